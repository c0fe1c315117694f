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
    /// How long a goal the circuit breaker paused waits before it is tried again (doubled
    /// at each trip in a row, up to `MAX_BREAKER_BACKOFF`; engine/breaker.rs).
    pub breaker_backoff: Duration,
    /// `[[hooks]]`: commands run on chosen events (issue #29, daemon/src/hooks).
    pub hooks: Vec<crate::hooks::HookConfig>,
    /// `metrics_listen`: the Prometheus endpoint's address or unix socket (issue #29,
    /// daemon/src/metrics); None: no endpoint.
    pub metrics_listen: Option<crate::metrics::Listen>,
}

/// The longest wait between the circuit breaker's tries (unless `breaker_backoff` is longer).
pub const MAX_BREAKER_BACKOFF: Duration = Duration::from_secs(3600);

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
    breaker_backoff: Option<String>,
    hooks: Option<Vec<crate::hooks::RawHook>>,
    metrics_listen: Option<String>,
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
            breaker_backoff: Duration::from_secs(300),
            hooks: Vec::new(),
            metrics_listen: None,
        }
    }

    /// kerneld.toml's operations keys (issue #29): `[[hooks]]` and `metrics_listen`.
    fn merge_ops(
        &mut self,
        file: &Path,
        text: &str,
        hooks: Option<Vec<crate::hooks::RawHook>>,
        metrics_listen: Option<String>,
    ) -> Result<(), String> {
        if let Some(v) = hooks {
            self.hooks = crate::hooks::from_raw(&file.display().to_string(), text, v)?;
        }
        if let Some(v) = metrics_listen {
            let listen = crate::metrics::Listen::parse(&v)
                .map_err(|m| format!("{}: {m}", file.display()))?;
            self.metrics_listen = Some(listen);
        }
        Ok(())
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
        // Relative paths in the file are refused: the directory kerneld starts in (`/`
        // under systemd) is not the file's, so neither reading would be what was meant.
        relative_in_file(file, &raw)?;
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
        if let Some(v) = dur(&raw.breaker_backoff, "breaker_backoff")? {
            self.breaker_backoff = v.max(Duration::from_secs(1));
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
        self.merge_ops(file, &text, raw.hooks, raw.metrics_listen)?;
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

    /// Every path made absolute against `cwd` (the directory kerneld started in): the
    /// workers run in their scratch directories and the sandbox grants only absolute
    /// paths, so a relative one would name another file there (issue #30). Directories
    /// and files are resolved through their existing part (symbolic links followed); a
    /// program (`python`, `sandbox_binary`) keeps its own name, since a virtual
    /// environment's python is known by the link's path. Refused: a socket path too long
    /// for a Unix socket once absolute.
    pub fn absolutize(mut self, cwd: &Path) -> Result<Config, String> {
        if !cwd.is_absolute() {
            return Err(format!(
                "the working directory {} is not an absolute path; start kerneld from a \
                 directory that exists, or give every path absolute",
                cwd.display()
            ));
        }
        let dir = |p: &mut PathBuf| *p = resolve(cwd, p);
        dir(&mut self.state_dir);
        dir(&mut self.socket);
        dir(&mut self.kernels_dir);
        self.spool_dir.iter_mut().for_each(dir);
        self.config_file.iter_mut().for_each(dir);
        let sb = &mut self.sandbox;
        sb.scratch_dir.iter_mut().for_each(dir);
        sb.extra_ro.iter_mut().for_each(dir);
        sb.extra_exec.iter_mut().for_each(dir);
        program(cwd, &mut self.python);
        sb.binary.iter_mut().for_each(|p| program(cwd, p));
        let len = self.socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(format!(
                "the socket path {} is {len} bytes, longer than the {MAX_SOCKET_PATH} a Unix \
                 socket's path may have; give --socket (or `socket` in kerneld.toml) a shorter path",
                self.socket.display()
            ));
        }
        Ok(self)
    }
}

/// The longest path `bind` takes (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// `p` against `cwd`, resolved through the longest part of it that exists (symbolic links
/// followed there); the rest is appended with `.` dropped and `..` taken lexically.
fn resolve(cwd: &Path, p: &Path) -> PathBuf {
    use std::path::Component;
    let joined = cwd.join(p);
    let mut existing = joined.as_path();
    let mut rest = Vec::new();
    let base = loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            break real;
        }
        match existing.parent() {
            Some(parent) => {
                rest.push(existing.components().next_back());
                existing = parent;
            }
            None => break existing.to_path_buf(),
        }
    };
    let mut out = base;
    for c in rest.into_iter().rev().flatten() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// A program's path: a bare name stays (looked up on PATH); anything with a slash is
