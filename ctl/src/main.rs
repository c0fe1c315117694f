//! kernelctl: the command-line client of kerneld.
//!
//! Each command is one JSON-RPC call (or an `events` stream) over the daemon's Unix socket.
//! Plain output is for people; `--json` prints the daemon's result as-is for scripts.
//! Exit codes: 0 ok, 1 failed (the daemon said no, or the operation failed), 2 usage,
//! 3 daemon not reachable. A closed stdout (`| head`) ends the command quietly.
//! Errors go to stderr: a line for people, or one JSON object with --json.
//! With -q a successful command prints nothing (cron mails whatever a job prints).

mod client;
mod digest;
mod render;
mod report;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use kerneld_protocol::paths::{choose_socket, SocketEnv};
use kerneld_protocol::wire::{
    self, code, method, BestResult, ContextResult, EnqueueParams, EnqueueResult, Event,
    EventsParams, GoalDetail, GoalRef, GoalState, GoalSummary, GpusResult, RpcError, StatusParams,
    VersionResult,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use client::{decode, Client, ClientError};
use render::Paint;

#[derive(Parser)]
#[command(
    name = "kernelctl",
    version,
    about = "Control kerneld: enqueue, watch and steer GPU-kernel optimization goals.",
    after_help = "Exit status: 0 ok, 1 failed (the daemon refused, or the operation failed), 2 usage, 3 daemon not reachable."
)]
struct Cli {
    /// The daemon's socket [default: $XDG_RUNTIME_DIR/kerneld.sock, else /run/user/$UID/kerneld.sock for a user, else /run/kerneld/kerneld.sock; the first that exists]
    #[arg(long, global = true, env = "KERNELD_SOCKET", value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the daemon's result as JSON (JSON lines for event streams); errors as one JSON object on stderr
    #[arg(long, global = true)]
    json: bool,
    /// Print nothing on success, for cron (files named with -o are still written); errors still go to stderr
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Enqueue the goal in FILE; prints the goal's id
    Enqueue {
        /// The goal file (TOML)
        file: PathBuf,
        /// If a goal of the same name is queued, running or paused, print its id instead (for cron)
        #[arg(long)]
        unique: bool,
    },
    /// List goals (or one goal) with their progress
    Status {
        /// Only this goal (id or name)
        goal: Option<String>,
    },
    /// One goal in full: its spec, progress and recent evaluations
    Show {
        /// The goal's id or name
        goal: String,
    },
    /// Follow a goal live until it completes, fails or is cancelled (exit 0 only when completed)
    Watch {
        /// The goal's id or name
        goal: String,
    },
    /// The event log, of one goal or of all
    Events {
        /// Only this goal's events (id or name)
        goal: Option<String>,
        /// Keep printing new events as they happen
        #[arg(short, long)]
        follow: bool,
        /// Only events after this sequence number
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
        /// At most N events (the newest, unless --after is given)
        #[arg(short = 'n', long, value_name = "N")]
        limit: Option<u64>,
    },
    /// Pause a goal: its evaluation in flight is finished or aborted and the GPU freed
    Pause {
        /// The goal's id or name
        goal: String,
    },
    /// Resume a paused goal from the iteration it stopped at
    Resume {
        /// The goal's id or name
        goal: String,
    },
    /// Cancel a goal for good
    Cancel {
        /// The goal's id or name
        goal: String,
    },
    /// The best correct candidate's source, to stdout or to a file
    Best {
        /// The goal's id or name
        goal: String,
        /// Write the source to FILE (a summary goes to stderr)
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Exactly what the goal's agent gets on its next iteration (llm: the messages, --json
    /// as sent; command: CONTEXT.md; search: the compacted context)
    Context {
        /// The goal's id or name
        goal: String,
    },
    /// GPUs (evaluation slots): health, leases, work done
    Gpus,
    /// Progress over time: an SVG chart with -o, else a chart in the terminal
    Report {
        /// The goal's id or name
        goal: String,
        /// Write an SVG chart to FILE ("-" for stdout)
        #[arg(short, long, value_name = "FILE.svg")]
        output: Option<PathBuf>,
    },
    /// Shell completions for SHELL, to stdout
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
    /// What happened lately: goals finished and why, new bests, evaluations and failures
    /// by class, GPU-hours, endpoint retries, restarts and downtime
    Digest {
        /// How far back to look, e.g. 12h, 90m, 2d
        #[arg(long, default_value = digest::DEFAULT_SINCE)]
        since: String,
    },
    /// Versions of this client and of the daemon
    Version,
}

fn main() -> ExitCode {
    let parsed = Cli::command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => return usage_error(e),
    };
    let (socket, socket_origin) = match (cli.socket.clone(), matches.value_source("socket")) {
        (Some(path), Some(ValueSource::EnvVariable)) => (path, SocketOrigin::Env),
        (Some(path), _) => (path, SocketOrigin::Flag),
        (None, _) => {
            // The daemon's own rule (kerneld_protocol::paths), so both ends agree.
            let choice = choose_socket(&SocketEnv::current());
            (
                choice.chosen,
                SocketOrigin::Default {
                    tried: choice.tried,
                },
            )
        }
    };
    let stdout_is_terminal = io::stdout().is_terminal();
    let ctx = Ctx {
        socket,
        socket_origin,
        json: cli.json,
        quiet: cli.quiet,
        paint: Paint::detect(stdout_is_terminal),
        fit: render::Fit::for_stdout(stdout_is_terminal),
    };
    match run(cli.command, &ctx) {
        Ok(code) => ExitCode::from(code),
        Err(Failure::StdoutClosed) => ExitCode::SUCCESS,
        Err(failure) => {
            let report = failure.report(&ctx.socket, &ctx.socket_origin);
            let text = if ctx.json {
                report.json()
            } else {
                report.text()
            };
            let _ = writeln!(io::stderr(), "{text}");
            ExitCode::from(report.exit)
        }
    }
}

