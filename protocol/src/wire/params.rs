//! The methods' parameters and results.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{EvalResult, GoalSpec};

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
    /// `kernelctl enqueue --after GOAL[:completed|:any]` (issue #29): the goal waits for
    /// another to end; in place of the file's own `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
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

/// Params of a method that takes none (any given are ignored, as they always were).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NoParams {}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatusParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// Every goal ever enqueued, a page at a time (`after`, `limit`); without it the
    /// reply lists the active goals and the newest finished ones only, so its size follows
    /// what is running, not the history.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// With `all`: the page after this goal id (none: the first page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// With `all`: at most this many goals (the daemon caps it at its page size, 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
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
    /// Geomean speedup over the goal's shapes against the goal's baseline: for a best the
    /// pooled rule decided (issue #23, `measurements` present), the pooled estimate over all
    /// its measurements; before it, the lower of its first reading and its re-time.
    pub speedup: f64,
    /// The noise shown with it, %: with `measurements`, half the width of the pooled
    /// estimate's 95 % interval; before, the larger worst-shape spread of its two timings.
    pub spread_pct: f64,
    pub iteration: u64,
    /// True when measured under Triton's interpreter (CPU mode): not a GPU figure.
    pub interpreted: bool,
    /// What measured it (absent in bests logged before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<super::Environment>,
    /// How many measurements the speedup is pooled over (absent before issue 23).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurements: Option<u32>,
    /// The method its figures were timed with, as the judge named it (`EvalResult::timing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
}

impl BestSummary {
    /// What its speedup is, for people: "GPU time", "as called" or "interpreted".
    pub fn timing_label(&self) -> &'static str {
        super::timing_label(self.timing.as_deref(), self.interpreted)
    }
}

/// One goal as `status` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Mean seconds per phase of its evaluations and the warm rate (absent before any
    /// evaluation reported phases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<crate::worker::PhaseMeans>,
    /// Tokens the agent's endpoint spent (the tokens and cost budgets).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokens: u64,
    /// Why a goal that should run does not (a worker that cannot start, an endpoint
    /// being retried), in words a user can act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// A fork's origin (`kernelctl fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<super::ForkOrigin>,
    /// The best was measured under another environment than the daemon's now: what
    /// changed, and what to do (`kernelctl revalidate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_changed: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `show`: a goal in full.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoalDetail {
    pub summary: GoalSummary,
    pub spec: GoalSpec,
    /// The last evaluations, newest last.
    pub recent: Vec<EvaluationRecord>,
    /// Would-be bests that were re-timed: iteration -> whether the win held (see
    /// `confirm_flag`, which turns this into the >10x flag).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub confirmations: std::collections::BTreeMap<u64, bool>,
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
    /// What confines candidate code (daemon/src/sandbox); absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
}

/// What `kerneld-sandbox --probe` prints: what the kernel and process can enforce.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxProbe {
    /// The kernel's Landlock ABI version; 0 when Landlock is absent or disabled.
    pub landlock_abi: i64,
    pub landlock_fs: bool,
    pub landlock_net: bool,
    pub landlock_scope: bool,
    pub seccomp: bool,
    pub no_new_privs: bool,
    /// Root, or CAP_SETUID and CAP_SETGID in the effective set.
    pub can_setuid: bool,
    #[serde(default)]
    pub kernel: String,
}

/// The evaluation sandbox as the daemon found it at start (`version`, `gpus`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxStatus {
    /// Everything the policy needs is in force.
    pub complete: bool,
    /// kerneld.toml's `allow_unsandboxed`: goals whose agent writes code run even when
    /// the sandbox is incomplete.
    pub allow_unsandboxed: bool,
    /// The uid runners run as, and its name; the daemon's own for a user daemon.
    pub runner_uid: u32,
    pub runner_user: String,
    /// The probe's findings; None when `kerneld-sandbox` could not be run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<SandboxProbe>,
    /// What is restricted, one line each, for people.
    pub restricts: Vec<String>,
    /// What is missing; empty when complete.
    pub problems: Vec<String>,
    /// GPU mode: the layers the start-up trial had to widen for CUDA (empty: the strict
    /// policy works, or CPU mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub widened: Vec<SandboxWidening>,
    /// GPU mode: the start-up trial's CUDA runs, in order (what was tried, how it ended).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<SandboxTrial>,
}

/// A layer of the sandbox widened for CUDA, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxWidening {
    /// `filesystem`, `proc-write`, `unix-sockets`, `network`, `process-rules`, `scoping`,
    /// `limits` or `user`.
    pub layer: String,
    /// What the layer allows as widened.
    pub level: String,
    /// CUDA's error with the layer strict.
    pub reason: String,
}

/// One CUDA trial of the start-up ladder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxTrial {
    /// `strict`, or the layers widened and how.
    pub variant: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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
    /// `hybrid`: which phase the next iteration is in, in words (`tune: ...`, `propose: ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
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
    /// Its fault readings (Xid events, ECC counters, remapped rows, retired and pending
    /// pages) with the faults new since kerneld started (issue #29); absent for the CPU
    /// slot and from daemons before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readings: Option<super::GpuReadings>,
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
    /// What confines candidate code on these devices; absent from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxStatus>,
}
