//! The circuit breaker (issue #30): a goal whose evaluations fail for a reason that is not
//! the candidate's stops before it spends its budget at machine speed.
//!
//! Not the candidate's: the worker could not start (a lease found no worker), it refused
//! or garbled the request (it could not read its input: `worker-refused`,
//! `worker-protocol`, `worker-failed`), the runner could not start (the sandbox refused,
//! Python failed: the harness's `runner-start`), the judge's own CUDA context was lost
//! (`device-lost`), the goal's baseline failed on the GPU (`baseline-failed`), no timing
//! sample survived the machine (`timing-samples`). The candidate's own failures (rejections, compile errors, wrong
//! results, its timeouts and crashes) count as before.
//!
//! `TRIP_AFTER` such failures in a row (one, after a trip, until a result shows the
//! evaluations work again) pause the goal with the last one's reason, in one commit:
//! `goal_state_changed` to paused and `breaker_tripped` (trips in a row, the back-off).
//! The tick resumes it after `breaker_backoff`, doubled per trip in a row up to an hour;
//! `kernelctl resume` retries at once, `pause` keeps it paused. What it holds is in the
//! projection (`GoalProjection::breaker`), so a restart keeps it; the count in a row is
//! read back from the goal's last results at start.

use std::time::Duration;

use super::{CommitGuard, Engine};
use crate::config::MAX_BREAKER_BACKOFF;
use crate::store::{now_ms, NewEvent};
use crate::wire::*;

/// Failures in a row, not the candidates', that pause a goal.
pub(super) const TRIP_AFTER: u32 = 3;
/// Rules the daemon gives the failures it assigns when the worker failed, not the
/// candidate (evaluation.rs).
pub(super) const WORKER_REFUSED: &str = "worker-refused";
pub(super) const WORKER_PROTOCOL: &str = "worker-protocol";
pub(super) const WORKER_FAILED: &str = "worker-failed";
pub(super) const DEVICE_LOST: &str = "device-lost";
/// The harness's: the candidate's runner process did not start.
const RUNNER_START: &str = "runner-start";
/// The harness's, on a GPU: the goal's baseline failed in the judge (no speedup can be had).
const BASELINE_FAILED: &str = "baseline-failed";
/// The harness's: no timing sample survived (every batch throttled or leaked past the hold).
const TIMING_SAMPLES: &str = "timing-samples";
/// The most of a failure's message a pause reason quotes.
const REASON_CHARS: usize = 600;

/// Whether a result failed for a reason that is not the candidate's.
pub(super) fn not_the_candidates(r: &EvalResult) -> bool {
    matches!(r.class, ResultClass::Error | ResultClass::Crashed)
        && r.rule.as_deref().is_some_and(|rule| {
            [
                WORKER_REFUSED,
                WORKER_PROTOCOL,
                WORKER_FAILED,
                DEVICE_LOST,
                RUNNER_START,
                BASELINE_FAILED,
                TIMING_SAMPLES,
            ]
            .contains(&rule)
        })
}

/// The wait before try `trips` (1 for the first trip): `base` doubled per trip in a row.
pub(super) fn backoff(base: Duration, trips: u32) -> Duration {
    let cap = MAX_BREAKER_BACKOFF.max(base);
    base.saturating_mul(1 << trips.saturating_sub(1).min(16))
        .min(cap)
}

