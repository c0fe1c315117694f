//! Wins that hold (issue #11): a would-be best (`WinPending`) is re-timed in a fresh
//! runner, interleaved with a freshly timed baseline, before it becomes `NewBest`; and
//! `kernelctl retime` re-times a candidate N times. A lease runs one owed re-time before
//! anything new; one interrupted by a crash or a kill runs again after the restart (its
//! starts counted like a pending evaluation's, quarantined after `max_attempts`).

use std::sync::Mutex;

use anyhow::anyhow;
use tokio_util::sync::CancellationToken;

use super::evaluation::{correctness_seeds, Outcome};
use super::Engine;
use crate::harness::Worker;
use crate::projection::RetimeWork;
use crate::store::NewEvent;
use crate::wire::*;

impl Engine {
    /// Runs the goal's next owed re-time, if there is one nobody runs. True: this lease
    /// ran one (or recorded it as quarantined), and has done its work.
    pub(super) async fn run_owed_retime(
        &self,
        goal: &str,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
        why: &Mutex<Option<String>>,
    ) -> anyhow::Result<bool> {
        let Some(w) = self.take_retime(goal, slot).await? else {
            return Ok(false);
        };
        let outcome = async {
            // One correctness seed, fresh for every re-time and attempt.
            let salt = (w.request.unwrap_or(0) << 16) ^ (u64::from(w.done) + 1);
            let seeds = correctness_seeds(&w.candidate, w.iteration, w.attempts, salt, 1);
            let mut req =
                self.evaluate_request(goal, &w.seed, w.source_hash.as_deref(), &w.config, seeds)?;
            req.retime = true;
            req.profile = false;
            match self.run_evaluate(slot, req, worker, cancel, why).await {
                Outcome::Done(r) => self.record_retime(goal, slot, &w, *r).await,
                Outcome::Aborted(reason) => self.abort_retime(goal, slot, &w, &reason).await,
            }
        }
        .await;
        if let Err(e) = &outcome {
            // As for an evaluation: say why it ended and free it, so it runs again.
            let still = self
                .state
                .lock()
                .unwrap()
                .goals
                .get(goal)
                .is_some_and(|rt| rt.retiming.contains(&w.key()));
            if still {
                let reason = format!("internal error: {e:#}");
                if let Err(e2) = self.abort_retime(goal, slot, &w, &reason).await {
                    tracing::error!(%goal, "recording the re-time's abort: {e2:#}");
                }
            }
        }
        outcome.map(|()| true)
    }

    /// Picks an owed re-time (confirmations first) and commits its start. Running goals,
    /// and completed ones (a confirmation cut off by a budget, a `retime` of a finished
    /// goal), re-time; paused, cancelled and failed ones wait or never do.
    async fn take_retime(&self, goal: &str, slot: usize) -> anyhow::Result<Option<RetimeWork>> {
        let guard = self.commit_lock.lock().await;
        let device = self.slot_uuid(slot);
        loop {
            let (proj, busy) = {
                let st = self.state.lock().unwrap();
                let rt = st
                    .goals
                    .get(goal)
                    .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
                (rt.proj.clone(), rt.retiming.clone())
            };
            let retimes = matches!(proj.state, GoalState::Running | GoalState::Completed);
            if !retimes || self.stopping.is_cancelled() {
                return Ok(None);
            }
            let Some(w) = proj
                .retime_work()
                .find(|w| !busy.contains(&w.key()))
                .cloned()
            else {
                return Ok(None);
            };
            if w.unexplained_starts() >= self.config().max_attempts {
                let msg = format!(
                    "re-time started {} times without a result or a recorded abort (the daemon or its worker died each time); quarantined",
                    w.unexplained_starts()
                );
                let result = EvalResult::failure(ResultClass::Quarantined, msg, 0.0);
                let mut items = Vec::new();
                let (checked, best) = check_win(&w, proj.best.as_ref(), &result);
                items.push(finished(goal, &w, &device, result));
                items.extend(checked.map(|k| NewEvent::goal(goal, k)));
                items.extend(best.map(|k| NewEvent::goal(goal, k)));
                self.append(&guard, items).await?;
                continue;
            }
            self.append(
                &guard,
                vec![NewEvent::goal(
                    goal,
                    EventKind::RetimeStarted {
                        iteration: w.iteration,
                        candidate: w.candidate.clone(),
                        device,
                        attempt: w.attempts + 1,
                        request: w.request,
                    },
                )],
            )
            .await?;
            let mut st = self.state.lock().unwrap();
            if let Some(rt) = st.goals.get_mut(goal) {
                rt.retiming.insert(w.key());
            }
            if let Some(lease) = st.slots[slot].lease.as_mut() {
                lease.candidate = w.candidate.clone();
                lease.iteration = w.iteration;
            }
            return Ok(Some(w));
        }
    }

