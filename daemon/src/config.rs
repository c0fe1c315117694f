//! The daemon's configuration: `kerneld.toml` (see config/kerneld.toml), then the
//! command line on top. Unknown keys are rejected like in goal files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::goal::parse_duration;

/// Candidates kept prepared per slot (engine/ahead.rs). A new configuration's Triton
/// compile takes seconds of one core against about one second of GPU work per evaluation
/// (issue #12's H200 figures), so a few compile side by side; each is a runner process
/// with its own CUDA context.
const DEFAULT_COMPILE_AHEAD_DEPTH: usize = 6;
/// Active goals, all users together: every plain `status` lists each of them (a summary
/// is 300-1,000 bytes), so this keeps that reply far below a line however many are enqueued.
const DEFAULT_MAX_ACTIVE_GOALS: usize = 2048;
/// Active goals per user: no one user's queue fills what everyone shares.
const DEFAULT_MAX_ACTIVE_GOALS_PER_USER: usize = 256;
/// Each prepared runner holds a CUDA context (about 0.5 GB of GPU memory) and a process.
const MAX_COMPILE_AHEAD_DEPTH: usize = 16;

#[derive(Debug, Clone)]
pub struct Config {
    /// Holds `kerneld.redb` and `sources/` (candidate files the workers load).
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// The Python that runs the harness worker (has torch and triton).
    pub python: PathBuf,
    /// The directory of tasks and of `harness/worker.py`.
    pub kernels_dir: PathBuf,
    /// Wall-clock limit of one evaluation; past it the worker's process group is killed.
    pub eval_timeout: Duration,
    /// How long a fresh worker may take to print its ready line.
    pub worker_start_timeout: Duration,
    /// GPU UUIDs (or prefixes) to use; empty: every device of compute capability 9.x.
    pub gpu_allow: Vec<String>,
    /// Run in CPU mode even when GPUs are present.
    pub force_cpu: bool,
    /// Worker resource limits.
    pub worker_max_files: u64,
    /// Address-space limit in CPU mode (bytes; 0 = none). CUDA needs a huge address space, so never on GPUs.
    pub worker_max_address_space_cpu: u64,
    /// A spool directory watched for goal files (each one dropped there is enqueued); None = off.
    pub spool_dir: Option<PathBuf>,
    /// Members of this group (besides root and the owner) may change any goal.
    pub admin_group: Option<String>,
    /// API keys in kerneld's environment that any user's `llm` goal may use, each pinned to
    /// the URL prefix it may be sent to (env var -> prefix). Trusted users may use any.
    pub llm_keys: std::collections::BTreeMap<String, String>,
    /// An evaluation that started this many times without a result is quarantined.
    pub max_attempts: u32,
    /// Compile-ahead (issue #12, engine/ahead.rs): the next candidate's runner starts and
    /// imports it while the current one is timed, for agents that can propose ahead.
    pub compile_ahead: bool,
    /// How many candidates each slot keeps prepared (started, imported, compiled) ahead of
    /// its evaluations; each is a runner process with a CUDA context, compiling on a core.
    pub compile_ahead_depth: usize,
    /// Multiplies every back-off after a transient agent-endpoint failure (Retry-After
    /// included); 1 in production, tiny in tests that compress hours of 429s.
    pub agent_backoff_scale: f64,
    /// Where the config was read from, for SIGHUP reloads.
    pub config_file: Option<PathBuf>,
    /// `[slurm]`: evaluation slots on a Slurm cluster (None: local devices only).
    pub slurm: Option<crate::slurm::SlurmConfig>,
    /// The evaluation sandbox (daemon/src/sandbox, docs/INSTALL.md "Sandbox").
    pub sandbox: SandboxConfig,
    /// The environment a `command` agent gets from kerneld's: only these variables
    /// (never API keys or the daemon's settings), plus the KERNELD_* it is given.
    pub command_env: Vec<String>,
    /// Active goals (queued, running, paused) kerneld keeps at once, all users together;
    /// the last eighth only root and kerneld's own user may take (engine/caps.rs).
    pub max_active_goals: usize,
    /// Active goals one uid may have at once, root's included.
    pub max_active_goals_per_user: usize,
}

/// Sandbox settings (flat keys in kerneld.toml).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxConfig {
    /// The account runners run as when kerneld may switch users (root, or CAP_SETUID).
    pub runner_user: String,
    /// Run goals whose agent writes code even when the sandbox is incomplete.
    pub allow_unsandboxed: bool,
    /// The `kerneld-sandbox` binary; default: next to `kerneld`, else on PATH.
    pub binary: Option<PathBuf>,
    /// Parent of the per-slot scratch directories; default `<state_dir>.scratch`
    /// (outside the state directory, which runners must not reach).
    pub scratch_dir: Option<PathBuf>,
    /// More paths the judge and runners may read / execute (e.g. a Python package
    /// installed outside the environment's prefix).
    pub extra_ro: Vec<PathBuf>,
    pub extra_exec: Vec<PathBuf>,
    /// RLIMIT_NPROC of the judge and runners (threads count; shared by the runner user).
    pub max_procs: u64,
    /// Let evaluations connect AF_UNIX sockets (off: they may create them, as CUDA does,
    /// but connect, bind, listen, accept and send with an address are refused, so the
    /// daemon's socket and every other local service are out of reach).
    pub unix_sockets: bool,
}

