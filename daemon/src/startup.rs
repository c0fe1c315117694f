//! Opening and replaying the event log at start: whatever stops it names the log's path
//! and what to do, and a panic there (redb's assertions on a file damaged in a way the
//! header check does not see) is one message, not a panic text and a backtrace followed
//! by kerneld's own (issue #30).
//!
//! The panic hook (`install_panic_hook`, the binary's) stays quiet while a window is open
//! (`open_log`, `quietly`) and keeps the panic's text for the window's error; panics
//! outside a window are printed as Rust prints them.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use futures::FutureExt;

use std::sync::Arc;

use crate::store::{self, StoreError};
use crate::wire::{Event, EventKind};

/// Windows open now (the log is being opened or replayed).
static OPEN_WINDOWS: AtomicUsize = AtomicUsize::new(0);
/// The texts of the panics a window kept quiet, oldest first.
static CAUGHT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Replaces the default panic hook with one that keeps quiet inside a window.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if OPEN_WINDOWS.load(Ordering::SeqCst) == 0 {
            return default(info);
        }
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("a panic without a message");
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        if let Ok(mut caught) = CAUGHT.lock() {
            caught.push(format!("{text}{at}"));
        }
    }));
}

/// One window: opened on creation, closed on drop (a panic unwinding through it too).
struct Window;

impl Window {
    fn open() -> Window {
        OPEN_WINDOWS.fetch_add(1, Ordering::SeqCst);
        Window
    }

    /// The panics kept quiet so far, taken.
    fn caught(&self) -> Vec<String> {
        CAUGHT
            .lock()
            .map(|mut c| c.drain(..).collect())
            .unwrap_or_default()
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        OPEN_WINDOWS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `f` with panics kept quiet and caught: a panic becomes `Err` with its text.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let window = Window::open();
    let r = std::panic::catch_unwind(AssertUnwindSafe(f));
    let caught = window.caught();
    r.map_err(|_| caught.join("; "))
}

/// Runs `open` (opening the log at `path`, or the engine's start, which replays it) and
/// turns what comes out of the log into an error that names `path` and what to do: a
/// record that does not decode, a redb error, a panic (here or on a blocking thread).
/// Other errors (a Slurm command, a full disk: they say what to do already) pass as they are.
pub async fn open_log<T>(
    path: &Path,
    open: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let window = Window::open();
    let r = AssertUnwindSafe(open).catch_unwind().await;
    let caught = window.caught();
    drop(window);
    let panicked = |what: &str| {
        let text = if caught.is_empty() {
            what.to_string()
        } else {
            caught.join("; ")
        };
        anyhow::Error::new(store::unreadable(
            path,
            &format!("stopped redb on an internal assertion: {text}"),
        ))
    };
    match r {
        Err(_) => Err(panicked("a panic")),
        Ok(Ok(v)) => {
            // A panic some other thread had while the window was open: say it as it was.
            for text in caught {
                eprintln!("kerneld: panicked: {text}");
            }
            Ok(v)
        }
        Ok(Err(e)) => {
            if let Some(j) = e.downcast_ref::<tokio::task::JoinError>() {
                if j.is_panic() {
                    return Err(panicked(&j.to_string()));
                }
            }
            match e.downcast::<StoreError>() {
                Ok(StoreError::Corrupt(what)) => {
                    Err(store::unreadable(path, &format!("has a corrupt record: {what}")).into())
                }
                Ok(StoreError::Db { source, .. }) => match *source {
                    redb::Error::Io(io) => Err(store::inaccessible(path, &io).into()),
                    other => {
                        Err(store::unreadable(path, &format!("cannot be read: {other}")).into())
                    }
                },
                Ok(e) => Err(e.into()),
                Err(e) => Err(e),
            }
        }
    }
}

/// The log's last event when the daemon before this one stopped without recording its
/// stop (a crash, a SIGKILL, a power cut): read before this start records its own
/// `daemon_started`. None for a new log and after a clean stop.
pub async fn unclean_stop(store: &Arc<store::Store>) -> anyhow::Result<Option<Event>> {
    let s = store.clone();
    let last = tokio::task::spawn_blocking(move || s.last_events(None, 1))
        .await??
        .pop();
    Ok(last.filter(|e| !matches!(e.kind, EventKind::DaemonStopped { .. })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_a_window_is_an_error_with_its_text() {
        install_panic_hook();
        let r: Result<(), String> = quietly(|| panic!("assertion failed: page < 7"));
        let e = r.unwrap_err();
        assert!(e.contains("assertion failed: page < 7"), "{e}");
        assert_eq!(quietly(|| 3), Ok(3));
        let _ = std::panic::take_hook();
    }

    #[tokio::test]
    async fn an_undecodable_record_names_the_log_and_what_to_do() {
        let path = Path::new("/var/lib/kerneld/kerneld.redb");
        let r: anyhow::Result<()> = open_log(path, async {
            Err(StoreError::Corrupt("invalid unicode code point at line 1 column 9".into()).into())
        })
        .await;
        let e = format!("{:#}", r.unwrap_err());
        assert!(
            e.contains("/var/lib/kerneld/kerneld.redb")
                && e.contains("invalid unicode code point")
                && e.contains("kerneld check")
                && e.contains(".damaged"),
            "{e}"
        );
        install_panic_hook();
        let panicked: anyhow::Result<()> = open_log(path, async {
            tokio::task::spawn_blocking(|| panic!("assertion failed: page < 7")).await?;
            Ok(())
        })
        .await;
        let e = panicked.unwrap_err().to_string();
        assert!(
            e.contains("/var/lib/kerneld/kerneld.redb") && e.contains("assertion failed: page < 7"),
            "{e}"
        );
        let _ = std::panic::take_hook();
        let other: anyhow::Result<()> =
            open_log(path, async { Err(anyhow::anyhow!("squeue failed")) }).await;
        assert_eq!(other.unwrap_err().to_string(), "squeue failed");
    }

    #[tokio::test]
    async fn a_log_that_does_not_end_with_a_stop_was_left_by_a_crash() {
        let db = std::env::temp_dir().join(format!("kd-unclean-{}.redb", std::process::id()));
        let _ = std::fs::remove_file(&db);
        let store = Arc::new(store::Store::open(&db).unwrap());
        assert!(unclean_stop(&store).await.unwrap().is_none(), "a new log");
        let started = EventKind::DaemonStarted {
            version: "0".into(),
            pid: 1,
            mode: "cpu".into(),
        };
        store
            .append(vec![store::NewEvent::daemon(started)])
            .unwrap();
        let last = unclean_stop(&store).await.unwrap().unwrap();
        assert_eq!(last.seq, 1);
        let stopped = EventKind::DaemonStopped {
            reason: "shutdown requested".into(),
        };
        store
            .append(vec![store::NewEvent::daemon(stopped)])
            .unwrap();
        assert!(
            unclean_stop(&store).await.unwrap().is_none(),
            "a clean stop"
        );
        drop(store);
        let _ = std::fs::remove_file(&db);
    }
}
