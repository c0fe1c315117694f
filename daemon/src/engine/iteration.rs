//! One lease = one iteration: the goal turns running, its seeds are described, then
//! `take_work` picks a pending candidate (a restart's re-run) or asks the agent for the
//! next, and commits the proposal and the start; `evaluation` runs and records it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use tokio_util::sync::CancellationToken;

use super::ahead::proposal_source;
use super::{CommitGuard, Engine};
use crate::agent;
use crate::agent::retry::EndpointError;
use crate::candidate::candidate_id;
use crate::harness::Worker;
use crate::projection::Pending;
use crate::store::NewEvent;
use crate::wire::*;

/// Agent failures in a row that fail the goal, and the back-off unit between them.
const MAX_AGENT_FAILURES: u32 = 3;
const AGENT_RETRY: Duration = Duration::from_secs(5);

impl Engine {
    pub(super) async fn run_lease(
        &self,
        goal: &str,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
        why: &Mutex<Option<String>>,
    ) -> anyhow::Result<()> {
        if !self.ensure_worker(slot, worker, cancel).await {
            if !cancel.is_cancelled() {
                self.worker_unstartable(goal, slot).await?;
            }
            return Ok(());
        }
        // Running from its first lease on (describing its seeds is work for it already):
        // `status` never shows a queued goal with an evaluation in flight.
        {
            let guard = self.commit_lock.lock().await;
            let queued = self
                .state
                .lock()
                .unwrap()
                .goals
                .get(goal)
                .is_some_and(|g| g.proj.state == GoalState::Queued);
            if queued && !cancel.is_cancelled() {
                self.append(
                    &guard,
                    vec![NewEvent::goal(
                        goal,
                        EventKind::GoalStateChanged {
                            from: GoalState::Queued,
                            to: GoalState::Running,
                            reason: None,
                        },
                    )],
                )
                .await?;
            }
        }
        if !self.describe_seeds(goal, slot, worker, cancel).await? {
            return Ok(());
        }
        // Owed re-times first: a would-be best waits on its confirmation (after a restart
        // too), and a `retime` request runs before new work.
        if self
            .run_owed_retime(goal, slot, worker, cancel, why)
            .await?
        {
            return Ok(());
        }
        let Some(work) = self.take_work(goal, slot, cancel).await? else {
            return Ok(());
        };
        // The next candidate's runner starts and imports while this one is timed.
        self.prepare_ahead(goal, slot, worker).await;
        let outcome = async {
            let result = self
                .evaluate(goal, slot, &work, worker, cancel, why)
                .await?;
            let Some(result) = result else {
                // Aborted with no pause, cancel or stop behind it: no worker could be
                // started for it (a Slurm job lost is the cluster's, and runs again).
                if !cancel.is_cancelled() && worker.is_none() && self.slurm_index(slot).is_none() {
                    self.worker_unstartable(goal, slot).await?;
                }
                return Ok(());
            };
            self.record(goal, slot, &work, result).await
        }
        .await;
        if let Err(e) = &outcome {
            // The start is in the log but no result or abort may be: say why it ended, and
            // free the iteration so it runs again (else the goal would wait on it forever).
            let still_pending = self
                .state
                .lock()
                .unwrap()
                .goals
                .get(goal)
                .is_some_and(|rt| {
                    rt.active.contains(&work.iteration)
                        && rt.proj.pending.contains_key(&work.iteration)
                });
            if still_pending {
                let device = self.slot_uuid(slot);
                let reason = format!("internal error: {e:#}");
                if let Err(e2) = self.abort(goal, &work, &device, &reason).await {
                    tracing::error!(%goal, "recording the abort: {e2:#}");
                }
            }
            if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
                rt.active.remove(&work.iteration);
            }
        }
        outcome?;
        // A win this evaluation produced is re-timed at once, on the same device, before
        // the slot goes to anyone else.
        let owed = self
            .state
            .lock()
            .unwrap()
            .goals
            .get(goal)
            .is_some_and(|rt| rt.proj.confirming.contains_key(&work.iteration));
        if owed && !cancel.is_cancelled() {
            self.run_owed_retime(goal, slot, worker, cancel, why)
                .await?;
        }
        Ok(())
    }

    /// Picks what this lease evaluates: a pending candidate first (a restart's re-run),
    /// else the agent's next proposal. Commits the proposal and the start. None: nothing
    /// to do now (and the goal may have been completed for that reason).
    pub(super) async fn take_work(
        &self,
        goal: &str,
        slot: usize,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Option<Pending>> {
        let mut guard = self.commit_lock.lock().await;
        let device = self.slot_uuid(slot);
        loop {
            let (proj, active, others_busy) = {
                let st = self.state.lock().unwrap();
                let rt = st
                    .goals
                    .get(goal)
                    .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
                (
                    rt.proj.clone(),
                    rt.active.clone(),
                    rt.leases.len() > 1 || !rt.active.is_empty(),
                )
            };
            // Running since the lease began (run_lease); anything else: paused, ended, or a
            // race with one, and the next dispatch decides again.
            if proj.state != GoalState::Running || self.stopping.is_cancelled() {
                return Ok(None);
            }

            // 1. Re-run what was started and never finished.
            if let Some(p) = proj
                .pending
                .values()
                .find(|p| !active.contains(&p.iteration))
                .cloned()
            {
                if p.unexplained_starts() >= self.config().max_attempts {
                    let msg = format!(
                        "started {} times without a result or a recorded abort (the daemon or its worker died each time); quarantined",
                        p.unexplained_starts()
                    );
                    self.append(
                        &guard,
                        vec![NewEvent::goal(
                            goal,
                            EventKind::EvaluationFinished {
                                iteration: p.iteration,
                                candidate: p.candidate.clone(),
                                device: device.clone(),
                                result: EvalResult::failure(ResultClass::Quarantined, msg, 0.0),
                            },
                        )],
                    )
                    .await?;
                    continue;
                }
                return self.start_evaluation(&guard, goal, slot, p).await.map(Some);
            }

            // 2. Something new, within the iteration budget.
            let budget_left = proj
                .spec
                .budget
                .iterations
                .is_none_or(|b| proj.iteration < b);
            let proposal = if budget_left {
                let history = self.evaluations(goal).await?;
                let best_source = self.best_source(goal).await;
                let work_root = self.config().state_dir.join("agents");
                let env = agent::AgentEnv {
                    work_root,
                    best_source,
                    cancel: cancel.clone(),
                    command_env: self.config().command_env.clone(),
                    source_of: Some({
                        let store = self.store.clone();
                        std::sync::Arc::new(move |h: &str| store.source(h).ok().flatten())
                    }),
                };
                let next = proj.iteration + 1;
                // Enqueue refuses this; goals logged before that rule (or an admin group
                // that changed since) are held to it here too: a command agent on a
                // non-root daemon runs as kerneld's user, so only for trusted owners.
                let unsafe_command = proj.spec.agent.proposer().kind() == AgentKind::Command
                    && !nix::unistd::geteuid().is_root()
                    && !self.is_trusted(proj.owner_uid);
                let ahead = self.take_ahead(goal, slot, &history);
                let proposed = match agent::for_goal(&proj, env) {
                    // Proposed ahead for this slot, and prepared (ahead.rs).
                    _ if ahead.is_some() => Ok(ahead),
                    _ if unsafe_command => Err(anyhow!(
                        "a command agent of uid {} would run as kerneld's user; only root, \
                         kerneld's user or the admin group may use one on this daemon",
                        proj.owner_uid
                    )),
                    Err(e) => Err(e),
                    Ok(agent) if agent.slow() => {
                        // An external agent may think for minutes: let the log move on
                        // meanwhile, then look at the goal again.
                        drop(guard);
                        let snapshot = proj.clone();
                        let outcome = tokio::task::spawn_blocking(move || {
                            agent.propose(&snapshot, &history, next)
                        })
                        .await
                        .map_err(|e| anyhow!("the agent's thread failed: {e}"))
                        .and_then(|r| r);
                        guard = self.commit_lock.lock().await;
                        let runnable =
                            self.state.lock().unwrap().goals.get(goal).is_some_and(|g| {
                                matches!(g.proj.state, GoalState::Queued | GoalState::Running)
                            });
                        if cancel.is_cancelled() || !runnable || self.stopping.is_cancelled() {
                            return Ok(None);
                        }
                        outcome
                    }
                    // The built-in search ranks thousands of draws: on a blocking
                    // thread, so that it never holds up a runtime thread (`status` and
                    // every other request are served there).
                    Ok(agent) => {
                        let snapshot = proj.clone();
                        tokio::task::spawn_blocking(move || {
                            agent.propose(&snapshot, &history, next)
                        })
                        .await
                        .map_err(|e| anyhow!("the agent's thread failed: {e}"))
                        .and_then(|r| r)
                    }
                };
                match proposed {
                    Ok(p) => {
                        if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
                            rt.agent_failures = 0;
                            rt.transient_failures = 0;
                            rt.waiting = None;
                        }
                        p
                    }
                    Err(e) => {
                        self.agent_failed(&guard, goal, proj.spec.agent.kind(), e)
                            .await?;
                        return Ok(None);
                    }
                }
            } else {
                None
            };
            let Some(proposal) = proposal else {
                if others_busy {
                    // Results still to come may change the picture (new neighbours, a stop rule).
                    if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
                        rt.exhausted = true;
                    }
                    return Ok(None);
                }
                let reason = if budget_left {
                    "space_exhausted"
                } else {
                    "budget_iterations"
                };
                self.finish_goal(&guard, goal, GoalState::Completed, reason.into())
                    .await?;
                return Ok(None);
            };
            let source = proposal_source(&proj, &proposal)
                .ok_or_else(|| anyhow!("agent proposed unknown seed {}", proposal.seed))?;
            // Re-read: another lease of this goal may have proposed while a slow agent ran.
            let iteration = self.state.lock().unwrap().goals[goal].proj.iteration + 1;
            let candidate = candidate_id(&source, &proposal.config);
            self.append(
                &guard,
                vec![NewEvent::goal(
                    goal,
                    EventKind::CandidateProposed {
                        iteration,
                        candidate,
                        seed: proposal.seed.clone(),
                        config: proposal.config.clone(),
                        // A hybrid's proposals say which of its agents made each.
                        agent: match proposal.by {
                            Some(by) => format!("{}/{by}", proj.spec.agent.kind()),
                            None => proj.spec.agent.kind().to_string(),
                        },
                        source: proposal.source.clone(),
                        note: proposal.note.clone(),
                        tokens: proposal.tokens,
                    },
                )],
            )
            .await?;
            let pending = self.state.lock().unwrap().goals[goal]
                .proj
                .pending
                .get(&iteration)
                .cloned();
            let pending = pending
                .ok_or_else(|| anyhow!("proposal {iteration} missing from the projection"))?;
            return self
                .start_evaluation(&guard, goal, slot, pending)
                .await
                .map(Some);
        }
    }

    /// An agent failed to propose. A transient endpoint failure (`retry::EndpointError`)
    /// waits its back-off and never fails the goal; a permanent one fails it now; anything
    /// else backs off and retries, and after a few in a row the goal fails with the last
    /// error (a broken agent would fail the same way all night).
    pub(super) async fn agent_failed(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        kind: AgentKind,
        e: anyhow::Error,
    ) -> anyhow::Result<()> {
        match e.downcast_ref::<EndpointError>() {
            Some(EndpointError::Transient { retry_after, .. }) => {
                let retry_after = *retry_after;
                return self
                    .agent_retrying(guard, goal, kind, format!("{e:#}"), retry_after)
                    .await;
            }
            Some(EndpointError::Permanent { .. }) => {
                tracing::warn!(%goal, "the {kind} agent failed for good: {e:#}");
                self.append(
                    guard,
                    vec![NewEvent::goal(
                        goal,
                        EventKind::AgentFailed {
                            agent: kind.to_string(),
                            message: format!("{e:#}"),
                            failures: 1,
                        },
                    )],
                )
                .await?;
                let why = format!("the {kind} agent cannot go on: {e:#}");
                return self.finish_goal(guard, goal, GoalState::Failed, why).await;
            }
            None => {}
        }
        let failures = {
            let mut st = self.state.lock().unwrap();
            let Some(rt) = st.goals.get_mut(goal) else {
                return Ok(());
            };
            rt.agent_failures += 1;
            rt.not_before = Some(Instant::now() + AGENT_RETRY * rt.agent_failures);
            rt.agent_failures
        };
        tracing::warn!(%goal, failures, "the {kind} agent failed: {e:#}");
        // In the log, so `events`, `watch` and the next prompt show why nothing is evaluated.
        self.append(
            guard,
            vec![NewEvent::goal(
                goal,
                EventKind::AgentFailed {
                    agent: kind.to_string(),
                    message: format!("{e:#}"),
                    failures,
                },
            )],
        )
        .await?;
        if failures >= MAX_AGENT_FAILURES {
            let why = format!("the {kind} agent failed {failures} times in a row; last: {e:#}");
            self.finish_goal(guard, goal, GoalState::Failed, why)
                .await?;
        }
        Ok(())
    }

    /// A transient endpoint failure: the goal waits out its back-off (jittered, at least
    /// the endpoint's `Retry-After`, scaled by `agent_backoff_scale`), says so in `status`
    /// and the log, and asks again. Only a budget ends a goal whose endpoint stays down.
    async fn agent_retrying(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        kind: AgentKind,
        message: String,
        retry_after: Option<Duration>,
    ) -> anyhow::Result<()> {
        let scale = self.config().agent_backoff_scale;
        let (attempt, wait) = {
            let mut st = self.state.lock().unwrap();
            let Some(rt) = st.goals.get_mut(goal) else {
                return Ok(());
            };
            rt.transient_failures += 1;
            let wait = agent::retry::backoff(rt.transient_failures, retry_after, scale);
            rt.not_before = Some(Instant::now() + wait);
            rt.waiting = Some(format!(
                "the {kind} endpoint failed transiently ({} in a row): {message}; asking again",
                rt.transient_failures
            ));
            (rt.transient_failures, wait)
        };
        tracing::warn!(%goal, attempt, ?wait, "the {kind} endpoint failed transiently: {message}");
        self.append(
            guard,
            vec![NewEvent::goal(
                goal,
                EventKind::AgentRetrying {
                    agent: kind.to_string(),
                    message,
                    attempt,
                    retry_in_ms: wait.as_millis() as u64,
                },
            )],
        )
        .await?;
        Ok(())
    }

    pub(super) async fn start_evaluation(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        slot: usize,
        p: Pending,
    ) -> anyhow::Result<Pending> {
        let device = self.slot_uuid(slot);
        self.append(
            guard,
            vec![NewEvent::goal(
                goal,
                EventKind::EvaluationStarted {
                    iteration: p.iteration,
                    candidate: p.candidate.clone(),
                    device,
                    attempt: p.attempts + 1,
                },
            )],
        )
        .await?;
        let mut st = self.state.lock().unwrap();
        if let Some(rt) = st.goals.get_mut(goal) {
            rt.active.insert(p.iteration);
        }
        if let Some(lease) = st.slots[slot].lease.as_mut() {
            lease.candidate = p.candidate.clone();
            lease.iteration = p.iteration;
        }
        Ok(p)
    }
}
