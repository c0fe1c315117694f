//! The `kerneld` binary: command line, logging, signals and systemd notification
//! around `kerneld::run_with`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use tokio_util::sync::CancellationToken;

use kerneld::{paths, Config, RunOptions};

#[derive(Debug, Clone, Parser)]
#[command(
    name = "kerneld",
    version,
    about = "Runs GPU-kernel optimization goals; control it with kernelctl.",
    after_long_help = "Operations (kerneld.toml; docs/OPERATIONS.md): `metrics_listen = \"127.0.0.1:9464\"` \
        (or a unix socket path) serves Prometheus text at /metrics, read-only; `[[hooks]]` run a \
        command as kerneld's user, with a cleared environment and the event as JSON on stdin, on \
        goal_finished, goal_failed, goal_cancelled, new_best, gpu_unhealthy, daemon_restarted and \
        more. Every health check reads each GPU's Xid events, ECC counters and remapped rows \
        through NVML: a GPU with a new fault is drained and its evaluation in flight runs again on \
        a healthy one (`kerneld gpu-health` reads them on demand)."
)]
struct Cli {
    /// Configuration file (default: /etc/kerneld/kerneld.toml when it exists).
    #[arg(long, env = "KERNELD_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Directory for the event log and candidate files.
    #[arg(long, env = "KERNELD_STATE_DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// The control socket.
    #[arg(long, env = "KERNELD_SOCKET")]
    socket: Option<PathBuf>,
    /// The Python that runs the harness worker (needs torch and triton).
    #[arg(long, env = "KERNELD_PYTHON")]
    python: Option<PathBuf>,
    /// The kernels directory (tasks and harness).
    #[arg(long, env = "KERNELD_KERNELS")]
    kernels: Option<PathBuf>,
    /// Wall-clock limit of one evaluation, e.g. "15m".
    #[arg(long)]
    eval_timeout: Option<String>,
    /// Watch this directory for goal files to enqueue.
    #[arg(long)]
    spool: Option<PathBuf>,
    /// Use the CPU slot (Triton's interpreter) even when GPUs are present.
    #[arg(long)]
    cpu: bool,
    /// Run goals whose agent writes code even when the evaluation sandbox is incomplete
    /// (kerneld.toml's `allow_unsandboxed`).
    #[arg(long)]
    allow_unsandboxed: bool,
    /// Log filter, e.g. "info" or "kerneld=debug".
    #[arg(long, env = "KERNELD_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Option<DaemonCommand>,
}