/// A command line clap refuses: its own message, or with --json the same as one JSON object.
/// Help and --version are not errors and print as clap does.
fn usage_error(e: clap::Error) -> ExitCode {
    let wants_json = std::env::args_os().skip(1).any(|a| a == "--json");
    if !wants_json || !e.use_stderr() {
        e.exit();
    }
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("invalid command line");
    let rest: Vec<&str> = lines.collect();
    let report = ErrorReport {
        code: None,
        message: first.strip_prefix("error: ").unwrap_or(first).to_string(),
        hint: (!rest.is_empty()).then(|| rest.join("; ")),
        exit: 2,
    };
    let _ = writeln!(io::stderr(), "{}", report.json());
    ExitCode::from(2)
}

fn run(command: Command, ctx: &Ctx) -> Result<u8, Failure> {
    match command {
        Command::Enqueue { file, unique } => enqueue(ctx, &file, unique),
        Command::Status { goal } => status(ctx, goal),
        Command::Show { goal } => show(ctx, goal),
        Command::Watch { goal } => watch(ctx, goal),
        Command::Events {
            goal,
            follow,
            after,
            limit,
        } => events(
            ctx,
            EventsParams {
                goal,
                after,
                limit,
                follow,
            },
        ),
        Command::Pause { goal } => transition(ctx, method::PAUSE, goal),
        Command::Resume { goal } => transition(ctx, method::RESUME, goal),
        Command::Cancel { goal } => transition(ctx, method::CANCEL, goal),
        Command::Best { goal, output } => best(ctx, goal, output.as_deref()),
        Command::Context { goal } => context(ctx, goal),
        Command::Gpus => gpus(ctx),
        Command::Report { goal, output } => report(ctx, goal, output.as_deref()),
        Command::Completions { shell } => completions(shell),
        Command::Digest { since } => digest_cmd(ctx, &since),
        Command::Version => version(ctx),
    }
}

// ---------------------------------------------------------------------------
// Context, output and failures
// ---------------------------------------------------------------------------

struct Ctx {
    socket: PathBuf,
    socket_origin: SocketOrigin,
    json: bool,
    quiet: bool,
    paint: Paint,
    /// Free text cut to fit a terminal, or whole for a pipe or a file.
    fit: render::Fit,
}

/// Where the socket's path came from; said in the error when nothing listens there.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SocketOrigin {
    Flag,
    Env,
    /// The default: every place looked at, in order.
    Default {
        tried: Vec<PathBuf>,
    },
}

