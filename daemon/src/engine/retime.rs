//! Wins that hold (issue #11): a would-be best (`WinPending`) is re-timed in a fresh
//! runner, interleaved with a freshly timed baseline, before it becomes `NewBest`; and
//! `kernelctl retime` re-times a candidate N times. A lease runs one owed re-time before
//! anything new; one interrupted by a crash or a kill runs again after the restart (its
//! starts counted like a pending evaluation's, quarantined after `max_attempts`). Every
//! re-time's measurement is pooled with the candidate's others (issue #23, `wins.rs`
//! decides with them).

use std::sync::Mutex;

use anyhow::anyhow;
use tokio_util::sync::CancellationToken;

use super::evaluation::{correctness_seeds, Outcome};
use super::wins::{self, check_win};
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
                let (checked, best) = check_win(&w, &proj, &result, None);
                items.push(finished(goal, &w, &device, result, None));
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

    /// Records a re-time's result, pooled with the candidate's other measurements; a
    /// confirmation's decides the win (`check_win`), and a new best gets kerneld's request
    /// for the rest of its measurements (`wins::top_up`).
    async fn record_retime(
        &self,
        goal: &str,
        slot: usize,
        w: &RetimeWork,
        result: EvalResult,
    ) -> anyhow::Result<()> {
        // Its first evaluation, for a candidate whose measurements the projection does
        // not hold (a `retime` of any evaluated candidate): read before the lock.
        let records = self.evaluations(goal).await?;
        let first = records
            .binary_search_by_key(&w.iteration, |r| r.iteration)
            .ok()
            .map(|i| &records[i].result);
        let guard = self.commit_lock.lock().await;
        let device = self.slot_uuid(slot);
        let proj = self.state.lock().unwrap().goals[goal].proj.clone();
        let before = wins::before(&proj, w.iteration, first);
        let pooled = crate::noise::pool(before.as_ref(), &result);
        let (checked, best) = check_win(w, &proj, &result, pooled.as_ref());
        // Only where a challenger may still come (not after the last iteration's win).
        let top_up = match (&best, pooled.as_ref()) {
            (Some(EventKind::NewBest { .. }), Some(p)) if proj.may_be_challenged() => {
                crate::noise::figure(p, &proj.noise).and_then(|f| wins::top_up(w, &f, own_uid()))
            }
            _ => None,
        };
        let revalidated =
            super::revalidate::revalidated(w, &proj, before.as_ref(), pooled.as_ref(), &result);
        let mut items = vec![finished(goal, w, &device, result, pooled)];
        items.extend(revalidated.map(|k| NewEvent::goal(goal, k)));
        items.extend(checked.map(|k| NewEvent::goal(goal, k)));
        items.extend(best.map(|k| NewEvent::goal(goal, k)));
        items.extend(top_up.map(|k| NewEvent::goal(goal, k)));
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

fn finished(
    goal: &str,
    w: &RetimeWork,
    device: &str,
    result: EvalResult,
    pooled: Option<Pooled>,
) -> NewEvent {
    NewEvent::goal(
        goal,
        EventKind::RetimeFinished {
            iteration: w.iteration,
            candidate: w.candidate.clone(),
            device: device.to_string(),
            result,
            request: w.request,
            pooled,
        },
    )
}

/// The uid kerneld's own requests are logged as asked by.
fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}
