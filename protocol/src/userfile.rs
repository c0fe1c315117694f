//! Files `kernelctl` reads with the user's rights (goal files, seeds next to them): only
//! regular files, and only up to a size checked before reading, so a FIFO cannot block the
//! client, nor `/dev/zero` or a huge file exhaust its memory.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

#[derive(Debug)]
pub enum UserFileError {
    /// A directory, FIFO, socket or device: what it is.
    NotRegular(&'static str),
    /// Its size, beyond the limit.
    TooLarge(u64),
    NotUtf8,
    Io(std::io::Error),
}

impl UserFileError {
    /// The message for people, naming the file.
    pub fn describe(&self, path: &Path, limit: u64) -> String {
        let p = path.display();
        match self {
            UserFileError::NotRegular(kind) => {
                format!("{p} is not a regular file (it is a {kind}); name the file itself")
            }
            UserFileError::TooLarge(n) => {
                format!("{p} is {n} bytes; it may be at most {limit} bytes")
            }
            UserFileError::NotUtf8 => format!("{p} is not UTF-8 text"),
            UserFileError::Io(e) => format!("cannot read {p}: {e}"),
        }
    }
}

fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// The text of a regular file of at most `limit` bytes. Opened non-blocking (a FIFO's
/// open would wait for a writer), then checked on the open descriptor (no race with a
/// rename), then read no further than `limit` (a file that grows meanwhile).
pub fn read_regular(path: &Path, limit: u64) -> Result<String, UserFileError> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(UserFileError::Io)?;
    let meta = file.metadata().map_err(UserFileError::Io)?;
    if !meta.file_type().is_file() {
        return Err(UserFileError::NotRegular(kind(meta.file_type())));
    }
    if meta.len() > limit {
        return Err(UserFileError::TooLarge(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(UserFileError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(UserFileError::TooLarge(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| UserFileError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = std::env::temp_dir().join(format!("kd-userfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("ok.toml");
        std::fs::write(&ok, "name = \"x\"\n").unwrap();
        assert_eq!(read_regular(&ok, 100).unwrap(), "name = \"x\"\n");
        assert!(matches!(
            read_regular(&ok, 4),
            Err(UserFileError::TooLarge(11))
        ));
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            read_regular(&fifo, 100),
            Err(UserFileError::NotRegular("FIFO"))
        ));
        assert!(matches!(
            read_regular(Path::new("/dev/zero"), 100),
            Err(UserFileError::NotRegular("character device"))
        ));
        assert!(matches!(
            read_regular(&dir, 100),
            Err(UserFileError::NotRegular("directory"))
        ));
        std::fs::write(&ok, [0xffu8, 0xfe]).unwrap();
        assert!(matches!(
            read_regular(&ok, 100),
            Err(UserFileError::NotUtf8)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
