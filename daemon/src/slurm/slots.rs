//! The jobs behind the engine's Slurm slots.
//!
//! Slot `i` (device name `slurm-i`) holds at most one job, named for the slot. The
//! engine leases Slurm slots like local ones (same goals, same fair share); this module
//! gives a lease's worker its launcher (`srun --jobid=N ... --`), asking Slurm for the
//! job first when the slot holds none: allocations follow the goals' need, never more
//! than `max_jobs`.
//!
//! Every job is in the log before kerneld waits on it (`SlurmJobSubmitted` as soon as
//! salloc names it), and leaves it with `SlurmJobEnded` once it was cancelled or Slurm
//! ended it. A job kerneld lets go of is always `scancel`led first (idempotent): so a
//! requeued job cannot come back holding a GPU nobody uses.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{Cluster, JobInfo, SlurmError};
use crate::gpu::DeviceInfo;
use crate::store::{NewEvent, SlurmJobRecord};
use crate::wire::{EventKind, SlurmJobStatus};

/// Where the slots' events go: the engine's commit (durable before it returns).
pub trait JobLog: Send + Sync {
    fn commit(&self, events: Vec<NewEvent>) -> BoxFuture<'_, anyhow::Result<()>>;
}

/// How long a worker's death waits for Slurm to tell whether its job went with it.
const LOST_RECHECK: Duration = Duration::from_secs(2);
/// How long the end of a job waits for Slurm to finish killing its steps (KillWait).
const COMPLETING_WAIT: Duration = Duration::from_secs(40);

#[derive(Debug, Default)]
struct SlotJob {
    /// The job the slot holds, as squeue last showed it.
    job: Option<JobInfo>,
    /// Since when the slot holds a job but no lease.
    idle_since: Option<Instant>,
    /// Why the slot's last job ended, when the tick noticed it first (its lease's
    /// evaluation then reads it when its worker dies).
    lost: Option<String>,
    /// A job asked for and not granted yet (shown by `kernelctl gpus` as PENDING).
    pending: Option<u64>,
}

pub struct SlurmSlots {
    pub cluster: Cluster,
    slots: Mutex<Vec<SlotJob>>,
}

/// The device name of Slurm slot `i` (in evaluation events and `kernelctl gpus`).
pub fn slot_name(i: usize) -> String {
    format!("slurm-{i}")
}

pub(crate) fn slot_index(name: &str) -> Option<usize> {
    name.strip_prefix("slurm-")?.parse().ok()
}

fn ended(i: usize, job: u64, state: Option<String>, reason: impl Into<String>) -> NewEvent {
    NewEvent::daemon(EventKind::SlurmJobEnded {
        slot: slot_name(i),
        job,
        state,
        reason: reason.into(),
    })
}

fn started(i: usize, j: &JobInfo, reattached: bool) -> NewEvent {
    NewEvent::daemon(EventKind::SlurmJobStarted {
        slot: slot_name(i),
        job: j.id,
        node: j.node.clone().unwrap_or_default(),
        reattached,
    })
}

impl SlurmSlots {
    pub fn new(cluster: Cluster) -> SlurmSlots {
        let n = cluster.cfg.max_jobs as usize;
        SlurmSlots {
            cluster,
            slots: Mutex::new((0..n).map(|_| SlotJob::default()).collect()),
        }
    }

    #[allow(clippy::len_without_is_empty)] // never empty: max_jobs >= 1
    pub fn len(&self) -> usize {
        self.cluster.cfg.max_jobs as usize
    }

    /// The engine's devices for the Slurm slots. `gpu`: the worker uses the job's GPU
    /// (false: Triton's interpreter, as in CPU mode).
    pub fn devices(&self, gpu: bool) -> Vec<DeviceInfo> {
        (0..self.len())
            .map(|i| DeviceInfo {
                uuid: slot_name(i),
                name: format!(
                    "Slurm {} ({})",
                    self.cluster.cfg.partition, self.cluster.cfg.gres
                ),
                compute_capability: None,
                memory_total_mib: None,
                is_gpu: gpu,
                // Which GPU of the node Slurm gives is known only there.
                minor: None,
            })
            .collect()
    }