impl Ctx {
    fn connect(&self) -> Result<Client, Failure> {
        Ok(Client::connect(&self.socket)?)
    }

    fn call_value(&self, method: &str, params: impl Serialize) -> Result<Value, Failure> {
        Ok(self.connect()?.call_value(method, params)?)
    }

    /// A note for the person at the terminal, on stderr; never with --quiet.
    fn note(&self, text: &str) {
        if !self.quiet {
            let _ = writeln!(io::stderr(), "{text}");
        }
    }

    /// A command's output on stdout; nothing with --quiet.
    fn print(&self, text: &str) -> Result<(), Failure> {
        if self.quiet {
            return Ok(());
        }
        write_stdout(text)
    }

    /// `print` with a newline at the end.
    fn print_line(&self, text: &str) -> Result<(), Failure> {
        if text.ends_with('\n') {
            self.print(text)
        } else {
            self.print(&format!("{text}\n"))
        }
    }

    fn print_json(&self, value: &Value) -> Result<(), Failure> {
        self.print_line(&serde_json::to_string_pretty(value).unwrap_or_default())
    }
}

/// Why a command did not succeed; each kind has its exit code.
#[derive(Debug)]
enum Failure {
    /// Whoever read our stdout has gone (`| head -1`): stop quietly, exit 0.
    StdoutClosed,
    Client(ClientError),
    /// Anything else that failed, with a message that names what (exit 1).
    Failed(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

impl Failure {
    fn exit_code(&self) -> u8 {
        match self {
            Failure::StdoutClosed => 0,
            Failure::Client(
                ClientError::Unreachable { .. }
                | ClientError::Unresponsive { .. }
                | ClientError::Closed { .. },
            ) => 3,
            Failure::Client(_) | Failure::Failed(_) => 1,
        }
    }

    /// What went wrong, a hint where one helps, and the exit code.
    fn report(&self, socket: &Path, origin: &SocketOrigin) -> ErrorReport {
        let (code, message, hint) = match self {
            Failure::StdoutClosed => (None, String::new(), None),
            Failure::Failed(m) => (None, m.clone(), None),
            Failure::Client(e @ ClientError::Unreachable { kind, .. }) => {
                let message = match origin {
                    SocketOrigin::Default { tried } if *kind == io::ErrorKind::NotFound => {
                        let tried: Vec<String> =
                            tried.iter().map(|p| p.display().to_string()).collect();
                        format!(
                            "cannot reach kerneld: no socket at the default locations (tried {})",
                            tried.join(", ")
                        )
                    }
                    SocketOrigin::Env => format!("{e} (KERNELD_SOCKET)"),
                    _ => e.to_string(),
                };
                (None, message, Some(start_hint(socket)))
            }
            Failure::Client(e @ ClientError::Unresponsive { .. }) => (
                None,
                e.to_string(),
                Some("`systemctl status kerneld` or the daemon's log says what it is doing".into()),
            ),
            Failure::Client(ClientError::Rpc(rpc)) => {
                (Some(rpc.code), rpc.message.clone(), rpc_hint(rpc))
            }
            Failure::Client(e) => (None, e.to_string(), None),
        };
        ErrorReport {
            code,
            message,
            hint,
            exit: self.exit_code(),
        }
    }
}

/// A failure as the user sees it on stderr.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ErrorReport {
    /// The daemon's JSON-RPC error code, when the daemon refused.
    code: Option<i64>,
    message: String,
    hint: Option<String>,
    exit: u8,
}

impl ErrorReport {
    /// `kernelctl: <what went wrong>`, and a line with a hint where one helps.
    fn text(&self) -> String {
        match &self.hint {
            Some(h) => format!("kernelctl: {}\nhint: {h}", self.message),
            None => format!("kernelctl: {}", self.message),
        }
    }

    /// `{"error":{"code":…,"message":…,"hint":…,"exit":N}}` in one line, for --json.
    fn json(&self) -> String {
        #[derive(Serialize)]
        struct Wrapped<'a> {
            error: &'a ErrorReport,
        }
        serde_json::to_string(&Wrapped { error: self }).unwrap_or_default()
    }
}

fn start_hint(socket: &Path) -> String {
    format!(
        "start the daemon with `systemctl start kerneld` (or `systemctl --user start kerneld`), \
         or run `kerneld --socket {}`; --socket or KERNELD_SOCKET pick another socket",
        socket.display()
    )
}

