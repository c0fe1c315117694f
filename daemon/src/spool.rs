//! The spool directory: a goal file dropped there is enqueued, then moved to
//! `done/` (or `rejected/` with a `.error` file saying why).
//!
//! Editors and `cp` write in steps, so the directory is watched (not the file), and
//! the whole directory is rescanned on every notification (also after an overflow).
//!
//! A file that cannot be moved away stays in place: the spool remembers its content
//! (path + SHA-256) and never enqueues that content again while it stays; new content at
//! the same path is a new submission. The goal's owner is the file's owner, read from the
//! open file; a file whose owner cannot be read is refused, never given to root.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;
use crate::wire::EnqueueParams;

/// Goal files are small; anything bigger is a mistake, not a goal (the same limit as
/// `kernelctl enqueue`'s).
const MAX_GOAL_FILE: u64 = kerneld_protocol::limits::GOAL_FILE_BYTES;

pub async fn watch(dir: PathBuf, engine: Arc<Engine>, stop: CancellationToken) {
    for sub in ["done", "rejected"] {
        let sub = dir.join(sub);
        if let Err(e) = std::fs::create_dir_all(&sub) {
            tracing::error!(
                "cannot create {}: {e}; spooled goal files will be enqueued but stay in the spool \
                 (each content once). Make it a directory the daemon's user can write.",
                sub.display()
            );
        }
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
    let mut spool = Spool::new(dir);
    spool.scan(&engine).await;
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
        spool.scan(&engine).await;
    }
}

type Digest256 = [u8; 32];

struct Spool {
    dir: PathBuf,
    /// Files handled but still in place (their move failed), with the content handled.
    stuck: HashMap<PathBuf, Digest256>,
    /// Files that could not be opened, already reported (a warning per file, not per scan).
    unreadable: HashSet<PathBuf>,
}

/// A goal file read from the spool, or why it is refused without being parsed.
enum Submission {
    Goal { source: String, owner: u32 },
    Refused(String),
}

impl Spool {
    fn new(dir: PathBuf) -> Spool {
        Spool {
            dir,
            stuck: HashMap::new(),
            unreadable: HashSet::new(),
        }
    }

    async fn scan(&mut self, engine: &Engine) {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("cannot list the spool {}: {e}", self.dir.display());
                return;
            }
        };
        // Regular files only (file_type does not follow symlinks; a symlink is refused below).
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        // Forget files that are gone: the same content dropped again is a new submission.
        self.stuck.retain(|p, _| files.contains(p));
        self.unreadable.retain(|p| files.contains(p));
        for path in files {
            self.take(engine, &path).await;
        }
    }

    async fn take(&mut self, engine: &Engine, path: &Path) {
        let submission = match read_submission(path) {
            Ok(s) => s,
            Err(e) => {
                // Vanished, or not readable by the daemon's user: nothing to enqueue or move.
                if self.unreadable.insert(path.to_path_buf()) {
                    tracing::warn!(
                        "spool {}: cannot read it: {e}; make it readable by the daemon's user",
                        path.display()
                    );
                }
                return;
            }
        };
        self.unreadable.remove(path);
        let digest: Digest256 = match &submission {
            Submission::Goal { source, .. } => Sha256::digest(source.as_bytes()).into(),
            Submission::Refused(why) => Sha256::digest(why.as_bytes()).into(),
        };
        if self.stuck.get(path) == Some(&digest) {
            return;
        }
        let name = path.file_name().unwrap_or_default().to_owned();
        let (verdict, error) = match submission {
            Submission::Refused(why) => {
                tracing::warn!("spool {}: {why}", path.display());
                ("rejected", Some(why))
            }
            Submission::Goal { source, owner } => {
                let params = EnqueueParams {
                    after: None,
                    path: path.display().to_string(),
                    source,
                    unique: true,
                    // Seeds come from the task only: the daemon reads no user-named file.
                    files: Default::default(),
                };
                match engine.enqueue(params, owner).await {
                    Ok(r) if r.created => {
                        tracing::info!(goal = %r.id, "enqueued {} from the spool", path.display());
                        ("done", None)
                    }
                    Ok(r) => {
                        tracing::info!(
                            goal = %r.id,
                            "spool {}: goal `{}` is already active; not enqueued again",
                            path.display(),
                            r.name
                        );
                        ("done", None)
                    }
                    Err(e) => {
                        tracing::warn!("spool {}: {}", path.display(), e.message);
                        ("rejected", Some(e.message))
                    }
                }
            }
        };
        match move_out(path, &self.dir.join(verdict), &name, error.as_deref()) {
            Ok(()) => {
                self.stuck.remove(path);
            }
            Err(e) => {
                // Said once: while this content stays, later scans skip it.
                tracing::error!(
                    "spool {}: handled ({verdict}) but cannot move it to {}/: {e}. It stays and \
                     is not taken again while its content is unchanged; let the daemon's user \
                     write {} and {}/, or remove the file.",
                    path.display(),
                    verdict,
                    self.dir.display(),
                    self.dir.join(verdict).display()
                );
                self.stuck.insert(path.to_path_buf(), digest);
            }
        }
    }
}

