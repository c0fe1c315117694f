//! Hooks (issue #29): commands an administrator configures (`[[hooks]]` in kerneld.toml)
//! run on chosen events — a goal finished, failed or was cancelled, a new best, a GPU
//! drained, kerneld restarted after a crash — so a night's run tells the person asleep.
//!
//! Owner: `Hooks`, one per daemon. API boundary: `fire` (never blocks: a bounded queue,
//! a full one drops the event with a log line and a counter), `fire_log_event` (a
//! committed event; `follow` hands over the engine's event stream), `check_notify` (a
//! goal's `notify` against what is offered), `reload`, `stats` (for the metrics).
//! Invariants: a hook runs as kerneld's own user (never a goal owner's code: the
//! command is the administrator's, a goal only selects it by name), with a cleared
//! environment (PATH, the event's `KERNELD_*`, the hook's own `env`), in its own process
//! group, killed with that group at its time limit; its output costs at most
//! `run::KEEP` bytes; at most `PARALLEL` run at once, on tasks of their own, so nothing a
//! hook does can stall the engine. Every run's end is logged (target `kerneld::hooks`):
//! tests/tests/ops.rs runs hanging, failing and flooding hooks through the real daemon.

mod config;
mod event;
mod run;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

pub use config::{from_raw, valid_name, HookConfig, HookOn, Owner, RawHook};
pub use event::{GoalInfo, HookEvent};

use crate::wire::Event;

/// Events waiting for their hooks. A burst (many goals ending at once) fits; a queue
/// that stays full means hooks that hang, and new events are dropped (logged, counted).
const QUEUE: usize = 256;
/// Hooks running at once: a few slow mailers do not hold up a new best's message.
const PARALLEL: usize = 4;
/// PATH for hooks when kerneld has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Reads what the store knows of a goal (name, owner, notify, best), for a goal's event.
pub type GoalLookup = Arc<dyn Fn(&str) -> Option<GoalInfo> + Send + Sync>;

/// What every run is told besides its event.
pub struct Context {
    pub host: String,
    /// kerneld's socket: a hook may ask `kernelctl --socket $KERNELD_SOCKET` for more.
    pub socket: PathBuf,
    pub lookup: GoalLookup,
}

/// How one hook's runs ended, since start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookCounts {
    pub ok: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub not_started: u64,
}

/// The hooks' figures (metrics: `kerneld_hook_runs_total`, `kerneld_hook_events_dropped_total`).
#[derive(Debug, Clone, Default)]
pub struct HookStats {
    pub runs: Vec<(String, HookCounts)>,
    /// Events dropped because the queue was full.
    pub dropped: u64,
    /// Events the stream ran ahead of (`follow` lagged behind the engine's broadcast).
    pub missed: u64,
}

struct Shared {
    hooks: RwLock<Arc<Vec<HookConfig>>>,
    counts: Mutex<Vec<(String, HookCounts)>>,
    dropped: AtomicU64,
    missed: AtomicU64,
    /// (goal, name) pairs whose unknown `notify` name was already logged.
    warned: Mutex<BTreeSet<(String, String)>>,
    permits: Arc<Semaphore>,
    /// Events queued or being handed to their hooks (the runs themselves hold permits).
    pending: std::sync::atomic::AtomicUsize,
    cx: Context,
    path: String,
}

pub struct Hooks {
    tx: mpsc::Sender<HookEvent>,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Hooks {
    /// Starts the runner task (call inside a tokio runtime).
    pub fn start(hooks: Vec<HookConfig>, cx: Context) -> Arc<Hooks> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let shared = Arc::new(Shared {
            hooks: RwLock::new(Arc::new(hooks)),
            counts: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            warned: Mutex::new(BTreeSet::new()),
            permits: Arc::new(Semaphore::new(PARALLEL)),
            pending: Default::default(),
            cx,
            path: std::env::var("PATH").unwrap_or_else(|_| DEFAULT_PATH.into()),
        });
        let stop = CancellationToken::new();
        tokio::spawn(runner(rx, shared.clone(), stop.clone()));
        Arc::new(Hooks { tx, shared, stop })
    }

