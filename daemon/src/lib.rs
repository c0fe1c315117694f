//! kerneld: the daemon that runs GPU-kernel optimization goals overnight.
//!
//! `run` is the whole daemon as a library function, so tests can start it
//! in-process as well as through the `kerneld` binary. See ARCHITECTURE.md for the
//! map of modules and their invariants.

pub(crate) mod admission;
pub(crate) mod agent;
pub(crate) mod audit;
pub(crate) mod candidate;
pub(crate) mod chains;
pub mod config;
pub(crate) mod context;
pub(crate) mod engine;
pub mod goal;
pub mod gpu;
pub(crate) mod harness;
pub mod hooks;
pub mod metrics;
pub(crate) mod noise;
pub(crate) mod projection;
pub(crate) mod reconfigure;
pub(crate) mod resolve;
pub(crate) mod rpc;
pub mod sandbox;
pub(crate) mod scheduler;
pub(crate) mod shares;
pub mod slurm;
pub(crate) mod spool;
pub(crate) mod stability;
pub(crate) mod startup;
pub(crate) mod status_view;
pub(crate) mod store;
pub(crate) mod task;

/// The protocol crate's modules, where the daemon's code has always found them.
pub use kerneld_protocol::{limits, paths, wire};

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use config::Config;

/// Entry points for tools beside the daemon proper: `kerneld check` (the binary), the
/// benchmark that builds a log in bulk through the store, and the fuzz target that drives
/// one connection's framing, parsing and dispatch.
pub mod tools {
    pub use crate::engine::Engine;
    pub use crate::rpc::{connection, Limits};
    pub use crate::startup::{install_panic_hook, quietly};
    pub use crate::store::{CheckReport, NewEvent, Space, Store, StoreError};
}
pub use engine::TickFn;
pub use reconfigure::Rebuild;

/// What `run` can be given beyond the configuration.
#[derive(Default)]
pub struct RunOptions {
    /// The devices to schedule on; None: discover them (NVML, else CPU mode).
    pub devices: Option<Arc<dyn gpu::DeviceLayer>>,
    /// Called once the socket accepts connections (systemd READY=1).
    pub on_ready: Option<Box<dyn FnOnce() + Send>>,
    /// How to rebuild the configuration on a reload, and the SIGHUP that asks for one.
    pub reconfigure: Option<(Rebuild, Arc<tokio::sync::Notify>)>,
    /// Called on every scheduler tick with a one-line status (systemd WATCHDOG=1 and
    /// STATUS=): pings come from the loop that does the work, so a stuck daemon stops them.
    pub on_tick: Option<TickFn>,
}

/// Runs the daemon until `shutdown` is cancelled, then stops cleanly: evaluations in
/// flight are aborted and recorded, workers stopped, the stop recorded.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    run_with(config, shutdown, RunOptions::default()).await
}

