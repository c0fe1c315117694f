//! `fork`: a new goal from another's state as of one of its events (its candidates,
//! measurements and best), with a new name, budget or agent.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ForkParams {
    /// The origin goal's id or name.
    pub goal: String,
    /// Its state as of this event (`GOAL@SEQ`); absent: as of now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The fork's name; absent: the origin's name with `-fork` appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `[budget]` keys for the fork (`iterations=5`, `wall=2h`, `gpu_hours=1`, `tokens=..`):
    /// they count from the carried-over figures (5 iterations more than the origin had).
    /// Absent: the origin's budget, counted the same way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budget: Vec<String>,
    /// A goal file's `[agent]` table (the text of `--agent FILE`) for the fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkResult {
    pub id: String,
    pub name: String,
    /// The origin goal's id and the event the fork starts from.
    pub from: String,
    pub seq: u64,
    /// What was carried over: evaluations (with their candidates) and the best's iteration.
    pub evaluations: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_iteration: Option<u64>,
}

/// Where a forked goal came from (`show`, `status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkOrigin {
    pub goal: String,
    pub seq: u64,
    /// Iterations carried over: the fork's own start after them.
    pub iterations: u64,
}

impl std::fmt::Display for ForkOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}@{} ({} iterations carried over)",
            self.goal, self.seq, self.iterations
        )
    }
}