impl Default for SandboxConfig {
    fn default() -> SandboxConfig {
        SandboxConfig {
            runner_user: "kerneld-runner".into(),
            allow_unsandboxed: false,
            binary: None,
            scratch_dir: None,
            extra_ro: Vec::new(),
            extra_exec: Vec::new(),
            max_procs: 4096,
            unix_sockets: false,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    state_dir: Option<PathBuf>,
    socket: Option<PathBuf>,
    python: Option<PathBuf>,
    kernels_dir: Option<PathBuf>,
    eval_timeout: Option<String>,
    worker_start_timeout: Option<String>,
    gpus: Option<Vec<String>>,
    force_cpu: Option<bool>,
    worker_max_files: Option<u64>,
    worker_max_address_space_cpu_gib: Option<u64>,
    spool_dir: Option<PathBuf>,
    admin_group: Option<String>,
    llm_keys: Option<std::collections::BTreeMap<String, String>>,
    max_attempts: Option<u32>,
    compile_ahead: Option<bool>,
    compile_ahead_depth: Option<usize>,
    agent_backoff_scale: Option<f64>,
    slurm: Option<crate::slurm::RawSlurmConfig>,
    runner_user: Option<String>,
    allow_unsandboxed: Option<bool>,
    sandbox_binary: Option<PathBuf>,
    scratch_dir: Option<PathBuf>,
    sandbox_extra_ro: Option<Vec<PathBuf>>,
    sandbox_extra_exec: Option<Vec<PathBuf>>,
    worker_max_procs: Option<u64>,
    sandbox_unix_sockets: Option<bool>,
    command_env: Option<Vec<String>>,
    max_active_goals: Option<usize>,
    max_active_goals_per_user: Option<usize>,
}

impl Config {
    /// Defaults for a daemon with the given state directory and socket.
    pub fn new(state_dir: PathBuf, socket: PathBuf) -> Config {
        Config {
            state_dir,
            socket,
            python: std::env::var_os("KERNELD_PYTHON")
                .map(PathBuf::from)
                .unwrap_or_else(|| "python3".into()),
            kernels_dir: default_kernels_dir(),
            eval_timeout: Duration::from_secs(900),
            worker_start_timeout: Duration::from_secs(180),
            gpu_allow: Vec::new(),
            force_cpu: false,
            worker_max_files: 4096,
            worker_max_address_space_cpu: 32 << 30,
            spool_dir: None,
            admin_group: None,
            llm_keys: Default::default(),
            max_attempts: 3,
            compile_ahead: true,
            compile_ahead_depth: DEFAULT_COMPILE_AHEAD_DEPTH,
            agent_backoff_scale: 1.0,
            config_file: None,
            slurm: None,
            sandbox: SandboxConfig::default(),
            command_env: ["PATH", "HOME", "LANG"].map(String::from).to_vec(),
            max_active_goals: DEFAULT_MAX_ACTIVE_GOALS,
            max_active_goals_per_user: DEFAULT_MAX_ACTIVE_GOALS_PER_USER,
        }
    }

    /// Applies a `kerneld.toml` on top of `self`.
    pub fn merge_file(mut self, file: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read config {}: {e}", file.display()))?;
        let raw: RawConfig = toml::from_str(&text).map_err(|e| {
            let line = e.span().map_or(0, |s| {
                text[..s.start.min(text.len())].matches('\n').count() + 1
            });
            format!("{}:{line}: {}", file.display(), e.message().trim())
        })?;
        let dur = |v: &Option<String>, key: &str| -> Result<Option<Duration>, String> {
            v.as_deref()
                .map(|s| {
                    parse_duration(s).map(Duration::from_secs).map_err(|m| {
                        format!("{}: `{key}`: bad duration `{s}`: {m}", file.display())
                    })
                })
                .transpose()
        };
        if let Some(v) = raw.state_dir {
            self.state_dir = v;
        }
        if let Some(v) = raw.socket {
            self.socket = v;
        }
        if let Some(v) = raw.python {
            self.python = v;
        }
        if let Some(v) = raw.kernels_dir {
            self.kernels_dir = v;
        }
        if let Some(v) = dur(&raw.eval_timeout, "eval_timeout")? {
            self.eval_timeout = v;
        }
        if let Some(v) = dur(&raw.worker_start_timeout, "worker_start_timeout")? {
            self.worker_start_timeout = v;
        }
        if let Some(v) = raw.gpus {
            self.gpu_allow = v;
        }
        if let Some(v) = raw.force_cpu {
            self.force_cpu = v;
        }
        if let Some(v) = raw.worker_max_files {
            self.worker_max_files = v;
        }
        if let Some(v) = raw.worker_max_address_space_cpu_gib {
            self.worker_max_address_space_cpu = v << 30;
        }
        if raw.spool_dir.is_some() {
            self.spool_dir = raw.spool_dir;
        }
        if raw.admin_group.is_some() {
            self.admin_group = raw.admin_group;
        }
        if let Some(v) = raw.llm_keys {
            self.llm_keys = v;
        }
        if let Some(v) = raw.max_attempts {
            self.max_attempts = v.max(1);
        }
        if let Some(v) = raw.compile_ahead {
            self.compile_ahead = v;
        }
        if let Some(v) = raw.compile_ahead_depth {
            if v > MAX_COMPILE_AHEAD_DEPTH {
                return Err(format!(
                    "{}: `compile_ahead_depth` must be 0 to {MAX_COMPILE_AHEAD_DEPTH} (candidates kept \
                     prepared per slot), not {v}",
                    file.display()
                ));
            }
            self.compile_ahead_depth = v;
        }
        if let Some(v) = raw.agent_backoff_scale {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "{}: `agent_backoff_scale` must be a positive number, not {v}",
                    file.display()
                ));
            }
            self.agent_backoff_scale = v;
        }
        if let Some(raw) = raw.slurm {
            let parse = |s: &str, key: &str| {
                parse_duration(s)
                    .map(Duration::from_secs)
                    .map_err(|m| format!("`{key}`: bad duration `{s}`: {m}"))
            };
            self.slurm = Some(
                crate::slurm::SlurmConfig::from_raw(raw, parse)
                    .map_err(|m| format!("{}: {m}", file.display()))?,
            );
        }
        let sb = &mut self.sandbox;
        if let Some(v) = raw.runner_user {
            sb.runner_user = v;
        }
        if let Some(v) = raw.allow_unsandboxed {
            sb.allow_unsandboxed = v;
        }
        if raw.sandbox_binary.is_some() {
            sb.binary = raw.sandbox_binary;
        }
        if raw.scratch_dir.is_some() {
            sb.scratch_dir = raw.scratch_dir;
        }
        if let Some(v) = raw.sandbox_extra_ro {
            sb.extra_ro = v;
        }
        if let Some(v) = raw.sandbox_extra_exec {
            sb.extra_exec = v;
        }
        if let Some(v) = raw.worker_max_procs {
            sb.max_procs = v;
        }
        if let Some(v) = raw.sandbox_unix_sockets {
            sb.unix_sockets = v;
        }
        if let Some(v) = raw.command_env {
            self.command_env = v;
        }
        if let Some(v) = raw.max_active_goals {
            self.max_active_goals = v;
        }
        if let Some(v) = raw.max_active_goals_per_user {
            self.max_active_goals_per_user = v;
        }
        if self.max_active_goals == 0 || self.max_active_goals_per_user == 0 {
            return Err(format!(
                "{}: `max_active_goals` and `max_active_goals_per_user` must be at least 1",
                file.display()
            ));
        }
        self.config_file = Some(file.to_path_buf());
        Ok(self)
    }

    pub fn db_path(&self) -> PathBuf {
        self.state_dir.join("kerneld.redb")
    }

    pub fn sources_dir(&self) -> PathBuf {
        self.state_dir.join("sources")
    }

    /// Parent of the slots' scratch directories (see `SandboxConfig::scratch_dir`).
    pub fn scratch_dir(&self) -> PathBuf {
        self.sandbox.scratch_dir.clone().unwrap_or_else(|| {
            let mut name = self
                .state_dir
                .file_name()
                .unwrap_or_default()
                .to_os_string();
            name.push(".scratch");
            self.state_dir.with_file_name(name)
        })
    }

    /// The judges' compile caches (KERNELD_JUDGE_CACHE_DIR, PROCESS_MODEL.md, issue #12):
    /// the baseline's torch.compile artifacts, kept across judges; runners never get it.
    pub fn judge_cache_dir(&self) -> PathBuf {
        self.scratch_dir().join("judge-cache")
    }

    pub fn worker_script(&self) -> PathBuf {
        self.kernels_dir.join("harness").join("worker.py")
    }
}

/// `KERNELD_KERNELS`, else `kernels/` next to the binary's checkout (target/*/kerneld →
/// repo/kernels), else the system location.
fn default_kernels_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KERNELD_KERNELS") {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1) {
            let k = dir.join("kernels");
            if k.join("harness").join("worker.py").is_file() {
                return k;
            }
        }
    }
    PathBuf::from("/usr/share/kerneld/kernels")
}