pub async fn run_with(
    config: Config,
    shutdown: CancellationToken,
    opts: RunOptions,
) -> anyhow::Result<()> {
    // The binary did this already; a library caller (tests, tools) may not have.
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    let config = config.absolutize(&cwd).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&config.state_dir).map_err(|e| {
        anyhow::anyhow!(
            "cannot create the state directory {}: {e}",
            config.state_dir.display()
        )
    })?;
    // Opening and replaying the log: whatever stops it names the log and what to do.
    let db = config.db_path();
    let store = startup::open_log(&db, async { Ok(Arc::new(store::Store::open(&db)?)) }).await?;
    let devices = opts.devices.unwrap_or_else(|| gpu::discover(&config));
    match devices.note() {
        Some(note) if devices.mode() == "cpu" => {
            tracing::warn!("{note}; evaluations run under Triton's interpreter and their timings are not GPU figures")
        }
        _ => {
            let names: Vec<String> = devices
                .devices()
                .iter()
                .map(|d| format!("{} {}", d.name, d.uuid))
                .collect();
            tracing::info!("devices: {}", names.join(", "));
        }
    }
    // Known only before this start records its own `daemon_started`.
    let unclean = startup::unclean_stop(&store).await?;
    // Bound before anything is written: an address in use stops the start, losing nothing.
    let metrics = match &config.metrics_listen {
        Some(l) => Some(
            metrics::Endpoint::bind(l)
                .await
                .map_err(anyhow::Error::msg)?,
        ),
        None => None,
    };
    let hooks = hooks::Hooks::start(config.hooks.clone(), hook_context(&config, &store));
    let start = engine::Engine::start(config.clone(), store, devices, shutdown.child_token());
    let engine = startup::open_log(&db, start).await?;
    engine.set_on_tick(opts.on_tick);
    // Hooks follow what the engine commits (issue #29): they can never hold it up.
    let stop_hooks = CancellationToken::new();
    tokio::spawn(hooks::follow(
        hooks.clone(),
        engine.subscribe(),
        stop_hooks.clone(),
    ));
    tokio::spawn(chains::follow(
        engine.clone(),
        engine.subscribe(),
        stop_hooks.clone(),
    ));
    if let Some(last) = unclean {
        let ev = hooks::HookEvent::daemon_restarted(&last, store::now_ms());
        tracing::warn!("{}", ev.reason.as_deref().unwrap_or_default());
        hooks.fire(ev);
    }
    let stop_metrics = CancellationToken::new();
    if let Some(m) = metrics {
        tokio::spawn(m.serve(engine.clone(), hooks.clone(), stop_metrics.clone()));
    }
    let listener = rpc::bind(&config.socket).await?;
    tracing::info!(socket = %config.socket.display(), state = %config.state_dir.display(), "kerneld ready");

    let stop_accepting = CancellationToken::new();
    let server = tokio::spawn(rpc::serve(listener, engine.clone(), stop_accepting.clone()));
    let spool = config
        .spool_dir
        .clone()
        .map(|dir| tokio::spawn(spool::watch(dir, engine.clone(), shutdown.clone())));
    let scheduler = tokio::spawn(engine.clone().run());
    if let Some((rebuild, hup)) = opts.reconfigure {
        tokio::spawn(reconfigure::run(
            engine.clone(),
            hooks.clone(),
            rebuild,
            hup,
            shutdown.clone(),
        ));
    }
    if let Some(ready) = opts.on_ready {
        ready();
    }

    let fatal = tokio::select! {
        _ = shutdown.cancelled() => None,
        why = engine.failed() => Some(why),
    };
    tracing::info!("stopping: aborting evaluations in flight");
    let _ = scheduler.await;
    stop_accepting.cancel();
    let _ = server.await;
    if let Some(s) = spool {
        let _ = s.await;
    }
    let _ = std::fs::remove_file(&config.socket);
    // What the last moments committed still reaches its hooks, within a few seconds.
    hooks.close(HOOKS_AT_STOP).await;
    stop_hooks.cancel();
    stop_metrics.cancel();
    if let Some(why) = fatal {
        // The log cannot take the stop record either; the restart reopens it.
        return Err(anyhow::anyhow!(why));
    }
    engine.record_stop("shutdown requested").await?;
    Ok(())
}

/// How long a stop waits for hooks still running or queued.
const HOOKS_AT_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// What hooks are told besides their event; goals are read from the store when one runs.
fn hook_context(config: &Config, store: &Arc<store::Store>) -> hooks::Context {
    let store = store.clone();
    hooks::Context {
        host: nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into()),
        socket: config.socket.clone(),
        lookup: Arc::new(move |id: &str| {
            let g = store.goal(id).ok()??;
            let owner = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(g.owner_uid))
                .ok()
                .flatten()
                .map(|u| u.name);
            Some(hooks::GoalInfo {
                id: g.id,
                name: g.spec.name,
                owner_uid: g.owner_uid,
                owner,
                task: g.spec.task,
                state: g.state,
                iteration: g.iteration,
                best_speedup: g.best.as_ref().map(|b| b.speedup),
                best_iteration: g.best.as_ref().map(|b| b.iteration),
                notify: g.spec.notify,
            })
        }),
    }
}
