//! Compile-ahead (issue #12): while the GPU times candidate N, the judge's next runner
//! starts and imports candidate N+1 (worker protocol `prepare`, kernels/harness/ahead.py).
//!
//! Just before N's `evaluate` is sent, an agent that can propose ahead (the search agent:
//! a pure function of the goal, its history and the iteration) is asked for the iteration
//! after N — without N's result, as if the goal had two evaluations in flight — and the
//! proposal is kept for this slot and sent as `prepare`. When this slot next asks for the
//! goal's work, the kept proposal is used if it is still new; the judge then finds its
//! runner prepared. Nothing of this is in the log: a proposal is logged (CandidateProposed)
//! only when it is taken, so a restart or a kept proposal never used loses nothing.
//!
//! Isolation is the judge's as before: a prepared runner is a fresh sandboxed runner with
//! its own scratch, one candidate per process (ahead.py says what runs early).

use std::time::Duration;

use super::Engine;
use crate::agent::{self, Proposal};
use crate::harness::Worker;
use crate::wire::{EvaluationRecord, GoalState};
use kerneld_protocol::worker;

/// `prepare` is answered at once (the judge works on it in a thread).
const PREPARE_TIMEOUT: Duration = Duration::from_secs(30);

/// Proposals made ahead, by slot (part of the goal's runtime state).
pub(super) type Ahead = std::collections::BTreeMap<usize, Proposal>;

impl Engine {
    /// Before N's `evaluate` on `slot`: the proposal after N, kept and prepared. Any
    /// failure here only means nothing was prepared (the evaluation imports as before);
    /// a worker whose transport failed is dropped, so the evaluation starts a fresh one.
    pub(super) async fn prepare_ahead(&self, goal: &str, slot: usize, worker: &mut Option<Worker>) {
        if !self.config().compile_ahead || worker.is_none() {
            return;
        }
        let Some((proposal, source)) = self.propose_ahead(goal).await else {
            return;
        };
        let req = match self.source_file(&source) {
            Ok(path) => {
                let task_dir = self.state.lock().unwrap().goals[goal]
                    .proj
                    .spec
                    .task_dir
                    .clone();
                worker::Request::Prepare(worker::Prepare {
                    task_dir,
                    candidate: path.display().to_string(),
                    config: proposal.config.clone(),
                })
            }
            Err(e) => {
                tracing::warn!(%goal, "compile-ahead: storing the source: {e:#}");
                return;
            }
        };
        if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
            rt.ahead.insert(slot, proposal);
        }
        let w = worker.as_mut().expect("checked above");
        let line = serde_json::to_value(&req).expect("worker requests serialize");
        match w.call(line, PREPARE_TIMEOUT).await {
            Ok(v) => match serde_json::from_value::<worker::Reply<worker::Prepared>>(v) {
                Ok(r) if r.ok && r.body.accepted => {}
                // An older judge (unknown op) or a candidate its static checks reject.
                Ok(r) => {
                    tracing::debug!(%goal, "not prepared ahead: {:?}", r.error.or(r.body.message))
                }
                Err(e) => tracing::debug!(%goal, "unreadable prepare reply: {e}"),
            },
            Err(e) => {
                tracing::warn!(%goal, slot, "compile-ahead: the worker failed: {e}");
                if let Some(w) = worker.take() {
                    w.kill().await;
                }
            }
        }
    }

    /// The agent's proposal for the iteration after the last one proposed, with its
    /// source, when the goal's agent can propose ahead and the budget has room for it.
    async fn propose_ahead(&self, goal: &str) -> Option<(Proposal, String)> {
        let proj = self.state.lock().unwrap().goals.get(goal)?.proj.clone();
        let next = proj.iteration + 1;
        if proj.state != GoalState::Running || proj.spec.budget.iterations.is_some_and(|b| next > b)
        {
            return None;
        }
        let agent = agent::for_goal(&proj, agent::AgentEnv::default()).ok()?;
        if !agent.proposes_ahead() {
            return None;
        }
        let store = self.store.clone();
        let id = goal.to_string();
        let history = tokio::task::spawn_blocking(move || store.evaluations(&id))
            .await
            .ok()?
            .ok()?;
        let proposal = match agent.propose(&proj, &history, next) {
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

    /// The proposal kept for `slot`, if it is still new to the goal (taken either way).
    pub(super) fn take_ahead(
        &self,
        goal: &str,
        slot: usize,
        history: &[EvaluationRecord],
    ) -> Option<Proposal> {
        let mut st = self.state.lock().unwrap();
        let rt = st.goals.get_mut(goal)?;
        let proposal = rt.ahead.remove(&slot)?;
        let source = proposal_source(&rt.proj, &proposal)?;
        agent::check_new(&rt.proj, history, &source, &proposal.config)
            .ok()
            .map(|_| proposal)
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
