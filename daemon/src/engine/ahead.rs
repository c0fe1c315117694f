//! Compile-ahead (issue #12): while the GPU times candidate N, the judge's next runners
//! start, import and compile candidates N+1 … N+depth (worker protocol `prepare`,
//! kernels/harness/ahead.py, warmup.py).
//!
//! Just before N's `evaluate` is sent, an agent that can propose ahead (the search agent:
//! a pure function of the goal, its history and the iteration) is asked for the
//! iterations after N — without the results in flight, as if the goal had that many
//! evaluations running, each proposal made with the ones kept before it counted as
//! pending — until `compile_ahead_depth` proposals are kept for this slot; each new one
//! is sent as `prepare`. When this slot next asks for the goal's work, the oldest kept
//! proposal that is still new is used; the judge then finds its runner prepared, and its
//! kernels compiled. Nothing of this is in the log: a proposal is logged
//! (CandidateProposed) only when it is taken, so a restart or a kept proposal never used
//! loses nothing.
//!
//! Why a depth: a new configuration's Triton compile takes several seconds of one CPU
//! core, an evaluation's GPU work about one; `depth` compiles run side by side on the
//! host's cores while the GPU works through the queue.
//!
//! Isolation is the judge's as before: a prepared runner is a fresh sandboxed runner with
//! its own scratch, one candidate per process (ahead.py says what runs early).

use std::collections::VecDeque;
use std::time::Duration;

use super::Engine;
use crate::agent::{self, Proposal};
use crate::harness::Worker;
use crate::projection::{GoalProjection, Pending};
use crate::wire::{EvaluationRecord, GoalState};
use kerneld_protocol::worker;

/// `prepare` is answered at once (the judge works on it in a thread).
const PREPARE_TIMEOUT: Duration = Duration::from_secs(30);

/// Proposals made ahead, by slot, oldest first (part of the goal's runtime state).
pub(super) type Ahead = std::collections::BTreeMap<usize, VecDeque<Proposal>>;