impl Engine {
    /// A result was recorded: one not the candidate's counts toward a trip, any other
    /// ends the streak. The caller holds the commit lock (`record`).
    pub(super) async fn breaker_after_result(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        infrastructure: Option<String>,
    ) -> anyhow::Result<()> {
        match infrastructure {
            Some(why) => self.infrastructure_failed(guard, goal, why, false).await,
            None => {
                if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
                    rt.infra_failures = 0;
                }
                Ok(())
            }
        }
    }

    /// A lease of `goal` found no worker on `slot` (it could not start). When every
    /// slot's worker has failed to start `TRIP_AFTER` times in a row (warming included),
    /// the goal trips at once: no lease of it can get further. (One bad device among good
    /// ones does not: the goal's next lease elsewhere ends its streak.)
    pub(super) async fn worker_unstartable(&self, goal: &str, slot: usize) -> anyhow::Result<()> {
        let (why, established) = {
            let st = self.state.lock().unwrap();
            let s = &st.slots[slot];
            let why = s
                .health_reason
                .clone()
                .unwrap_or_else(|| "no worker could be started".into());
            (
                format!("{}: {why}", s.info.uuid),
                st.slots.iter().all(|s| s.start_failures >= TRIP_AFTER),
            )
        };
        let guard = self.commit_lock.lock().await;
        self.infrastructure_failed(&guard, goal, why, established)
            .await
    }

    /// The worker refused a request for a reason of its own (it could not read its input):
    /// not the seed's fault, so not recorded as its rejection.
    pub(super) async fn describe_refused(&self, goal: &str, why: String) -> anyhow::Result<()> {
        let guard = self.commit_lock.lock().await;
        let why = format!("the worker refused to describe a seed: {why}");
        self.infrastructure_failed(&guard, goal, why, false).await
    }

    /// Counts one failure that is not the candidate's; trips at the threshold (`now`: at
    /// once).
    async fn infrastructure_failed(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        why: String,
        now: bool,
    ) -> anyhow::Result<()> {
        let (failures, trips, tripped_before) = {
            let mut st = self.state.lock().unwrap();
            let Some(rt) = st.goals.get_mut(goal) else {
                return Ok(());
            };
            if !matches!(rt.proj.state, GoalState::Queued | GoalState::Running) {
                return Ok(());
            }
            rt.infra_failures += 1;
            let before = rt.proj.breaker.as_ref().map_or(0, |b| b.trips);
            (rt.infra_failures, before + 1, before > 0)
        };
        tracing::warn!(%goal, failures, "an evaluation failed, not by the candidate's fault: {why}");
        // After a trip, one more failure (no result has worked since) trips it again.
        if !(now || tripped_before || failures >= TRIP_AFTER) {
            return Ok(());
        }
        self.trip(guard, goal, why, failures, trips).await
    }

    async fn trip(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        why: String,
        failures: u32,
        trips: u32,
    ) -> anyhow::Result<()> {
        let from = match self.state.lock().unwrap().goals.get(goal) {
            Some(rt) if matches!(rt.proj.state, GoalState::Queued | GoalState::Running) => {
                rt.proj.state
            }
            _ => return Ok(()),
        };
        let wait = backoff(self.config().breaker_backoff, trips);
        let short: String = why.chars().take(REASON_CHARS).collect();
        let cut = if short.len() < why.len() { "…" } else { "" };
        let reason = format!(
            "paused by the circuit breaker: {failures} evaluation attempt(s) in a row failed for a \
             reason that is not the candidate's, so none of its budget is spent while it is \
             paused; last: {short}{cut}; kerneld tries again in {} (`kernelctl resume {goal}` \
             tries now, once the cause is fixed)",
            humantime::format_duration(wait)
        );
        tracing::warn!(%goal, trips, ?wait, "{reason}");
        self.append(
            guard,
            vec![
                NewEvent::goal(
                    goal,
                    EventKind::GoalStateChanged {
                        from,
                        to: GoalState::Paused,
                        reason: Some(reason),
                    },
                ),
                NewEvent::goal(
                    goal,
                    EventKind::BreakerTripped {
                        reason: format!("{short}{cut}"),
                        failures,
                        trips,
                        retry_in_ms: wait.as_millis() as u64,
                    },
                ),
            ],
        )
        .await?;
        if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
            rt.infra_failures = 0;
        }
        self.cancel_leases(goal, "goal paused by the circuit breaker");
        Ok(())
    }

    /// The tick's part: goals the breaker holds whose back-off is over run again.
    pub(super) async fn breaker_retries(&self) {
        let now = now_ms();
        let due: Vec<String> = {
            let st = self.state.lock().unwrap();
            st.goals
                .values()
                .filter(|g| g.proj.state == GoalState::Paused)
                .filter(|g| g.proj.breaker_retry_at().is_some_and(|t| t <= now))
                .map(|g| g.proj.id.clone())
                .collect()
        };
        for goal in due {
            let guard = self.commit_lock.lock().await;
            let to = {
                let st = self.state.lock().unwrap();
                match st.goals.get(&goal) {
                    // Still held (a user may have acted meanwhile).
                    Some(g) if g.proj.breaker_retry_at().is_some() => {
                        // A goal that never ran goes back to the queue (as `resume` does).
                        if g.proj.wall_ms > 0 || g.proj.iteration > 0 {
                            GoalState::Running
                        } else {
                            GoalState::Queued
                        }
                    }
                    _ => continue,
                }
            };
            let event = EventKind::GoalStateChanged {
                from: GoalState::Paused,
                to,
                reason: Some("the circuit breaker's back-off is over: trying again".into()),
            };
            if let Err(e) = self
                .append(&guard, vec![NewEvent::goal(&goal, event)])
                .await
            {
                tracing::error!(%goal, "resuming after the circuit breaker's back-off: {e:#}");
            }
        }
        self.wake.notify_one();
    }

    /// At start: each active goal's failures in a row that were not the candidates', from
    /// its last results (a restart does not reset the count).
    pub(super) async fn breaker_restore(&self) -> anyhow::Result<()> {
        let goals: Vec<String> = {
            let st = self.state.lock().unwrap();
            st.goals
                .values()
                .filter(|g| matches!(g.proj.state, GoalState::Queued | GoalState::Running))
                .map(|g| g.proj.id.clone())
                .collect()
        };
        for goal in goals {
            let store = self.store.clone();
            let id = goal.clone();
            let last =
                tokio::task::spawn_blocking(move || store.last_results(&id, TRIP_AFTER as usize))
                    .await??;
            let streak = last.iter().take_while(|r| not_the_candidates(r)).count() as u32;
            if let Some(rt) = self.state.lock().unwrap().goals.get_mut(&goal) {
                rt.infra_failures = streak;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_back_off_doubles_per_trip_up_to_an_hour() {
        let base = Duration::from_secs(300);
        assert_eq!(backoff(base, 1), base);
        assert_eq!(backoff(base, 2), base * 2);
        assert_eq!(backoff(base, 5), MAX_BREAKER_BACKOFF);
        assert_eq!(backoff(base, 400), MAX_BREAKER_BACKOFF);
        let long = Duration::from_secs(7200);
        assert_eq!(backoff(long, 3), long);
    }

    #[test]
    fn only_the_infrastructures_failures_count() {
        let with = |class, rule: Option<&str>| EvalResult {
            rule: rule.map(String::from),
            ..EvalResult::failure(class, "x", 0.0)
        };
        assert!(not_the_candidates(&with(
            ResultClass::Error,
            Some(WORKER_REFUSED)
        )));
        assert!(not_the_candidates(&with(
            ResultClass::Error,
            Some("runner-start")
        )));
        assert!(not_the_candidates(&with(
            ResultClass::Crashed,
            Some(DEVICE_LOST)
        )));
        // The candidate's own: as before.
        assert!(!not_the_candidates(&with(ResultClass::Error, None)));
        assert!(!not_the_candidates(&with(
            ResultClass::WrongResult,
            Some("tolerance")
        )));
        assert!(!not_the_candidates(&with(ResultClass::CompileError, None)));
        assert!(!not_the_candidates(&with(
            ResultClass::TimedOut,
            Some(WORKER_FAILED)
        )));
        assert!(!not_the_candidates(&with(
            ResultClass::Error,
            Some("runner-protocol")
        )));
    }
}