    fn cmd_event(&self, i: usize, j: &JobInfo) -> NewEvent {
        NewEvent::daemon(EventKind::SlurmJobSubmitted {
            slot: slot_name(i),
            job: j.id,
            name: j.name.clone(),
            partition: self.cluster.cfg.partition.clone(),
        })
    }

    /// After a (re)start: reattaches to the jobs of ours still running (one per slot,
    /// their old worker steps ended), cancels the rest, and records each outcome, so the
    /// log's held jobs match Slurm's again. `held`: what the log says we hold.
    pub async fn recover(&self, held: Vec<SlurmJobRecord>, log: &dyn JobLog) -> anyhow::Result<()> {
        let ours = match self.cluster.our_jobs().await {
            Ok(j) => j,
            Err(e) => {
                // Nothing can be decided without squeue: the slots keep the jobs the log
                // says they hold (state unknown), so none gets a second one; the tick's
                // poll settles them once squeue answers.
                tracing::error!("Slurm: cannot list our jobs at start ({e}); keeping the log's");
                let mut st = self.slots.lock().unwrap();
                for h in held {
                    if let Some(s) = slot_index(&h.slot).and_then(|i| st.get_mut(i)) {
                        s.job = Some(JobInfo {
                            id: h.job,
                            name: h.name,
                            state: "UNKNOWN".into(),
                            node: h.node,
                            time_left_s: None,
                            reason: String::new(),
                        });
                        s.idle_since = Some(Instant::now());
                    }
                }
                return Ok(());
            }
        };
        let mut events = Vec::new();
        let mut kept: Vec<Option<JobInfo>> = vec![None; self.len()];
        for (slot, job) in &ours {
            let alive = job.is_running() || job.is_pending() || job.state == "COMPLETING";
            if !alive {
                continue;
            }
            let known = held.iter().any(|h| h.job == job.id);
            if !known {
                events.push(self.cmd_event(*slot, job));
            }
            if job.is_running() && *slot < self.len() && kept[*slot].is_none() {
                if let Err(e) = self.cluster.cancel_steps(job.id).await {
                    tracing::warn!(job = job.id, "Slurm: ending the old worker step: {e}");
                }
                events.push(started(*slot, job, true));
                kept[*slot] = Some(job.clone());
            } else {
                let why = if job.is_running() {
                    "a second job for one slot, or a slot beyond max_jobs: cancelled at restart"
                } else {
                    "still pending at restart: cancelled (asked for again when needed)"
                };
                self.cluster.cancel(job.id).await?;
                events.push(ended(*slot, job.id, Some(job.state.clone()), why));
            }
        }
        for h in &held {
            if kept.iter().flatten().any(|k| k.id == h.job)
                || events.iter().any(
                    |e| matches!(&e.kind, EventKind::SlurmJobEnded { job, .. } if *job == h.job),
                )
            {
                continue;
            }
            let state = ours
                .iter()
                .find(|(_, j)| j.id == h.job)
                .map(|(_, j)| j.state.clone());
            self.cluster.cancel(h.job).await?;
            let i = slot_index(&h.slot).unwrap_or(0);
            events.push(ended(
                i,
                h.job,
                state,
                "no longer running when kerneld restarted",
            ));
        }
        if !events.is_empty() {
            log.commit(events).await?;
        }
        let mut st = self.slots.lock().unwrap();
        for (i, k) in kept.into_iter().enumerate() {
            st[i].job = k;
            st[i].idle_since = Some(Instant::now());
        }
        Ok(())
    }

    /// Whether slot `i` holds a running job (a worker can start at once).
    pub fn holds_job(&self, i: usize) -> bool {
        self.slots.lock().unwrap()[i].job.is_some()
    }

