//! The engine: goals, evaluation slots, and the optimization loop that joins them.
//!
//! Its rooms, in the order one iteration passes through them (ARCHITECTURE.md has the
//! picture):
//! - `dispatch`: the scheduler loop: hands a free slot to a goal (a lease) and runs it;
//! - `slots`: evaluation slots and their harness workers (start, warm, health);
//! - `iteration`: one lease = one iteration: take work (a pending candidate, else the
//!   agent's proposal), commit `CandidateProposed` + `EvaluationStarted`;
//! - `evaluation`: the worker evaluates; `EvaluationFinished` (+ `NewBest`) committed;
//! - `retime`: a would-be best is re-timed before `NewBest`; `retime` requests;
//! - `stop`: stop rules and budgets, ending a goal and its leases;
//! - `auth`: who may name tasks by path, run commands, change a goal;
//! - `ops/`: one file per RPC operation (the control plane). Internal code never calls
//!   an operation; operations and internals share the helpers here and in the rooms.
//!
//! Invariants:
//! - Every change of state is an event committed through `Engine::append` before it is
//!   acted on or acknowledged; the in-memory projections are updated from the very
//!   events committed, in sequence order (appends are serialized by `commit_lock`).
//! - A slot has at most one lease; a lease's worker is owned by the lease task while it
//!   runs and handed back (or killed) when it ends.
//! - `state` (a std mutex) is never held across an await.

mod ahead;
mod auth;
mod breaker;
mod caps;
mod dispatch;
mod evaluation;
mod faults;
mod history;
mod iteration;
pub(crate) mod ops;
mod overhead;
mod records;
mod retime;
mod revalidate;
mod slots;
// Slurm slots: the hooks marked HOOK(slurm) call into this room.
mod slurm;
mod sources;
mod stop;
mod waiting;
mod wins;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, Notify};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::gpu::{DeviceInfo, DeviceLayer};
use crate::harness::Worker;
use crate::projection::GoalProjection;
use crate::store::{now_ms, NewEvent, Store};
use crate::wire::*;

/// How long a worker may take to abandon an evaluation (pause, cancel) before it is killed.
const ABORT_GRACE: Duration = Duration::from_secs(3);

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
    /// Owed re-times a lease runs right now (`RetimeWork::key`).
    retiming: BTreeSet<(Option<u64>, u64)>,
    served: u64,
    /// The agent had nothing new; cleared when a result lands (it may open new neighbours).
    exhausted: bool,
    /// Agent failures in a row (a program that crashed, timed out, proposed a repeat).
    agent_failures: u32,
    /// No lease before this instant (back-off after an agent failure).
    not_before: Option<Instant>,
    /// The proposals made ahead for slots' next leases (compile-ahead, ahead.rs).
    ahead: ahead::Ahead,
    /// Its evaluation records, read from the log once (records.rs); None until asked.
    records: Option<records::Records>,
    /// Transient endpoint failures in a row (they never fail the goal; see agent::retry).
    transient_failures: u32,
    /// Why the goal waits, while it backs off (shown by `status`/`show`, see waiting.rs).
    waiting: Option<String>,
    /// Its evaluations' failures in a row that were not the candidates' (breaker.rs).
    infra_failures: u32,
}

