//! The log file as redb's storage: redb's own `FileBackend` without its `flock`.
//!
//! `flock` locks the open file description, which every child forked by the daemon holds
//! until it execs (or, if the daemon dies first, until it is torn down): the lock of a
//! killed daemon outlived it (issue #18). Exclusion is `super::owner`'s record lock, taken
//! before this file is opened; nothing else about the file changes (the same reads,
//! writes, lengths and syncs as redb 2's `FileBackend`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[derive(Debug)]
pub(super) struct LogFile {
    file: File,
}

impl LogFile {
    /// Opens the log for reading and writing; `create` makes the file when it is missing
    /// (a new log, under its temporary name).
    pub(super) fn open(path: &Path, create: bool) -> io::Result<LogFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path)?;
        Ok(LogFile { file })
    }
}

impl redb::StorageBackend for LogFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buffer = vec![0; len];
        self.file.read_exact_at(&mut buffer, offset)?;
        Ok(buffer)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self, _eventual: bool) -> io::Result<()> {
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }
}