/// The daemon's own hint (`data.hint`) when it gives one, else what the error code suggests.
fn rpc_hint(e: &RpcError) -> Option<String> {
    if let Some(h) = e
        .data
        .as_ref()
        .and_then(|d| d.get("hint"))
        .and_then(Value::as_str)
    {
        return Some(h.to_string());
    }
    // A message that already tells the user which command to run needs no second hint.
    if e.message.contains("`kernelctl ") {
        return None;
    }
    let hint = match e.code {
        code::GOAL_NOT_FOUND => "`kernelctl status` lists the goals, by id and name",
        code::INVALID_GOAL => "fix the goal file where the message says, then enqueue it again",
        code::INVALID_STATE => "`kernelctl status GOAL` shows the goal's state",
        code::PERMISSION_DENIED => "only the goal's owner, root or the admin group may change it",
        code::NO_BEST => {
            "no candidate is correct yet; `kernelctl show GOAL` lists the recent evaluations"
        }
        code::SHUTTING_DOWN => {
            "the daemon is stopping; try again once it is back (`systemctl status kerneld`)"
        }
        code::METHOD_NOT_FOUND
        | code::INVALID_PARAMS
        | code::INVALID_REQUEST
        | code::PARSE_ERROR => {
            "client and daemon may be of different versions; compare `kernelctl version`"
        }
        _ => return None,
    };
    Some(hint.to_string())
}

/// Writes to stdout, --quiet or not (use `Ctx::print` for a command's output); a reader
/// that went away is not an error.
fn write_stdout(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe => Failure::StdoutClosed,
            _ => Failure::Failed(format!("cannot write to stdout: {e}")),
        })
}

/// Writes a file whole or not at all: to a temporary name beside it, then renamed.
fn write_file(path: &Path, content: &[u8]) -> Result<(), Failure> {
    let failed = |e: io::Error| Failure::Failed(format!("cannot write {}: {e}", path.display()));
    let name = path
        .file_name()
        .ok_or_else(|| failed(io::Error::other("not a file name")))?;
    let tmp = path.with_file_name(format!(
        ".{}.kernelctl-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, content)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            failed(e)
        })
}

fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// One call: with --json its result as-is, else read into `T` and shown by `show`.
fn answer<T: DeserializeOwned>(
    ctx: &Ctx,
    method: &str,
    params: impl Serialize,
    show: impl FnOnce(T) -> Result<(), Failure>,
) -> Result<u8, Failure> {
    let value = ctx.call_value(method, params)?;
    if ctx.json {
        ctx.print_json(&value)?;
    } else {
        show(decode(method, value)?)?;
    }
    Ok(0)
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

fn enqueue(ctx: &Ctx, file: &Path, unique: bool) -> Result<u8, Failure> {
    let source = std::fs::read_to_string(file)
        .map_err(|e| Failure::Failed(format!("cannot read goal file {}: {e}", file.display())))?;
    let path = std::fs::canonicalize(file)
        .or_else(|_| std::path::absolute(file))
        .unwrap_or_else(|_| file.to_path_buf());
    // Seeds next to the goal file are read here, with the user's own rights: the daemon
    // reads no user-named file outside its installed tasks.
    let files =
        kerneld_protocol::seeds::local_seed_files(&path, &source).map_err(Failure::Failed)?;
    let params = EnqueueParams {
        path: path.to_string_lossy().into_owned(),
        source,
        unique,
        files,
    };
    let value = ctx.call_value(method::ENQUEUE, &params)?;
    if ctx.json {
        ctx.print_json(&value)?;
        return Ok(0);
    }
    let result: EnqueueResult = decode(method::ENQUEUE, value)?;
    if !result.created && io::stderr().is_terminal() {
        ctx.note(&format!(
            "{} is already active as {}: not enqueued again",
            result.name, result.id
        ));
    }
    ctx.print_line(&result.id)?;
    Ok(0)
}

fn status(ctx: &Ctx, goal: Option<String>) -> Result<u8, Failure> {
    answer(
        ctx,
        method::STATUS,
        StatusParams { goal },
        |goals: Vec<GoalSummary>| {
            if goals.is_empty() {
                return ctx.print_line("no goals yet: `kernelctl enqueue FILE` adds one");
            }
            // On a terminal, the night in one line first (scripts get the table alone).
            if io::stdout().is_terminal() {
                if let Ok(d) = window_digest(ctx, digest::DEFAULT_SINCE) {
                    ctx.print_line(&digest::one_line(&d, digest::DEFAULT_SINCE))?;
                }
            }
            ctx.print(&render::status_table(&goals, ctx.paint))
        },
    )
}

fn show(ctx: &Ctx, goal: String) -> Result<u8, Failure> {
    answer(ctx, method::SHOW, GoalRef { goal }, |detail: GoalDetail| {
        ctx.print(&render::show(&detail, ctx.paint))
    })
}

fn transition(ctx: &Ctx, method: &str, goal: String) -> Result<u8, Failure> {
    answer(ctx, method, GoalRef { goal }, |summary: GoalSummary| {
        ctx.print_line(&format!(
            "{}: {}",
            summary.id,
            render::status_line(&summary, ctx.paint, ctx.fit)
        ))
    })
}

fn best(ctx: &Ctx, goal: String, output: Option<&Path>) -> Result<u8, Failure> {
    let value = ctx.call_value(method::BEST, GoalRef { goal })?;
    let best: BestResult = decode(method::BEST, value.clone())?;
    match output {
        Some(path) if !is_stdout(path) => {
            write_file(path, best.source.as_bytes())?;
            let s = &best.summary;
            let interp = if s.interpreted {
                ", interpreted: not a GPU figure"
            } else {
                ""
            };
            ctx.note(&format!(
                "wrote {}: {} {} at iteration {} (candidate {}, seed {}, config {}{interp})",
                path.display(),
                render::speedup(s.speedup),
                render::percent(s.spread_pct),
                s.iteration,
                render::short_id(&s.candidate),
                s.seed,
                s.config
            ));
        }
        // `-o -` names stdout as the file: written even with --quiet.
        Some(_) if !ctx.json => write_stdout(&best.source)?,
        _ if ctx.json => {}
        _ => ctx.print(&best.source)?,
    }
    if ctx.json {
        ctx.print_json(&value)?;
    }
    Ok(0)
}

fn context(ctx: &Ctx, goal: String) -> Result<u8, Failure> {
    answer(
        ctx,
        method::CONTEXT,
        GoalRef { goal },
        |result: ContextResult| {
            ctx.print_line(&result.text)?;
            // On stderr: stdout stays exactly CONTEXT.md.
            if !result.files.is_empty() {
                ctx.note(&format!(
                    "(the above is CONTEXT.md; the command also gets {})",
                    result.files.join(", ")
                ));
            }
            Ok(())
        },
    )
}

fn gpus(ctx: &Ctx) -> Result<u8, Failure> {
    answer(ctx, method::GPUS, (), |result: GpusResult| {
        ctx.print(&render::gpus(&result, render::now_ms(), ctx.paint))
    })
}

fn completions(shell: clap_complete::Shell) -> Result<u8, Failure> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kernelctl", &mut script);
    // The script is what was asked for: printed even with --quiet.
    write_stdout(&String::from_utf8_lossy(&script))?;
    Ok(0)
}

fn version(ctx: &Ctx) -> Result<u8, Failure> {
    let client = env!("CARGO_PKG_VERSION");
    let value = match ctx.call_value(method::VERSION, ()) {
        Ok(v) => v,
        Err(e) => {
            if !ctx.json {
                ctx.print_line(&format!("kernelctl {client} (protocol {})", wire::PROTOCOL))?;
            }
            return Err(e);
        }
    };
    if ctx.json {
        let both = serde_json::json!({"client": {"version": client, "protocol": wire::PROTOCOL}, "daemon": value});
        ctx.print_json(&both)?;
        return Ok(0);
    }
    let d: VersionResult = decode(method::VERSION, value)?;
    ctx.print_line(&format!("kernelctl {client} (protocol {})", wire::PROTOCOL))?;
    ctx.print_line(&format!(
        "kerneld   {} (protocol {}), pid {}, {} mode, state {}, last event {}",
        d.version, d.protocol, d.pid, d.mode, d.state_dir, d.last_seq
    ))?;
    if d.protocol != wire::PROTOCOL {
        ctx.note(
            "warning: client and daemon speak different protocol revisions; upgrade the older one",
        );
    }
    Ok(0)
}

