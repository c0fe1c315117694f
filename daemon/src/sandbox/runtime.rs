//! The sandbox as this daemon runs it: found out once at start (`Runtime::detect`: the
//! probe, the runner user, a trial run of the harness's Python under the judge policy
//! and, in GPU mode, a CUDA init under the judge and runner policies, widened along the
//! ladder in `widen` until CUDA works), then used for every worker (`Runtime::worker`), every enqueue (`Runtime::admit`) and
//! shown by `version` and `gpus` (`Runtime::status`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::policy::{Policy, PolicyInputs, HARNESS_ENV};
use super::probe::Probe;
use super::widen::{Choice, Widening};
use crate::config::Config;
use crate::gpu::DeviceInfo;
use crate::wire::SandboxStatus;

/// How workers are started.
#[derive(Debug, Clone, PartialEq)]
enum Level {
    /// Under `kerneld-sandbox`, switching to `run_as` when set, with the filesystem
    /// rules widened to `widen` (GPU mode, when CUDA needs it).
    Sandboxed {
        run_as: Option<(u32, u32)>,
        widen: Widening,
    },
    /// Directly (no kerneld-sandbox that works here), with the cleared environment.
    Off,
}

#[derive(Debug)]
pub struct Runtime {
    status: SandboxStatus,
    level: Level,
    bin: Option<PathBuf>,
}

/// How one worker (judge) is started: the program and arguments to run instead of
/// `python -u worker.py`'s own, its environment, and its directories.
#[derive(Debug, Clone)]
pub struct WorkerSandbox {
    /// `kerneld-sandbox` and the judge options (None: run Python directly).
    pub wrapper: Option<(PathBuf, Vec<String>)>,
    /// The judge's whole environment.
    pub env: Vec<(String, String)>,
    /// Where the daemon puts the candidate file for the judge to read.
    pub inbox: PathBuf,
    /// The judge's scratch root (KERNELD_SCRATCH_ROOT).
    pub scratch: PathBuf,
    /// What the judge may read: a task outside it cannot be evaluated here.
    pub readable: Vec<PathBuf>,
}

/// The `kerneld-sandbox` binary: configured, else next to this executable, else on PATH.
fn find_binary(cfg: &Config) -> Option<PathBuf> {
    if let Some(b) = &cfg.sandbox.binary {
        return Some(b.clone());
    }
    if let Some(near) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("kerneld-sandbox")))
        .filter(|p| p.is_file())
    {
        return Some(near);
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("kerneld-sandbox"))
            .find(|p| p.is_file())
    })
}

fn run_probe(bin: &Path) -> Result<Probe, String> {
    let out = Command::new(bin)
        .arg("--probe")
        .env_clear()
        .output()
        .map_err(|e| format!("cannot run {} --probe: {e}", bin.display()))?;
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "{} --probe printed no probe ({e}): {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// The runner account's uid and gid.
fn runner_account(name: &str) -> Result<(u32, u32), String> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok((u.uid.as_raw(), u.gid.as_raw())),
        Ok(None) => Err(format!(
            "the runner user `{name}` does not exist (install systemd/kerneld.sysusers.conf and \
             run systemd-sysusers, or `useradd --system --no-create-home --shell /usr/sbin/nologin \
             {name}`; the name is `runner_user` in kerneld.toml)"
        )),
        Err(e) => Err(format!("looking up the runner user `{name}`: {e}")),
    }
}

/// The CUDA init the GPU trial runs: what every GPU evaluation needs first.
const CUDA_TRIAL: &str = "import torch; torch.ones(1, device='cuda').sum().item()";

/// The scratch subdirectories a worker's environment points at.
const SCRATCH_SUBDIRS: &[&str] = &[
    "tmp",
    "home",
    "cache",
    "cache/triton",
    "cache/inductor",
    "cache/nv",
];

/// The last line of a failed trial's stderr (a traceback's last line names the error).
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(400).collect()
}

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
fn ensure_root(root: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let meta = std::fs::symlink_metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!(
            "the scratch directory {} is not a directory owned by kerneld's user (uid {});              remove it or set `scratch_dir` in kerneld.toml",
            root.display(),
            nix::unistd::geteuid()
        ));
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))
        .map_err(|e| format!("chmod {}: {e}", root.display()))
}