/// Without a subcommand kerneld runs the daemon.
#[derive(Debug, Clone, Subcommand)]
enum DaemonCommand {
    /// Write kerneld's man page (kerneld.1) to stdout, or into DIR with --out
    Man {
        /// The directory to write kerneld.1 in (e.g. /usr/share/man/man1)
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Read the whole event log and its projections and report what is found; the daemon
    /// must be stopped. Exit 0: no problems; 1: problems found (listed); 2: no log, or
    /// it cannot be opened (in use, unreadable).
    Check,
    /// Print this machine's GPUs' fault readings through NVML: critical Xid events (seen
    /// while it waits), ECC error counters, remapped rows, retired and pending pages, the
    /// readings kerneld's health check judges (a GPU with a new fault is drained). Exit 0:
    /// every GPU clean; 1: one is not (what, is said); 2: no NVML or no GPU.
    GpuHealth {
        /// How long to listen for Xid events before reading, e.g. "10s"
        #[arg(long, default_value = "2s", value_name = "DURATION")]
        wait: String,
        /// Print the readings as JSON
        #[arg(long)]
        json: bool,
    },
}

/// The configuration file and --state-dir applied, nothing else (for `kerneld check`).
fn state_dir(cli: &Cli) -> Result<PathBuf, String> {
    let mut cfg = Config::new(paths::default_state_dir(), paths::default_socket());
    if let Some(file) = config_file(cli) {
        cfg = cfg.merge_file(&file)?;
    }
    if let Some(v) = &cli.state_dir {
        cfg.state_dir = v.clone();
    }
    Ok(cfg.absolutize(&working_dir()?)?.state_dir)
}

/// The directory relative paths are taken from, or why there is none.
fn working_dir() -> Result<PathBuf, String> {
    std::env::current_dir().map_err(|e| {
        format!(
            "cannot tell the working directory ({e}) to make relative paths absolute; start \
             kerneld from a directory that exists, or give every path absolute"
        )
    })
}

fn config_file(cli: &Cli) -> Option<PathBuf> {
    cli.config.clone().or_else(|| {
        let system = PathBuf::from("/etc/kerneld/kerneld.toml");
        system.is_file().then_some(system)
    })
}

fn build_config(cli: &Cli) -> Result<Config, String> {
    let mut cfg = Config::new(paths::default_state_dir(), paths::default_socket());
    if let Some(file) = &config_file(cli) {
        cfg = cfg.merge_file(file)?;
    }
    if let Some(v) = &cli.state_dir {
        cfg.state_dir = v.clone();
    }
    if let Some(v) = &cli.socket {
        cfg.socket = v.clone();
    }
    if let Some(v) = &cli.python {
        cfg.python = v.clone();
    }
    if let Some(v) = &cli.kernels {
        cfg.kernels_dir = v.clone();
    }
    if let Some(v) = &cli.eval_timeout {
        let secs =
            kerneld::goal::parse_duration(v).map_err(|m| format!("--eval-timeout {v}: {m}"))?;
        cfg.eval_timeout = Duration::from_secs(secs);
    }
    if let Some(v) = &cli.spool {
        cfg.spool_dir = Some(v.clone());
    }
    if cli.cpu {
        cfg.force_cpu = true;
    }
    if cli.allow_unsandboxed {
        cfg.sandbox.allow_unsandboxed = true;
    }
    // Made absolute once, here: the daemon, its workers and the sandbox see these paths.
    let cfg = cfg.absolutize(&working_dir()?)?;
    if !cfg.worker_script().is_file() {
        return Err(format!(
            "no harness worker at {}; point --kernels (or KERNELD_KERNELS) at the kernels directory",
            cfg.worker_script().display()
        ));
    }
    Ok(cfg)
}

/// systemd's watchdog and STATUS= line, fed by the scheduler's tick: a daemon whose
/// scheduler is stuck stops pinging and is restarted (WatchdogSec in the unit).
fn systemd_tick() -> kerneld::TickFn {
    let mut usec = 0u64;
    let watchdog = sd_notify::watchdog_enabled(false, &mut usec) && usec > 0;
    let last_status = std::sync::Mutex::new(String::new());
    Box::new(move |status: &str| {
        let mut states = Vec::new();
        if watchdog {
            states.push(sd_notify::NotifyState::Watchdog);
        }
        let mut last = last_status.lock().unwrap();
        if *last != status {
            *last = status.to_string();
            states.push(sd_notify::NotifyState::Status(status));
        }
        if !states.is_empty() {
            let _ = sd_notify::notify(false, &states);
        }
    })
}

/// Colour in the log only for a person at a terminal: the journal or a log file would
/// keep the escape codes as garbage. NO_COLOR counts when non-empty (no-color.org).
fn log_colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn main() -> ExitCode {
    // First of all: processes of the same uid (a user daemon's runners) must not read
    // /proc/<kerneld>/environ or mem, where API keys live. Not dumpable also means no core.
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    // A panic inside redb while the log is opened is reported as a damaged log, once.
    kerneld::tools::install_panic_hook();
    let cli = Cli::parse();
    // Hook: `kerneld man` writes the page and exits before anything starts (manpage.rs).
    if let Some(DaemonCommand::Man { out }) = &cli.command {
        return man(out.as_deref());
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(log_colours(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .with_target(false)
        .init();

    if let Some(DaemonCommand::Check) = cli.command {
        return check(&cli);
    }
    if let Some(DaemonCommand::GpuHealth { wait, json }) = &cli.command {
        return gpu_health(&cli, wait, *json);
    }
    let cfg = match build_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kerneld: {e}");
            return ExitCode::from(2);
        }
    };

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kerneld: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let shutdown = CancellationToken::new();

    // Signals on a plain thread: SIGTERM/SIGINT stop cleanly (a second one exits at
    // once: registering a handler removed the default action); SIGHUP re-reads the
    // configuration file and reports what it found.
    let sig_shutdown = shutdown.clone();
    let hup = std::sync::Arc::new(tokio::sync::Notify::new());
    let sig_hup = hup.clone();
    match signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]) {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                for sig in signals.forever() {
                    match sig {
                        SIGHUP => sig_hup.notify_one(),
                        _ if sig_shutdown.is_cancelled() => {
                            eprintln!("kerneld: second stop signal, exiting now");
                            std::process::exit(130);
                        }
                        _ => {
                            let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
                            sig_shutdown.cancel();
                        }
                    }
                }
            });
        }
        Err(e) => {
            eprintln!("kerneld: cannot install signal handlers: {e}");
            return ExitCode::from(1);
        }
    }

    let rebuild_cli = cli.clone();
    let opts = RunOptions {
        reconfigure: Some((Box::new(move || build_config(&rebuild_cli)), hup)),
        devices: None,
        on_tick: Some(systemd_tick()),
        on_ready: Some(Box::new(|| {
            let _ = sd_notify::notify(
                false,
                &[
                    sd_notify::NotifyState::Ready,
                    sd_notify::NotifyState::Status("accepting goals"),
                ],
            );
        })),
    };
    let result = runtime.block_on(kerneld::run_with(cfg, shutdown, opts));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kerneld: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `kerneld check`: the report on stdout, the exit code as documented on `DaemonCommand::Check`.