// ---------------------------------------------------------------------------
// Events, watch and report
// ---------------------------------------------------------------------------

/// One event for people; an event type this client does not know still gets a line.
fn event_text(value: &Value, paint: Paint, fit: render::Fit) -> String {
    match serde_json::from_value::<Event>(value.clone()) {
        Ok(ev) => render::event_line(&ev, paint, fit),
        Err(_) => format!(
            "{:>6}  {}  {}",
            value.get("seq").and_then(Value::as_u64).unwrap_or(0),
            render::datetime(value.get("time_ms").and_then(Value::as_u64).unwrap_or(0)),
            value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown"),
        ),
    }
}

fn print_event(ctx: &Ctx, value: &Value) -> Result<(), Failure> {
    if ctx.json {
        ctx.print_line(&value.to_string())
    } else {
        ctx.print_line(&event_text(value, ctx.paint, ctx.fit))
    }
}

fn events(ctx: &Ctx, params: EventsParams) -> Result<u8, Failure> {
    if !params.follow {
        if params.limit.is_some() {
            let list: Vec<Value> =
                decode(method::EVENTS, ctx.call_value(method::EVENTS, &params)?)?;
            for value in &list {
                print_event(ctx, value)?;
            }
            return Ok(0);
        }
        // Everything: the daemon answers a page at a time; an empty page means the end.
        let mut page = EventsParams {
            after: Some(params.after.unwrap_or(0)),
            ..params
        };
        loop {
            let list: Vec<Value> = decode(method::EVENTS, ctx.call_value(method::EVENTS, &page)?)?;
            let Some(last) = list
                .last()
                .and_then(|v| v.get("seq"))
                .and_then(Value::as_u64)
            else {
                return Ok(0);
            };
            for value in &list {
                print_event(ctx, value)?;
            }
            page.after = Some(last);
        }
    }
    let (backlog, mut stream) = ctx.connect()?.follow(params)?;
    for value in &backlog {
        print_event(ctx, value)?;
    }
    while let Some(value) = stream.next_event()? {
        print_event(ctx, &value)?;
    }
    Err(ClientError::Closed {
        socket: ctx.socket.clone(),
    }
    .into())
}

/// How many past events `watch` shows before the live ones.
const WATCH_BACKLOG: u64 = 8;

fn watch(ctx: &Ctx, goal: String) -> Result<u8, Failure> {
    let id = goal_summary(ctx, &goal)?.id;
    let params = EventsParams {
        goal: Some(id.clone()),
        limit: Some(WATCH_BACKLOG),
        ..Default::default()
    };
    let (backlog, mut stream) = ctx.connect()?.follow(params)?;
    let mut view = WatchView::new(ctx);
    for value in &backlog {
        view.event(value)?;
    }
    // Read after subscribing: whatever changes from here on arrives as an event.
    let mut summary = goal_summary(ctx, &id)?;
    view.status(&summary)?;
    while !summary.state.is_terminal() {
        let Some(value) = stream.next_event()? else {
            view.end()?;
            return Err(ClientError::Closed {
                socket: ctx.socket.clone(),
            }
            .into());
        };
        view.event(&value)?;
        summary = goal_summary(ctx, &id)?;
        view.status(&summary)?;
    }
    view.end()?;
    Ok(if summary.state == GoalState::Completed {
        0
    } else {
        1
    })
}

fn goal_summary(ctx: &Ctx, goal: &str) -> Result<GoalSummary, Failure> {
    let value = ctx.call_value(
        method::STATUS,
        StatusParams {
            goal: Some(goal.to_string()),
        },
    )?;
    let goals: Vec<GoalSummary> = decode(method::STATUS, value)?;
    goals
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Failed(format!("no goal {goal}")))
}

/// What `watch` prints. On a terminal: events scroll by above a status line redrawn in place.
/// Elsewhere (a pipe, cron): one timestamped status line whenever it changes.
/// With --json: the events as JSON lines.
struct WatchView<'a> {
    ctx: &'a Ctx,
    live: bool,
    /// A status line is on screen without its newline (terminal mode).
    pending: bool,
    last: String,
}

