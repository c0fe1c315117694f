//! The events of the log: every state the daemon shows is a projection of these.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{BestSummary, EvalResult, GoalSpec, GoalState, Health};

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
    /// The daemon was down from `from_ms` (its last event) to `to_ms` (its restart): a
    /// running goal's wall clock does not count that time.
    Downtime {
        from_ms: u64,
        to_ms: u64,
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
            EventKind::AgentRetrying { .. } => "agent_retrying",
            EventKind::Downtime { .. } => "downtime",
        }
    }
}