    /// Records a re-time's result; a confirmation's decides the win (`check_win`).
    async fn record_retime(
        &self,
        goal: &str,
        slot: usize,
        w: &RetimeWork,
        result: EvalResult,
    ) -> anyhow::Result<()> {
        let guard = self.commit_lock.lock().await;
        let device = self.slot_uuid(slot);
        let prev = self.state.lock().unwrap().goals[goal].proj.best.clone();
        let (checked, best) = check_win(w, prev.as_ref(), &result);
        let revalidated = super::revalidate::revalidated(w, &result);
        let mut items = vec![finished(goal, w, &device, result)];
        items.extend(revalidated.map(|k| NewEvent::goal(goal, k)));
        items.extend(checked.map(|k| NewEvent::goal(goal, k)));
        items.extend(best.map(|k| NewEvent::goal(goal, k)));
        self.append(&guard, items).await?;
        {
            let mut st = self.state.lock().unwrap();
            if let Some(rt) = st.goals.get_mut(goal) {
                rt.retiming.remove(&w.key());
                // As after a result: a lease that found nothing to do while this ran
                // marked the goal exhausted; a new best (or none) may change that.
                rt.exhausted = false;
            }
            st.slots[slot].evaluations += 1;
        }
        if let Some((state, reason)) = self.stop_rule(goal) {
            self.finish_goal(&guard, goal, state, reason).await?;
        }
        Ok(())
    }

    async fn abort_retime(
        &self,
        goal: &str,
        slot: usize,
        w: &RetimeWork,
        reason: &str,
    ) -> anyhow::Result<()> {
        self.commit(vec![NewEvent::goal(
            goal,
            EventKind::RetimeAborted {
                iteration: w.iteration,
                candidate: w.candidate.clone(),
                device: self.slot_uuid(slot),
                reason: reason.to_string(),
                request: w.request,
            },
        )])
        .await?;
        if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
            rt.retiming.remove(&w.key());
            rt.exhausted = false;
        }
        Ok(())
    }
}

fn finished(goal: &str, w: &RetimeWork, device: &str, result: EvalResult) -> NewEvent {
    NewEvent::goal(
        goal,
        EventKind::RetimeFinished {
            iteration: w.iteration,
            candidate: w.candidate.clone(),
            device: device.to_string(),
            result,
            request: w.request,
        },
    )
}