impl Engine {
    /// Before N's `evaluate` on `slot`: proposals after N, kept and prepared until the
    /// slot holds `compile_ahead_depth`. Any failure here only means less was prepared (the
    /// evaluation imports and compiles as before); a worker whose transport failed is
    /// dropped, so the evaluation starts a fresh one.
    pub(super) async fn prepare_ahead(&self, goal: &str, slot: usize, worker: &mut Option<Worker>) {
        let depth = self.config().compile_ahead_depth;
        if !self.config().compile_ahead || depth == 0 || worker.is_none() {
            return;
        }
        let Some(history) = self.history_for_ahead(goal).await else {
            return;
        };
        loop {
            let kept = self
                .state
                .lock()
                .unwrap()
                .goals
                .get(goal)
                .map_or(0, |rt| rt.ahead.get(&slot).map_or(0, VecDeque::len));
            if kept >= depth {
                return;
            }
            let Some((proposal, source)) = self.propose_ahead(goal, &history) else {
                return;
            };
            let (task_dir, shapes) = {
                let st = self.state.lock().unwrap();
                let spec = &st.goals[goal].proj.spec;
                (spec.task_dir.clone(), spec.shapes.clone())
            };
            let req = match self.source_file(&source) {
                Ok(path) => worker::Request::Prepare(worker::Prepare {
                    task_dir,
                    candidate: path.display().to_string(),
                    config: proposal.config.clone(),
                    shapes,
                    ahead: depth,
                }),
                Err(e) => {
                    tracing::warn!(%goal, "compile-ahead: storing the source: {e:#}");
                    return;
                }
            };
            if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
                rt.ahead.entry(slot).or_default().push_back(proposal);
            }
            let w = worker.as_mut().expect("checked above");
            let line = serde_json::to_value(&req).expect("worker requests serialize");
            match w.call(line, PREPARE_TIMEOUT).await {
                Ok(v) => match serde_json::from_value::<worker::Reply<worker::Prepared>>(v) {
                    Ok(r) if r.ok && r.body.accepted => {}
                    // An older judge (unknown op) or a candidate its static checks reject.
                    Ok(r) => {
                        tracing::debug!(%goal, "not prepared ahead: {:?}", r.error.or(r.body.message));
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(%goal, "unreadable prepare reply: {e}");
                        return;
                    }
                },
                Err(e) => {
                    tracing::warn!(%goal, slot, "compile-ahead: the worker failed: {e}");
                    if let Some(w) = worker.take() {
                        w.kill().await;
                    }
                    return;
                }
            }
        }
    }

    /// The goal's evaluations, when its agent can propose ahead and it is running.
    async fn history_for_ahead(&self, goal: &str) -> Option<super::records::Records> {
        let proj = self.state.lock().unwrap().goals.get(goal)?.proj.clone();
        if proj.state != GoalState::Running {
            return None;
        }
        let agent = agent::for_goal(&proj, agent::AgentEnv::default()).ok()?;
        if !agent.proposes_ahead() {
            return None;
        }
        self.evaluations(goal).await.ok()
    }

    /// The agent's proposal for the iteration after those already proposed and kept (by
    /// any slot), with its source, when the budget has room for it.
    fn propose_ahead(
        &self,
        goal: &str,
        history: &[EvaluationRecord],
    ) -> Option<(Proposal, String)> {
        let (mut proj, kept): (GoalProjection, Vec<Proposal>) = {
            let st = self.state.lock().unwrap();
            let rt = st.goals.get(goal)?;
            (
                rt.proj.clone(),
                rt.ahead.values().flatten().cloned().collect(),
            )
        };
        let next = proj.iteration + 1 + kept.len() as u64;
        if proj.state != GoalState::Running || proj.spec.budget.iterations.is_some_and(|b| next > b)
        {
            return None;
        }
        // The kept proposals count as in flight, so the agent proposes something else.
        for (i, p) in kept.iter().enumerate() {
            let source = proposal_source(&proj, p)?;
            let pseudo = u64::MAX - i as u64;
            proj.pending.insert(
                pseudo,
                Pending {
                    iteration: pseudo,
                    candidate: crate::candidate::CandidateIds::of(&source, &p.config).canonical,
                    seed: p.seed.clone(),
                    config: p.config.clone(),
                    source_hash: None,
                    attempts: 0,
                    aborted: 0,
                },
            );
        }
        let agent = agent::for_goal(&proj, agent::AgentEnv::default()).ok()?;
        let proposal = match agent.propose(&proj, history, next) {
            Ok(Some(p)) => p,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(%goal, "no proposal ahead: {e:#}");
                return None;
            }
        };
        let source = proposal_source(&proj, &proposal)?;
        Some((proposal, source))
    }

    /// The oldest proposal kept for `slot` that is still new to the goal (the ones before it
    /// are dropped: another slot or a restart evaluated them meanwhile).
    pub(super) fn take_ahead(
        &self,
        goal: &str,
        slot: usize,
        history: &[EvaluationRecord],
    ) -> Option<Proposal> {
        let mut st = self.state.lock().unwrap();
        let rt = st.goals.get_mut(goal)?;
        let queue = rt.ahead.get_mut(&slot)?;
        while let Some(proposal) = queue.pop_front() {
            let Some(source) = proposal_source(&rt.proj, &proposal) else {
                continue;
            };
            if agent::check_new(&rt.proj, history, &source, &proposal.config).is_ok() {
                return Some(proposal);
            }
        }
        None
    }
}

/// A proposal's source: its own, or its seed's (None: a seed the goal does not have).
pub(super) fn proposal_source(
    proj: &crate::projection::GoalProjection,
    p: &Proposal,
) -> Option<String> {
    match &p.source {
        Some(s) => Some(s.clone()),
        None => proj
            .spec
            .seeds
            .iter()
            .find(|s| s.name == p.seed)
            .map(|s| s.source.clone()),
    }
}
