//! The engine's side of Slurm slots (the jobs themselves: `crate::slurm`).
//!
//! Slurm slots are ordinary slots after the local ones: the scheduler leases them to the
//! same goals under the same fair share. What differs is here: a worker on a Slurm slot
//! is started under its job's `srun` (the job asked for first when the slot holds none),
//! a worker death is checked against the job (a job Slurm took means the evaluation runs
//! again, not a crash result), the tick watches the jobs and gives idle ones back, and a
//! stop cancels them all.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::Engine;
use crate::slurm::{JobLog, SlurmSlots};
use crate::store::NewEvent;
use crate::wire::SlurmJobStatus;

impl JobLog for Engine {
    fn commit(&self, events: Vec<NewEvent>) -> BoxFuture<'_, anyhow::Result<()>> {
        Box::pin(async move { Engine::commit(self, events).await.map(|_| ()) })
    }
}

impl Engine {
    /// Slot `slot`'s index among the Slurm slots, if it is one.
    pub(super) fn slurm_index(&self, slot: usize) -> Option<(&Arc<SlurmSlots>, usize)> {
        let slurm = self.slurm.as_ref()?;
        let i = slot.checked_sub(self.first_slurm)?;
        (i < slurm.len()).then_some((slurm, i))
    }

    /// A Slurm slot without a job is not warmed: jobs are asked for when a lease needs one.
    pub(super) fn slurm_waits_for_lease(&self, slot: usize) -> bool {
        self.slurm_index(slot).is_some_and(|(s, i)| !s.holds_job(i))
    }

    /// The launcher of a worker on `slot` (empty for local slots).
    pub(super) async fn slurm_launcher(
        &self,
        slot: usize,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Vec<String>> {
        match self.slurm_index(slot) {
            Some((s, i)) => s.launcher(i, self, cancel).await,
            None => Ok(Vec::new()),
        }
    }

    /// `slot`'s worker died: Some(why) when its Slurm job ended (recorded), so the
    /// evaluation in flight is aborted and runs again; None: a local slot, or a crash.
    pub(super) async fn slurm_job_lost(&self, slot: usize) -> Option<String> {
        let (s, i) = self.slurm_index(slot)?;
        s.job_lost(i, self).await
    }

    /// Each health tick: job states for `kernelctl gpus`, ended jobs recorded (their
    /// idle workers dropped), idle jobs given back.
    pub(super) async fn slurm_tick(&self) {
        let Some(slurm) = self.slurm.clone() else {
            return;
        };
        let leased: Vec<bool> = {
            let st = self.state.lock().unwrap();
            (0..slurm.len())
                .map(|i| {
                    st.slots
                        .get(self.first_slurm + i)
                        .is_some_and(|s| s.lease.is_some() || s.warming)
                })
                .collect()
        };
        for i in slurm.poll(&leased, self).await {
            let idle_worker = {
                let mut st = self.state.lock().unwrap();
                let s = &mut st.slots[self.first_slurm + i];
                (s.lease.is_none()).then(|| s.worker.take()).flatten()
            };
            if let Some(w) = idle_worker {
                w.kill().await;
            }
        }
        for i in slurm.idle() {
            // Taken out of dispatch (warming) while the job goes back.
            let worker = {
                let mut st = self.state.lock().unwrap();
                let s = &mut st.slots[self.first_slurm + i];
                if s.lease.is_some() || s.warming {
                    continue;
                }
                s.warming = true;
                s.worker_pid = None;
                s.worker.take()
            };
            if let Some(w) = worker {
                w.shutdown().await;
            }
            let idle = self
                .cfg
                .read()
                .unwrap()
                .slurm
                .as_ref()
                .map(|c| c.idle_release);
            let why = format!("idle for {:?}: given back", idle.unwrap_or_default());
            if let Err(e) = slurm.release(i, &why, self).await {
                tracing::error!("Slurm: giving slot {i}'s job back: {e:#}");
            }
            self.state.lock().unwrap().slots[self.first_slurm + i].warming = false;
        }
    }

    /// At a clean stop (workers already shut down): every job is cancelled and recorded.
    pub(super) async fn slurm_stop(&self) {
        let Some(slurm) = self.slurm.clone() else {
            return;
        };
        for i in 0..slurm.len() {
            if let Err(e) = slurm.release(i, "kerneld stopped", self).await {
                tracing::error!("Slurm: cancelling slot {i}'s job at stop: {e:#}");
            }
        }
    }

    /// At start: reattach to our running jobs, cancel the rest (see `SlurmSlots::recover`).
    pub(super) async fn slurm_recover(&self) -> anyhow::Result<()> {
        let Some(slurm) = self.slurm.clone() else {
            return Ok(());
        };
        let store = self.store.clone();
        let held = tokio::task::spawn_blocking(move || store.slurm_jobs()).await??;
        slurm.recover(held, self).await
    }

    pub(super) fn slurm_status(&self, slot: usize) -> Option<SlurmJobStatus> {
        let (s, i) = self.slurm_index(slot)?;
        s.status(i)
    }
}
