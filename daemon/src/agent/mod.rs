//! Agents propose the next candidate of a goal. An agent sees the goal (its spec and
//! projection) and the goal's evaluation history, and returns a proposal or `None`
//! when it has nothing new to try.
//!
//! Agents keep no state of their own between calls: everything they need is in the
//! log, so a restarted daemon continues exactly where it stopped.

pub mod command;
pub mod search;

use std::path::PathBuf;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

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
    /// True for agents that take long (an external program, a remote model): the engine
    /// then proposes without holding the log's commit lock, on a blocking thread.
    fn slow(&self) -> bool {
        false
    }
    /// The next candidate for iteration `iteration`, or None when nothing untried is left.
    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
    ) -> anyhow::Result<Option<Proposal>>;
}

/// What an agent may need beyond the goal and its history.
#[derive(Clone, Default)]
pub struct AgentEnv {
    /// Where agents that work in files get their per-iteration working directories.
    pub work_root: PathBuf,
    /// The current best candidate's source (with its configuration), if any.
    pub best_source: Option<String>,
    /// Cancelled when the goal is paused or cancelled, or the daemon stops.
    pub cancel: CancellationToken,
}

/// The agent a goal asks for.
pub fn for_goal(goal: &GoalProjection, env: AgentEnv) -> anyhow::Result<Box<dyn Agent>> {
    match goal.spec.agent.kind.as_str() {
        "search" => Ok(Box::new(search::SearchAgent)),
        "command" => Ok(Box::new(command::CommandAgent::new(
            &goal.spec.agent.settings,
            env,
        )?)),
        other => anyhow::bail!("agent kind `{other}` is not available in this build"),
    }
}
