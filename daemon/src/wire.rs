//! The one definition of every type that crosses a process boundary: the JSON-RPC
//! envelope, the methods' parameters and results, and the events of the log.
//!
//! `kernelctl` uses these types directly (never a copy), so a change here is a
//! change of the protocol: keep fields additive (`#[serde(default)]`) where old
//! logs or old clients may meet new code.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol revision `version` reports; bump on an incompatible change.
pub const PROTOCOL: u32 = 1;

/// Longest accepted request or response line, in bytes. Goal files travel inside
/// `enqueue`, candidate sources inside `best`: both are far below this.
pub const MAX_LINE: usize = 8 * 1024 * 1024;

// ---------------------------------------------------------------------------
// JSON-RPC 2.0 envelope
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    /// Absent for a notification (the daemon accepts none, but must not answer one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    pub method: String,
    #[serde(default)]
    pub params: Value,
}

impl Request {
    pub fn new(id: u64, method: &str, params: impl Serialize) -> Self {
        Request {
            jsonrpc: "2.0".into(),
            id: Some(Value::from(id)),
            method: method.into(),
            params: serde_json::to_value(params).unwrap_or(Value::Null),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub jsonrpc: String,
    pub id: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

impl Response {
    pub fn ok(id: Value, result: Value) -> Self {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: Some(result),
            error: None,
        }
    }
    pub fn err(id: Value, error: RpcError) -> Self {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: None,
            error: Some(error),
        }
    }
}

/// A server-to-client message without an id: the `event` stream of `events --follow`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Notification {
    pub jsonrpc: String,
    pub method: String,
    pub params: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// Error codes: the four standard ones plus the server's own (-32000..-32099).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No goal has that id or name.
    pub const GOAL_NOT_FOUND: i64 = -32001;
    /// The goal file was rejected; `message` says file, line and what is expected.
    pub const INVALID_GOAL: i64 = -32002;
    /// The transition is not allowed from the goal's state (e.g. resume a completed goal).
    pub const INVALID_STATE: i64 = -32003;
    /// The caller may read but not change this goal (not its owner, root or admin group).
    pub const PERMISSION_DENIED: i64 = -32004;
    /// The goal has no correct candidate yet.
    pub const NO_BEST: i64 = -32005;
    /// The daemon is shutting down and accepts no new work.
    pub const SHUTTING_DOWN: i64 = -32006;
    /// Too many connections are open; close idle clients and retry.
    pub const TOO_MANY_CONNECTIONS: i64 = -32007;
}

/// Method names, shared by the server's dispatch and the client.
pub mod method {
    pub const ENQUEUE: &str = "enqueue";
    pub const STATUS: &str = "status";
    pub const SHOW: &str = "show";
    pub const PAUSE: &str = "pause";
    pub const RESUME: &str = "resume";
    pub const CANCEL: &str = "cancel";
    pub const BEST: &str = "best";
    pub const EVENTS: &str = "events";
    pub const CONTEXT: &str = "context";
    pub const GPUS: &str = "gpus";
    pub const VERSION: &str = "version";
    /// The notification method carrying one event in follow mode.
    pub const EVENT_NOTIFICATION: &str = "event";
}

// ---------------------------------------------------------------------------
// Method parameters and results
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnqueueParams {
    /// Where the goal file was read from (for messages, and to resolve a relative task path).
    pub path: String,
    /// The goal file's text: the daemon parses it, so the client needs no TOML of its own.
    pub source: String,
    /// With `unique`, a goal of the same name and the same owner that is queued,
    /// running or paused is returned instead of a new one (idempotent cron jobs).
    #[serde(default)]
    pub unique: bool,
    /// Seed files the client read with the user's own rights (seed as written in the
    /// goal file -> text): the daemon reads no user-named file outside the installed
    /// tasks. A seed found in the task's directory is taken from there instead.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub files: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnqueueResult {
    pub id: String,
    pub name: String,
    /// False when `unique` found an existing active goal of that name and owner.
    pub created: bool,
}

/// Params of every method that names one goal (by id or by name).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoalRef {
    pub goal: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalState {
    Queued,
    Running,
    Paused,
    Completed,
    Failed,
    Cancelled,
}