/// taken against `cwd`, without following links.
fn program(cwd: &Path, p: &mut PathBuf) {
    if p.components().count() > 1 && p.is_relative() {
        *p = cwd.join(&*p).components().collect();
    }
}

/// The first path key of a config file that is relative, as an error naming it.
fn relative_in_file(file: &Path, raw: &RawConfig) -> Result<(), String> {
    let single = [
        ("state_dir", raw.state_dir.as_ref()),
        ("socket", raw.socket.as_ref()),
        ("kernels_dir", raw.kernels_dir.as_ref()),
        ("spool_dir", raw.spool_dir.as_ref()),
        ("scratch_dir", raw.scratch_dir.as_ref()),
    ];
    let lists = [
        ("sandbox_extra_ro", raw.sandbox_extra_ro.as_deref()),
        ("sandbox_extra_exec", raw.sandbox_extra_exec.as_deref()),
    ];
    let programs = [
        ("python", raw.python.as_ref()),
        ("sandbox_binary", raw.sandbox_binary.as_ref()),
    ];
    let found = single
        .into_iter()
        .filter_map(|(k, p)| Some((k, p?)))
        .chain(
            lists
                .into_iter()
                .flat_map(|(k, l)| l.unwrap_or_default().iter().map(move |p| (k, p))),
        )
        // A bare program name is looked up on PATH, not taken as a path.
        .chain(
            programs
                .into_iter()
                .filter_map(|(k, p)| Some((k, p?)))
                .filter(|(_, p)| p.components().count() > 1),
        )
        .find(|(_, p)| p.is_relative());
    match found {
        None => Ok(()),
        Some((key, p)) => Err(format!(
            "{}: `{key}` = \"{}\" is a relative path; write it absolute (relative to what? \
             kerneld may start anywhere, `/` under systemd)",
            file.display(),
            p.display()
        )),
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

#[cfg(test)]
mod path_tests {
    use super::*;

    #[test]
    fn relative_paths_become_absolute_against_the_working_directory() {
        let cwd = std::env::temp_dir().join(format!("kd-abs-{}", std::process::id()));
        std::fs::create_dir_all(cwd.join("kernels")).unwrap();
        let real = std::fs::canonicalize(&cwd).unwrap();
        let mut cfg = Config::new("st".into(), "k.sock".into());
        cfg.kernels_dir = "./kernels/../kernels".into();
        cfg.python = "venv/bin/python".into();
        cfg.sandbox.extra_ro = vec!["lib/x".into()];
        let cfg = cfg.absolutize(&cwd).unwrap();
        assert_eq!(cfg.state_dir, real.join("st"));
        assert_eq!(cfg.socket, real.join("k.sock"));
        assert_eq!(cfg.kernels_dir, real.join("kernels"));
        assert_eq!(cfg.python, cwd.join("venv/bin/python"));
        assert_eq!(cfg.sandbox.extra_ro, vec![real.join("lib/x")]);
        assert_eq!(cfg.scratch_dir(), real.join("st.scratch"));
        // A bare program name is looked up on PATH.
        let mut bare = Config::new("/s".into(), "/k".into());
        bare.python = "python3".into();
        assert_eq!(
            bare.absolutize(&cwd).unwrap().python,
            PathBuf::from("python3")
        );
        // Too long a socket once absolute: refused, naming it.
        let long = Config::new("/s".into(), "x".repeat(100).into());
        let err = long.absolutize(&cwd).unwrap_err();
        assert!(
            err.contains("longer than the 107") && err.contains("--socket"),
            "{err}"
        );
        std::fs::remove_dir_all(&cwd).unwrap();
    }

    #[test]
    fn a_relative_path_in_the_config_file_is_refused_naming_the_key() {
        let file = std::env::temp_dir().join(format!("kd-rel-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            "state_dir = \"/var/lib/k\"\nkernels_dir = \"kernels\"\n",
        )
        .unwrap();
        let err = Config::new("/s".into(), "/k".into())
            .merge_file(&file)
            .unwrap_err();
        assert!(
            err.contains("`kernels_dir` = \"kernels\" is a relative path"),
            "{err}"
        );
        std::fs::write(&file, "python = \"python3\"\n").unwrap();
        assert!(Config::new("/s".into(), "/k".into())
            .merge_file(&file)
            .is_ok());
        std::fs::remove_file(&file).unwrap();
    }
}