    /// The launcher for a worker on slot `i`: its job's `srun ... --`, asking Slurm for
    /// the job first if the slot holds none (waiting while it is pending, until
    /// `cancel`). Err: why no worker can start there now (the engine backs the slot off).
    pub async fn launcher(
        &self,
        i: usize,
        log: &dyn JobLog,
        cancel: &CancellationToken,
    ) -> anyhow::Result<Vec<String>> {
        let held = self.slots.lock().unwrap()[i].job.as_ref().map(|j| j.id);
        if let Some(id) = held {
            // A step left from a killed worker would hold the job's resources.
            self.cluster.cancel_steps(id).await?;
            self.slots.lock().unwrap()[i].idle_since = None;
            return Ok(self.cluster.srun_prefix(id));
        }
        let req = self.cluster.request(i).await?;
        let id = req.id;
        self.slots.lock().unwrap()[i].pending = Some(id);
        let name = self.cluster.job_name(i);
        log.commit(vec![NewEvent::daemon(EventKind::SlurmJobSubmitted {
            slot: slot_name(i),
            job: id,
            name,
            partition: self.cluster.cfg.partition.clone(),
        })])
        .await?;
        let granted = tokio::select! {
            r = self.cluster.granted(req) => r,
            _ = cancel.cancelled() => Err(SlurmError::Failed {
                cmd: format!("salloc (job {id})"),
                status: "no longer needed".into(),
                stderr: "the lease that asked for it ended before Slurm granted it".into(),
            }),
        };
        self.slots.lock().unwrap()[i].pending = None;
        match granted {
            Ok(job) => {
                log.commit(vec![started(i, &job, false)]).await?;
                let mut st = self.slots.lock().unwrap();
                st[i].job = Some(job);
                st[i].idle_since = None;
                st[i].lost = None;
                Ok(self.cluster.srun_prefix(id))
            }
            Err(e) => {
                let state = self.cluster.job(id).await.ok().flatten().map(|j| j.state);
                self.cluster.cancel(id).await?;
                log.commit(vec![ended(i, id, state, e.to_string())]).await?;
                Err(e.into())
            }
        }
    }

