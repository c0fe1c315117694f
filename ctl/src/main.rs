//! kernelctl: the command-line client of kerneld.
//!
//! Each command is one JSON-RPC call (or an `events` stream) over the daemon's Unix socket.
//! Plain output is for people; `--json` prints the daemon's result as-is for scripts.
//! Exit codes: 0 ok, 1 failed (the daemon said no, or the operation failed), 2 usage,
//! 3 daemon not reachable. A closed stdout (`| head`) ends the command quietly.
//! Errors go to stderr: a line for people, or one JSON object with --json.
//! With -q a successful command prints nothing (cron mails whatever a job prints).

mod cli;
mod client;
mod digest;
mod failure;
mod follow;
mod fork;
mod lineage;
mod man;
mod render;
mod report;
mod retime;
mod revalidate;
mod term;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use kerneld_protocol::paths::{choose_socket, SocketEnv};
use kerneld_protocol::wire::{
    self, method, BestResult, ContextResult, EnqueueParams, EnqueueResult, EventsParams,
    GoalDetail, GoalRef, GoalSummary, GpusResult, StatusParams, VersionResult,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use cli::{Cli, Command};
use client::{decode, Client};
use failure::{ErrorReport, Failure, SocketOrigin};
use render::Paint;
use term::ColorWhen;

fn main() -> ExitCode {
    // clap prints help and usage errors while it parses: tell it --color first.
    let color = ColorWhen::from_args(std::env::args_os().skip(1));
    let parsed = Cli::command()
        .color(color.for_clap())
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
        paint: Paint::for_stdout(cli.color),
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
        Command::Enqueue {
            file,
            unique,
            after,
        } => enqueue(ctx, &file, unique, after),
        Command::Status { goal, all } => status(ctx, goal, all),
        Command::Show { goal } => show(ctx, goal),
        Command::Watch { goal } => follow::watch(ctx, goal),
        Command::Events {
            goal,
            follow,
            after,
            limit,
        } => follow::events(
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
        Command::Report { goal, output } => follow::report(ctx, goal, output.as_deref()),
        Command::Diff { goal, a, b } => lineage::diff(ctx, &goal, &a, b.as_deref()),
        Command::Retime {
            goal,
            candidate,
            times,
            no_wait,
        } => retime::retime(ctx, goal, Some(candidate), times, !no_wait),
        Command::Completions { shell } => completions(shell),
        Command::Digest { since } => digest::command(ctx, &since),
        Command::Revalidate { goal, top, no_wait } => revalidate::command(ctx, goal, top, !no_wait),
        Command::Fork {
            goal,
            name,
            budget,
            agent,
        } => fork::command(ctx, &goal, name, budget, agent.as_deref()),
        Command::Version => version(ctx),
        Command::Man { out } => man(ctx, out.as_deref()),
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

fn enqueue(ctx: &Ctx, file: &Path, unique: bool, after: Option<String>) -> Result<u8, Failure> {
    // Checked before it is read: a FIFO, /dev/zero or a huge file is refused, not read.
    let limit = kerneld_protocol::limits::GOAL_FILE_BYTES;
    let source = kerneld_protocol::userfile::read_regular(file, limit)
        .map_err(|e| Failure::Failed(format!("goal file {}", e.describe(file, limit))))?;
    let path = std::fs::canonicalize(file)
        .or_else(|_| std::path::absolute(file))
        .unwrap_or_else(|_| file.to_path_buf());
    // Seeds next to the goal file are read here, with the user's own rights: the daemon
    // reads no user-named file outside its installed tasks.
    let files =
        kerneld_protocol::seeds::local_seed_files(&path, &source).map_err(Failure::Failed)?;
    let params = EnqueueParams {
        after,
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

fn status(ctx: &Ctx, goal: Option<String>, all: bool) -> Result<u8, Failure> {
    if all {
        return status_all(ctx);
    }
    answer(
        ctx,
        method::STATUS,
        StatusParams {
            goal,
            ..Default::default()
        },
        |goals: Vec<GoalSummary>| {
            if goals.is_empty() {
                return ctx.print_line("no goals yet: `kernelctl enqueue FILE` adds one");
            }
            // On a terminal, the night in one line first (scripts get the table alone).
            if io::stdout().is_terminal() && !ctx.json {
                if let Ok(d) = digest::window(ctx, digest::DEFAULT_SINCE) {
                    ctx.print_line(&digest::one_line(&d, digest::DEFAULT_SINCE))?;
                }
            }
            ctx.print(&render::status_table(&goals, ctx.paint))
        },
    )
}

/// `status --all`: the whole history, page after page (an empty page ends it).
fn status_all(ctx: &Ctx) -> Result<u8, Failure> {
    let mut goals: Vec<Value> = Vec::new();
    loop {
        let after = goals
            .last()
            .and_then(|g| g["id"].as_str())
            .map(str::to_string);
        let params = StatusParams {
            all: true,
            after,
            ..Default::default()
        };
        let page = match ctx.call_value(method::STATUS, params)? {
            Value::Array(page) => page,
            other => {
                return Err(Failure::Failed(format!(
                    "status: expected a list, got {other}"
                )))
            }
        };
        if page.is_empty() {
            break;
        }
        goals.extend(page);
    }
    if ctx.json {
        ctx.print_json(&Value::Array(goals))?;
        return Ok(0);
    }
    let goals: Vec<GoalSummary> = decode(method::STATUS, Value::Array(goals))?;
    if goals.is_empty() {
        return ctx
            .print_line("no goals yet: `kernelctl enqueue FILE` adds one")
            .map(|()| 0);
    }
    ctx.print(&render::status_table(&goals, ctx.paint))?;
    Ok(0)
}

fn show(ctx: &Ctx, goal: String) -> Result<u8, Failure> {
    answer(ctx, method::SHOW, GoalRef { goal }, |detail: GoalDetail| {
        let mode = run_mode(ctx, &detail);
        ctx.print(&render::show(&detail, mode, ctx.paint))
    })
}

/// CPU or GPU: the results say (interpreted timings); before the first result the
/// daemon's `version` does. A daemon that cannot say counts as GPU.
fn run_mode(ctx: &Ctx, detail: &GoalDetail) -> render::Mode {
    let interpreted = detail.recent.iter().map(|e| e.result.interpreted);
    let evidence = interpreted
        .chain(detail.summary.best.iter().map(|b| b.interpreted))
        .reduce(|a, b| a || b);
    let cpu = evidence.unwrap_or_else(|| {
        ctx.call_value(method::VERSION, ())
            .ok()
            .and_then(|v| decode::<VersionResult>(method::VERSION, v).ok())
            .is_some_and(|v| v.mode == "cpu")
    });
    if cpu {
        render::Mode::Cpu
    } else {
        render::Mode::Gpu
    }
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
                ": not a GPU figure"
            } else {
                ""
            };
            ctx.note(&format!(
                "wrote {}: {} {} ({}{interp}) at iteration {} (candidate {}, seed {}, config {})",
                path.display(),
                render::speedup(s.speedup),
                render::percent(s.spread_pct),
                render::best_kind(s),
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

/// kernelctl's pages from the clap definition above (kerneld's: `kerneld man`).
fn man(ctx: &Ctx, out: Option<&Path>) -> Result<u8, Failure> {
    let mut stdout = Vec::new();
    let files = man::write(Cli::command(), out, &mut stdout).map_err(Failure::Failed)?;
    // The page is what was asked for: printed even with --quiet.
    write_stdout(&String::from_utf8_lossy(&stdout))?;
    if let Some(dir) = out {
        ctx.note(&format!("wrote {} pages in {}", files.len(), dir.display()));
    }
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
    if let Some(sb) = &d.sandbox {
        ctx.print(&render::sandbox(sb, ctx.paint))?;
    }
    if d.protocol != wire::PROTOCOL {
        ctx.note(
            "warning: client and daemon speak different protocol revisions; upgrade the older one",
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
