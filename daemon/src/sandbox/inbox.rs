//! Handing a request's files to a sandboxed judge. The daemon keeps candidate sources
//! in its state directory, which the judge may not read; before each request the
//! candidate file is copied into the slot's inbox (read-only to the judge, holding only
//! the current candidate) and the request names that copy. A task directory the judge
//! cannot read is refused with what to do, instead of a confusing import error.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::runtime::WorkerSandbox;

/// Largest candidate file handed over (the agents accept at most 1 MiB).
const MAX_CANDIDATE: u64 = 8 << 20;

fn canon(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

pub fn hand_over(sb: &WorkerSandbox, req: &mut Value) -> Result<(), String> {
    if sb.wrapper.is_none() {
        return Ok(());
    }
    if let Some(task) = req.get("task_dir").and_then(Value::as_str) {
        let task = canon(Path::new(task));
        if !sb.readable.iter().any(|r| task.starts_with(canon(r))) {
            return Err(format!(
                "the task directory {} is outside what sandboxed evaluations may read; install \
                 the task under the kernels directory, or add it to `sandbox_extra_ro` in \
                 kerneld.toml",
                task.display()
            ));
        }
    }
    let Some(path) = req
        .get("candidate")
        .and_then(Value::as_str)
        .map(PathBuf::from)
    else {
        return Ok(());
    };
    let name = path
        .file_name()
        .map_or("candidate.py".into(), |n| n.to_string_lossy().into_owned());
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > MAX_CANDIDATE {
        return Err(format!(
            "{} is larger than {MAX_CANDIDATE} bytes",
            path.display()
        ));
    }
    let source = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    // Only the current candidate is there: the judge never sees another goal's source.
    if let Ok(entries) = std::fs::read_dir(&sb.inbox) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let dest = sb.inbox.join(&name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&dest)
        .map_err(|e| format!("writing {}: {e}", dest.display()))?;
    f.write_all(&source)
        .map_err(|e| format!("writing {}: {e}", dest.display()))?;
    req["candidate"] = Value::String(dest.display().to_string());
    Ok(())
}
