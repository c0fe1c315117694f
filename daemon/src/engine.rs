//! The engine: goals, evaluation slots, and the optimization loop that joins them.
//!
//! One iteration, on one leased slot (see ARCHITECTURE.md for the picture):
//! take work (a pending candidate to re-run, or the agent's next proposal) →
//! `CandidateProposed` + `EvaluationStarted` committed → the worker evaluates →
//! `EvaluationFinished` (+ `NewBest`) committed → stop rules checked → slot released.
//!
//! Invariants:
//! - Every change of state is an event committed through `Engine::append` before it is
//!   acted on or acknowledged; the in-memory projections are updated from the very
//!   events committed, in sequence order (appends are serialized by `commit_lock`).
//! - A slot has at most one lease; a lease's worker is owned by the lease task while it
//!   runs and handed back (or killed) when it ends.
//! - `state` (a std mutex) is never held across an await.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};
use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use crate::agent;
use crate::config::Config;
use crate::gpu::{DeviceInfo, DeviceLayer};
use crate::harness::{Worker, WorkerError, WorkerSpec};
use crate::projection::{GoalProjection, Pending};
use crate::scheduler::{self, Contender};
use crate::store::{self, now_ms, NewEvent, Store};
use crate::wire::*;

// Slurm slots: the engine's hooks (HOOK(slurm) below) call into this room.
mod slurm;

/// How often budgets and device health are looked at between events.
const TICK: Duration = Duration::from_secs(2);
/// Device health is read every this many ticks.
const HEALTH_EVERY: u32 = 3;
/// A `describe` of a seed (static checks + import) must answer within this.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(120);
/// Correctness seeds per evaluation.
const SEEDS_PER_EVALUATION: usize = 3;
/// Agent failures in a row that fail the goal, and the back-off unit between them.
const MAX_AGENT_FAILURES: u32 = 3;
const AGENT_RETRY: Duration = Duration::from_secs(5);
/// Most events in one `events` reply.
pub const EVENTS_PAGE: usize = 2000;
/// Evaluation records kept in `show`.
const RECENT: usize = 20;
/// How long a worker may take to abandon an evaluation (pause, cancel) before it is killed.
const ABORT_GRACE: Duration = Duration::from_secs(3);
/// A device drained for throttling during a measurement is retried after this.
const THROTTLE_COOLDOWN: Duration = Duration::from_secs(60);

/// An error an RPC handler returns: a JSON-RPC error code and a message for people.
pub type RpcResult<T> = Result<T, RpcError>;

fn rpc_err(code: i64, msg: impl Into<String>) -> RpcError {
    RpcError::new(code, msg)
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    rpc_err(code::INTERNAL_ERROR, format!("internal error: {e}"))
}

struct LeaseRt {
    slot: usize,
    cancel: CancellationToken,
    /// Why it was cancelled, written just before `cancel` fires (None: daemon stopping).
    why: Arc<Mutex<Option<String>>>,
}

struct GoalRt {
    proj: GoalProjection,
    leases: Vec<LeaseRt>,
    /// Pending iterations a lease is evaluating right now.
    active: BTreeSet<u64>,
    served: u64,
    /// The agent had nothing new; cleared when a result lands (it may open new neighbours).
    exhausted: bool,
    /// Agent failures in a row (a program that crashed, timed out, proposed a repeat).
    agent_failures: u32,
    /// No lease before this instant (back-off after an agent failure).
    not_before: Option<Instant>,
}

impl GoalRt {
    fn new(proj: GoalProjection) -> GoalRt {
        GoalRt {
            proj,
            leases: Vec::new(),
            active: BTreeSet::new(),
            served: 0,
            exhausted: false,
            agent_failures: 0,
            not_before: None,
        }
    }
}

struct Slot {
    info: DeviceInfo,
    health: Health,
    health_reason: Option<String>,
    /// Not before this instant (worker start back-off, throttle cool-down).
    not_before: Option<Instant>,
    start_failures: u32,
    /// A worker is being started ahead of need (at start, after a kill); no lease meanwhile.
    warming: bool,
    worker: Option<Worker>,
    worker_pid: Option<u32>,
    lease: Option<LeaseInfo>,
    leased_at: Option<Instant>,
    evaluations: u64,
    busy: Duration,
}

struct State {
    goals: BTreeMap<String, GoalRt>,
    slots: Vec<Slot>,
}

pub struct Engine {
    cfg: std::sync::RwLock<Config>,
    store: Arc<Store>,
    devices: Arc<dyn DeviceLayer>,
    state: Mutex<State>,
    /// Serializes appends, so projections apply events in sequence order, and makes
    /// "look at the goal, then commit" steps atomic.
    commit_lock: tokio::sync::Mutex<()>,
    wake: Notify,
    events: broadcast::Sender<Event>,
    stopping: CancellationToken,
    /// Cancelled when the daemon cannot go on (the event log became unwritable): `run`
    /// stops and returns the reason, so the process exits non-zero and systemd restarts it.
    fatal: CancellationToken,
    fatal_reason: Mutex<Option<String>>,
    /// Called on every scheduler tick with a one-line status (systemd watchdog + STATUS=):
    /// a scheduler that stops ticking stops the pings.
    on_tick: Mutex<Option<TickFn>>,
    started: Instant,
    /// HOOK(slurm): the Slurm slots (after the local ones, from `first_slurm` on).
    slurm: Option<Arc<crate::slurm::SlurmSlots>>,
    first_slurm: usize,
}

/// What the scheduler calls on each tick, with a one-line status of the daemon.
pub type TickFn = Box<dyn Fn(&str) + Send + Sync>;

/// Proof that the caller holds `commit_lock`.
type CommitGuard<'a> = tokio::sync::MutexGuard<'a, ()>;

