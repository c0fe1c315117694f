//! kernelctl's command line: one clap definition for `--help`, the shell completions and
//! the man pages (`kernelctl man`), so the three always agree.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::term::ColorWhen;

/// Where the socket is looked for without --socket; said once, on the main page.
const SOCKET_DEFAULT: &str = "\
Socket: without --socket or KERNELD_SOCKET, kernelctl uses the first that exists of \
$XDG_RUNTIME_DIR/kerneld.sock (else /run/user/$UID/kerneld.sock for a user) and \
/run/kerneld/kerneld.sock, the same rule the daemon follows.

Colour: --color auto (the default) colours a terminal; NO_COLOR (non-empty) turns colour \
off and CLICOLOR_FORCE turns it on for pipes too; --color always|never decides outright.

Exit status: 0 ok, 1 failed (the daemon refused, or the operation failed), 2 usage, \
3 daemon not reachable.";

#[derive(Parser)]
#[command(
    name = "kernelctl",
    version,
    about = "Control kerneld: enqueue, watch and steer GPU-kernel optimization goals.",
    after_help = SOCKET_DEFAULT,
    // Subcommand pages list the global options under their own heading, briefly; the
    // long story (socket defaults, colour, exit codes) is told once, here.
    subcommand_help_heading = "Commands"
)]
pub struct Cli {
    /// The daemon's socket (default: see `kernelctl --help`)
    #[arg(
        long,
        global = true,
        env = "KERNELD_SOCKET",
        value_name = "PATH",
        help_heading = "Global options"
    )]
    pub socket: Option<PathBuf>,
    /// Print results as JSON (JSON lines for event streams), errors as JSON on stderr
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,
    /// Print nothing on success, for cron (files named with -o are still written)
    #[arg(short, long, global = true, help_heading = "Global options")]
    pub quiet: bool,
    /// When to colour the output
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        default_value = "auto",
        hide_possible_values = false,
        help_heading = "Global options"
    )]
    pub color: ColorWhen,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Enqueue the goal in FILE; prints the goal's id
    ///
    /// The goal file (TOML, README "A goal file"): name, task, seed, objective, baseline,
    /// shapes, timing, and the tables [budget], [stop], [agent], [resources]. `timing` is
    /// how the objective is timed: "gpu" (the default; the GPU time of the call's work,
    /// calls replayed from a CUDA graph) or "as_called" (host-inclusive, each call launched
    /// from Python). Unknown keys and bad values are refused with file:line:column.
    Enqueue {
        /// The goal file (TOML)
        file: PathBuf,
        /// If a goal of the same name is queued, running or paused, print its id instead (for cron)
        #[arg(long)]
        unique: bool,
        /// Run only after GOAL (an id or a name) ends: GOAL or GOAL:completed waits for it to
        /// complete and is cancelled if it fails or is cancelled (Slurm's afterok);
        /// GOAL:any runs after any end (afterany). In place of the goal file's `after`
        #[arg(long, value_name = "GOAL[:completed|:any]")]
        after: Option<String>,
    },
    /// List the active goals and the newest finished ones (or one goal) with their progress
    Status {
        /// Only this goal (id or name)
        goal: Option<String>,
        /// Every goal ever enqueued (read from the daemon page by page)
        #[arg(long, conflicts_with = "goal")]
        all: bool,
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
    /// GPUs (evaluation slots): health, leases, work done; why a drained one is drained, and
    /// each GPU's fault readings (Xid events, ECC counters, remapped rows, pending retirement)
    Gpus,
    /// Progress over time: a chart in the terminal, or with -o an SVG, PNG or HTML file
    Report {
        /// The goal's id or name
        goal: String,
        /// Write the chart to FILE, as its extension says: .svg, .png, or .html (the chart
        /// and the table of bests in one page); "-" writes the SVG to stdout
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// The lineage of a candidate (the best unless named): each step from its seed, with its
    /// speedup and what changed (seed, config, the source's diff); with two candidates, what
    /// changed from A to B. A candidate's parent is the goal's best when it was proposed
    Diff {
        /// The goal's id or name
        goal: String,
        /// A candidate id (or a unique prefix), or `best`
        #[arg(default_value = "best")]
        a: String,
        /// A second candidate: the diff from A to it
        b: Option<String>,
    },
    /// Re-time a candidate N times (each a fresh runner, interleaved with a freshly timed
    /// baseline) and print the stability: per-shape medians, the geomean speedup's CV, the
    /// largest deviation of any shape's median (candidate and baseline), what the figures
    /// are (GPU time, as called, interpreted) and the candidate's speedup pooled over all
    /// its measurements, the figure the win rule uses (re-times of the best tighten it)
    Retime {
        /// The goal's id or name
        goal: String,
        /// A candidate id (or a unique prefix), or `best`
        #[arg(default_value = "best")]
        candidate: String,
        /// How many re-times
        #[arg(short = 'n', long, default_value_t = 1)]
        times: u32,
        /// Queue the request and print its id, without waiting for the re-times
        #[arg(long)]
        no_wait: bool,
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
        #[arg(long, default_value = crate::digest::DEFAULT_SINCE)]
        since: String,
    },
    /// Re-measure the goal's best few candidates now and say whether each still holds its
    /// win beyond noise (after a driver, CUDA, torch or triton upgrade): lost when the new
    /// reading is below the candidate's pooled figure by more than the noise of both; exits
    /// 1 if one did not hold
    Revalidate {
        /// The goal's id or name
        goal: String,
        /// How many of the best distinct candidates (default 3)
        #[arg(long)]
        top: Option<u32>,
        /// Queue the re-times and print their request ids, without waiting
        #[arg(long)]
        no_wait: bool,
    },
    /// Start a new goal from another's state (its candidates, measurements and best) as of
    /// event SEQ, with a new name, budget or agent; the fork records where it came from
    Fork {
        /// The origin goal's id or name, optionally @SEQ (an event of it, from `events`)
        goal: String,
        /// The fork's name (default: the origin's with -fork)
        #[arg(long)]
        name: Option<String>,
        /// A [budget] key for the fork, KEY=VALUE (iterations=20, wall=2h, gpu_hours=1,
        /// tokens=100000); repeatable. Counts from what the fork carries over
        #[arg(long, value_name = "KEY=VALUE")]
        budget: Vec<String>,
        /// A file with an [agent] table (as in a goal file) for the fork
        #[arg(long, value_name = "FILE")]
        agent: Option<PathBuf>,
    },
    /// Versions of this client and of the daemon
    Version,
    /// The man pages: kernelctl.1 to stdout, or with --out every page (kernelctl.1,
    /// kernelctl-status.1, ...) into DIR
    Man {
        /// The directory to write the pages in (e.g. /usr/local/share/man/man1)
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}