/// The judges' compile-cache directory (issue #12, `Config::judge_cache_dir`): kept, not
/// emptied; mode 0700, owned by the user judges run as.
fn judge_cache_dir(cfg: &Config, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
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
fn fresh_dir(dir: &Path, owner: Option<(u32, u32)>, mode: u32) -> Result<(), String> {
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
fn worker_env(cfg: &Config, scratch: &Path, dev: &DeviceInfo) -> Vec<(String, String)> {
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
        env.push(("CUDA_VISIBLE_DEVICES".into(), dev.uuid.clone()));
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

impl Runtime {
    /// `gpu`: one of the daemon's GPUs (None: CPU mode), for the CUDA trial.
    pub fn detect(cfg: &Config, gpu: Option<&DeviceInfo>) -> Runtime {
        let mut problems = Vec::new();
        let bin = find_binary(cfg);
        let probe = match &bin {
            Some(b) => run_probe(b).map_err(|e| problems.push(e)).ok(),
            None => {
                problems.push(
                    "no kerneld-sandbox binary (next to kerneld, on PATH, or `sandbox_binary`)"
                        .into(),
                );
                None
            }
        };
        if let Some(p) = &probe {
            problems.extend(
                super::probe::missing(p)
                    .into_iter()
                    .map(|m| format!("the kernel lacks {m}")),
            );
        }
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let privileged = probe.as_ref().is_some_and(|p| p.can_setuid);
        let mut run_as = None;
        let mut runner_user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(me.0))
            .ok()
            .flatten()
            .map_or_else(|| me.0.to_string(), |u| u.name);
        let mut runner_uid = me.0;
        if privileged {
            match runner_account(&cfg.sandbox.runner_user) {
                Ok(ids) => {
                    run_as = Some(ids);
                    runner_user = cfg.sandbox.runner_user.clone();
                    runner_uid = ids.0;
                }
                Err(e) => problems.push(format!("{e}; runners would run as {runner_user}")),
            }
        }
        let mut rt = Runtime {
            status: SandboxStatus {
                complete: false,
                allow_unsandboxed: cfg.sandbox.allow_unsandboxed,
                runner_uid,
                runner_user: runner_user.clone(),
                probe: probe.clone(),
                restricts: Vec::new(),
                problems: Vec::new(),
            },
            level: Level::Off,
            bin: bin.clone(),
        };
        if bin.is_some() && probe.is_some() {
            // A trial run under the judge policy: the Python, its libraries and the
            // kernels directory must be reachable as the runner user.
            match rt.trial(cfg, run_as) {
                Ok(()) => {
                    rt.level = Level::Sandboxed {
                        run_as,
                        widen: Widening::None,
                    }
                }
                Err(e) if run_as.is_some() => {
                    problems.push(format!(
                        "the harness's Python cannot run as {runner_user}: {e}; runners run as \
                         the daemon's user instead"
                    ));
                    rt.status.runner_uid = me.0;
                    rt.status.runner_user = me.0.to_string();
                    match rt.trial(cfg, None) {
                        Ok(()) => {
                            rt.level = Level::Sandboxed {
                                run_as: None,
                                widen: Widening::None,
                            }
                        }
                        Err(e) => problems.push(format!("the sandbox cannot run the harness: {e}")),
                    }
                }
                Err(e) => problems.push(format!("the sandbox cannot run the harness: {e}")),
            }
        }
        // GPU mode: a trial that imports json proves nothing about CUDA (on an H200 the
        // driver failed under the full policy with Error 304): init CUDA under the judge
        // and runner policies, widening the filesystem rules until it works.
        if let (Level::Sandboxed { run_as, .. }, Some(gpu)) = (rt.level.clone(), gpu) {
            let choice = Choice::find(|widen| rt.cuda_trial(cfg, run_as, gpu, widen));
            problems.extend(choice.problem());
            rt.level = match choice.level {
                Some(widen) => Level::Sandboxed { run_as, widen },
                None => Level::Off,
            };
        }
        if rt.level == Level::Off && problems.is_empty() {
            problems.push("the sandbox is off".into());
        }
        rt.status.restricts = rt.restricts(cfg);
        rt.status.complete = problems.is_empty();
        rt.status.problems = problems;
        rt
    }

    fn trial(&self, cfg: &Config, run_as: Option<(u32, u32)>) -> Result<(), String> {
        let bin = self.bin.as_ref().ok_or("no kerneld-sandbox")?;
        let dir = cfg.scratch_dir().join("trial");
        ensure_root(&cfg.scratch_dir())?;
        fresh_dir(&dir, run_as, 0o700)?;
        let inputs = self.inputs(cfg, bin, &dir, &dir, None, run_as);
        let policy = Policy::build(&inputs)?;
        let mut judge = policy.judge.clone();
        judge.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        let out = Command::new(bin)
            .args(judge.to_args())
            .arg("--")
            .arg(&cfg.python)
            .args(["-c", "import json, sys"])
            .current_dir("/")
            .env_clear()
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        let _ = std::fs::remove_dir_all(&dir);
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} ({})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ))
        }
    }

    /// CUDA init on `gpu` under the judge policy, then under the runner policy (with
    /// the runner scratch the judge appends), both widened to `widen`, with the
    /// environment a worker gets.
    fn cuda_trial(
        &self,
        cfg: &Config,
        run_as: Option<(u32, u32)>,
        gpu: &DeviceInfo,
        widen: Widening,
    ) -> Result<(), String> {
        let bin = self.bin.as_ref().ok_or("no kerneld-sandbox")?;
        let minor = gpu
            .minor
            .ok_or_else(|| format!("NVML gave no minor number for {}", gpu.uuid))?;
        let dir = cfg.scratch_dir().join("trial");
        ensure_root(&cfg.scratch_dir())?;
        fresh_dir(&dir, run_as, 0o700)?;
        for d in SCRATCH_SUBDIRS {
            fresh_dir(&dir.join(d), run_as, 0o700)?;
        }
        let policy = Policy::build(&self.inputs(cfg, bin, &dir, &dir, Some(minor), run_as))?;
        let env = worker_env(cfg, &dir, gpu);
        let (mut judge, mut runner) = (policy.judge, policy.runner);
        runner.rw.push(dir.clone());
        let mut result = Ok(());
        for (who, o) in [("judge", &mut judge), ("runner", &mut runner)] {
            widen.apply(o);
            o.env = env.clone();
            let out = Command::new(bin)
                .args(o.to_args())
                .arg("--")
                .arg(&cfg.python)
                .args(["-c", CUDA_TRIAL])
                .current_dir("/")
                .env_clear()
                .output()
                .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
            if !out.status.success() {
                result = Err(format!(
                    "the {who} policy: {} ({})",
                    last_line(&out.stderr),
                    out.status
                ));
                break;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn inputs(
        &self,
        cfg: &Config,
        bin: &Path,
        scratch: &Path,
        inbox: &Path,
        gpu_minor: Option<u32>,
        run_as: Option<(u32, u32)>,
    ) -> PolicyInputs {
        let mut forbidden = vec![cfg.state_dir.clone()];
        forbidden.extend(cfg.config_file.clone());
        forbidden.extend(cfg.spool_dir.clone());
        PolicyInputs {
            sandbox_bin: bin.to_path_buf(),
            python: cfg.python.clone(),
            kernels_dir: cfg.kernels_dir.clone(),
            scratch: scratch.to_path_buf(),
            inbox: inbox.to_path_buf(),
            gpu_minor,
            run_as,
            max_files: cfg.worker_max_files,
            max_procs: cfg.sandbox.max_procs,
            max_address_space: cfg.worker_max_address_space_cpu,
            extra_ro: cfg.sandbox.extra_ro.clone(),
            extra_exec: cfg.sandbox.extra_exec.clone(),
            forbidden,
            no_unix: !cfg.sandbox.unix_sockets,
            // Incomplete and allowed anyway: run with what the kernel has.
            best_effort: cfg.sandbox.allow_unsandboxed
                && self
                    .status
                    .probe
                    .as_ref()
                    .is_some_and(|p| !super::probe::missing(p).is_empty()),
        }
    }

    fn restricts(&self, cfg: &Config) -> Vec<String> {
        let Level::Sandboxed { run_as, widen } = &self.level else {
            return vec![
                "environment: cleared to the harness's variables (nothing else is restricted)"
                    .into(),
            ];
        };
        let abi = self.status.probe.as_ref().map_or(0, |p| p.landlock_abi);
        let mut r = vec![
            "environment: cleared to the harness's variables (no API keys, NOTIFY_SOCKET or daemon settings)".into(),
            match widen {
                Widening::None => format!("filesystem (Landlock ABI {abi}): read system libraries, the Python environment and the kernels directory; write only the slot's scratch directory; execute only Python, kerneld-sandbox and the compilers Triton runs"),
                w => format!("{} (Landlock ABI {abi}; CUDA did not initialise under the full policy)", w.describe()),
            },
            format!("network: no IP, packet{} sockets (seccomp), no TCP bind/connect (Landlock)", if cfg.sandbox.unix_sockets { "" } else { " or unix" }),
            "processes: no ptrace or process_vm_* (seccomp), signals and abstract unix sockets scoped (Landlock)".into(),
            if *widen == Widening::None {
                "devices: /dev/null, zero, full, random, urandom and only the leased GPU's nodes".into()
            } else {
                "devices: every node under /dev (widened for CUDA)".into()
            },
        ];
        r.push(match run_as {
            Some((uid, _)) => format!(
                "user: runners run as {} (uid {uid}), no_new_privs, no capabilities",
                self.status.runner_user
            ),
            None => format!(
                "user: runners keep the daemon's uid {} (no_new_privs)",
                self.status.runner_uid
            ),
        });
        r.push(format!(
            "limits: {} open files, {} processes, no core dumps, {} GiB address space in CPU mode",
            cfg.worker_max_files,
            cfg.sandbox.max_procs,
            cfg.worker_max_address_space_cpu >> 30
        ));
        r
    }

    /// No sandbox: the trials could not run at all (`problem` says why).
    pub fn unavailable(cfg: &Config, problem: String) -> Runtime {
        Runtime {
            status: SandboxStatus {
                complete: false,
                allow_unsandboxed: cfg.sandbox.allow_unsandboxed,
                runner_uid: nix::unistd::getuid().as_raw(),
                runner_user: nix::unistd::getuid().to_string(),
                probe: None,
                restricts: Vec::new(),
                problems: vec![problem],
            },
            level: Level::Off,
            bin: None,
        }
    }

    pub fn status(&self) -> SandboxStatus {
        self.status.clone()
    }

    /// Says at start what is in force and what is missing.
    pub fn log(&self) {
        for line in &self.status.restricts {
            tracing::info!("sandbox: {line}");
        }
        for p in &self.status.problems {
            tracing::warn!("sandbox incomplete: {p}");
        }
        if !self.status.complete {
            if self.status.allow_unsandboxed {
                tracing::warn!(
                    "allow_unsandboxed = true: goals whose agent writes code run anyway"
                );
            } else {
                tracing::warn!("goals whose agent writes code (llm, command, seeds sent by a user) are refused until this is fixed, or allow_unsandboxed = true");
            }
        }
    }

    /// Refuses a goal that runs code written by an agent or a user while the sandbox is
    /// incomplete (unless allowed). Seeds of installed tasks with the search agent run.
    pub fn admit(&self, agent_kind: &str, sent_seeds: bool) -> Result<(), String> {
        if self.status.complete || self.status.allow_unsandboxed {
            return Ok(());
        }
        let who = match (agent_kind, sent_seeds) {
            ("llm", _) => "an llm agent",
            ("command", _) => "a command agent",
            (_, true) => "seeds sent with the goal",
            _ => return Ok(()),
        };
        Err(format!(
            "refused: this goal runs code written by {who}, and the evaluation sandbox is \
             incomplete on this machine: {}. An administrator can fix that (docs/INSTALL.md, \
             \"Sandbox\") or set `allow_unsandboxed = true` in kerneld.toml; goals with the \
             search agent over an installed task's own seeds still run",
            self.status.problems.join("; ")
        ))
    }

    /// Prepares the slot's directories and says how to start its worker.
    pub fn worker(
        &self,
        cfg: &Config,
        slot: usize,
        dev: &DeviceInfo,
    ) -> Result<WorkerSandbox, String> {
        let root = cfg.scratch_dir();
        let scratch = root.join(format!("slot{slot}"));
        let inbox = root.join(format!("inbox{slot}"));
        let run_as = match &self.level {
            Level::Sandboxed { run_as, .. } => *run_as,
            Level::Off => None,
        };
        ensure_root(&root)?;
        fresh_dir(&scratch, run_as, 0o700)?;
        fresh_dir(&inbox, None, 0o755)?;
        for d in SCRATCH_SUBDIRS {
            fresh_dir(&scratch.join(d), run_as, 0o700)?;
        }
        let mut env = worker_env(cfg, &scratch, dev);
        // Issue #12: the judge's compile caches, kept across judges (PROCESS_MODEL.md).
        let judge_cache = judge_cache_dir(cfg, run_as)?;
        env.push((
            "KERNELD_JUDGE_CACHE_DIR".into(),
            judge_cache.display().to_string(),
        ));
        let (wrapper, readable) = match (&self.level, &self.bin) {
            (Level::Sandboxed { run_as, widen }, Some(bin)) => {
                let minor = if dev.is_gpu {
                    Some(dev.minor.ok_or_else(|| {
                        format!(
                            "NVML gave no minor number for {}: its device node is unknown",
                            dev.uuid
                        )
                    })?)
                } else {
                    None
                };
                let mut policy =
                    Policy::build(&self.inputs(cfg, bin, &scratch, &inbox, minor, *run_as))?;
                widen.apply(&mut policy.judge);
                widen.apply(&mut policy.runner);
                let (uid, gid) =
                    run_as.unwrap_or((self.status.runner_uid, nix::unistd::getgid().as_raw()));
                env.push(("KERNELD_RUNNER_LAUNCHER".into(), policy.launcher_json(bin)));
                env.push(("KERNELD_RUNNER_UID".into(), uid.to_string()));
                env.push(("KERNELD_RUNNER_GID".into(), gid.to_string()));
                let mut judge = policy.judge.clone();
                judge.env = env.clone();
                // The judge's only writable place besides its slot (runners never get it).
                judge.rw.push(judge_cache);
                (
                    Some((bin.clone(), judge.to_args())),
                    policy.judge.ro.clone(),
                )
            }
            _ => (None, Vec::new()),
        };
        Ok(WorkerSandbox {
            wrapper,
            env,
            inbox,
            scratch,
            readable,
        })
    }
}