fn check(cli: &Cli) -> ExitCode {
    let dir = match state_dir(cli) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kerneld: {e}");
            return ExitCode::from(2);
        }
    };
    let path = Config::new(dir, PathBuf::new()).db_path();
    let opened = kerneld::tools::quietly(|| kerneld::tools::Store::open_for_check(&path));
    let opened = opened.unwrap_or_else(|panic| {
        Err(kerneld::tools::StoreError::Damaged {
            path: path.clone(),
            what: format!("stopped redb on an internal assertion: {panic}"),
            todo: String::new(),
        })
    });
    let mut store = match opened {
        Ok(s) => s,
        // A file that is there but damaged is a finding, not a failure to look.
        // (Its advice without "run `kerneld check`": that is what said it.)
        Err(kerneld::tools::StoreError::Damaged { path, what, .. }) => {
            println!(
                "event log {p} {what}: nothing in it can be read; restore it from a backup, or \
                 move it aside (mv {p} {p}.damaged) to start kerneld with an empty log",
                p = path.display()
            );
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("kerneld check: {e}");
            return ExitCode::from(2);
        }
    };
    let checked = kerneld::tools::quietly(|| store.check());
    match checked.unwrap_or_else(|panic| {
        Err(kerneld::tools::StoreError::Corrupt(format!(
            "redb stopped on an internal assertion: {panic}"
        )))
    }) {
        Ok(report) => {
            print!("{}", report.render(&path));
            ExitCode::from(if report.is_sound() { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("kerneld check: {e}");
            ExitCode::from(2)
        }
    }
}

/// `kerneld gpu-health`: the GPUs kerneld would use (kerneld.toml's `gpus`), read through
/// the same NVML layer as the daemon's health check.
fn gpu_health(cli: &Cli, wait: &str, json: bool) -> ExitCode {
    let allow = match config_file(cli)
        .map(|f| Config::new(PathBuf::new(), PathBuf::new()).merge_file(&f))
    {
        Some(Err(e)) => {
            eprintln!("kerneld: {e}");
            return ExitCode::from(2);
        }
        Some(Ok(cfg)) => cfg.gpu_allow,
        None => Vec::new(),
    };
    let wait = match kerneld::goal::parse_duration(wait) {
        Ok(s) => Duration::from_secs(s),
        Err(m) => {
            eprintln!("kerneld gpu-health: --wait {wait}: {m}");
            return ExitCode::from(2);
        }
    };
    let layer = match kerneld::gpu::NvmlLayer::discover(&allow) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("kerneld gpu-health: {why}");
            return ExitCode::from(2);
        }
    };
    // Xid events are only seen while an event set waits: give them the time asked for.
    std::thread::sleep(wait);
    let (text, code) = kerneld::gpu::check::report(&layer, json);
    print!("{text}");
    ExitCode::from(code)
}

/// `kerneld man`: the page from this very definition (clap_mangen), to stdout or DIR/kerneld.1.
fn man(out: Option<&std::path::Path>) -> ExitCode {
    let page = clap_mangen::Man::new(Cli::command().disable_help_subcommand(true))
        .source(format!("kerneld {}", env!("CARGO_PKG_VERSION")))
        .manual("kerneld manual");
    let written = match out {
        None => page.render(&mut std::io::stdout()),
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| page.generate_to(dir))
            .map(|path| eprintln!("wrote {}", path.display())),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let place = out.map_or("stdout".into(), |d| d.display().to_string());
            eprintln!("kerneld: cannot write the man page to {place}: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_log_is_coloured_only_on_a_terminal_without_no_color() {
        assert!(log_colours(true, None));
        assert!(log_colours(true, Some(OsStr::new(""))));
        assert!(!log_colours(true, Some(OsStr::new("1"))));
        assert!(!log_colours(false, None));
    }
}
