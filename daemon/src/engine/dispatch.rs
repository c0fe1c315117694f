//! The scheduler loop: on every wake-up or tick, free healthy slots go to the goal the
//! policy (`crate::scheduler`) picks; each lease runs one iteration in its own task and
//! gives the slot back (`release`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Engine, LeaseRt};
use crate::harness::Worker;
use crate::scheduler::{self, Contender};
use crate::store::now_ms;
use crate::wire::*;

/// How often budgets and device health are looked at between events.
const TICK: Duration = Duration::from_secs(2);
/// Device health is read every this many ticks.
const HEALTH_EVERY: u32 = 3;

impl Engine {
    /// Runs until `stopping` is cancelled: hands free slots to goals, checks wall
    /// budgets and device health. Then waits for the leases to record their end.
    pub(crate) async fn run(self: Arc<Self>) {
        // Workers start ahead of need (torch import + CUDA init take seconds), so the
        // first goal's first evaluation does not wait for them.
        let n = self.state.lock().unwrap().slots.len();
        for slot in 0..n {
            self.warm(slot);
        }
        let mut ticks: u32 = 0;
        // An interval, not a sleep per loop: wake-ups come more often than TICK on a busy
        // daemon, and a sleep restarted on each would never fire.
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.dispatch();
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tick.tick() => {
                    ticks = ticks.wrapping_add(1);
                    self.check_wall_budgets().await;
                    self.breaker_retries().await;
                    if ticks.is_multiple_of(HEALTH_EVERY) {
                        self.check_health().await;
                        self.slurm_tick().await; // HOOK(slurm)
                    }
                    if let Some(f) = self.on_tick.lock().unwrap().as_ref() {
                        f(&self.status_line());
                    }
                }
                _ = self.stopping.cancelled() => break,
            }
        }
        // Leases see the cancellation (their tokens are children of `stopping`) and
        // record an abort; wait for them, bounded.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let busy = self
                .state
                .lock()
                .unwrap()
                .slots
                .iter()
                .any(|s| s.lease.is_some());
            if !busy {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let workers: Vec<Worker> = {
            let mut st = self.state.lock().unwrap();
            st.slots
                .iter_mut()
                .filter_map(|s| s.worker.take())
                .collect()
        };
        for w in workers {
            w.shutdown().await;
        }
        self.slurm_stop().await; // HOOK(slurm)
    }

    pub(super) fn dispatch(self: &Arc<Self>) {
        if self.stopping.is_cancelled() {
            return;
        }
        let now = Instant::now();
        let mut st = self.state.lock().unwrap();
        while let Some(slot) = st.slots.iter().position(|s| {
            s.lease.is_none()
                && !s.warming
                && s.health == Health::Healthy
                && s.not_before.is_none_or(|t| t <= now)
        }) {
            let contenders: Vec<Contender> = st
                .goals
                .values()
                .filter(|g| {
                    // An owed re-time nobody runs (retime.rs) makes an exhausted running
                    // goal, or a completed one, worth a lease.
                    let owed = g.proj.retime_work().any(|w| !g.retiming.contains(&w.key()));
                    let runnable = match g.proj.state {
                        GoalState::Queued | GoalState::Running => !g.exhausted || owed,
                        GoalState::Completed => owed,
                        _ => false,
                    };
                    runnable
                        && g.not_before.is_none_or(|t| t <= now)
                        && super::ops::chain_waits(&st, g).is_none()
                })
                .map(|g| Contender {
                    goal: g.proj.id.clone(),
                    priority: g.proj.spec.resources.priority,
                    in_flight: g.leases.len() as u32,
                    max_in_flight: g.proj.spec.resources.gpus,
                    served: g.served,
                    age_key: (
                        g.proj.created_ms,
                        g.proj.id.trim_start_matches('g').parse().unwrap_or(0),
                    ),
                })
                .collect();
            let Some(pick) = scheduler::pick(&contenders).map(|c| c.goal.clone()) else {
                // Free slots nobody wants: their wait is not daemon overhead (overhead.rs).
                for s in st.slots.iter_mut().filter(|s| s.lease.is_none()) {
                    s.clock.idle();
                }
                break;
            };

            // A goal that was idle joins the competition at the current minimum.
            let others = st
                .goals
                .values()
                .filter(|g| g.proj.id != pick && !g.leases.is_empty())
                .map(|g| g.served)
                .collect::<Vec<_>>();
            let rt = st.goals.get_mut(&pick).expect("picked goal exists");
            if rt.leases.is_empty() {
                rt.served = scheduler::join_served(rt.served, others.into_iter());
            }
            rt.served += 1;
            let cancel = self.stopping.child_token();
            let why = Arc::new(Mutex::new(None));
            rt.leases.push(LeaseRt {
                slot,
                cancel: cancel.clone(),
                why: why.clone(),
            });
            let goal_name = rt.proj.spec.name.clone();
            let s = &mut st.slots[slot];
            s.lease = Some(LeaseInfo {
                goal: pick.clone(),
                goal_name,
                candidate: String::new(),
                iteration: 0,
                since_ms: now_ms(),
            });
            s.leased_at = Some(now);
            let worker = s.worker.take();
            let engine = self.clone();
            tokio::spawn(async move {
                let mut worker = worker;
                if let Err(e) = engine
                    .run_lease(&pick, slot, &mut worker, &cancel, &why)
                    .await
                {
                    tracing::error!(goal = %pick, "iteration failed: {e:#}");
                    // A store failure (disk full, ...) must not spin: back off this slot.
                    engine.state.lock().unwrap().slots[slot].not_before =
                        Some(Instant::now() + Duration::from_secs(5));
                }
                engine.release(&pick, slot, worker);
            });
        }
    }

    pub(super) fn release(self: &Arc<Self>, goal: &str, slot: usize, worker: Option<Worker>) {
        {
            let mut st = self.state.lock().unwrap();
            if let Some(rt) = st.goals.get_mut(goal) {
                // A slot has at most one lease, so the slot names it.
                rt.leases.retain(|l| l.slot != slot);
                // Two leases that finish together can each see the other still leased,
                // mark the goal exhausted "until the other's result" and end: the last
                // one out clears the mark, so a lease looks again and completes the goal
                // (take_work) instead of leaving it running with nothing in flight.
                if rt.leases.is_empty() && rt.active.is_empty() {
                    rt.exhausted = false;
                }
            }
            let s = &mut st.slots[slot];
            if let Some(t) = s.leased_at.take() {
                s.busy += t.elapsed();
            }
            s.lease = None;
            s.worker_pid = worker.as_ref().map(|w| w.pid() as u32);
            s.worker = worker;
        }
        // A killed worker is replaced at once, not when the next lease needs it.
        self.warm(slot);
        self.wake.notify_one();
    }
}
