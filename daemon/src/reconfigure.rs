//! Configuration reloads: on SIGHUP (`systemctl reload kerneld`) and when the
//! configuration file changes on disk. The file's directory is watched, not the file:
//! editors save by writing a new file and renaming it over the old one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::engine::Engine;
use crate::hooks::Hooks;

/// A re-read configuration to everyone who keeps part of it: the engine, the hooks
/// (which take effect for the next event). Returns what changed, for the log.
fn apply(engine: &Engine, hooks: &Hooks, cfg: Config) -> Vec<String> {
    let new_hooks = cfg.hooks.clone();
    // The endpoint is bound once, at start: a change waits for the next one.
    let listen = |l: &Option<crate::metrics::Listen>| l.as_ref().map(ToString::to_string);
    let metrics = (
        listen(&engine.config().metrics_listen),
        listen(&cfg.metrics_listen),
    );
    let mut changes = engine.reload(cfg);
    if metrics.0 != metrics.1 {
        changes.push(format!(
            "metrics_listen {:?} → {:?} takes effect at the next start",
            metrics.0, metrics.1
        ));
    }
    changes.extend(hooks.reload(new_hooks));
    changes
}

/// Builds the configuration again, the way the daemon was started (file + command line).
pub type Rebuild = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

pub async fn run(
    engine: Arc<Engine>,
    hooks: Arc<Hooks>,
    rebuild: Rebuild,
    hup: Arc<Notify>,
    stop: CancellationToken,
) {
    let file: Option<PathBuf> = engine.config().config_file.clone();
    let (tx, mut changed) = tokio::sync::mpsc::unbounded_channel::<()>();
    // Kept alive for the whole loop; None when there is no file or it cannot be watched.
    let _watcher = file.as_ref().and_then(|f| {
        let name = f.file_name()?.to_owned();
        let dir = f.parent()?.to_path_buf();
        let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res {
                if ev
                    .paths
                    .iter()
                    .any(|p| p.file_name() == Some(name.as_os_str()))
                {
                    let _ = tx.send(());
                }
            }
        })
        .ok()?;
        match w.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(e) => {
                tracing::warn!(
                    "cannot watch {} for changes: {e}; SIGHUP still reloads",
                    dir.display()
                );
                None
            }
        }
    });
    // An edit made after the start read the file but before the watch began raised no
    // event (seen in CI under load): read it once more now that changes are watched.
    if _watcher.is_some() {
        if let Ok(cfg) = rebuild() {
            let changes = apply(&engine, &hooks, cfg);
            if !changes.is_empty() {
                tracing::info!(
                    "the configuration file changed while kerneld started: configuration reloaded: {}",
                    changes.join("; ")
                );
            }
        }
    }
    loop {
        let why = tokio::select! {
            _ = hup.notified() => "SIGHUP",
            Some(()) = changed.recv() => {
                // Let an editor finish writing, and fold a burst of events into one reload.
                tokio::time::sleep(Duration::from_millis(300)).await;
                while changed.try_recv().is_ok() {}
                "the configuration file changed"
            }
            _ = stop.cancelled() => return,
        };
        // systemd shows the unit as reloading until READY=1 (no-ops without NOTIFY_SOCKET).
        let mut reloading = vec![sd_notify::NotifyState::Reloading];
        reloading.extend(sd_notify::NotifyState::monotonic_usec_now().ok());
        let _ = sd_notify::notify(false, &reloading);
        match rebuild() {
            Ok(cfg) => {
                let changes = apply(&engine, &hooks, cfg);
                if changes.is_empty() {
                    tracing::info!("{why}: configuration reloaded, nothing changed");
                } else {
                    tracing::info!("{why}: configuration reloaded: {}", changes.join("; "));
                }
            }
            // A broken file leaves the running configuration as it was.
            Err(e) => tracing::error!("{why}: configuration NOT reloaded: {e}"),
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    }
}