/// Whether a would-be best's win holds after its re-time: the `WinChecked` event, and
/// the `NewBest` when it does (None, None for a request's re-time, which decides nothing).
///
/// The figure that decides and that is shown is the LOWER of the two speedups, with the
/// LARGER of the two spreads: a win must hold in both timings (the first one may have hit
/// a fast phase, the re-time a slow one; neither alone is trusted), and the noise either
/// saw is the noise the comparison must clear. It must beat the best at the time of the
/// re-time (another device may have confirmed one meanwhile) by more than that spread,
/// the same rule a first reading passed. A re-time that is not a correct, timed result
/// (wrong, crashed, refused) confirms nothing.
pub(super) fn check_win(
    w: &RetimeWork,
    prev: Option<&BestSummary>,
    retime: &EvalResult,
) -> (Option<EventKind>, Option<EventKind>) {
    let Some(first) = w.best.as_ref().filter(|_| w.request.is_none()) else {
        return (None, None);
    };
    let unconfirmed =
        |retimed_speedup: Option<f64>, spread_pct: f64, reason: String| EventKind::WinChecked {
            iteration: w.iteration,
            candidate: w.candidate.clone(),
            confirmed: false,
            first_speedup: first.speedup,
            retimed_speedup,
            speedup: None,
            spread_pct,
            reason,
        };
    if !retime.is_scored() {
        let why = retime.message.clone().unwrap_or_default();
        let reason = format!(
            "the re-time was not a correct, timed result ({}{}{})",
            retime.class.as_str(),
            if why.is_empty() { "" } else { ": " },
            why
        );
        return (Some(unconfirmed(None, first.spread_pct, reason)), None);
    }
    let again = retime.speedup.unwrap_or(0.0);
    let speedup = first.speedup.min(again);
    let spread = first
        .spread_pct
        .max(retime.spread_pct.unwrap_or(0.0).max(0.0));
    if let Some(b) = prev {
        let needed = b.speedup * (1.0 + spread.max(b.spread_pct) / 100.0);
        if speedup <= needed {
            let reason = format!(
                "re-timed at {again:.3}× (first {:.3}×): {speedup:.3}× does not beat the best {:.3}× by more than the spread {:.1}%",
                first.speedup,
                b.speedup,
                spread.max(b.spread_pct)
            );
            return (Some(unconfirmed(Some(again), spread, reason)), None);
        }
    }
    let checked = EventKind::WinChecked {
        iteration: w.iteration,
        candidate: w.candidate.clone(),
        confirmed: true,
        first_speedup: first.speedup,
        retimed_speedup: Some(again),
        speedup: Some(speedup),
        spread_pct: spread,
        reason: format!(
            "re-timed at {again:.3}× (first {:.3}×): the lower, {speedup:.3}×, counts",
            first.speedup
        ),
    };
    let best = EventKind::NewBest {
        best: BestSummary {
            speedup,
            spread_pct: spread,
            interpreted: first.interpreted || retime.interpreted,
            ..first.clone()
        },
        previous: prev.map(|b| b.speedup),
    };
    (Some(checked), Some(best))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    fn work(speedup: f64, spread: f64) -> RetimeWork {
        RetimeWork {
            iteration: 4,
            candidate: "c4".into(),
            seed: "a.py".into(),
            config: json!({}),
            source_hash: None,
            request: None,
            best: Some(BestSummary {
                candidate: "c4".into(),
                seed: "a.py".into(),
                config: json!({}),
                speedup,
                spread_pct: spread,
                iteration: 4,
                interpreted: false,
                environment: None,
            }),
            revalidate: None,
            times: 1,
            done: 0,
            attempts: 1,
            aborted: 0,
        }
    }

    /// A correct, timed re-time (revalidate.rs's tests too).
    pub(in crate::engine) fn timed(speedup: f64, spread: f64) -> EvalResult {
        EvalResult {
            class: ResultClass::Ok,
            correct: true,
            speedup: Some(speedup),
            spread_pct: Some(spread),
            ..EvalResult::failure(ResultClass::Ok, "", 1.0)
        }
    }

    fn best(speedup: f64) -> BestSummary {
        work(speedup, 1.0).best.unwrap()
    }

    #[test]
    fn the_lower_speedup_and_the_larger_spread_count() {
        let (c, b) = check_win(&work(2.0, 1.0), Some(&best(1.5)), &timed(1.8, 3.0));
        let Some(EventKind::WinChecked {
            confirmed, speedup, ..
        }) = c
        else {
            panic!("no check")
        };
        assert!(confirmed);
        assert_eq!(speedup, Some(1.8));
        let Some(EventKind::NewBest { best, previous }) = b else {
            panic!("no best")
        };
        assert_eq!(
            (best.speedup, best.spread_pct, previous),
            (1.8, 3.0, Some(1.5))
        );
    }

    #[test]
    fn a_win_that_does_not_hold_is_not_confirmed() {
        // First 2.0x, re-timed 1.52x: beats 1.5x by less than the spread.
        let (c, b) = check_win(&work(2.0, 1.0), Some(&best(1.5)), &timed(1.52, 2.0));
        assert!(matches!(
            c,
            Some(EventKind::WinChecked {
                confirmed: false,
                ..
            })
        ));
        assert!(b.is_none());
        // A wrong re-time confirms nothing, even with no best yet.
        let wrong = EvalResult::failure(ResultClass::WrongResult, "shape s seed 1", 1.0);
        let (c, b) = check_win(&work(2.0, 1.0), None, &wrong);
        let Some(EventKind::WinChecked {
            confirmed, reason, ..
        }) = c
        else {
            panic!("no check")
        };
        assert!(!confirmed && reason.contains("wrong_result"), "{reason}");
        assert!(b.is_none());
    }

    #[test]
    fn a_request_retime_decides_nothing() {
        let mut w = work(2.0, 1.0);
        w.request = Some(9);
        assert_eq!(check_win(&w, None, &timed(3.0, 1.0)), (None, None));
    }
}