impl Engine {
    /// Rebuilds the state from the store's projections (no replay of the log) and
    /// records the start. Goals that were running are running again; their pending
    /// evaluations run first.
    pub async fn start(
        cfg: Config,
        store: Arc<Store>,
        devices: Arc<dyn DeviceLayer>,
        stopping: CancellationToken,
    ) -> anyhow::Result<Arc<Engine>> {
        let goals = {
            let s = store.clone();
            tokio::task::spawn_blocking(move || s.goals()).await??
        };
        // HOOK(slurm): Slurm slots after the local ones; a host that would only be the CPU
        // fallback (a login node) serves no evaluations itself unless `local = true`.
        let slurm = cfg.slurm.clone().map(|c| {
            Arc::new(crate::slurm::SlurmSlots::new(crate::slurm::Cluster::new(
                c,
                &cfg.state_dir,
            )))
        });
        let mut infos = devices.devices();
        if let Some(c) = &cfg.slurm {
            if !c.local.unwrap_or(devices.mode() == "gpu") {
                infos.clear();
            }
        }
        let first_slurm = infos.len();
        if let Some(s) = &slurm {
            infos.extend(s.devices(!cfg.force_cpu));
        }
        let slots = infos
            .into_iter()
            .map(|info| Slot {
                info,
                health: Health::Healthy,
                health_reason: None,
                not_before: None,
                start_failures: 0,
                warming: false,
                worker: None,
                worker_pid: None,
                lease: None,
                leased_at: None,
                evaluations: 0,
                busy: Duration::ZERO,
            })
            .collect();
        let mut map = BTreeMap::new();
        for proj in goals {
            map.insert(proj.id.clone(), GoalRt::new(proj));
        }
        let (events, _) = broadcast::channel(4096);
        let engine = Arc::new(Engine {
            cfg: std::sync::RwLock::new(cfg),
            store,
            devices,
            state: Mutex::new(State { goals: map, slots }),
            commit_lock: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
            events,
            stopping,
            fatal: CancellationToken::new(),
            fatal_reason: Mutex::new(None),
            on_tick: Mutex::new(None),
            started: Instant::now(),
            slurm,
            first_slurm,
        });
        let mode = engine.devices.mode().to_string();
        // The log's last event is the last moment this daemon is known to have been alive
        // (a clean stop records one; after a crash it is a little early). Running goals'
        // wall clocks skip the time between it and now: a budget of "10h" means ten hours
        // of optimizing, not ten hours of which the machine was off for six.
        let last_alive = {
            let s = engine.store.clone();
            tokio::task::spawn_blocking(move || s.last_events(None, 1))
                .await??
                .last()
                .map(|e| e.time_ms)
        };
        let now = now_ms();
        let mut items = vec![NewEvent::daemon(EventKind::DaemonStarted {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: std::process::id(),
            mode,
        })];
        if let Some(from_ms) = last_alive.filter(|&t| t < now) {
            let running: Vec<String> = engine
                .state
                .lock()
                .unwrap()
                .goals
                .values()
                .filter(|g| g.proj.running_since_ms.is_some())
                .map(|g| g.proj.id.clone())
                .collect();
            for goal in running {
                items.push(NewEvent::goal(
                    &goal,
                    EventKind::Downtime {
                        from_ms,
                        to_ms: now,
                    },
                ));
            }
        }
        engine.commit(items).await?;
        engine.slurm_recover().await?; // HOOK(slurm)
        Ok(engine)
    }