    fn hooks(&self) -> Arc<Vec<HookConfig>> {
        self.shared
            .hooks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Queues an event for its hooks; returns at once. A full queue drops it (logged).
    pub fn fire(&self, ev: HookEvent) {
        if !self.hooks().iter().any(|h| h.on.contains(&ev.event)) {
            return;
        }
        self.shared.pending.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                self.shared.pending.fetch_sub(1, Ordering::SeqCst);
                let n = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    "hook queue full ({QUEUE} events waiting: hooks are slower than events \
                     come): {} not passed to its hooks; {n} dropped since start \
                     (kerneld_hook_events_dropped_total)",
                    describe(&ev, None)
                );
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.shared.pending.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// A committed log event: fired when a hook can run on its kind.
    pub fn fire_log_event(&self, ev: &Event) {
        if let Some(h) = HookEvent::from_log(ev) {
            self.fire(h);
        }
    }

    /// Takes a re-read configuration's hooks; says what changed (for the reload's log line).
    pub fn reload(&self, new: Vec<HookConfig>) -> Option<String> {
        let mut cur = self.shared.hooks.write().unwrap_or_else(|e| e.into_inner());
        if **cur == new {
            return None;
        }
        let names: Vec<&str> = new.iter().map(|h| h.name.as_str()).collect();
        let said = format!("hooks = [{}]", names.join(", "));
        *cur = Arc::new(new);
        Some(said)
    }

    /// Whether a goal's `notify` names only hooks offered to goals (`per_goal = true`).
    pub fn check_notify(&self, notify: &[String]) -> Result<(), String> {
        check_notify(&self.hooks(), notify)
    }

    pub fn stats(&self) -> HookStats {
        HookStats {
            runs: self
                .shared
                .counts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
            missed: self.shared.missed.load(Ordering::Relaxed),
        }
    }

    /// At stop: runs what is queued and waits for the runs, up to `grace`; then no more.
    pub async fn close(&self, grace: Duration) {
        let shared = &self.shared;
        let idle = async {
            while shared.pending.load(Ordering::SeqCst) > 0
                || shared.permits.available_permits() < PARALLEL
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let late = tokio::time::timeout(grace, idle).await.is_err();
        self.stop.cancel();
        if late {
            tracing::warn!(
                "kerneld stops with hooks still running or queued after {}: {} events not \
                 run, running hooks are killed",
                humantime::format_duration(grace),
                shared.pending.load(Ordering::SeqCst)
            );
        }
    }
}

/// `notify` against the configured hooks (a goal's file at enqueue).
pub fn check_notify(hooks: &[HookConfig], notify: &[String]) -> Result<(), String> {
    let offered: Vec<&str> = hooks
        .iter()
        .filter(|h| h.per_goal)
        .map(|h| h.name.as_str())
        .collect();
    match notify.iter().find(|n| !offered.contains(&n.as_str())) {
        None => Ok(()),
        Some(n) if offered.is_empty() => Err(format!(
            "`notify` names hook `{}`, but this kerneld offers goals no hooks (its \
             administrator adds them: [[hooks]] with per_goal = true in kerneld.toml); remove \
             `notify`",
            crate::wire::quote(n)
        )),
        Some(n) => Err(format!(
            "`notify` names hook `{}`, which this kerneld does not offer; goals may name: {}",
            crate::wire::quote(n),
            offered.join(", ")
        )),
    }
}

/// Hands every committed event of the engine's stream to `hooks` until `stop`.
pub async fn follow(
    hooks: Arc<Hooks>,
    mut rx: broadcast::Receiver<Event>,
    stop: CancellationToken,
) {
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = stop.cancelled() => return,
        };
        match ev {
            Ok(ev) => hooks.fire_log_event(&ev),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                hooks.shared.missed.fetch_add(n, Ordering::Relaxed);
                tracing::warn!(
                    "hooks missed {n} events: the event stream ran ahead of them (their hooks \
                     did not run)"
                );
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

async fn runner(mut rx: mpsc::Receiver<HookEvent>, shared: Arc<Shared>, stop: CancellationToken) {
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => match ev { Some(ev) => ev, None => return },
            _ = stop.cancelled() => return,
        };
        let goal = match ev.goal.clone() {
            Some(id) => {
                let lookup = shared.cx.lookup.clone();
                tokio::task::spawn_blocking(move || lookup(&id))
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        if let Some(g) = &goal {
            warn_unknown_notify(&shared, g);
        }
        let hooks = shared
            .hooks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (i, hook) in hooks.iter().enumerate() {
            if !matches(hook, &ev, goal.as_ref()) {
                continue;
            }
            // Waiting here, not in `fire`: while every slot is taken the queue fills up
            // and `fire` drops, and the engine never waits on a hook.
            let Ok(permit) = shared.permits.clone().acquire_owned().await else {
                return;
            };
            let (shared, ev, goal, hooks) =
                (shared.clone(), ev.clone(), goal.clone(), hooks.clone());
            tokio::spawn(async move {
                run_one(&shared, &hooks[i], &ev, goal.as_ref()).await;
                drop(permit);
            });
        }
        shared.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether `hook` runs for `ev` (of `goal`, as the store knows it).
fn matches(hook: &HookConfig, ev: &HookEvent, goal: Option<&GoalInfo>) -> bool {
    if !hook.on.contains(&ev.event) {
        return false;
    }
    if !ev.event.is_goal_event() {
        return true;
    }
    let Some(g) = goal else {
        // Unknown goal (gone from the store?): only hooks that filter nothing run.
        return !hook.per_goal && hook.goals.is_empty() && hook.owners.is_empty();
    };
    if hook.per_goal && !g.notify.contains(&hook.name) {
        return false;
    }
    if !hook.goals.is_empty() && !hook.goals.iter().any(|p| p.matches(&g.name)) {
        return false;
    }
    hook.owners.is_empty()
        || hook.owners.iter().any(|o| match o {
            Owner::Uid(u) => *u == g.owner_uid,
            Owner::Name(n) => g.owner.as_deref() == Some(n.as_str()),
        })
}

/// A goal whose `notify` names a hook that is not offered (the configuration changed
/// since it was enqueued): said once per goal and name.
fn warn_unknown_notify(shared: &Shared, g: &GoalInfo) {
    let hooks = shared
        .hooks
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for name in &g.notify {
        if hooks.iter().any(|h| h.per_goal && &h.name == name) {
            continue;
        }
        let mut warned = shared.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.len() > 10_000 {
            warned.clear();
        }
        if warned.insert((g.id.clone(), name.clone())) {
            tracing::warn!(
                "goal {} ({}) asks for hook `{name}` (`notify`), which kerneld.toml does not \
                 offer goals (no [[hooks]] of that name with per_goal = true): it does not run",
                g.id,
                g.name
            );
        }
    }
}

/// "new_best of g3 (mla-decode)", "gpu_unhealthy of GPU-1", "daemon_restarted".
fn describe(ev: &HookEvent, goal: Option<&GoalInfo>) -> String {
    match (goal, &ev.goal, &ev.device) {
        (Some(g), _, _) => format!("{} of {} ({})", ev.event, g.id, g.name),
        (None, Some(id), _) => format!("{} of {id}", ev.event),
        (None, None, Some(d)) => format!("{} of {d}", ev.event),
        (None, None, None) => ev.event.to_string(),
    }
}

async fn run_one(shared: &Shared, hook: &HookConfig, ev: &HookEvent, goal: Option<&GoalInfo>) {
    let cx = &shared.cx;
    let summary = event::summary(&cx.host, ev, goal);
    let mut env = event::environment(&hook.name, &cx.host, &cx.socket, ev, goal, &summary);
    env.insert("PATH".into(), shared.path.clone());
    env.extend(hook.env.clone());
    let payload = event::Payload {
        hook: &hook.name,
        host: &cx.host,
        time: event::rfc3339(ev.time_ms),
        summary,
        event: ev,
        goal,
    };
    let mut input = serde_json::to_vec(&payload).unwrap_or_default();
    input.push(b'\n');
    let out = run::run(&hook.command, &env, input, hook.timeout).await;
    let what = describe(ev, goal);
    let name = &hook.name;
    let secs = out.elapsed.as_secs_f64();
    let output = || {
        let text = out.output.text();
        if text.is_empty() {
            "no output".to_string()
        } else {
            format!(
                "its output ({} bytes{}): {}",
                out.output.total,
                if out.output.total > run::KEEP as u64 {
                    ", the end shown"
                } else {
                    ""
                },
                text.lines().collect::<Vec<_>>().join(" | ")
            )
        }
    };
    {
        let mut counts = shared.counts.lock().unwrap_or_else(|e| e.into_inner());
        let i = match counts.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                counts.push((name.clone(), HookCounts::default()));
                counts.len() - 1
            }
        };
        let c = &mut counts[i].1;
        match &out.ended {
            run::Ended::Exit(0) => c.ok += 1,
            run::Ended::Exit(_) | run::Ended::Signal(_) => c.failed += 1,
            run::Ended::TimedOut => c.timed_out += 1,
            run::Ended::NotStarted(_) => c.not_started += 1,
        }
    }
    match &out.ended {
        run::Ended::Exit(0) => {
            tracing::info!("hook `{name}` ran for {what}: exit 0 in {secs:.2}s")
        }
        run::Ended::Exit(code) => tracing::warn!(
            "hook `{name}` failed for {what}: exit status {code} after {secs:.2}s; {}",
            output()
        ),
        run::Ended::Signal(sig) => tracing::warn!(
            "hook `{name}` failed for {what}: killed by signal {sig} after {secs:.2}s; {}",
            output()
        ),
        run::Ended::TimedOut => tracing::warn!(
            "hook `{name}` for {what} was killed at its timeout of {} (with its whole \
             process group) after {secs:.2}s; {}",
            humantime::format_duration(hook.timeout),
            output()
        ),
        run::Ended::NotStarted(why) => {
            tracing::warn!("hook `{name}` did not run for {what}: {why}")
        }
    }
}

#[cfg(test)]
mod tests;