impl GoalState {
    /// Completed, failed and cancelled goals never run again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            GoalState::Completed | GoalState::Failed | GoalState::Cancelled
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            GoalState::Queued => "queued",
            GoalState::Running => "running",
            GoalState::Paused => "paused",
            GoalState::Completed => "completed",
            GoalState::Failed => "failed",
            GoalState::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for GoalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The best correct candidate of a goal, as status shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BestSummary {
    pub candidate: String,
    pub seed: String,
    pub config: Value,
    /// Geomean speedup over the goal's shapes against the goal's baseline.
    pub speedup: f64,
    pub spread_pct: f64,
    pub iteration: u64,
    /// True when measured under Triton's interpreter (CPU mode): not a GPU figure.
    pub interpreted: bool,
}

/// One goal as `status` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoalSummary {
    pub id: String,
    pub name: String,
    pub task: String,
    pub state: GoalState,
    /// Why the goal ended (completed: target_reached, budget_iterations, budget_wall,
    /// budget_gpu_hours, plateau, space_exhausted; failed: the error; cancelled: by whom).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The number of the last proposed iteration; never goes backwards.
    pub iteration: u64,
    /// Evaluations with a recorded result.
    pub evaluations: u64,
    pub in_flight: u32,
    pub best: Option<BestSummary>,
    pub priority: i32,
    pub gpus: u32,
    pub owner_uid: u32,
    /// Unix milliseconds.
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Seconds spent in the running state so far (the wall budget).
    pub wall_s: f64,
    /// Device-seconds spent evaluating (the gpu_hours budget).
    pub gpu_s: f64,
}

