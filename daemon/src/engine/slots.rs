//! Evaluation slots and their workers: starting one (with back-off), keeping one warm
//! ahead of need, killing one whose state is unknown, and reading device health.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::Engine;
use crate::harness::{Worker, WorkerError, WorkerSpec};
use crate::store::NewEvent;
use crate::wire::*;

impl Engine {
    /// Starts the slot's worker in the background if it has none and is free.
    pub(super) fn warm(self: &Arc<Self>, slot: usize) {
        {
            let mut st = self.state.lock().unwrap();
            let s = &mut st.slots[slot];
            let due = s.not_before.is_none_or(|t| t <= Instant::now());
            if s.worker.is_some()
                || s.warming
                || self.slurm_waits_for_lease(slot) // HOOK(slurm)
                || s.lease.is_some()
                || s.health != Health::Healthy
                || !due
            {
                return;
            }
            if self.stopping.is_cancelled() {
                return;
            }
            s.warming = true;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            let cancel = engine.stopping.child_token();
            let mut worker = None;
            engine.ensure_worker(slot, &mut worker, &cancel).await;
            {
                let mut st = engine.state.lock().unwrap();
                let s = &mut st.slots[slot];
                s.warming = false;
                if s.worker.is_none() {
                    s.worker = worker;
                } // else: impossible (no lease while warming); dropping kills the extra one
            }
            engine.wake.notify_one();
        });
    }

    pub(super) async fn worker_spec(&self, slot: usize) -> WorkerSpec {
        let info = self.state.lock().unwrap().slots[slot].info.clone();
        let sandbox = self.sandbox().await;
        WorkerSpec {
            python: self.config().python.clone(),
            script: self.config().worker_script(),
            max_files: self.config().worker_max_files,
            max_address_space: if info.is_gpu {
                0
            } else {
                self.config().worker_max_address_space_cpu
            },
            start_timeout: self.config().worker_start_timeout,
            launcher: Vec::new(),
            sandbox: sandbox.worker(&self.config(), slot, &info),
        }
    }

    pub(super) fn slot_uuid(&self, slot: usize) -> String {
        self.state.lock().unwrap().slots[slot].info.uuid.clone()
    }

    /// Makes sure the lease has a live worker. False: none could be started (the
    /// slot backs off) or the lease was cancelled meanwhile.
    pub(super) async fn ensure_worker(
        &self,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
    ) -> bool {
        if worker.is_some() {
            return true;
        }
        let mut spec = self.worker_spec(slot).await;
        // HOOK(slurm): a Slurm slot's worker runs under its job's srun. Not raced against
        // `cancel`: it watches it itself, and must record (and scancel) a job it asked for.
        let started = match self.slurm_launcher(slot, cancel).await {
            _ if cancel.is_cancelled() => return false,
            Ok(launcher) => {
                spec.launcher = launcher;
                tokio::select! {
                    r = Worker::start(&spec) => r,
                    _ = cancel.cancelled() => return false,
                }
            }
            Err(e) => Err(WorkerError::NoPlace(format!("{e:#}"))),
        };
        match started {
            Ok(w) => {
                let mut st = self.state.lock().unwrap();
                st.environment = Some(Environment::from_ready(&w.ready, super::KERNELD_VERSION));
                let s = &mut st.slots[slot];
                s.start_failures = 0;
                s.worker_pid = Some(w.pid() as u32);
                s.health_reason = None;
                *worker = Some(w);
                true
            }
            Err(e) => {
                let mut st = self.state.lock().unwrap();
                let s = &mut st.slots[slot];
                s.start_failures += 1;
                let backoff = Duration::from_secs((1u64 << s.start_failures.min(6)).min(60));
                s.not_before = Some(Instant::now() + backoff);
                s.health_reason = Some(format!(
                    "worker failed to start (retry in {backoff:?}): {e}"
                ));
                tracing::error!(device = %s.info.uuid, "{e}");
                false
            }
        }
    }

    /// Kills a worker whose state is unknown (timeout, protocol error, abort).
    pub(super) async fn discard(worker: &mut Option<Worker>) {
        if let Some(w) = worker.take() {
            w.kill().await;
        }
    }

    pub(super) async fn check_health(&self) {
        // (slot, uuid, health, due for a check) per device, and our workers' pids
        type Devices = Vec<(usize, String, Health, bool)>;
        let (uuids, ours): (Devices, BTreeSet<u32>) = {
            let st = self.state.lock().unwrap();
            let now = Instant::now();
            (
                st.slots
                    .iter()
                    .enumerate()
                    // HOOK(slurm): Slurm watches its own nodes; NVML here cannot.
                    .filter(|(i, _)| self.slurm_index(*i).is_none())
                    .map(|(i, s)| {
                        (
                            i,
                            s.info.uuid.clone(),
                            s.health.clone(),
                            s.not_before.is_none_or(|t| t <= now),
                        )
                    })
                    .collect(),
                st.slots.iter().filter_map(|s| s.worker_pid).collect(),
            )
        };
        let devices = self.devices.clone();
        let readings = tokio::task::spawn_blocking(move || {
            // The judge's runners are its children (in sessions of their own): ours too.
            let ours = crate::harness::with_descendants(&ours);
            uuids
                .into_iter()
                .map(|(i, u, h, cool)| {
                    let r = devices.health(&u, &ours);
                    (i, u, h, cool, r)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (i, uuid, was, cooled, reading) in readings {
            let reason = reading.drain_reason();
            let now_health = if reason.is_some() || !cooled {
                Health::Drained
            } else {
                Health::Healthy
            };
            if now_health == was {
                continue;
            }
            {
                let mut st = self.state.lock().unwrap();
                let s = &mut st.slots[i];
                s.health = now_health.clone();
                if reason.is_some() {
                    s.health_reason = reason.clone();
                } else if now_health == Health::Healthy {
                    s.health_reason = None;
                }
            }
            if now_health == Health::Drained {
                self.on_drained(i, &uuid, &reading); // issue #29: a sick GPU cannot judge
            }
            if let Err(e) = self
                .commit(vec![NewEvent::daemon(EventKind::DeviceHealth {
                    device: uuid,
                    health: now_health,
                    reason,
                })])
                .await
            {
                tracing::error!("recording device health: {e:#}");
            }
            self.wake.notify_one();
        }
    }
}