impl<'a> WatchView<'a> {
    fn new(ctx: &'a Ctx) -> Self {
        WatchView {
            ctx,
            live: io::stdout().is_terminal() && !ctx.json && !ctx.quiet,
            pending: false,
            last: String::new(),
        }
    }

    fn event(&mut self, value: &Value) -> Result<(), Failure> {
        if self.ctx.json {
            return self.ctx.print_line(&value.to_string());
        }
        if self.live {
            self.clear()?;
            let columns = render::terminal_columns();
            self.ctx.print_line(&render::truncate_visible(
                &event_text(value, self.ctx.paint, self.ctx.fit),
                columns,
            ))?;
        }
        Ok(())
    }

    fn status(&mut self, summary: &GoalSummary) -> Result<(), Failure> {
        if self.ctx.json {
            return Ok(());
        }
        let plain = render::status_line(summary, Paint::OFF, self.ctx.fit);
        if self.live {
            // One column short of the width: a full line would wrap and break the redraw.
            let columns = render::terminal_columns().saturating_sub(1);
            let line = render::truncate_visible(
                &render::status_line(summary, self.ctx.paint, self.ctx.fit),
                columns,
            );
            self.clear()?;
            self.ctx.print(&line)?;
            self.pending = true;
        } else if plain != self.last {
            self.ctx
                .print_line(&format!("{}  {plain}", render::clock(render::now_ms())))?;
        }
        self.last = plain;
        Ok(())
    }

