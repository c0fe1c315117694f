//! The events of the log: every state the daemon shows is a projection of these.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{BestSummary, Comparison, EvalResult, ForkOrigin, GoalSpec, GoalState, Health, Pooled};

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
    /// This goal is a fork: the events after this one up to its first own are copies of
    /// the origin's (its candidates, measurements and best as of `origin.seq`).
    GoalForked {
        origin: ForkOrigin,
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
        /// Tokens the endpoint's `usage` counted for this proposal (llm agents).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens: Option<u64>,
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
    /// The agent's endpoint failed transiently (429, 5xx, a timeout, a reset, a garbled
    /// reply): the goal waits `retry_in_ms` and asks again. Never fails the goal by itself.
    AgentRetrying {
        agent: String,
        message: String,
        /// Transient failures in a row.
        attempt: u32,
        retry_in_ms: u64,
    },
    /// The goal's evaluations failed `failures` times in a row for a reason that is not
    /// the candidate's (the worker could not start, refused or garbled a request, the
    /// runner could not start, the device was lost): the goal was paused (the
    /// `goal_state_changed` just before, in the same commit) and resumes by itself after
    /// `retry_in_ms`; `trips` counts the pauses since one of its results last worked.
    BreakerTripped {
        reason: String,
        failures: u32,
        trips: u32,
        retry_in_ms: u64,
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
    /// or ended by Slurm (time limit, preemption, node failure).
    SlurmJobEnded {
        slot: String,
        job: u64,
        /// Slurm's last state of the job (CANCELLED, TIMEOUT, PREEMPTED, ...), if known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        reason: String,
    },
    /// The result just recorded would become the new best (`best`: its first figures):
    /// it is re-timed before it counts (`WinChecked` decides).
    WinPending {
        best: BestSummary,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source_hash: Option<String>,
        /// Its first evaluation as the start of its pooled measurements (issue #23; absent
        /// in older logs, whose wins were decided by the spread rule).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pooled: Option<Pooled>,
    },
    /// `kernelctl retime`: re-time an evaluated candidate `times` times; the request's
    /// id is this event's sequence number.
    RetimeRequested {
        iteration: u64,
        candidate: String,
        seed: String,
        config: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source_hash: Option<String>,
        times: u32,
        by_uid: u32,
        /// A `revalidate` request: its result is checked against these figures.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revalidate: Option<super::Revalidation>,
        /// Asked by kerneld for a new best (issue #23): re-times that measure its noise
        /// before challengers face it, so a win is not decided against two readings.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        for_best: bool,
    },
    /// A revalidation's re-time finished: whether the candidate still holds its win
    /// (its speedup now within the noise of the one it was measured at, or above).
    Revalidated {
        iteration: u64,
        candidate: String,
        request: u64,
        then_speedup: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        now_speedup: Option<f64>,
        spread_pct: f64,
        held: bool,
        reason: String,
        /// What the pooled rule compared: now (this re-time) against the candidate's
        /// measurements before it (absent in older logs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<Comparison>,
    },
    /// A re-time began: a would-be best's confirmation (`request` absent) or one of a
    /// `retime` request's.
    RetimeStarted {
        iteration: u64,
        candidate: String,
        device: String,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
    },
    RetimeFinished {
        iteration: u64,
        candidate: String,
        device: String,
        result: EvalResult,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
        /// The candidate's measurements pooled with this one (issue #23), when it was a
        /// correct, timed result; absent in older logs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pooled: Option<Pooled>,
    },
    /// A re-time stopped before its result (pause, cancel, shutdown); it runs again.
    RetimeAborted {
        iteration: u64,
        candidate: String,
        device: String,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<u64>,
    },
    /// A would-be best after its re-time: `confirmed` (a `NewBest` with `speedup`, the
    /// confirmed figure, follows in the same commit) or not (it does not become best).
    /// Since issue 23 `speedup` is the pooled estimate over all its measurements and
    /// `spread_pct` half the width of its 95 % interval; `rule` holds what was compared.
    WinChecked {
        iteration: u64,
        candidate: String,
        confirmed: bool,
        first_speedup: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retimed_speedup: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        speedup: Option<f64>,
        spread_pct: f64,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<Comparison>,
    },
}

impl EventKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::DaemonStarted { .. } => "daemon_started",
            EventKind::DaemonStopped { .. } => "daemon_stopped",
            EventKind::GoalEnqueued { .. } => "goal_enqueued",
            EventKind::GoalForked { .. } => "goal_forked",
            EventKind::GoalStateChanged { .. } => "goal_state_changed",
            EventKind::SeedDescribed { .. } => "seed_described",
            EventKind::CandidateProposed { .. } => "candidate_proposed",
            EventKind::EvaluationStarted { .. } => "evaluation_started",
            EventKind::EvaluationFinished { .. } => "evaluation_finished",
            EventKind::EvaluationAborted { .. } => "evaluation_aborted",
            EventKind::NewBest { .. } => "new_best",
            EventKind::DeviceHealth { .. } => "device_health",
            EventKind::AgentFailed { .. } => "agent_failed",
            EventKind::AgentRetrying { .. } => "agent_retrying",
            EventKind::BreakerTripped { .. } => "breaker_tripped",
            EventKind::Downtime { .. } => "downtime",
            EventKind::SlurmJobSubmitted { .. } => "slurm_job_submitted",
            EventKind::SlurmJobStarted { .. } => "slurm_job_started",
            EventKind::SlurmJobEnded { .. } => "slurm_job_ended",
            EventKind::WinPending { .. } => "win_pending",
            EventKind::RetimeRequested { .. } => "retime_requested",
            EventKind::RetimeStarted { .. } => "retime_started",
            EventKind::RetimeFinished { .. } => "retime_finished",
            EventKind::RetimeAborted { .. } => "retime_aborted",
            EventKind::WinChecked { .. } => "win_checked",
            EventKind::Revalidated { .. } => "revalidated",
        }
    }
}