/// Opens the file itself (never a symlink's target), reads it and its owner from the same
/// open file. Err: it cannot be opened at all.
fn read_submission(path: &Path) -> std::io::Result<Submission> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            // Its owner is whoever made the link, not whoever wrote the content.
            return Ok(Submission::Refused(
                "a symbolic link; drop the goal file itself".into(),
            ));
        }
        Err(e) => return Err(e),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => {
            return Ok(Submission::Refused(format!(
                "cannot read the file's owner ({e}); refused, since the owner decides who may \
                 change the goal; submit it with `kernelctl enqueue` instead"
            )))
        }
    };
    if !meta.is_file() {
        return Ok(Submission::Refused(
            "not a regular file; drop a goal file (TOML)".into(),
        ));
    }
    // A hard link to someone else's file has that someone's uid: the owner would be whoever
    // wrote the file, not whoever dropped the link (as with a symbolic link, above).
    if meta.nlink() > 1 {
        return Ok(Submission::Refused(format!(
            "a file with {} hard links; its owner need not be who dropped it: drop a copy of \
             the goal file",
            meta.nlink()
        )));
    }
    if meta.len() > MAX_GOAL_FILE {
        return Ok(Submission::Refused(format!(
            "{} bytes; a goal file may have at most {MAX_GOAL_FILE}",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_GOAL_FILE + 1).read_to_end(&mut bytes)?;
    match String::from_utf8(bytes) {
        Ok(source) => Ok(Submission::Goal {
            source,
            owner: meta.uid(),
        }),
        Err(e) => Ok(Submission::Refused(format!(
            "not UTF-8 (byte {}); save the goal file as UTF-8",
            e.utf8_error().valid_up_to()
        ))),
    }
}

/// Moves `path` into `to_dir` (under a free name: an earlier file of that name is kept),
/// with `<name>.error` beside it when `error` says why it was rejected.
fn move_out(
    path: &Path,
    to_dir: &Path,
    name: &std::ffi::OsStr,
    error: Option<&str>,
) -> std::io::Result<()> {
    let mut target = to_dir.join(name);
    let mut n = 1;
    while target.symlink_metadata().is_ok() {
        let mut numbered = name.to_owned();
        numbered.push(format!(".{n}"));
        target = to_dir.join(numbered);
        n += 1;
    }
    std::fs::rename(path, &target)?;
    if let Some(why) = error {
        let mut error_file = target.clone().into_os_string();
        error_file.push(".error");
        if let Err(e) = std::fs::write(&error_file, format!("{why}\n")) {
            tracing::warn!(
                "spool: cannot write {}: {e}; the reason was: {why}",
                Path::new(&error_file).display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kd-spool-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn links_are_refused_and_the_owner_comes_from_the_file() {
        let d = temp("link");
        std::fs::write(d.join("real.toml"), "name = \"x\"\n").unwrap();
        std::os::unix::fs::symlink(d.join("real.toml"), d.join("link.toml")).unwrap();
        match read_submission(&d.join("link.toml")).unwrap() {
            Submission::Refused(why) => assert!(why.contains("symbolic link"), "{why}"),
            Submission::Goal { .. } => panic!("a symlink was taken"),
        }
        match read_submission(&d.join("real.toml")).unwrap() {
            Submission::Goal { source, owner } => {
                assert_eq!(source, "name = \"x\"\n");
                assert_eq!(owner, nix::unistd::geteuid().as_raw());
            }
            Submission::Refused(why) => panic!("refused: {why}"),
        }
        std::fs::hard_link(d.join("real.toml"), d.join("hard.toml")).unwrap();
        match read_submission(&d.join("hard.toml")).unwrap() {
            Submission::Refused(why) => assert!(why.contains("hard links"), "{why}"),
            Submission::Goal { .. } => panic!("a hard link was taken"),
        }
        std::fs::remove_file(d.join("hard.toml")).unwrap();
        std::fs::write(d.join("bin.toml"), b"name = \"\xff\"\n").unwrap();
        assert!(matches!(
            read_submission(&d.join("bin.toml")).unwrap(),
            Submission::Refused(why) if why.contains("UTF-8")
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn moving_out_keeps_an_earlier_file_of_the_same_name() {
        let d = temp("move");
        std::fs::create_dir_all(d.join("rejected")).unwrap();
        for round in 0..2 {
            std::fs::write(d.join("g.toml"), format!("{round}")).unwrap();
            move_out(
                &d.join("g.toml"),
                &d.join("rejected"),
                "g.toml".as_ref(),
                Some("why"),
            )
            .unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(d.join("rejected/g.toml")).unwrap(),
            "0"
        );
        assert_eq!(
            std::fs::read_to_string(d.join("rejected/g.toml.1")).unwrap(),
            "1"
        );
        assert!(d.join("rejected/g.toml.error").is_file());
        assert!(d.join("rejected/g.toml.1.error").is_file());
        // No directory to move into: the error reaches the caller.
        std::fs::write(d.join("g.toml"), "2").unwrap();
        assert!(move_out(
            &d.join("g.toml"),
            &d.join("missing"),
            "g.toml".as_ref(),
            None
        )
        .is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