    fn clear(&mut self) -> Result<(), Failure> {
        if self.pending {
            self.pending = false;
            self.ctx.print("\r\x1b[2K")?;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), Failure> {
        if self.pending {
            self.pending = false;
            self.ctx.print("\n")?;
        }
        Ok(())
    }
}

/// Events per `events` call while reading a goal's whole history.
const REPORT_PAGE: u64 = 500;

fn report(ctx: &Ctx, goal: String, output: Option<&Path>) -> Result<u8, Failure> {
    let events = all_events(ctx, Some(&goal))?;
    let progress = report::Progress::from_events(&goal, &events);
    match output {
        Some(path) => {
            let svg = report::svg(&progress);
            if is_stdout(path) {
                // `-o -` names stdout as the file: written even with --quiet.
                write_stdout(&svg)?;
            } else {
                write_file(path, svg.as_bytes())?;
                ctx.note(&format!(
                    "wrote {}: {}",
                    path.display(),
                    progress.headline()
                ));
            }
        }
        None if ctx.json => {
            ctx.print_line(&serde_json::to_string_pretty(&progress).unwrap_or_default())?
        }
        None => ctx.print(&report::terminal(
            &progress,
            render::terminal_columns(),
            ctx.paint,
        ))?,
    }
    Ok(0)
}

/// The digest of the log over the last `since`.
fn window_digest(ctx: &Ctx, since: &str) -> Result<digest::Digest, Failure> {
    let secs = digest::parse_since(since).map_err(Failure::Failed)?;
    let now = render::now_ms();
    let events = all_events(ctx, None)?;
    Ok(digest::digest(
        &events,
        now.saturating_sub(secs * 1000),
        now,
    ))
}

fn digest_cmd(ctx: &Ctx, since: &str) -> Result<u8, Failure> {
    let d = window_digest(ctx, since)?;
    if ctx.json {
        ctx.print_line(&serde_json::to_string(&d).unwrap_or_default())?;
    } else {
        ctx.print(&digest::render(&d, since, ctx.paint))?;
    }
    Ok(0)
}

/// Every event of a goal (or of the whole log), oldest first, read page by page (an event of a type this
/// client does not know is skipped: the chart has no use for it).
fn all_events(ctx: &Ctx, goal: Option<&str>) -> Result<Vec<Event>, Failure> {
    let mut client = ctx.connect()?;
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let params = EventsParams {
            goal: goal.map(str::to_string),
            after: Some(after),
            limit: Some(REPORT_PAGE),
            follow: false,
        };
        let page: Vec<Value> = client.call(method::EVENTS, &params)?;
        let count = page.len() as u64;
        let start = after;
        for value in page {
            after = after.max(value.get("seq").and_then(Value::as_u64).unwrap_or(after));
            events.extend(serde_json::from_value::<Event>(value).ok());
        }
        if count < REPORT_PAGE || after == start {
            return Ok(events);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    fn unreachable(kind: io::ErrorKind) -> Failure {
        Failure::Client(ClientError::Unreachable {
            socket: "/x.sock".into(),
            kind,
            reason: "no such socket".into(),
        })
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        let unreachable = unreachable(io::ErrorKind::NotFound);
        assert_eq!(unreachable.exit_code(), 3);
        let message = unreachable
            .report(Path::new("/x.sock"), &SocketOrigin::Flag)
            .text();
        assert!(message.starts_with("kernelctl: cannot reach kerneld at /x.sock"));
        assert!(
            message.contains("systemctl start kerneld")
                && message.contains("kerneld --socket /x.sock")
        );

        let rpc = Failure::Client(ClientError::Rpc(RpcError::new(
            code::GOAL_NOT_FOUND,
            "no goal named foo",
        )));
        assert_eq!(rpc.exit_code(), 1);
        assert_eq!(
            rpc.report(Path::new("/x"), &SocketOrigin::Flag).text(),
            "kernelctl: no goal named foo\nhint: `kernelctl status` lists the goals, by id and name"
        );
        assert_eq!(Failure::Failed("x".into()).exit_code(), 1);
    }

    #[test]
    fn a_missing_default_socket_lists_every_place_tried() {
        let origin = SocketOrigin::Default {
            tried: vec![
                "/run/user/1000/kerneld.sock".into(),
                "/run/kerneld/kerneld.sock".into(),
            ],
        };
        let report = unreachable(io::ErrorKind::NotFound).report(Path::new("/x.sock"), &origin);
        assert_eq!(report.exit, 3);
        assert!(
            report.message.contains(
                "no socket at the default locations (tried /run/user/1000/kerneld.sock, /run/kerneld/kerneld.sock)"
            ),
            "{}",
            report.message
        );
        // A socket that exists but refuses says so, at the one path it is.
        let refused =
            unreachable(io::ErrorKind::ConnectionRefused).report(Path::new("/x.sock"), &origin);
        assert!(refused
            .message
            .starts_with("cannot reach kerneld at /x.sock"));
        let from_env =
            unreachable(io::ErrorKind::NotFound).report(Path::new("/x.sock"), &SocketOrigin::Env);
        assert!(from_env.message.ends_with("(KERNELD_SOCKET)"));
    }

    #[test]
    fn json_errors_carry_code_message_hint_and_exit() {
        let rpc = Failure::Client(ClientError::Rpc(RpcError::new(
            code::GOAL_NOT_FOUND,
            "no goal named nosuch",
        )));
        let json = rpc.report(Path::new("/x"), &SocketOrigin::Flag).json();
        assert!(
            json.starts_with(r#"{"error":{"code":-32001,"message":"#),
            "{json}"
        );
        let json: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {
                "code": code::GOAL_NOT_FOUND,
                "message": "no goal named nosuch",
                "hint": "`kernelctl status` lists the goals, by id and name",
                "exit": 1,
            }})
        );
        let json: Value = serde_json::from_str(
            &Failure::Failed("cannot read goal file x".into())
                .report(Path::new("/x"), &SocketOrigin::Flag)
                .json(),
        )
        .unwrap();
        assert_eq!(json["error"]["code"], Value::Null);
        assert_eq!(json["error"]["hint"], Value::Null);
        assert_eq!(json["error"]["exit"], 1);
    }

    #[test]
    fn the_daemons_own_hint_wins() {
        let mut e = RpcError::new(code::INVALID_GOAL, "goal.toml:3: unknown key `budgett`");
        e.data = Some(serde_json::json!({"hint": "did you mean `budget`?"}));
        assert_eq!(rpc_hint(&e).as_deref(), Some("did you mean `budget`?"));
        assert_eq!(rpc_hint(&RpcError::new(-32099, "x")), None);
    }

    #[test]
    fn unknown_event_types_still_print() {
        let v = serde_json::json!({"seq": 9, "time_ms": 0, "type": "from_the_future"});
        assert!(event_text(&v, Paint::OFF, render::Fit::Cut).ends_with("from_the_future"));
    }
}
