//! The sandbox as this daemon runs it: found out once at start (`Runtime::detect`: the
//! probe, the runner user, a trial run of the harness's Python under the judge policy
//! and, in GPU mode, the CUDA ladder of `widen` over `trial::GpuTrial`), then used for
//! every worker (`Runtime::worker`), every enqueue (`Runtime::admit`) and shown by
//! `version` and `gpus` (`Runtime::status`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::policy::{GpuNodes, Policy, PolicyInputs};
use super::probe::Probe;
use super::scratch::{ensure_root, fresh_dir, judge_cache_dir, worker_env, SCRATCH_SUBDIRS};
use super::trial::{python_trial, GpuTrial, CUDA};
use super::widen::{Finding, Layer, Variant};
use crate::config::Config;
use crate::gpu::DeviceInfo;
use crate::wire::{SandboxStatus, SandboxTrial, SandboxWidening};

/// How workers are started.
#[derive(Debug, Clone, PartialEq)]
enum Level {
    /// Under `kerneld-sandbox`, switching to `run_as` when set, with the layers the GPU
    /// trial had to widen widened (`Variant::STRICT`: none).
    Sandboxed {
        run_as: Option<(u32, u32)>,
        variant: Variant,
    },
    /// Directly (no kerneld-sandbox that works here), with the cleared environment.
    Off,
}