    /// Slot `i`'s worker died: did its job end (cancelled, time limit, preemption,
    /// requeue, node failure)? Some(why): yes, and it is recorded; the evaluation in
    /// flight is to run again, and the slot asks for a new job when next leased.
    /// None: the job still runs, so the worker itself crashed (the candidate's doing).
    pub async fn job_lost(&self, i: usize, log: &dyn JobLog) -> Option<String> {
        let id = {
            let mut st = self.slots.lock().unwrap();
            match &st[i].job {
                Some(j) => j.id,
                None => return st[i].lost.take(),
            }
        };
        let mut seen = self.cluster.job(id).await;
        if matches!(&seen, Ok(Some(j)) if j.is_running()) {
            // The step may die a moment before slurmctld marks the job.
            tokio::time::sleep(LOST_RECHECK).await;
            seen = self.cluster.job(id).await;
        }
        let job = match seen {
            Ok(Some(j)) if j.is_running() => return None,
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(
                    job = id,
                    "Slurm: cannot read the job's state ({e}); taken as lost"
                );
                None
            }
        };
        Some(self.forget(i, id, job, log).await)
    }

    /// Records the end of slot `i`'s job `id` (cancelling it to be sure) and frees the slot.
    async fn forget(
        &self,
        i: usize,
        id: u64,
        mut job: Option<JobInfo>,
        log: &dyn JobLog,
    ) -> String {
        // COMPLETING hides how it ended (TIMEOUT, CANCELLED, PREEMPTED...): its steps are
        // still being killed. Wait for that, briefly.
        let t0 = Instant::now();
        while job.as_ref().is_some_and(|j| j.state == "COMPLETING")
            && t0.elapsed() < COMPLETING_WAIT
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
            match self.cluster.job(id).await {
                Ok(j) => job = j.or(job),
                Err(_) => break,
            }
        }
        let state = job.as_ref().map(|j| j.state.clone());
        let why = match &job {
            Some(j) if j.reason != "None" && !j.reason.is_empty() => {
                format!("Slurm job {id} ended ({}: {})", j.state, j.reason)
            }
            Some(j) => format!("Slurm job {id} ended ({})", j.state),
            None => format!("Slurm job {id} is gone (squeue no longer knows it)"),
        };
        if let Err(e) = self.cluster.cancel(id).await {
            tracing::warn!(job = id, "Slurm: cancelling a lost job: {e}");
        }
        if let Err(e) = log.commit(vec![ended(i, id, state, why.clone())]).await {
            tracing::error!(job = id, "recording the end of a Slurm job: {e:#}");
        }
        let mut st = self.slots.lock().unwrap();
        if st[i].job.as_ref().is_some_and(|j| j.id == id) {
            st[i].job = None;
            st[i].idle_since = None;
        }
        why
    }

    /// One look at Slurm per tick: refreshes what `kernelctl gpus` shows (state, time
    /// left) and records jobs that ended. `leased[i]`: slot i has a lease now. Returns
    /// the slots whose job ended (the engine drops their idle worker).
    pub async fn poll(&self, leased: &[bool], log: &dyn JobLog) -> Vec<usize> {
        let held: Vec<(usize, u64)> = {
            let mut st = self.slots.lock().unwrap();
            for (i, s) in st.iter_mut().enumerate() {
                let busy = leased.get(i).copied().unwrap_or(false);
                if busy || s.job.is_none() {
                    s.idle_since = None;
                } else if s.idle_since.is_none() {
                    s.idle_since = Some(Instant::now());
                }
            }
            st.iter()
                .enumerate()
                .filter_map(|(i, s)| s.job.as_ref().map(|j| (i, j.id)))
                .collect()
        };
        if held.is_empty() {
            return Vec::new();
        }
        let ours = match self.cluster.our_jobs().await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!("Slurm: squeue failed ({e}); job states not refreshed");
                return Vec::new();
            }
        };
        let mut gone = Vec::new();
        for (i, id) in held {
            let now = ours
                .iter()
                .find(|(_, j)| j.id == id)
                .map(|(_, j)| j.clone());
            match now {
                Some(j) if j.is_running() => {
                    self.slots.lock().unwrap()[i].job = Some(j);
                }
                other => {
                    let why = self.forget(i, id, other, log).await;
                    self.slots.lock().unwrap()[i].lost = Some(why);
                    gone.push(i);
                }
            }
        }
        gone
    }

    /// The slots idle past `idle_release` (holding a job, no lease): to give back.
    pub fn idle(&self) -> Vec<usize> {
        let limit = self.cluster.cfg.idle_release;
        let st = self.slots.lock().unwrap();
        st.iter()
            .enumerate()
            .filter(|(_, s)| s.job.is_some() && s.idle_since.is_some_and(|t| t.elapsed() >= limit))
            .map(|(i, _)| i)
            .collect()
    }

    /// Gives slot `i`'s job back (idle, or the daemon stopping): cancelled and recorded.
    pub async fn release(&self, i: usize, reason: &str, log: &dyn JobLog) -> anyhow::Result<()> {
        let Some(id) = self.slots.lock().unwrap()[i].job.as_ref().map(|j| j.id) else {
            return Ok(());
        };
        self.cluster.cancel(id).await?;
        log.commit(vec![ended(i, id, Some("CANCELLED".into()), reason)])
            .await?;
        let mut st = self.slots.lock().unwrap();
        st[i].job = None;
        st[i].idle_since = None;
        Ok(())
    }

    /// What `kernelctl gpus` shows for slot `i`.
    pub fn status(&self, i: usize) -> Option<SlurmJobStatus> {
        let st = self.slots.lock().unwrap();
        let s = st.get(i)?;
        match (&s.job, s.pending) {
            (Some(j), _) => Some(SlurmJobStatus {
                job: j.id,
                node: j.node.clone(),
                state: j.state.clone(),
                time_left_s: j.time_left_s,
            }),
            (None, Some(id)) => Some(SlurmJobStatus {
                job: id,
                node: None,
                state: "PENDING".into(),
                time_left_s: None,
            }),
            (None, None) => None,
        }
    }
}
