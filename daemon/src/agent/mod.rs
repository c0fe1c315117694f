//! Agents propose the next candidate of a goal. An agent sees the goal (its spec and
//! projection) and the goal's evaluation history, and returns a proposal or `None`
//! when it has nothing new to try.
//!
//! Agents keep no state of their own between calls: everything they need is in the
//! log, so a restarted daemon continues exactly where it stopped.

pub mod search;

use serde_json::Value;

use crate::projection::GoalProjection;
use crate::wire::EvaluationRecord;

/// What an agent proposes: a seed's source (or a new source) and a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The seed this candidate derives from (its name in the goal spec).
    pub seed: String,
    pub config: Value,
    /// A new source (llm / command agents); None: the seed's own source.
    pub source: Option<String>,
    /// Why this one (for the log and the context).
    pub note: Option<String>,
}

pub trait Agent: Send + Sync {
    fn name(&self) -> &'static str;
    /// The next candidate for iteration `iteration`, or None when nothing untried is left.
    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
    ) -> anyhow::Result<Option<Proposal>>;
}

/// The agent a goal asks for.
pub fn for_goal(goal: &GoalProjection) -> anyhow::Result<Box<dyn Agent>> {
    match goal.spec.agent.kind.as_str() {
        "search" => Ok(Box::new(search::SearchAgent)),
        other => anyhow::bail!("agent kind `{other}` is not available in this build"),
    }
}
