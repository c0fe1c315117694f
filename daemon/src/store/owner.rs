//! Who owns a log: a POSIX record lock (`fcntl(F_SETLK)`) on `<log>.lock` beside it, taken
//! before the log is looked at, created or opened, and held for as long as the `Store` is.
//!
//! Why not redb's own lock (issue #18). redb takes `flock` on the log's open file
//! description, and that lock lasts until the *last* holder of the description closes it.
//! Every child the daemon forks holds a copy of it between fork and exec (O_CLOEXEC only
//! closes at exec), so a daemon SIGKILLed while it was starting a worker left a child,
//! reparented to init and still being torn down, that kept the log locked; the next start
//! was told "another kerneld is already running" by a kerneld that was dead (the
//! kill-torture's soak, kill 957; /proc showed the holder: comm tokio-rt-worker, ppid 1,
//! the daemon's command line, not yet exec'ed). No spawn path can close that window for
//! every child (a forked child holds the whole fd table until exec, and a dying one until
//! it is torn down), so the lock must not be one a child can hold: a record lock belongs
//! to the process (its fd table), is never inherited across fork, and goes when the
//! process dies, whoever still has the file open. The log itself is then opened without
//! `flock` (`super::log_file`).
//!
//! Record locks have one trap: a process that closes *any* fd of the locked file drops its
//! lock. Nothing but this module opens the lock file, and within one process the paths
//! locked are kept in `HELD`, so a second open in the same process (tests, tools) is
//! refused before it opens (and later closes) a second fd.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::StoreError;

/// (device, inode) of every lock file this process holds.
static HELD: Mutex<BTreeSet<(u64, u64)>> = Mutex::new(BTreeSet::new());

/// The lock file of a log: `kerneld.redb` → `kerneld.redb.lock`. Never removed: removing
/// a lock file while another process waits on it would let two processes lock two files.
pub(super) fn lock_path(log: &Path) -> PathBuf {
    let mut name = log.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    log.with_file_name(name)
}

/// Exclusive ownership of a log, released when dropped (or when the process dies).
#[derive(Debug)]
pub(super) struct Owner {
    /// Always Some until dropped: closing it is what releases the lock.
    file: Option<File>,
    key: (u64, u64),
}

impl Owner {
    /// Takes the log's lock, or says who has it: `AlreadyOpen` with the owner's pid.
    pub(super) fn acquire(log: &Path) -> Result<Owner, StoreError> {
        let path = lock_path(log);
        let dir = log.parent().unwrap_or(log).to_path_buf();
        let io = |e: std::io::Error| StoreError::Db {
            path: path.clone(),
            source: Box::new(redb::Error::Io(e)),
        };
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up by stat, before any fd is opened (see the module's note on closing).
        if let Ok(m) = std::fs::metadata(&path) {
            if held.contains(&(m.dev(), m.ino())) {
                return Err(StoreError::AlreadyOpen {
                    dir,
                    pid: Some(std::process::id() as i32),
                });
            }
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        let m = file.metadata().map_err(io)?;
        let key = (m.dev(), m.ino());
        if held.contains(&key) {
            // Another name of a lock file this process holds (a link): this fd must stay
            // open, or closing it would release the lock the other name took.
            std::mem::forget(file);
            return Err(StoreError::AlreadyOpen {
                dir,
                pid: Some(std::process::id() as i32),
            });
        }
        let mut lock = whole_file(libc::F_WRLCK);
        // SAFETY: fcntl on an fd this function owns, with a valid flock struct.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) } != 0 {
            let e = std::io::Error::last_os_error();
            if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                return Err(io(e));
            }
            // Who has it (it may have gone meanwhile: then no pid is named).
            // SAFETY: as above; F_GETLK writes the conflicting lock into `lock`.
            let owner = (unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock) } == 0
                && lock.l_type != libc::F_UNLCK as libc::c_short)
                .then_some(lock.l_pid);
            return Err(StoreError::AlreadyOpen { dir, pid: owner });
        }
        held.insert(key);
        Ok(Owner {
            file: Some(file),
            key,
        })
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Closed under `HELD`: a second open in this process between the close and the
        // removal would find the path free, and its lock would go with this close.
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.file.take());
        held.remove(&self.key);
    }
}

fn whole_file(kind: libc::c_int) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value (start 0, length 0 = to the end).
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l
}

/// Removes a test's log and its lock file (tests only: a running daemon never removes
/// the lock file, see `lock_path`).
#[cfg(test)]
pub(super) fn remove_log(log: &Path) {
    let _ = std::fs::remove_file(log);
    let _ = std::fs::remove_file(lock_path(log));
}