impl GoalRt {
    fn new(proj: GoalProjection) -> GoalRt {
        GoalRt {
            proj,
            leases: Vec::new(),
            active: BTreeSet::new(),
            retiming: BTreeSet::new(),
            served: 0,
            exhausted: false,
            agent_failures: 0,
            not_before: None,
            ahead: Default::default(),
            records: None,
            transient_failures: 0,
            waiting: None,
            infra_failures: 0,
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
    /// The daemon's share between evaluations (issue #12, `overhead.rs`).
    clock: overhead::SlotClock,
}

struct State {
    /// The goals the engine schedules or was asked about, in full.
    goals: BTreeMap<String, GoalRt>,
    /// Goals finished before start-up, as summaries (`history`); never also in `goals`.
    history: history::History,
    slots: Vec<Slot>,
    /// What the newest worker reported (workers start at start-up): what a goal's best
    /// is compared with (`environment_changed` in `status`).
    environment: Option<Environment>,
}

/// This build's version, as results record it.
pub(crate) const KERNELD_VERSION: &str = env!("CARGO_PKG_VERSION");

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
    /// The evaluation sandbox (crate::sandbox): set once by the trial task `start` spawns,
    /// which then sends `true` on `sandbox_found`; read through `sandbox()`.
    sandbox: std::sync::OnceLock<crate::sandbox::Runtime>,
    sandbox_found: tokio::sync::watch::Receiver<bool>,
}

/// What the scheduler calls on each tick, with a one-line status of the daemon.
pub type TickFn = Box<dyn Fn(&str) + Send + Sync>;

/// Proof that the caller holds `commit_lock`.
type CommitGuard<'a> = tokio::sync::MutexGuard<'a, ()>;

impl Engine {
    /// Rebuilds the state from the store's projections (no replay of the log): the active
    /// goals in full, the finished ones as summaries (`history`); and records the start.
    /// Goals that were running are running again; their pending evaluations run first.
    pub async fn start(
        cfg: Config,
        store: Arc<Store>,
        devices: Arc<dyn DeviceLayer>,
        stopping: CancellationToken,
    ) -> anyhow::Result<Arc<Engine>> {
        let (goals, finished) = {
            let s = store.clone();
            tokio::task::spawn_blocking(move || {
                anyhow::Ok((s.active_goals()?, s.finished_goals()?))
            })
            .await??
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
                clock: Default::default(),
                evaluations: 0,
                busy: Duration::ZERO,
            })
            .collect();
        let mut map = BTreeMap::new();
        for proj in goals {
            map.insert(proj.id.clone(), GoalRt::new(proj));
        }
        let (events, _) = broadcast::channel(4096);
        let (sandbox_found_tx, sandbox_found) = tokio::sync::watch::channel(false);
        let engine = Arc::new(Engine {
            cfg: std::sync::RwLock::new(cfg),
            store,
            devices,
            state: Mutex::new(State {
                goals: map,
                history: history::History::new(finished),
                slots,
                environment: None,
            }),
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
            sandbox: std::sync::OnceLock::new(),
            sandbox_found,
        });
        // The sandbox trials start now, on a task of their own (no caller's cancellation
        // can cut them short), and run beside the first requests.
        tokio::spawn({
            let engine = engine.clone();
            async move {
                let cfg = engine.config().clone();
                let gpu = engine.devices.devices().into_iter().find(|d| d.is_gpu);
                let trial_cfg = cfg.clone();
                let found = tokio::task::spawn_blocking(move || {
                    crate::sandbox::Runtime::detect(&trial_cfg, gpu.as_ref())
                })
                .await
                .unwrap_or_else(|e| {
                    let why = format!("the sandbox trial failed: {e}");
                    crate::sandbox::Runtime::unavailable(&cfg, why)
                });
                found.log();
                let _ = engine.sandbox.set(found);
                let _ = sandbox_found_tx.send(true);
            }
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
        engine.breaker_restore().await?;
        engine.slurm_recover().await?; // HOOK(slurm)
        Ok(engine)
    }

    /// The evaluation sandbox. Found out once, by trials that start with the daemon: a
    /// Python start under the judge policy, and in GPU mode CUDA inits along the widening
    /// ladder (seconds). The socket answers meanwhile (`status`, `show`, `events` do not
    /// need it); what does (an enqueue's admission, a worker, `version`, `gpus`) waits here.
    pub(super) async fn sandbox(&self) -> &crate::sandbox::Runtime {
        let mut found = self.sandbox_found.clone();
        // Err: the trial task is gone without a finding (the runtime is shutting down).
        let _ = found.wait_for(|&done| done).await;
        self.sandbox.get_or_init(|| {
            let why = "the sandbox trial did not finish".to_string();
            crate::sandbox::Runtime::unavailable(&self.config(), why)
        })
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
            max_attempts,
            command_env,
            breaker_backoff
        );
        macro_rules! restart_only {
            ($($field:ident),*) => {$(
                if format!("{:?}", cfg.$field) != format!("{:?}", new.$field) {
                    changed.push(format!("{} changed: takes effect after a restart", stringify!($field)));
                }
            )*};
        }
        restart_only!(state_dir, socket, gpu_allow, force_cpu, spool_dir, slurm, sandbox);
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

    // -- looking goals up --------------------------------------------------------

    /// The goal `goal_ref` (an id or a name) means for `uid`: its own first
    /// (`crate::resolve`). A goal of the history is loaded in full (`hydrate`), so the
    /// caller finds it in `goals`.
    fn resolve(&self, goal_ref: &str, uid: u32) -> RpcResult<String> {
        let id = {
            let st = self.state.lock().unwrap();
            let live = st.goals.values().map(|g| crate::resolve::Candidate {
                id: &g.proj.id,
                name: &g.proj.spec.name,
                owner_uid: g.proj.owner_uid,
                state: g.proj.state,
                created_ms: g.proj.created_ms,
            });
            let old = st.history.iter().map(|g| crate::resolve::Candidate {
                id: &g.id,
                name: &g.name,
                owner_uid: g.owner_uid,
                state: g.state,
                created_ms: g.created_ms,
            });
            crate::resolve::resolve(live.chain(old), goal_ref, uid)?
        };
        self.hydrate(&id)?;
        Ok(id)
    }

    fn summary(&self, goal: &str) -> RpcResult<GoalSummary> {
        let st = self.state.lock().unwrap();
        let rt = st
            .goals
            .get(goal)
            .ok_or_else(|| rpc_err(code::GOAL_NOT_FOUND, format!("no goal {goal}")))?;
        Ok(waiting::summary(&st, rt, now_ms()))
    }

    /// Resolves a goal reference for event filtering (follow mode).
    pub fn resolve_goal(&self, goal: &str, uid: u32) -> RpcResult<String> {
        self.resolve(goal, uid)
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
