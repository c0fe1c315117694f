//! The `hybrid` agent: its proposer (an `llm` or a `command`) writes a kernel with its
//! SPACE, the search agent tunes that SPACE for `tune_evaluations` evaluations, then the
//! proposer is asked again, with the tuned results in its context (its history and the
//! best source). LLM calls are the expensive part of a night; tuning is cheap.
//!
//! The phase is a pure function of the log (like every agent's state): the newest source
//! an agent wrote is the structure; its evaluations after the first are its tuning.

use std::fmt;

use super::search::{propose_in, SeedSpace};
use super::space::literal_space;
use super::{Agent, AgentEnv, Proposal, SourceLookup};
use crate::projection::GoalProjection;
use crate::wire::{EvaluationRecord, HybridSettings};

pub struct HybridAgent {
    settings: HybridSettings,
    proposer: Box<dyn Agent>,
    source_of: Option<SourceLookup>,
}

impl HybridAgent {
    pub fn new(settings: &HybridSettings, env: AgentEnv) -> anyhow::Result<Self> {
        let source_of = env.source_of.clone();
        Ok(HybridAgent {
            settings: settings.clone(),
            proposer: super::for_spec(&settings.proposer, env)?,
            source_of,
        })
    }
}

/// What the next iteration of a hybrid goal does.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Ask the proposer for a new structure, and why now.
    Propose { why: String },
    /// Tune the structure first evaluated at `iteration` (its `done`-th of `of` tunings next).
    Tune {
        iteration: u64,
        seed: String,
        hash: String,
        done: u64,
        of: u64,
    },
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Propose { why } => write!(f, "propose (the proposer writes a structure): {why}"),
            Phase::Tune {
                iteration,
                done,
                of,
                ..
            } => write!(
                f,
                "tune (the search tunes the SPACE of iteration {iteration}'s structure): \
                 {done} of {of} tuning evaluations done"
            ),
        }
    }
}

/// The goal as its proposer sees it: the same goal, the proposer's settings.
pub fn as_proposer(goal: &GoalProjection, h: &HybridSettings) -> GoalProjection {
    let mut g = goal.clone();
    g.spec.agent = (*h.proposer).clone();
    g
}

/// The phase the next iteration is in, from the goal's history and what is in flight.
pub fn phase(goal: &GoalProjection, history: &[EvaluationRecord], tune: u64) -> Phase {
    let Some(latest) = history
        .iter()
        .filter(|r| r.source_hash.is_some())
        .max_by_key(|r| r.iteration)
    else {
        return Phase::Propose {
            why: "no structure yet".into(),
        };
    };
    let hash = latest.source_hash.clone().unwrap_or_default();
    let mine = |h: &Option<String>| h.as_deref() == Some(hash.as_str());
    let first = history
        .iter()
        .filter(|r| mine(&r.source_hash))
        .min_by_key(|r| r.iteration)
        .unwrap_or(latest);
    if !first.result.is_scored() {
        return Phase::Propose {
            why: format!(
                "iteration {}'s structure did not pass ({})",
                first.iteration,
                first.result.class.as_str()
            ),
        };
    }
    let evaluated = history.iter().filter(|r| mine(&r.source_hash)).count() as u64
        + goal
            .pending
            .values()
            .filter(|p| mine(&p.source_hash))
            .count() as u64;
    let done = evaluated.saturating_sub(1);
    if done >= tune {
        return Phase::Propose {
            why: format!(
                "iteration {}'s structure was tuned for {done} evaluations",
                first.iteration
            ),
        };
    }
    Phase::Tune {
        iteration: first.iteration,
        seed: first.seed.clone(),
        hash,
        done,
        of: tune,
    }
}

impl Agent for HybridAgent {
    fn slow(&self) -> bool {
        self.proposer.slow()
    }

    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
    ) -> anyhow::Result<Option<Proposal>> {
        let mut why = match phase(goal, history, self.settings.tune_evaluations) {
            Phase::Propose { why } => why,
            Phase::Tune {
                iteration: structure,
                seed,
                hash,
                done,
                of,
            } => match self.tune(goal, history, iteration, &seed, &hash) {
                Ok(Some(mut p)) => {
                    p.note = Some(format!(
                        "tune {}/{of} of iteration {structure}'s structure: {}",
                        done + 1,
                        p.note.unwrap_or_default()
                    ));
                    p.by = Some("search");
                    return Ok(Some(p));
                }
                Ok(None) => {
                    format!("iteration {structure}'s SPACE has no untried configuration left")
                }
                Err(e) => format!("iteration {structure}'s structure cannot be tuned: {e}"),
            },
        };
        let proposer = as_proposer(goal, &self.settings);
        let proposed = self.proposer.propose(&proposer, history, iteration)?;
        Ok(proposed.map(|mut p| {
            why = format!("structure ({why}): {}", p.note.take().unwrap_or_default());
            p.note = Some(why);
            p.by = Some(proposer.spec.agent.kind().as_str());
            p
        }))
    }
}

impl HybridAgent {
    /// The search's next configuration of the structure's SPACE.
    fn tune(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
        seed: &str,
        hash: &str,
    ) -> anyhow::Result<Option<Proposal>> {
        let source = self
            .source_of
            .as_ref()
            .and_then(|f| f(hash))
            .ok_or_else(|| anyhow::anyhow!("its source {hash} is not in the store"))?;
        let (space, default) = literal_space(&source)
            .ok_or_else(|| anyhow::anyhow!("its SPACE is not a literal dict of lists"))?;
        let spaces = [SeedSpace::of_source(seed, &source, &space, &default)];
        propose_in(&spaces, goal, history, iteration)
    }
}