/// `show`: a goal in full.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoalDetail {
    pub summary: GoalSummary,
    pub spec: GoalSpec,
    /// The last evaluations, newest last.
    pub recent: Vec<EvaluationRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvaluationRecord {
    pub iteration: u64,
    pub candidate: String,
    pub seed: String,
    pub config: Value,
    /// The source's hash when it is not the seed's own source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_hash: Option<String>,
    pub result: EvalResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

/// `best`: the winner, with its source so the client can write it to a file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BestResult {
    pub goal: String,
    pub summary: BestSummary,
    pub source: String,
    pub result: EvalResult,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EventsParams {
    /// Only this goal's events (id or name); all events when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// Only events with a sequence number greater than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// At most this many (the newest, when `after` is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Keep the connection open and send each new event as an `event` notification.
    #[serde(default)]
    pub follow: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionResult {
    pub version: String,
    pub protocol: u32,
    pub pid: u32,
    /// "gpu" or "cpu".
    pub mode: String,
    pub state_dir: String,
    /// The last sequence number in the log.
    pub last_seq: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContextResult {
    pub goal: String,
    /// The goal's agent kind: `search`, `command` or `llm`.
    #[serde(default)]
    pub agent: String,
    /// What `kernelctl context` prints: exactly what the agent gets on its next iteration.
    /// `command`: CONTEXT.md; `search`: the compacted context; `llm`: every message of
    /// the request, each under a `===== role (N bytes) =====` line.
    pub text: String,
    /// `llm`: the chat messages exactly as the next request sends them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<ChatMessage>,
    /// `command`: the other files the program finds beside CONTEXT.md in its directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// The goal's context budget in bytes (`agent.context_bytes`, else the default).
    #[serde(default)]
    pub budget_bytes: u64,
}

/// One message of an OpenAI-compatible chat-completions request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    /// `system` or `user`.
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Healthy,
    /// Drained: no new leases until healthy again; the reason says why.
    Drained,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeaseInfo {
    pub goal: String,
    pub goal_name: String,
    pub candidate: String,
    pub iteration: u64,
    /// Unix milliseconds.
    pub since_ms: u64,
}

/// One evaluation slot: a GPU, or the single CPU slot in CPU mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuStatus {
    /// The GPU's UUID ("cpu" for the CPU slot). Never an index.
    pub uuid: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    pub health: Health,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_reason: Option<String>,
    pub lease: Option<LeaseInfo>,
    /// The slot's harness worker process (also its process group), when one is running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pid: Option<u32>,
    /// Evaluations this slot has run since the daemon started.
    pub evaluations: u64,
    /// Seconds this slot spent leased since the daemon started.
    pub busy_s: f64,
    /// A Slurm slot's job (None for local devices, and for a Slurm slot holding none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmJobStatus>,
}

/// The Slurm job behind a slot, as `kernelctl gpus` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SlurmJobStatus {
    pub job: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Slurm's state: PENDING, RUNNING, ...
    pub state: String,
    /// Seconds before the job's time limit, as squeue last said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_left_s: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpusResult {
    /// "gpu" or "cpu".
    pub mode: String,
    /// Why the daemon is in CPU mode, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub devices: Vec<GpuStatus>,
}

// ---------------------------------------------------------------------------
// Goal specification (the parsed goal file)
// ---------------------------------------------------------------------------

/// A goal as enqueued. Parsed from TOML by `goal::parse`, which rejects unknown keys and
/// bad values; stored in the `GoalEnqueued` event, so it is what every iteration aims at.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GoalSpec {
    pub name: String,
    /// The task directory, resolved to an absolute path at enqueue time.
    pub task: String,
    pub task_dir: String,
    pub objective: String,
    pub baseline: String,
    pub shapes: Vec<String>,
    /// Seed candidate files (absolute paths), and their sources as read at enqueue time,
    /// so a later edit of the file does not change a running goal.
    pub seeds: Vec<SeedSource>,
    pub budget: Budget,
    pub stop: StopRules,
    pub agent: AgentSpec,
    pub resources: Resources,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SeedSource {
    /// The file name (for people) ...
    pub name: String,
    /// ... and its text.
    pub source: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Budget {
    pub wall_s: Option<u64>,
    pub iterations: Option<u64>,
    pub gpu_hours: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StopRules {
    pub target_speedup: Option<f64>,
    pub plateau: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentSpec {
    /// search | llm | command
    pub kind: String,
    /// The agent's own settings (endpoint, model, command line, ...), kept as given.
    #[serde(default)]
    pub settings: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    pub gpus: u32,
    pub priority: i32,
}

// ---------------------------------------------------------------------------
// Evaluation results (the harness worker's `result`, see docs/HARNESS.md)
// ---------------------------------------------------------------------------

/// How an evaluation ended. `Crashed`, `TimedOut` and `Quarantined` are assigned by the
/// daemon (the worker cannot report its own death); the rest come from the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultClass {
    Ok,
    Rejected,
    CompileError,
    WrongResult,
    Error,
    Crashed,
    TimedOut,
    Quarantined,
}

impl ResultClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ResultClass::Ok => "ok",
            ResultClass::Rejected => "rejected",
            ResultClass::CompileError => "compile_error",
            ResultClass::WrongResult => "wrong_result",
            ResultClass::Error => "error",
            ResultClass::Crashed => "crashed",
            ResultClass::TimedOut => "timed_out",
            ResultClass::Quarantined => "quarantined",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShapeTiming {
    pub shape: String,
    pub median_us: f64,
    #[serde(default)]
    pub spread_pct: f64,
    #[serde(default)]
    pub baseline_us: f64,
    #[serde(default)]
    pub baseline_spread_pct: f64,
    #[serde(default)]
    pub speedup: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pct_roofline: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalResult {
    pub class: ResultClass,
    #[serde(default)]
    pub message: Option<String>,
    /// The harness rule behind a rejection or a wrong result (`syntax`, `torch-heavy-math`,
    /// `tolerance`, `nonfinite`, …), when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default)]
    pub correct: bool,
    #[serde(default)]
    pub interpreted: bool,
    #[serde(default)]
    pub speedup: Option<f64>,
    #[serde(default)]
    pub spread_pct: Option<f64>,
    #[serde(default)]
    pub shapes: Vec<ShapeTiming>,
    /// Per (shape, seed, output) correctness figures, as the worker reported them.
    #[serde(default)]
    pub checks: Value,
    /// Registers, spills, shared memory per kernel; an ncu summary where available.
    #[serde(default)]
    pub profile: Value,
    /// The GPU that measured it (uuid, SM clock, throttle reasons, discarded samples).
    #[serde(default)]
    pub device: Value,
    #[serde(default)]
    pub elapsed_s: f64,
    /// The full configuration the harness ran: the proposal with the candidate's defaults
    /// filled in (an agent may propose only some keys). What `best -o` writes as `BEST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
}

impl EvalResult {
    /// A result the daemon writes itself (worker death, timeout, quarantine, bad reply).
    pub fn failure(class: ResultClass, message: impl Into<String>, elapsed_s: f64) -> Self {
        EvalResult {
            class,
            message: Some(message.into()),
            rule: None,
            correct: false,
            interpreted: false,
            speedup: None,
            spread_pct: None,
            shapes: Vec::new(),
            checks: Value::Null,
            profile: Value::Null,
            device: Value::Null,
            elapsed_s,
            config: None,
        }
    }

    /// Correct and timed: a candidate that may become the best.
    pub fn is_scored(&self) -> bool {
        self.class == ResultClass::Ok && self.correct && self.speedup.is_some_and(f64::is_finite)
    }
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// One immutable record of the log. Every state the daemon shows is a projection of these.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// Dense, starting at 1, no gaps.
    pub seq: u64,
    /// Unix milliseconds when it was committed.
    pub time_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    DaemonStarted {
        version: String,
        pid: u32,
        mode: String,
    },
    DaemonStopped {
        reason: String,
    },
    GoalEnqueued {
        spec: GoalSpec,
        owner_uid: u32,
    },
    GoalStateChanged {
        from: GoalState,
        to: GoalState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The harness described a seed: its tunable space and default configuration.
    SeedDescribed {
        seed: String,
        space: Value,
        default: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rejected: Option<String>,
    },
    CandidateProposed {
        iteration: u64,
        candidate: String,
        seed: String,
        config: Value,
        agent: String,
        /// The candidate's source when it is not one of the goal's seeds (llm/command agents).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    EvaluationStarted {
        iteration: u64,
        candidate: String,
        device: String,
        attempt: u32,
    },
    EvaluationFinished {
        iteration: u64,
        candidate: String,
        device: String,
        result: EvalResult,
    },
    /// An evaluation stopped before its result (pause, cancel, shutdown); it runs again on resume.
    EvaluationAborted {
        iteration: u64,
        candidate: String,
        device: String,
        reason: String,
    },
    /// A correct candidate beat the previous best by more than the measured spread.
    NewBest {
        best: BestSummary,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<f64>,
    },
    DeviceHealth {
        device: String,
        health: Health,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The agent could not propose (a program that crashed or timed out, an endpoint that
    /// failed, a repeat); `failures` in a row, and the goal fails after a few.
    AgentFailed {
        agent: String,
        message: String,
        failures: u32,
    },
    /// The daemon was down from `from_ms` (its last event) to `to_ms` (its restart): a
    /// running goal's wall clock does not count that time.
    Downtime {
        from_ms: u64,
        to_ms: u64,
    },
    /// Slurm named a job kerneld asked for slot `slot` (pending or granted): from here on
    /// the log knows it, and a restart reattaches to it or cancels it.
    SlurmJobSubmitted {
        slot: String,
        job: u64,
        name: String,
        partition: String,
    },
    /// The job runs (granted, or found running again after a restart: `reattached`).
    SlurmJobStarted {
        slot: String,
        job: u64,
        node: String,
        #[serde(default)]
        reattached: bool,
    },
    /// The job is over for kerneld: released when idle, cancelled at a stop or a restart,
    /// or ended by Slurm (time limit, preemption, requeue, node failure).
    SlurmJobEnded {
        slot: String,
        job: u64,
        /// Slurm's last state of the job (CANCELLED, TIMEOUT, PREEMPTED, ...), if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        reason: String,
    },
}

impl EventKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::DaemonStarted { .. } => "daemon_started",
            EventKind::DaemonStopped { .. } => "daemon_stopped",
            EventKind::GoalEnqueued { .. } => "goal_enqueued",
            EventKind::GoalStateChanged { .. } => "goal_state_changed",
            EventKind::SeedDescribed { .. } => "seed_described",
            EventKind::CandidateProposed { .. } => "candidate_proposed",
            EventKind::EvaluationStarted { .. } => "evaluation_started",
            EventKind::EvaluationFinished { .. } => "evaluation_finished",
            EventKind::EvaluationAborted { .. } => "evaluation_aborted",
            EventKind::NewBest { .. } => "new_best",
            EventKind::DeviceHealth { .. } => "device_health",
            EventKind::AgentFailed { .. } => "agent_failed",
            EventKind::Downtime { .. } => "downtime",
            EventKind::SlurmJobSubmitted { .. } => "slurm_job_submitted",
            EventKind::SlurmJobStarted { .. } => "slurm_job_started",
            EventKind::SlurmJobEnded { .. } => "slurm_job_ended",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trips_with_flattened_kind() {
        let ev = Event {
            seq: 7,
            time_ms: 1,
            goal: Some("g1".into()),
            kind: EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                reason: None,
            },
        };
        let text = serde_json::to_string(&ev).unwrap();
        assert!(text.contains("\"type\":\"goal_state_changed\""));
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn worker_result_parses_with_missing_optional_fields() {
        let r: EvalResult =
            serde_json::from_str(r#"{"class":"wrong_result","message":"shape s16 seed 3"}"#)
                .unwrap();
        assert_eq!(r.class, ResultClass::WrongResult);
        assert!(!r.is_scored());
    }
}
