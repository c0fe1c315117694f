//! A slot's directories and its worker's environment: the scratch root (never a planted
//! link), the slot's scratch and inbox, the judges' compile cache, and the variables the
//! judge gets (HOME, TMPDIR and the caches inside its scratch; the GPU it may use).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::policy::HARNESS_ENV;
use crate::config::Config;
use crate::gpu::DeviceInfo;

/// The scratch subdirectories a worker's environment points at.
pub const SCRATCH_SUBDIRS: &[&str] = &[
    "tmp",
    "home",
    "cache",
    "cache/triton",
    "cache/inductor",
    "cache/nv",
];

/// The directory holding libcuda.so.1, where the driver installs it.
fn libcuda_dir() -> Option<String> {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
    ]
    .iter()
    .find(|d| Path::new(d).join("libcuda.so.1").exists())
    .map(|d| d.to_string())
}

/// Creates the scratch root if needed; it must be a real directory of ours (never a
/// link someone planted), and is never emptied as a whole: only our slot directories.
pub fn ensure_root(root: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let meta = std::fs::symlink_metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!(
            "the scratch directory {} is not a directory owned by kerneld's user (uid {}); \
             remove it or set `scratch_dir` in kerneld.toml",
            root.display(),
            nix::unistd::geteuid()
        ));
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| format!("chmod {}: {e}", root.display()))
}

/// The judges' compile-cache directory (issue #12, `Config::judge_cache_dir`): kept, not
/// emptied; mode 0700, owned by the user judges run as.
pub fn judge_cache_dir(cfg: &Config, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    let dir = cfg.judge_cache_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|e| format!("handing {} to uid {uid}: {e}", dir.display()))?;
    }
    Ok(dir)
}

/// Makes `dir` an empty directory owned by `owner` with `mode`.
pub fn fresh_dir(dir: &Path, owner: Option<(u32, u32)>, mode: u32) -> Result<(), String> {
    if dir.exists() && std::fs::remove_dir_all(dir).is_err() {
        // Directories of the runner user (mode 0700) that a daemon without
        // CAP_DAC_OVERRIDE cannot empty: take them back (CAP_CHOWN), then remove them.
        let me = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let _ = std::os::unix::fs::lchown(&d, Some(me.0), Some(me.1));
            let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        std::fs::remove_dir_all(dir).map_err(|e| format!("clearing {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", dir.display()))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(|e| format!("handing {} to uid {uid}: {e}", dir.display()))?;
    }
    Ok(())
}

/// The judge's environment for a slot whose scratch root is `scratch` (without the
/// runner launcher, which depends on the policy).
pub fn worker_env(cfg: &Config, scratch: &Path, dev: &DeviceInfo) -> Vec<(String, String)> {
    let s = |p: PathBuf| p.display().to_string();
    let sub = |p: &str| scratch.join(p);
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        (
            "LANG".into(),
            std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into()),
        ),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("HOME".into(), s(sub("home"))),
        ("TMPDIR".into(), s(sub("tmp"))),
        ("XDG_CACHE_HOME".into(), s(sub("cache"))),
        ("TRITON_CACHE_DIR".into(), s(sub("cache/triton"))),
        ("TORCHINDUCTOR_CACHE_DIR".into(), s(sub("cache/inductor"))),
        ("CUDA_CACHE_PATH".into(), s(sub("cache/nv"))),
        ("KERNELD_SCRATCH_ROOT".into(), s(scratch.to_path_buf())),
        (
            "KERNELD_WORKER_MAX_FILES".into(),
            cfg.worker_max_files.to_string(),
        ),
    ];
    if dev.is_gpu {
        // A Slurm slot's GPU is named by Slurm on the node: its CUDA_VISIBLE_DEVICES
        // reaches the worker through srun (and kerneld-sandbox's --pass-env).
        if crate::slurm::slot_index(&dev.uuid).is_none() {
            env.push(("CUDA_VISIBLE_DEVICES".into(), dev.uuid.clone()));
        }
        // Else Triton runs `/sbin/ldconfig -p` to find libcuda, which on some
        // distributions is a shell script (no shell in the sandbox).
        if let Some(dir) = libcuda_dir() {
            env.push(("TRITON_LIBCUDA_PATH".into(), dir));
        }
    } else {
        env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
        env.push(("TRITON_INTERPRET".into(), "1".into()));
    }
    for k in HARNESS_ENV {
        if let Ok(v) = std::env::var(k) {
            env.push((k.to_string(), v));
        }
    }
    env
}
