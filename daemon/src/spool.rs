//! The spool directory: a goal file dropped there is enqueued, then moved to
//! `done/` (or `rejected/` with a `.error` file saying why).
//!
//! Editors and `cp` write in steps, so the directory is watched (not the file), and
//! the whole directory is rescanned on every notification (also after an overflow).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::wire::EnqueueParams;

pub async fn watch(dir: PathBuf, engine: Arc<Engine>, stop: CancellationToken) {
    for sub in ["done", "rejected"] {
        let _ = std::fs::create_dir_all(dir.join(sub));
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher =
        match notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
            let _ = tx.send(());
        }) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("cannot watch the spool {}: {e}", dir.display());
                return;
            }
        };
    if let Err(e) = watcher.watch(&dir, RecursiveMode::NonRecursive) {
        tracing::error!("cannot watch the spool {}: {e}", dir.display());
        return;
    }
    scan(&dir, &engine).await;
    loop {
        tokio::select! {
            got = rx.recv() => if got.is_none() { return },
            // A periodic rescan covers lost notifications.
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
            _ = stop.cancelled() => return,
        }
        // Let a burst of writes settle before reading.
        tokio::time::sleep(Duration::from_millis(200)).await;
        while rx.try_recv().is_ok() {}
        scan(&dir, &engine).await;
    }
}

async fn scan(dir: &Path, engine: &Engine) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    for path in files {
        let Ok(source) = std::fs::read_to_string(&path) else {
            continue;
        };
        let owner = std::fs::metadata(&path)
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(0);
        let params = EnqueueParams {
            path: path.display().to_string(),
            source,
            unique: true,
            // Seeds come from the task only: the daemon reads no user-named file.
            files: Default::default(),
        };
        let name = path.file_name().unwrap_or_default().to_owned();
        match engine.enqueue(params, owner).await {
            Ok(r) => {
                tracing::info!(goal = %r.id, "enqueued {} from the spool", path.display());
                let _ = std::fs::rename(&path, dir.join("done").join(&name));
            }
            Err(e) => {
                tracing::warn!("spool {}: {}", path.display(), e.message);
                let target = dir.join("rejected").join(&name);
                let _ = std::fs::rename(&path, &target);
                let _ = std::fs::write(
                    target.with_extension("toml.error"),
                    format!("{}\n", e.message),
                );
            }
        }
    }
}
