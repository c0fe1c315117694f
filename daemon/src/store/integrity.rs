//! Looks at the log file before redb does, so a damaged file is reported, never replaced.
//!
//! redb initializes an empty file as a fresh database (every goal gone without a word)
//! and meets a truncated one with assertions (a panic, exit 101). So:
//! - a log that does not exist yet is created under a temporary name and renamed into
//!   place once redb has written it: a kill during creation leaves no half-made file at
//!   the log's path, and an empty or short file there can only be damage;
//! - an existing file is checked against redb's own header (magic number, and the length
//!   its layout says the file has) before redb opens it; what does not match stops the
//!   start with a message that says what to do.
//!
//! The header layout is redb 2's file format (redb-2.x `tree_store/page_store/header.rs`
//! and `layout.rs`); `header_length_matches_what_redb_writes` in `store.rs` keeps this
//! honest when redb is upgraded.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::log_file::LogFile;
use super::StoreError;

const MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];
/// redb's database header: 64 bytes of layout, then two 128-byte commit slots.
const HEADER_SIZE: u64 = 64 + 2 * 128;
const PAGE_SIZE_OFFSET: usize = MAGIC.len() + 1 + 2;

/// What to do about a damaged log, said once for every kind of damage.
fn what_to_do(path: &Path) -> String {
    format!(
        "kerneld does not replace it: restore it from a backup, or run `kerneld check` to see \
         what it holds; to start with an empty log instead, move it aside (mv {p} {p}.damaged)",
        p = path.display()
    )
}

pub(super) fn damaged(path: &Path, what: String) -> StoreError {
    StoreError::Damaged {
        path: path.to_path_buf(),
        what,
        todo: what_to_do(path),
    }
}

/// What came out of opening or replaying the log (a record that does not decode, redb's
/// error or assertion), as a damaged log: the path, `what`, and what to do.
pub(crate) fn unreadable(path: &Path, what: &str) -> StoreError {
    damaged(path, what.to_string())
}

/// The log could not be read or written for a reason of the system's (permissions, I/O).
pub(crate) fn inaccessible(path: &Path, e: &std::io::Error) -> StoreError {
    StoreError::Damaged {
        path: path.to_path_buf(),
        what: format!("cannot be accessed: {e}"),
        todo: format!(
            "check that kerneld's user (uid {}) may read and write it and its directory, and \
             that the disk is healthy (dmesg); then start kerneld again",
            nix::unistd::geteuid()
        ),
    }
}

/// The length redb's header says the file has, or what is wrong with the header.
fn expected_len(header: &[u8]) -> Result<u64, String> {
    if header[..MAGIC.len()] != MAGIC {
        return Err(
            "has no redb header (it is not a kerneld event log, or its start was overwritten)"
                .into(),
        );
    }
    // u128: a damaged header's fields cannot overflow the sum.
    let u32_at = |at: usize| u128::from(u32::from_le_bytes(header[at..at + 4].try_into().unwrap()));
    let page_size = u32_at(PAGE_SIZE_OFFSET);
    let region_header_pages = u32_at(PAGE_SIZE_OFFSET + 4);
    let region_max_data_pages = u32_at(PAGE_SIZE_OFFSET + 8);
    let full_regions = u32_at(PAGE_SIZE_OFFSET + 12);
    let trailing_data_pages = u32_at(PAGE_SIZE_OFFSET + 16);
    if !(512..=1 << 24).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!("has a damaged header (page size {page_size})"));
    }
    let full_region = (region_header_pages + region_max_data_pages) * page_size;
    let trailing = if trailing_data_pages > 0 {
        (region_header_pages + trailing_data_pages) * page_size
    } else {
        0
    };
    // The first page holds the header; the regions follow.
    u64::try_from(page_size + full_regions * full_region + trailing)
        .map_err(|_| "has a damaged header (its layout is larger than any file)".to_string())
}

/// Checks an existing log file's header and length; Ok(false) when there is no file.
pub(super) fn check_existing(path: &Path) -> Result<bool, StoreError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(damaged(path, format!("cannot be examined: {e}"))),
    };
    if !meta.is_file() {
        return Err(damaged(path, "is not a regular file".into()));
    }
    let len = meta.len();
    if len == 0 {
        return Err(damaged(
            path,
            "is empty (0 bytes) where a log was expected: it was truncated or emptied".into(),
        ));
    }
    if len < HEADER_SIZE {
        return Err(damaged(
            path,
            format!("is {len} bytes, shorter than a log's header: it was truncated"),
        ));
    }
    let mut header = vec![0u8; HEADER_SIZE as usize];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(|e| damaged(path, format!("cannot be read: {e}")))?;
    let expected = expected_len(&header).map_err(|what| damaged(path, what))?;
    if len < expected {
        return Err(damaged(
            path,
            format!("is {len} bytes but its header says {expected}: it was truncated"),
        ));
    }
    Ok(true)
}

/// Opens the existing log (through `LogFile`: no `flock`, see `super::owner`), with a
/// panic inside redb (an assertion on a file damaged in a way the header check did not
/// see) turned into an error: a damaged log is a message. `create_with_backend` is redb's
/// only way to take a backend; it would initialize an empty file, which `check_existing`
/// has refused before this runs (and the owner's lock keeps anyone from emptying it since).
pub(super) fn open_caught(path: &Path) -> Result<redb::Database, redb::DatabaseError> {
    let open = || redb::Builder::new().create_with_backend(LogFile::open(path, false)?);
    std::panic::catch_unwind(open).unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("an assertion failed");
        Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(
            format!("redb could not read it ({why})"),
        )))
    })
}

/// A new log's database in `tmp` (`create_atomically`'s `init` makes it).
pub(super) fn create(tmp: &Path) -> Result<redb::Database, redb::DatabaseError> {
    redb::Builder::new().create_with_backend(LogFile::open(tmp, true)?)
}

/// The temporary name a new log is created under.
fn creating(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".creating");
    path.with_file_name(name)
}

/// Creates a new log atomically: written under a temporary name by `init`, synced, then
/// renamed into place (and the directory synced, so the rename survives a crash).
pub(super) fn create_atomically(
    path: &Path,
    init: impl FnOnce(&Path) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let tmp = creating(path);
    // A leftover from a start killed while creating: it was never the log.
    let _ = std::fs::remove_file(&tmp);
    init(&tmp)?;
    let io = |e: std::io::Error| StoreError::Db {
        path: path.to_path_buf(),
        source: Box::new(redb::Error::Io(e)),
    };
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) fn expected_len_of(path: &Path) -> u64 {
    let mut header = vec![0u8; HEADER_SIZE as usize];
    std::fs::File::open(path)
        .unwrap()
        .read_exact(&mut header)
        .unwrap();
    expected_len(&header).unwrap()
}