#[derive(Debug)]
pub struct Runtime {
    status: SandboxStatus,
    level: Level,
    bin: Option<PathBuf>,
    /// The daemon has GPUs (the GPU trial ran; /proc is written for thread names).
    gpu_mode: bool,
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

/// The device nodes a worker on `dev` gets.
fn gpu_nodes(dev: &DeviceInfo) -> Result<GpuNodes, String> {
    if !dev.is_gpu {
        return Ok(GpuNodes::None);
    }
    if let Some(minor) = dev.minor {
        return Ok(GpuNodes::Local(PathBuf::from(format!(
            "/dev/nvidia{minor}"
        ))));
    }
    if crate::slurm::slot_index(&dev.uuid).is_some() {
        return Ok(GpuNodes::Slurm);
    }
    Err(format!(
        "NVML gave no minor number for {}: its device node is unknown",
        dev.uuid
    ))
}

/// A finding's trials and widenings as the status shows them.
fn report(f: &Finding) -> (Vec<SandboxWidening>, Vec<SandboxTrial>) {
    let widened = f
        .reasons
        .iter()
        .map(|(layer, reason)| SandboxWidening {
            layer: layer.name().into(),
            level: f.variant.map_or(String::new(), |v| {
                layer.levels()[v.level(*layer) as usize].into()
            }),
            reason: reason.clone(),
        })
        .collect();
    let trials = f
        .trials
        .iter()
        .map(|t| SandboxTrial {
            variant: t.variant.describe(),
            ok: t.result.is_ok(),
            error: t.result.clone().err(),
        })
        .collect();
    (widened, trials)
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
        let mut run_as = None;
        let mut runner_user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(me.0))
            .ok()
            .flatten()
            .map_or_else(|| me.0.to_string(), |u| u.name);
        let mut runner_uid = me.0;
        if probe.as_ref().is_some_and(|p| p.can_setuid) {
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
                widened: Vec::new(),
                trials: Vec::new(),
            },
            level: Level::Off,
            bin: bin.clone(),
            gpu_mode: gpu.is_some(),
        };
        if let (Some(bin), Some(_)) = (&bin, &probe) {
            // A trial run under the judge policy: the Python, its libraries and the
            // kernels directory must be reachable as the runner user.
            let [as_runner, as_daemon] =
                [run_as, None].map(|r| rt.inputs(cfg, bin, Path::new("/"), GpuNodes::None, r));
            match python_trial(cfg, bin, &as_runner) {
                Ok(()) => rt.sandboxed(run_as),
                Err(e) if run_as.is_some() => {
                    problems.push(format!(
                        "the harness's Python cannot run as {runner_user}: {e}; runners run as \
                         the daemon's user instead"
                    ));
                    rt.daemon_uid_runs(me.0);
                    match python_trial(cfg, bin, &as_daemon) {
                        Ok(()) => rt.sandboxed(None),
                        Err(e) => problems.push(format!("the sandbox cannot run the harness: {e}")),
                    }
                }
                Err(e) => problems.push(format!("the sandbox cannot run the harness: {e}")),
            }
        }
        // GPU mode: a trial that imports json proves nothing about CUDA: start CUDA under
        // the judge and runner policies, widening only the layers it cannot live with.
        if let (Level::Sandboxed { run_as, .. }, Some(gpu), Some(bin)) =
            (rt.level.clone(), gpu, &bin)
        {
            match gpu_nodes(gpu) {
                Ok(nodes) => {
                    let finding = GpuTrial {
                        cfg,
                        bin,
                        inputs: rt.inputs(cfg, bin, Path::new("/"), nodes, run_as),
                        gpu,
                        code: CUDA,
                    }
                    .ladder();
                    problems.extend(finding.problem());
                    (rt.status.widened, rt.status.trials) = report(&finding);
                    match finding.variant {
                        Some(v) if v.keeps_user() => {
                            rt.level = Level::Sandboxed { run_as, variant: v }
                        }
                        Some(v) => {
                            rt.daemon_uid_runs(me.0);
                            rt.level = Level::Sandboxed {
                                run_as: None,
                                variant: v,
                            };
                        }
                        None => rt.level = Level::Off,
                    }
                }
                Err(e) => problems.push(e),
            }
        }
        if rt.level == Level::Off && problems.is_empty() {
            problems.push("the sandbox is off".into());
        }
        rt.status.restricts = rt.restricts(cfg);
        rt.status.complete = problems.is_empty();
        rt.status.problems = problems;
        rt
    }

    fn sandboxed(&mut self, run_as: Option<(u32, u32)>) {
        self.level = Level::Sandboxed {
            run_as,
            variant: Variant::STRICT,
        };
    }

    /// Runners keep the daemon's uid (no runner user that works).
    fn daemon_uid_runs(&mut self, uid: u32) {
        self.status.runner_uid = uid;
        self.status.runner_user = uid.to_string();
    }

    /// The policy's inputs for a slot whose scratch and inbox are `scratch` (the trials
    /// set their own).
    fn inputs(
        &self,
        cfg: &Config,
        bin: &Path,
        scratch: &Path,
        gpu: GpuNodes,
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
            inbox: scratch.to_path_buf(),
            gpu,
            run_as,
            max_files: cfg.worker_max_files,
            max_procs: cfg.sandbox.max_procs,
            max_address_space: cfg.worker_max_address_space_cpu,
            extra_ro: cfg.sandbox.extra_ro.clone(),
            extra_exec: cfg.sandbox.extra_exec.clone(),
            forbidden,
            no_connect: !cfg.sandbox.unix_sockets,
            // Incomplete and allowed anyway: run with what the kernel has.
            best_effort: cfg.sandbox.allow_unsandboxed
                && self
                    .status
                    .probe
                    .as_ref()
                    .is_some_and(|p| !super::probe::missing(p).is_empty()),
        }
    }

    /// One line per layer: what is in force, and what the GPU trial widened.
    fn restricts(&self, cfg: &Config) -> Vec<String> {
        let Level::Sandboxed { run_as, variant } = &self.level else {
            return vec![
                "environment: cleared to the harness's variables (nothing else is restricted)"
                    .into(),
            ];
        };
        let abi = self.status.probe.as_ref().map_or(0, |p| p.landlock_abi);
        let widened = |layer: Layer, strict: String| match variant.level(layer) {
            0 => strict,
            l => format!("WIDENED for CUDA: {}", layer.levels()[l as usize]),
        };
        let proc = if !self.gpu_mode {
            "nothing under /proc is writable".to_string()
        } else {
            widened(
                Layer::ProcWrite,
                "a runner may write only its own /proc/<pid>/task (thread names, which CUDA \
                 sets); its judge may write /proc as far as its uid may (its runners' task \
                 directories, whose pids it cannot know in advance)"
                    .into(),
            )
        };
        let sockets = if cfg.sandbox.unix_sockets {
            "AF_UNIX sockets connect freely (sandbox_unix_sockets = true): every named socket \
             the runner user may open is reachable, the daemon's included"
                .to_string()
        } else {
            widened(
                Layer::UnixSockets,
                "AF_UNIX sockets may be created (CUDA creates two) but reach nothing: connect, \
                 bind, listen, accept, sendmsg, sendmmsg and sendto with an address are refused \
                 (seccomp); socketpair() reaches only the process itself"
                    .into(),
            )
        };
        let mut r = vec![
            "environment: cleared to the harness's variables (no API keys, NOTIFY_SOCKET or daemon settings)".into(),
            format!("filesystem (Landlock ABI {abi}): {}", widened(Layer::Filesystem, "read system libraries, the Python environment and the kernels directory; write only the slot's scratch directory; runners execute only Python and the compilers Triton runs, the judge also the system's programs (torch.compile runs some), inside its sandbox".into())),
            format!("/proc: {proc}"),
            format!("sockets: {sockets}"),
            format!("network: {}", widened(Layer::Network, "no IP or packet sockets (seccomp), no TCP bind/connect (Landlock)".into())),
            format!("processes: {}; {}", widened(Layer::ProcessRules, "no ptrace, process_vm_* or io_uring (seccomp)".into()), widened(Layer::Scoping, "signals and abstract unix sockets scoped to the sandbox (Landlock)".into())),
            format!("devices: {}", if variant.level(Layer::Filesystem) == 0 {
                "/dev/null, zero, full, random, urandom and only the leased GPU's nodes"
            } else {
                "every node under /dev (widened with the filesystem)"
            }),
        ];
        r.push(match run_as {
            Some((uid, _)) => format!(
                "user: runners run as {} (uid {uid}), no_new_privs, no capabilities",
                self.status.runner_user
            ),
            None => format!(
                "user: runners keep the daemon's uid {} (no_new_privs, no capabilities){}",
                self.status.runner_uid,
                if variant.keeps_user() {
                    ""
                } else {
                    " (WIDENED for CUDA)"
                }
            ),
        });
        r.push(format!(
            "limits: {}, no core dumps, {} GiB address space in CPU mode",
            widened(
                Layer::Limits,
                format!(
                    "{} open files, {} processes",
                    cfg.worker_max_files, cfg.sandbox.max_procs
                )
            ),
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
                widened: Vec::new(),
                trials: Vec::new(),
            },
            level: Level::Off,
            bin: None,
            gpu_mode: false,
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
        for t in &self.status.trials {
            match &t.error {
                None => tracing::info!("sandbox: GPU trial, {}: CUDA started", t.variant),
                Some(e) => tracing::info!("sandbox: GPU trial, {}: {e}", t.variant),
            }
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
            (Level::Sandboxed { run_as, variant }, Some(bin)) => {
                let mut inputs = self.inputs(cfg, bin, &scratch, gpu_nodes(dev)?, *run_as);
                inputs.inbox = inbox.clone();
                let mut policy = Policy::build(&inputs)?;
                variant.apply(&mut policy.judge, &mut policy.runner);
                let (uid, gid) =
                    run_as.unwrap_or((self.status.runner_uid, nix::unistd::getgid().as_raw()));
                env.push(("KERNELD_RUNNER_LAUNCHER".into(), policy.launcher_json(bin)));
                env.push(("KERNELD_RUNNER_UID".into(), uid.to_string()));
                env.push(("KERNELD_RUNNER_GID".into(), gid.to_string()));
                // Inductor's parallel compile (the judge's torch.compile baselines) runs a
                // multiprocessing pool, whose locks are POSIX semaphores in /dev/shm: not
                // writable in the sandbox (a directory every uid shares). Compile in-process.
                env.push(("TORCHINDUCTOR_COMPILE_THREADS".into(), "1".into()));
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