    pub fn mode(&self) -> &'static str {
        self.devices.mode()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The configuration in force (SIGHUP or an edit of the file may change it).
    pub fn config(&self) -> std::sync::RwLockReadGuard<'_, Config> {
        self.cfg.read().unwrap()
    }

    /// Applies a re-read configuration file. Settings read at each use (timeouts,
    /// attempts, the worker's Python and limits, the admin group) take effect for the
    /// next evaluation or worker; where the state, the socket or the devices live needs
    /// a restart, and is said so. Returns what changed, for the log.
    pub fn reload(&self, new: Config) -> Vec<String> {
        let mut cfg = self.cfg.write().unwrap();
        let mut changed = Vec::new();
        macro_rules! take {
            ($($field:ident),*) => {$(
                if format!("{:?}", cfg.$field) != format!("{:?}", new.$field) {
                    changed.push(format!("{} = {:?}", stringify!($field), new.$field));
                    cfg.$field = new.$field.clone();
                }
            )*};
        }
        take!(
            python,
            kernels_dir,
            eval_timeout,
            worker_start_timeout,
            worker_max_files,
            worker_max_address_space_cpu,
            admin_group,
            llm_keys,
            max_attempts
        );
        macro_rules! restart_only {
            ($($field:ident),*) => {$(
                if format!("{:?}", cfg.$field) != format!("{:?}", new.$field) {
                    changed.push(format!("{} changed: takes effect after a restart", stringify!($field)));
                }
            )*};
        }
        restart_only!(state_dir, socket, gpu_allow, force_cpu, spool_dir, slurm);
        changed
    }

    // -- committing -----------------------------------------------------------

    async fn commit(&self, items: Vec<NewEvent>) -> anyhow::Result<Vec<Event>> {
        let guard = self.commit_lock.lock().await;
        self.append(&guard, items).await
    }

    /// Appends durably, then updates the cached projections and tells followers.
    async fn append(
        &self,
        _guard: &CommitGuard<'_>,
        items: Vec<NewEvent>,
    ) -> anyhow::Result<Vec<Event>> {
        let store = self.store.clone();
        let evs = match tokio::task::spawn_blocking(move || store.append(items)).await? {
            Ok(evs) => evs,
            Err(e) => {
                if let Some(why) = self.store.unwritable() {
                    self.fail(why.to_string());
                }
                return Err(e.into());
            }
        };
        self.publish(&evs);
        Ok(evs)
    }

    /// Stops the daemon for a reason it cannot recover from while running.
    pub fn fail(&self, reason: String) {
        let mut r = self.fatal_reason.lock().unwrap();
        if r.is_none() {
            tracing::error!("{reason}");
            *r = Some(reason);
        }
        drop(r);
        self.stopping.cancel();
        self.fatal.cancel();
    }

    /// Resolves when `fail` was called; returns its reason.
    pub async fn failed(&self) -> String {
        self.fatal.cancelled().await;
        self.fatal_reason
            .lock()
            .unwrap()
            .clone()
            .unwrap_or_default()
    }

    /// Installs the per-tick callback (see `on_tick`).
    pub fn set_on_tick(&self, f: Option<TickFn>) {
        *self.on_tick.lock().unwrap() = f;
    }

    /// One line for systemd's STATUS=: goals by state, busy devices.
    fn status_line(&self) -> String {
        let st = self.state.lock().unwrap();
        let count = |s: GoalState| st.goals.values().filter(|g| g.proj.state == s).count();
        let busy = st.slots.iter().filter(|s| s.lease.is_some()).count();
        let healthy = st
            .slots
            .iter()
            .filter(|s| s.health == Health::Healthy)
            .count();
        format!(
            "{} running, {} queued, {} paused; {busy}/{} devices busy, {healthy} healthy",
            count(GoalState::Running),
            count(GoalState::Queued),
            count(GoalState::Paused),
            st.slots.len()
        )
    }

    fn publish(&self, evs: &[Event]) {
        {
            let mut st = self.state.lock().unwrap();
            for ev in evs {
                if let Some(g) = ev.goal.as_deref() {
                    if let Some(rt) = st.goals.get_mut(g) {
                        rt.proj.apply(ev);
                    }
                }
            }
        }
        for ev in evs {
            let _ = self.events.send(ev.clone());
        }
    }

    // -- the scheduler loop ---------------------------------------------------

    /// Runs until `stopping` is cancelled: hands free slots to goals, checks wall
    /// budgets and device health. Then waits for the leases to record their end.
    pub async fn run(self: Arc<Self>) {
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

    fn dispatch(self: &Arc<Self>) {
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
                    matches!(g.proj.state, GoalState::Queued | GoalState::Running)
                        && !g.exhausted
                        && g.not_before.is_none_or(|t| t <= now)
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

    fn release(self: &Arc<Self>, goal: &str, slot: usize, worker: Option<Worker>) {
        {
            let mut st = self.state.lock().unwrap();
            if let Some(rt) = st.goals.get_mut(goal) {
                // A slot has at most one lease, so the slot names it.
                rt.leases.retain(|l| l.slot != slot);
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

    /// Starts the slot's worker in the background if it has none and is free.
    fn warm(self: &Arc<Self>, slot: usize) {
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

    // -- one lease: one iteration ---------------------------------------------

    fn worker_spec(&self, slot: usize) -> WorkerSpec {
        let info = self.state.lock().unwrap().slots[slot].info.clone();
        WorkerSpec {
            python: self.config().python.clone(),
            script: self.config().worker_script(),
            gpu_uuid: if info.is_gpu {
                Some(info.uuid.clone())
            } else {
                None
            },
            max_files: self.config().worker_max_files,
            max_address_space: if info.is_gpu {
                0
            } else {
                self.config().worker_max_address_space_cpu
            },
            start_timeout: self.config().worker_start_timeout,
            launcher: Vec::new(),
        }
    }

    fn slot_uuid(&self, slot: usize) -> String {
        self.state.lock().unwrap().slots[slot].info.uuid.clone()
    }

    /// Makes sure the lease has a live worker. False: none could be started (the
    /// slot backs off) or the lease was cancelled meanwhile.
    async fn ensure_worker(
        &self,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
    ) -> bool {
        if worker.is_some() {
            return true;
        }
        let mut spec = self.worker_spec(slot);
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
    async fn discard(worker: &mut Option<Worker>) {
        if let Some(w) = worker.take() {
            w.kill().await;
        }
    }

    async fn run_lease(
        &self,
        goal: &str,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
        why: &Mutex<Option<String>>,
    ) -> anyhow::Result<()> {
        if !self.ensure_worker(slot, worker, cancel).await {
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
        let Some(work) = self.take_work(goal, slot, cancel).await? else {
            return Ok(());
        };
        let outcome = async {
            let result = self
                .evaluate(goal, slot, &work, worker, cancel, why)
                .await?;
            let Some(result) = result else { return Ok(()) };
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
        outcome
    }

    /// Describes every seed the log has no description of yet (once per goal, ever).
    /// False when the lease should end (cancelled, or the worker was lost).
    async fn describe_seeds(
        &self,
        goal: &str,
        slot: usize,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<bool> {
        let (spec, known) = {
            let st = self.state.lock().unwrap();
            let rt = st
                .goals
                .get(goal)
                .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
            (
                rt.proj.spec.clone(),
                rt.proj.seeds.keys().cloned().collect::<BTreeSet<_>>(),
            )
        };
        for seed in spec.seeds.iter().filter(|s| !known.contains(&s.name)) {
            let path = self.source_file(&seed.source)?;
            let req = json!({"op": "describe", "task_dir": spec.task_dir, "candidate": path});
            let w = worker.as_mut().expect("ensured");
            let reply = tokio::select! {
                r = w.call(req, DESCRIBE_TIMEOUT) => r,
                _ = cancel.cancelled() => { Self::discard(worker).await; return Ok(false); }
            };
            let (space, default, rejected) = match reply {
                Ok(v) if v.get("ok").and_then(Value::as_bool) == Some(true) => {
                    let rejected = match v.get("class").and_then(Value::as_str) {
                        Some("ok") | None => None,
                        Some(_) => Some(
                            v.get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("rejected")
                                .to_string(),
                        ),
                    };
                    (
                        v.get("space").cloned().unwrap_or(json!({})),
                        v.get("default").cloned().unwrap_or(json!({})),
                        rejected,
                    )
                }
                Ok(v) => {
                    let msg = v
                        .get("error")
                        .and_then(Value::as_str)
                        .unwrap_or("describe failed")
                        .to_string();
                    (json!({}), json!({}), Some(msg))
                }
                Err(e) => {
                    Self::discard(worker).await;
                    // HOOK(slurm): the job went, not the seed's fault: describe it again later.
                    if self.slurm_job_lost(slot).await.is_some() {
                        return Ok(false);
                    }
                    // The worker died or hung importing the seed: record it as a rejection
                    // of that seed rather than retrying forever.
                    (json!({}), json!({}), Some(format!("describe failed: {e}")))
                }
            };
            self.commit(vec![NewEvent::goal(
                goal,
                EventKind::SeedDescribed {
                    seed: seed.name.clone(),
                    space,
                    default,
                    rejected,
                },
            )])
            .await?;
            if worker.is_none() && !self.ensure_worker(slot, worker, cancel).await {
                return Ok(false);
            }
        }
        // Every seed rejected: the goal cannot make progress.
        let rejections: Option<Vec<String>> = {
            let st = self.state.lock().unwrap();
            let rt = st
                .goals
                .get(goal)
                .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
            let all_rejected = rt.proj.seeds.len() == rt.proj.spec.seeds.len()
                && rt.proj.seeds.values().all(|s| s.rejected.is_some());
            all_rejected.then(|| {
                rt.proj
                    .seeds
                    .iter()
                    .map(|(n, s)| format!("{n}: {}", s.rejected.clone().unwrap_or_default()))
                    .collect()
            })
        };
        if let Some(r) = rejections {
            let guard = self.commit_lock.lock().await;
            self.finish_goal(
                &guard,
                goal,
                GoalState::Failed,
                format!("every seed was rejected: {}", r.join("; ")),
            )
            .await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Writes a candidate's source where the worker can load it; content-addressed.
    fn source_file(&self, source: &str) -> anyhow::Result<PathBuf> {
        let dir = self.config().sources_dir();
        let path = dir.join(format!("{}.py", store::source_hash(source)));
        if !path.is_file() {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let tmp = path.with_extension("py.tmp");
            std::fs::write(&tmp, source).with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &path)?;
        }
        Ok(path)
    }

    /// Picks what this lease evaluates: a pending candidate first (a restart's re-run),
    /// else the agent's next proposal. Commits the proposal and the start. None: nothing
    /// to do now (and the goal may have been completed for that reason).
    async fn take_work(
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
                let store = self.store.clone();
                let id = goal.to_string();
                let history = tokio::task::spawn_blocking(move || store.evaluations(&id)).await??;
                let best_source = match proj.best {
                    Some(_) => self.best(goal).await.ok().map(|b| b.source),
                    None => None,
                };
                let work_root = self.config().state_dir.join("agents");
                let env = agent::AgentEnv {
                    work_root,
                    best_source,
                    cancel: cancel.clone(),
                };
                let next = proj.iteration + 1;
                // Enqueue refuses this; goals logged before that rule (or an admin group
                // that changed since) are held to it here too: a command agent on a
                // non-root daemon runs as kerneld's user, so only for trusted owners.
                let unsafe_command = proj.spec.agent.kind == "command"
                    && !nix::unistd::geteuid().is_root()
                    && !self.is_trusted(proj.owner_uid);
                let proposed = match agent::for_goal(&proj, env) {
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
                    Ok(agent) => agent.propose(&proj, &history, next),
                };
                match proposed {
                    Ok(p) => {
                        if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
                            rt.agent_failures = 0;
                        }
                        p
                    }
                    Err(e) => {
                        self.agent_failed(&guard, goal, &proj.spec.agent.kind, e)
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
            let source = match &proposal.source {
                Some(s) => s.clone(),
                None => proj
                    .spec
                    .seeds
                    .iter()
                    .find(|s| s.name == proposal.seed)
                    .map(|s| s.source.clone())
                    .ok_or_else(|| anyhow!("agent proposed unknown seed {}", proposal.seed))?,
            };
            // Re-read: another lease of this goal may have proposed while a slow agent ran.
            let iteration = self.state.lock().unwrap().goals[goal].proj.iteration + 1;
            let candidate = store::candidate_id(&source, &proposal.config);
            self.append(
                &guard,
                vec![NewEvent::goal(
                    goal,
                    EventKind::CandidateProposed {
                        iteration,
                        candidate,
                        seed: proposal.seed.clone(),
                        config: proposal.config.clone(),
                        agent: proj.spec.agent.kind.clone(),
                        source: proposal.source.clone(),
                        note: proposal.note.clone(),
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

    /// An agent failed to propose: back off and retry; after a few failures in a row the
    /// goal fails with the last error (a broken agent would fail the same way all night).
    async fn agent_failed(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        kind: &str,
        e: anyhow::Error,
    ) -> anyhow::Result<()> {
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

    async fn start_evaluation(
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

    fn candidate_source(&self, goal: &str, p: &Pending) -> anyhow::Result<String> {
        if let Some(h) = &p.source_hash {
            return self
                .store
                .source(h)?
                .ok_or_else(|| anyhow!("source {h} missing from the store"));
        }
        let st = self.state.lock().unwrap();
        let rt = st
            .goals
            .get(goal)
            .ok_or_else(|| anyhow!("goal {goal} vanished"))?;
        rt.proj
            .spec
            .seeds
            .iter()
            .find(|s| s.name == p.seed)
            .map(|s| s.source.clone())
            .ok_or_else(|| anyhow!("seed {} not in goal", p.seed))
    }

    /// Runs the evaluation. None: it was aborted (and the abort is recorded).
    async fn evaluate(
        &self,
        goal: &str,
        slot: usize,
        p: &Pending,
        worker: &mut Option<Worker>,
        cancel: &CancellationToken,
        why: &Mutex<Option<String>>,
    ) -> anyhow::Result<Option<EvalResult>> {
        let source = self.candidate_source(goal, p)?;
        let path = self.source_file(&source)?;
        let spec = self.state.lock().unwrap().goals[goal].proj.spec.clone();
        // Fresh correctness seeds for every evaluation (and every attempt), reproducible from the log.
        let base = u64::from_str_radix(&p.candidate[..8.min(p.candidate.len())], 16).unwrap_or(0);
        let seeds: Vec<u64> = (0..SEEDS_PER_EVALUATION as u64)
            .map(|i| {
                (base ^ (p.iteration << 20) ^ ((p.attempts as u64) << 40)).wrapping_add(i * 7919)
                    % 1_000_000_007
            })
            .collect();
        let req = json!({
            "op": "evaluate",
            "task_dir": spec.task_dir,
            "candidate": path,
            "config": p.config,
            "shapes": spec.shapes,
            "baseline": spec.baseline,
            "seeds": seeds,
            "timing": {"warmup_ms": 25, "min_reps": 20, "max_reps": 200, "target_noise_pct": 1.0},
            "profile": true,
        });
        let device = self.slot_uuid(slot);
        if worker.is_none() && !self.ensure_worker(slot, worker, cancel).await {
            self.abort(goal, p, &device, "no worker could be started")
                .await?;
            return Ok(None);
        }
        let started = Instant::now();
        let w = worker.as_mut().expect("ensured");
        let reply = tokio::select! {
            r = w.call(req, self.config().eval_timeout) => r,
            _ = cancel.cancelled() => {
                // Pause, cancel, completion or shutdown: the GPU is freed at once. The
                // worker abandons the evaluation and stays; one that does not answer
                // (a kernel that never returns) is killed.
                let kept = match worker.as_mut() {
                    Some(w) if !self.stopping.is_cancelled() => w.interrupt(ABORT_GRACE).await,
                    _ => false,
                };
                if !kept {
                    Self::discard(worker).await;
                }
                let why = why.lock().unwrap().clone().unwrap_or_else(|| "daemon stopping".into());
                self.abort(goal, p, &device, &why).await?;
                return Ok(None);
            }
        };
        let elapsed = started.elapsed().as_secs_f64();
        let result = match reply {
            Ok(v) if v.get("ok").and_then(Value::as_bool) == Some(true) => {
                // A CUDA error poisoned the worker's context: it answered, and exits;
                // the next evaluation gets a fresh one.
                if v.get("fatal").and_then(Value::as_bool) == Some(true) {
                    Self::discard(worker).await;
                }
                match v
                    .get("result")
                    .cloned()
                    .map(serde_json::from_value::<EvalResult>)
                {
                    Some(Ok(mut r)) => {
                        if r.elapsed_s <= 0.0 {
                            r.elapsed_s = elapsed;
                        }
                        r
                    }
                    Some(Err(e)) => EvalResult::failure(
                        ResultClass::Error,
                        format!("unreadable result from the worker: {e}"),
                        elapsed,
                    ),
                    None => EvalResult::failure(
                        ResultClass::Error,
                        "the worker's reply had no result",
                        elapsed,
                    ),
                }
            }
            Ok(v) => {
                let msg = v
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("the worker refused the request");
                EvalResult::failure(ResultClass::Error, msg, elapsed)
            }
            Err(WorkerError::Timeout(t)) => {
                Self::discard(worker).await;
                EvalResult::failure(
                    ResultClass::TimedOut,
                    format!(
                        "no result within {}s; the worker's process group was killed",
                        t.as_secs()
                    ),
                    elapsed,
                )
            }
            Err(WorkerError::Died { status, stderr }) => {
                Self::discard(worker).await;
                // HOOK(slurm): Slurm took the job (scancel, time limit, preemption, node
                // failure): the evaluation runs again on a new job, like after a restart.
                if let Some(why) = self.slurm_job_lost(slot).await {
                    self.abort(goal, p, &device, &why).await?;
                    return Ok(None);
                }
                EvalResult::failure(
                    ResultClass::Crashed,
                    format!("the worker died ({status}); its last output:\n{stderr}"),
                    elapsed,
                )
            }
            Err(e) => {
                Self::discard(worker).await;
                EvalResult::failure(ResultClass::Error, e.to_string(), elapsed)
            }
        };
        Ok(Some(result))
    }

    async fn abort(
        &self,
        goal: &str,
        p: &Pending,
        device: &str,
        reason: &str,
    ) -> anyhow::Result<()> {
        self.commit(vec![NewEvent::goal(
            goal,
            EventKind::EvaluationAborted {
                iteration: p.iteration,
                candidate: p.candidate.clone(),
                device: device.to_string(),
                reason: reason.to_string(),
            },
        )])
        .await?;
        let mut st = self.state.lock().unwrap();
        if let Some(rt) = st.goals.get_mut(goal) {
            rt.active.remove(&p.iteration);
        }
        Ok(())
    }

    /// Records a result (and a new best, when it beats the old one beyond the noise),
    /// then applies the stop rules.
    async fn record(
        &self,
        goal: &str,
        slot: usize,
        p: &Pending,
        result: EvalResult,
    ) -> anyhow::Result<()> {
        let guard = self.commit_lock.lock().await;
        let device = self.slot_uuid(slot);
        let prev = self.state.lock().unwrap().goals[goal].proj.best.clone();
        let mut items = Vec::new();
        let new_best = result
            .is_scored()
            .then(|| result.speedup.unwrap())
            .and_then(|s| {
                let spread = result.spread_pct.unwrap_or(0.0).max(0.0);
                let better = match &prev {
                    None => true,
                    Some(b) => s > b.speedup * (1.0 + spread.max(b.spread_pct) / 100.0),
                };
                better.then(|| BestSummary {
                    candidate: p.candidate.clone(),
                    seed: p.seed.clone(),
                    // what ran, defaults filled in: the `BEST` a user takes must run as is
                    config: result.config.clone().unwrap_or_else(|| p.config.clone()),
                    speedup: s,
                    spread_pct: spread,
                    iteration: p.iteration,
                    interpreted: result.interpreted,
                })
            });
        // A throttled measurement drains the device for a cool-down.
        let throttled = result
            .device
            .get("throttle_reasons")
            .and_then(Value::as_array)
            .is_some_and(|a| {
                a.iter().any(|r| {
                    r.as_str()
                        .is_some_and(|s| s.contains("thermal") || s.contains("power"))
                })
            });
        items.push(NewEvent::goal(
            goal,
            EventKind::EvaluationFinished {
                iteration: p.iteration,
                candidate: p.candidate.clone(),
                device: device.clone(),
                result,
            },
        ));
        if let Some(best) = new_best {
            items.push(NewEvent::goal(
                goal,
                EventKind::NewBest {
                    best,
                    previous: prev.map(|b| b.speedup),
                },
            ));
        }
        if throttled {
            items.push(NewEvent::daemon(EventKind::DeviceHealth {
                device: device.clone(),
                health: Health::Drained,
                reason: Some("thermal or power throttling during a measurement".into()),
            }));
        }
        self.append(&guard, items).await?;
        {
            let mut st = self.state.lock().unwrap();
            if let Some(rt) = st.goals.get_mut(goal) {
                rt.active.remove(&p.iteration);
                rt.exhausted = false;
            }
            let s = &mut st.slots[slot];
            s.evaluations += 1;
            if throttled {
                s.health = Health::Drained;
                s.health_reason =
                    Some("thermal or power throttling during a measurement; cooling down".into());
                s.not_before = Some(Instant::now() + THROTTLE_COOLDOWN);
            }
        }
        if let Some((state, reason)) = self.stop_rule(goal) {
            self.finish_goal(&guard, goal, state, reason).await?;
        }
        Ok(())
    }

    /// The stop rule or budget that ends the goal now, if any (iterations and an
    /// exhausted space are decided when taking work).
    fn stop_rule(&self, goal: &str) -> Option<(GoalState, String)> {
        let st = self.state.lock().unwrap();
        let g = &st.goals.get(goal)?.proj;
        if g.state.is_terminal() {
            return None;
        }
        if let (Some(t), Some(b)) = (g.spec.stop.target_speedup, &g.best) {
            if b.speedup >= t {
                return Some((GoalState::Completed, "target_reached".into()));
            }
        }
        if let Some(p) = g.spec.stop.plateau {
            if g.evaluations > 0
                && g.iteration.saturating_sub(g.last_improvement) >= p
                && g.pending.is_empty()
            {
                return Some((GoalState::Completed, "plateau".into()));
            }
        }
        if let Some(h) = g.spec.budget.gpu_hours {
            if g.gpu_ms as f64 / 3.6e6 >= h {
                return Some((GoalState::Completed, "budget_gpu_hours".into()));
            }
        }
        if let Some(w) = g.spec.budget.wall_s {
            if g.wall_ms_at(now_ms()) >= w * 1000 {
                return Some((GoalState::Completed, "budget_wall".into()));
            }
        }
        None
    }

    /// Moves a goal to a terminal (or paused) state and stops its other leases.
    async fn finish_goal(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        to: GoalState,
        reason: String,
    ) -> anyhow::Result<()> {
        let from = match self.state.lock().unwrap().goals.get(goal) {
            Some(rt) if !rt.proj.state.is_terminal() => rt.proj.state,
            _ => return Ok(()),
        };
        let why = format!("goal {to}: {reason}");
        self.append(
            guard,
            vec![NewEvent::goal(
                goal,
                EventKind::GoalStateChanged {
                    from,
                    to,
                    reason: Some(reason),
                },
            )],
        )
        .await?;
        self.cancel_leases(goal, &why);
        Ok(())
    }

    fn cancel_leases(&self, goal: &str, why: &str) {
        let st = self.state.lock().unwrap();
        if let Some(rt) = st.goals.get(goal) {
            for l in &rt.leases {
                *l.why.lock().unwrap() = Some(why.to_string());
                l.cancel.cancel();
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    async fn check_wall_budgets(&self) {
        let over: Vec<String> = {
            let st = self.state.lock().unwrap();
            let now = now_ms();
            st.goals
                .values()
                .filter(|g| g.proj.state == GoalState::Running)
                .filter(|g| {
                    g.proj
                        .spec
                        .budget
                        .wall_s
                        .is_some_and(|w| g.proj.wall_ms_at(now) >= w * 1000)
                })
                .map(|g| g.proj.id.clone())
                .collect()
        };
        for goal in over {
            let guard = self.commit_lock.lock().await;
            if let Err(e) = self
                .finish_goal(&guard, &goal, GoalState::Completed, "budget_wall".into())
                .await
            {
                tracing::error!(%goal, "recording the wall budget's end: {e:#}");
            }
        }
    }

    async fn check_health(&self) {
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

    // -- the control plane's operations ------------------------------------------

    fn resolve(&self, goal_ref: &str) -> RpcResult<String> {
        let st = self.state.lock().unwrap();
        if st.goals.contains_key(goal_ref) {
            return Ok(goal_ref.to_string());
        }
        // By name: the one active goal of that name, else the newest of that name. Two
        // active goals of one name are ambiguous: acting on either silently would surprise.
        let mut named: Vec<&GoalRt> = st
            .goals
            .values()
            .filter(|g| g.proj.spec.name == goal_ref)
            .collect();
        named.sort_by_key(|g| (g.proj.created_ms, g.proj.id.len(), g.proj.id.clone()));
        let active: Vec<&str> = named
            .iter()
            .filter(|g| !g.proj.state.is_terminal())
            .map(|g| g.proj.id.as_str())
            .collect();
        if active.len() > 1 {
            return Err(rpc_err(
                code::INVALID_PARAMS,
                format!(
                    "`{goal_ref}` names {} active goals ({}); use an id",
                    active.len(),
                    active.join(", ")
                ),
            ));
        }
        if let Some(id) = active.first() {
            return Ok(id.to_string());
        }
        named.last().map(|g| g.proj.id.clone()).ok_or_else(|| {
            rpc_err(
                code::GOAL_NOT_FOUND,
                format!("no goal `{goal_ref}` (by id or name); `kernelctl status` lists them"),
            )
        })
    }

    /// May name task directories outside the installed tasks at enqueue: root, kerneld's
    /// own user, or the admin group.
    fn is_trusted(&self, uid: u32) -> bool {
        uid == nix::unistd::geteuid().as_raw() || self.is_admin(uid)
    }

    /// Root, or a member of the configured admin group.
    fn is_admin(&self, uid: u32) -> bool {
        if uid == 0 {
            return true;
        }
        let Some(group) = &self.config().admin_group else {
            return false;
        };
        let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
            return false;
        };
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => u.gid == g.gid || g.mem.contains(&u.name),
            _ => false,
        }
    }

    /// A goal's owner, root or the admin group. Not "anyone with the daemon's uid": the
    /// programs the daemon runs for goals (agents, candidates) would pass that test.
    fn may_modify(&self, uid: u32, owner: u32) -> bool {
        uid == owner || self.is_admin(uid)
    }

    fn summary(&self, goal: &str) -> RpcResult<GoalSummary> {
        let st = self.state.lock().unwrap();
        let rt = st
            .goals
            .get(goal)
            .ok_or_else(|| rpc_err(code::GOAL_NOT_FOUND, format!("no goal {goal}")))?;
        Ok(rt.proj.summary(now_ms(), rt.leases.len() as u32))
    }

    pub async fn enqueue(&self, params: EnqueueParams, uid: u32) -> RpcResult<EnqueueResult> {
        if self.stopping.is_cancelled() {
            return Err(rpc_err(
                code::SHUTTING_DOWN,
                "kerneld is stopping; enqueue again once it is back",
            ));
        }
        let kernels = self.config().kernels_dir.clone();
        let trusted = self.is_trusted(uid);
        let requester = crate::goal::Requester {
            trusted,
            // A root daemon runs a command agent as the goal's owner (agent::command).
            may_run_commands: trusted || nix::unistd::geteuid().is_root(),
            files: params.files,
            llm_keys: self.config().llm_keys.clone(),
        };
        let (path, source) = (params.path, params.source);
        let spec = tokio::task::spawn_blocking(move || {
            crate::goal::parse(&path, &source, &kernels, &requester)
        })
        .await
        .map_err(internal)?
        .map_err(|e| rpc_err(code::INVALID_GOAL, e.to_string()))?;
        let guard = self.commit_lock.lock().await;
        if params.unique {
            let st = self.state.lock().unwrap();
            if let Some(g) = st.goals.values().find(|g| {
                g.proj.spec.name == spec.name
                    && g.proj.owner_uid == uid
                    && !g.proj.state.is_terminal()
            }) {
                return Ok(EnqueueResult {
                    id: g.proj.id.clone(),
                    name: spec.name,
                    created: false,
                });
            }
        }
        let name = spec.name.clone();
        let store = self.store.clone();
        let (id, evs) = tokio::task::spawn_blocking(move || store.enqueue_goal(spec, uid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        {
            let mut st = self.state.lock().unwrap();
            let proj = self
                .store
                .goal(&id)
                .map_err(internal)?
                .ok_or_else(|| internal("enqueued goal missing"))?;
            st.goals.insert(id.clone(), GoalRt::new(proj));
        }
        drop(guard);
        for ev in evs {
            let _ = self.events.send(ev);
        }
        self.wake.notify_one();
        Ok(EnqueueResult {
            id,
            name,
            created: true,
        })
    }

    pub fn status(&self, goal: Option<&str>) -> RpcResult<Vec<GoalSummary>> {
        match goal {
            Some(g) => {
                let id = self.resolve(g)?;
                Ok(vec![self.summary(&id)?])
            }
            None => {
                let st = self.state.lock().unwrap();
                let now = now_ms();
                let mut all: Vec<GoalSummary> = st
                    .goals
                    .values()
                    .map(|g| g.proj.summary(now, g.leases.len() as u32))
                    .collect();
                all.sort_by_key(|g| {
                    (
                        g.created_ms,
                        g.id.trim_start_matches('g').parse::<u64>().unwrap_or(0),
                    )
                });
                Ok(all)
            }
        }
    }

    pub async fn show(&self, goal: &str) -> RpcResult<GoalDetail> {
        let id = self.resolve(goal)?;
        let summary = self.summary(&id)?;
        let spec = self.state.lock().unwrap().goals[&id].proj.spec.clone();
        let store = self.store.clone();
        let gid = id.clone();
        let mut recent = tokio::task::spawn_blocking(move || store.evaluations(&gid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        let cut = recent.len().saturating_sub(RECENT);
        recent.drain(..cut);
        Ok(GoalDetail {
            summary,
            spec,
            recent,
        })
    }

    pub async fn pause(&self, goal: &str, uid: u32) -> RpcResult<GoalSummary> {
        self.transition(
            goal,
            uid,
            |s| matches!(s, GoalState::Queued | GoalState::Running),
            |s| s == GoalState::Paused,
            GoalState::Paused,
            "pause",
        )
        .await
    }

    pub async fn resume(&self, goal: &str, uid: u32) -> RpcResult<GoalSummary> {
        let id = self.resolve(goal)?;
        // A goal that never ran goes back to the queue; one that ran continues running.
        let ran = self
            .state
            .lock()
            .unwrap()
            .goals
            .get(&id)
            .is_some_and(|g| g.proj.wall_ms > 0 || g.proj.iteration > 0);
        let to = if ran {
            GoalState::Running
        } else {
            GoalState::Queued
        };
        self.transition(
            &id,
            uid,
            |s| s == GoalState::Paused,
            |s| matches!(s, GoalState::Queued | GoalState::Running),
            to,
            "resume",
        )
        .await
    }

    pub async fn cancel(&self, goal: &str, uid: u32) -> RpcResult<GoalSummary> {
        self.transition(
            goal,
            uid,
            |s| !s.is_terminal(),
            |s| s == GoalState::Cancelled,
            GoalState::Cancelled,
            "cancel",
        )
        .await
    }

    async fn transition(
        &self,
        goal: &str,
        uid: u32,
        allowed: impl Fn(GoalState) -> bool,
        already: impl Fn(GoalState) -> bool,
        to: GoalState,
        verb: &str,
    ) -> RpcResult<GoalSummary> {
        let id = self.resolve(goal)?;
        let guard = self.commit_lock.lock().await;
        let (from, owner) = {
            let st = self.state.lock().unwrap();
            let g = &st.goals[&id].proj;
            (g.state, g.owner_uid)
        };
        if !self.may_modify(uid, owner) {
            return Err(rpc_err(
                code::PERMISSION_DENIED,
                format!("goal {id} belongs to uid {owner}; only its owner, root or the admin group may {verb} it"),
            ));
        }
        if already(from) {
            // Already there: nothing to do, and nothing for a cron job to special-case.
            drop(guard);
            return self.summary(&id);
        }
        if !allowed(from) {
            return Err(rpc_err(
                code::INVALID_STATE,
                format!("cannot {verb} goal {id}: it is {from}"),
            ));
        }
        let reason = (to == GoalState::Cancelled).then(|| format!("cancelled by uid {uid}"));
        self.append(
            &guard,
            vec![NewEvent::goal(
                &id,
                EventKind::GoalStateChanged { from, to, reason },
            )],
        )
        .await
        .map_err(internal)?;
        drop(guard);
        if matches!(to, GoalState::Paused | GoalState::Cancelled) {
            // Abort what is in flight: the GPU goes to the next goal at once. The reply
            // waits until the aborts are recorded and the devices free (bounded).
            self.cancel_leases(&id, &format!("goal {to} by uid {uid}"));
            let deadline = Instant::now() + ABORT_GRACE + Duration::from_secs(2);
            while Instant::now() < deadline
                && self
                    .state
                    .lock()
                    .unwrap()
                    .goals
                    .get(&id)
                    .is_some_and(|g| !g.leases.is_empty())
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.wake.notify_one();
        self.summary(&id)
    }

    pub async fn best(&self, goal: &str) -> RpcResult<BestResult> {
        let id = self.resolve(goal)?;
        let best = self.state.lock().unwrap().goals[&id].proj.best.clone();
        let best = best.ok_or_else(|| {
            rpc_err(
                code::NO_BEST,
                format!("goal {id} has no correct candidate yet"),
            )
        })?;
        let store = self.store.clone();
        let (gid, it) = (id.clone(), best.iteration);
        let rec = tokio::task::spawn_blocking(move || store.evaluation(&gid, it))
            .await
            .map_err(internal)?
            .map_err(internal)?
            .ok_or_else(|| internal(format!("evaluation {it} of the best is missing")))?;
        let pending = Pending {
            iteration: rec.iteration,
            candidate: rec.candidate.clone(),
            seed: rec.seed.clone(),
            config: rec.config.clone(),
            source_hash: rec.source_hash.clone(),
            attempts: 0,
            aborted: 0,
        };
        let source = self.candidate_source(&id, &pending).map_err(internal)?;
        Ok(BestResult {
            goal: id,
            summary: best,
            // what ran (defaults filled in), else what was proposed (logs from older builds)
            source: with_config_header(&source, rec.result.config.as_ref().unwrap_or(&rec.config)),
            result: rec.result,
        })
    }

    pub async fn events(&self, p: &EventsParams) -> RpcResult<Vec<Event>> {
        let goal = p.goal.as_deref().map(|g| self.resolve(g)).transpose()?;
        let store = self.store.clone();
        // One reply holds at most a page: a day's log does not fit in one line. Clients
        // page forward with `after` (an empty page means caught up).
        let given = p.limit.is_some();
        let (after, limit) = (
            p.after,
            p.limit
                .map_or(EVENTS_PAGE, |l| (l as usize).min(EVENTS_PAGE)),
        );
        let mut evs = tokio::task::spawn_blocking(move || match (after, given) {
            (Some(a), _) => store.events(goal.as_deref(), a, limit),
            (None, true) => store.last_events(goal.as_deref(), limit),
            (None, false) => store.events(goal.as_deref(), 0, limit),
        })
        .await
        .map_err(internal)?
        .map_err(internal)?;
        // ... and at most half a line's bytes, whatever the events' sizes.
        let mut bytes = 0usize;
        if let Some(cut) = evs.iter().position(|e| {
            bytes += serde_json::to_string(e).map_or(0, |t| t.len() + 1);
            bytes > MAX_LINE / 2
        }) {
            evs.truncate(cut.max(1));
        }
        Ok(evs)
    }

    /// Resolves a goal reference for event filtering (follow mode).
    pub fn resolve_goal(&self, goal: &str) -> RpcResult<String> {
        self.resolve(goal)
    }

    pub async fn context(&self, goal: &str) -> RpcResult<ContextResult> {
        let id = self.resolve(goal)?;
        let proj = self.state.lock().unwrap().goals[&id].proj.clone();
        let store = self.store.clone();
        let gid = id.clone();
        let history = tokio::task::spawn_blocking(move || store.evaluations(&gid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        // The same best source the agent gets (see `take_work`).
        let best_source = match proj.best {
            Some(_) => self.best(&id).await.ok().map(|b| b.source),
            None => None,
        };
        Ok(agent::context_view(&proj, &history, best_source.as_deref()))
    }

    pub fn gpus(&self) -> GpusResult {
        let st = self.state.lock().unwrap();
        let devices = st
            .slots
            .iter()
            .enumerate()
            .map(|(i, s)| GpuStatus {
                uuid: s.info.uuid.clone(),
                name: s.info.name.clone(),
                compute_capability: s.info.compute_capability.map(|(a, b)| format!("{a}.{b}")),
                memory_total_mib: s.info.memory_total_mib,
                sm_clock_mhz: None,
                health: s.health.clone(),
                health_reason: s.health_reason.clone(),
                lease: s.lease.clone(),
                worker_pid: s.worker_pid,
                evaluations: s.evaluations,
                busy_s: (s.busy + s.leased_at.map_or(Duration::ZERO, |t| t.elapsed()))
                    .as_secs_f64(),
                slurm: self.slurm_status(i), // HOOK(slurm)
            })
            .collect();
        GpusResult {
            mode: self.devices.mode().into(),
            note: self.devices.note(),
            devices,
        }
    }

    pub fn version(&self) -> RpcResult<VersionResult> {
        Ok(VersionResult {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL,
            pid: std::process::id(),
            mode: self.devices.mode().into(),
            state_dir: self.config().state_dir.display().to_string(),
            last_seq: self.store.last_seq().map_err(internal)?,
        })
    }

    /// Records the graceful stop (after the loop has recorded every abort).
    pub async fn record_stop(&self, reason: &str) -> anyhow::Result<()> {
        self.commit(vec![NewEvent::daemon(EventKind::DaemonStopped {
            reason: reason.into(),
        })])
        .await?;
        tracing::info!(
            uptime_s = self.started.elapsed().as_secs(),
            "stopped: {reason}"
        );
        Ok(())
    }
}

/// The best candidate's source with its configuration appended as `BEST` (after any
/// `BEST` the source had), so the file a user takes is self-describing.
fn with_config_header(source: &str, config: &Value) -> String {
    let sep = if source.ends_with('\n') { "" } else { "\n" };
    format!(
        "{source}{sep}\n# The configuration kerneld measured best for this source.\nBEST = {}\n",
        py_literal(config)
    )
}

/// A JSON object as a Python literal (true/false/null spelled the Python way).
fn py_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => {
            if *b {
                "True".into()
            } else {
                "False".into()
            }
        }
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(py_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    serde_json::to_string(k).unwrap_or_default(),
                    py_literal(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
