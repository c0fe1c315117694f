//! Text for people: tables, durations, times, colours, and one-line summaries of events.
//!
//! Every function returns a `String` (or lines of one) so it can be tested without a
//! terminal; colour is applied through a `Paint` that is off unless stdout is a TTY.

use std::fmt::Write as _;

use kerneld_protocol::wire::{
    BestSummary, EvalResult, Event, EventKind, GoalDetail, GoalSpec, GoalState, GoalSummary,
    GpusResult, Health, ResultClass,
};

// ---------------------------------------------------------------------------
// Colour
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Bold,
    Dim,
    Green,
    Yellow,
    Red,
    Cyan,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Style::Bold => "1",
            Style::Dim => "2",
            Style::Green => "32",
            Style::Yellow => "33",
            Style::Red => "31",
            Style::Cyan => "36",
        }
    }
}

/// Applies ANSI colours, or nothing when colour is off.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    pub enabled: bool,
}

impl Paint {
    pub const OFF: Paint = Paint { enabled: false };

    /// Colours only on a terminal, never with NO_COLOR set to a non-empty value
    /// (no-color.org: an empty one does not count) or TERM=dumb.
    pub fn detect(is_tty: bool) -> Paint {
        Paint::decide(
            is_tty,
            std::env::var_os("NO_COLOR").as_deref(),
            std::env::var_os("TERM").as_deref(),
        )
    }

    fn decide(
        is_tty: bool,
        no_color: Option<&std::ffi::OsStr>,
        term: Option<&std::ffi::OsStr>,
    ) -> Paint {
        let no_color = no_color.is_some_and(|v| !v.is_empty());
        let dumb = term.is_some_and(|t| t == "dumb");
        Paint {
            enabled: is_tty && !no_color && !dumb,
        }
    }

    pub fn paint(&self, text: &str, style: Option<Style>) -> String {
        match style {
            Some(s) if self.enabled => format!("\x1b[{}m{text}\x1b[0m", s.code()),
            _ => text.to_string(),
        }
    }
}

pub fn state_style(state: GoalState) -> Style {
    match state {
        GoalState::Running => Style::Green,
        GoalState::Queued | GoalState::Paused => Style::Yellow,
        GoalState::Completed => Style::Cyan,
        GoalState::Failed => Style::Red,
        GoalState::Cancelled => Style::Dim,
    }
}

pub fn class_style(class: ResultClass) -> Style {
    match class {
        ResultClass::Ok => Style::Green,
        ResultClass::Rejected | ResultClass::TimedOut => Style::Yellow,
        _ => Style::Red,
    }
}

// ---------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------

/// One cell: its text (which decides the width), an optional colour, and its alignment.
#[derive(Debug, Clone)]
pub struct Cell {
    text: String,
    style: Option<Style>,
    right: bool,
}

impl Cell {
    pub fn new(text: impl Into<String>) -> Cell {
        Cell {
            text: text.into(),
            style: None,
            right: false,
        }
    }
    pub fn num(text: impl Into<String>) -> Cell {
        Cell {
            right: true,
            ..Cell::new(text)
        }
    }
    pub fn styled(mut self, style: Style) -> Cell {
        self.style = Some(style);
        self
    }
}

/// Columns separated by two spaces, padded to the widest cell; the last column unpadded.
pub fn table(headers: &[&str], rows: &[Vec<Cell>], paint: Paint) -> String {
    let columns = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(width(&cell.text));
        }
    }
    // A header sits over its column the way the column's numbers or words do.
    let right = |i: usize| rows.first().and_then(|r| r.get(i)).is_some_and(|c| c.right);
    let header_cells: Vec<Cell> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| Cell {
            right: right(i),
            ..Cell::new(*h).styled(Style::Bold)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(&header_cells).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate().take(columns) {
            let last = i + 1 == columns;
            let pad = " ".repeat(widths[i] - width(&cell.text));
            let text = paint.paint(&cell.text, cell.style);
            match (cell.right, last) {
                (true, _) => line.push_str(&format!("{pad}{text}")),
                (false, true) => line.push_str(&text),
                (false, false) => line.push_str(&format!("{text}{pad}")),
            }
            if !last {
                line.push_str("  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Display width in columns; every character this client prints is one column wide.
pub fn width(text: &str) -> usize {
    text.chars().count()
}

/// The width of the terminal on stdout: the tty's own size, else $COLUMNS, else 80.
pub fn terminal_columns() -> usize {
    // SAFETY: TIOCGWINSZ only writes the `winsize` we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0
    {
        return usize::from(ws.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
        .unwrap_or(80)
}

/// How free text (messages, reasons, configs) is shown in one line: cut to fit a
/// terminal, or whole where nobody reads it on a screen (a pipe, a file, cron's mail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Cut,
    Whole,
}

impl Fit {
    pub fn for_stdout(is_tty: bool) -> Fit {
        if is_tty {
            Fit::Cut
        } else {
            Fit::Whole
        }
    }
}

/// `text` in one line: cut to `max` with `Fit::Cut`, else whole with its line breaks
/// shown as ` ⏎ ` (one event stays one line for grep).
pub fn fit(text: &str, max: usize, fit: Fit) -> String {
    match fit {
        Fit::Cut => truncate(text, max),
        Fit::Whole => text
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(" ⏎ "),
    }
}

/// The first line of `text`, cut to `max` characters with an ellipsis.
pub fn truncate(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim_end();
    let more_lines = text.trim_end().lines().nth(1).is_some();
    if width(first) <= max && !more_lines {
        return first.to_string();
    }
    let cut: String = first.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

/// Cuts an already coloured line to `max` visible columns: escape sequences take no room
/// and are kept, so the colours stay; a reset ends a cut line.
pub fn truncate_visible(text: &str, max: usize) -> String {
    if width(&strip_ansi(text)) <= max {
        return text.to_string();
    }
    let mut out = String::new();
    let mut visible = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            out.push(c);
            // CSI: ESC [ parameters, ended by a letter.
            for e in chars.by_ref() {
                out.push(e);
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if visible + 1 < max {
            out.push(c);
            visible += 1;
        } else {
            break;
        }
    }
    out.push('…');
    out.push_str("\x1b[0m");
    out
}

/// The text without its ANSI escape sequences.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A content hash shortened for tables: 12 characters identify a candidate among thousands.
pub fn short_id(id: &str) -> String {
    id.chars().take(12).collect()
}

// ---------------------------------------------------------------------------
// Numbers, durations, times
// ---------------------------------------------------------------------------

pub fn speedup(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    match x.abs() {
        a if a >= 100.0 => format!("{x:.0}×"),
        a if a >= 10.0 => format!("{x:.1}×"),
        a if a >= 0.1 || a == 0.0 => format!("{x:.2}×"),
        // Interpreter timings can be tiny fractions: plain decimals with three significant
        // digits (0.0176×), which people read more easily than 1.760e-2×.
        a => {
            let decimals = (2 - a.log10().floor() as i64).clamp(3, 12) as usize;
            format!("{x:.decimals$}×")
        }
    }
}

pub fn percent(x: f64) -> String {
    if x.is_finite() {
        format!("±{x:.1}%")
    } else {
        "-".into()
    }
}

/// A duration for people: `42s`, `5m12s`, `3h04m`, `2d03h`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".into();
    }
    let s = seconds.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Broken-down local time (falls back to UTC where the C library cannot say).
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

fn civil(ms: u64) -> Civil {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: localtime_r only writes the `tm` we own; a null return leaves it unused.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if ok {
        return Civil {
            year: tm.tm_year as i64 + 1900,
            month: tm.tm_mon as u32 + 1,
            day: tm.tm_mday as u32,
            hour: tm.tm_hour as u32,
            minute: tm.tm_min as u32,
            second: tm.tm_sec as u32,
        };
    }
    utc(ms / 1000)
}

/// Days-from-civil inverse (Howard Hinnant's algorithm) for the UTC fallback.
fn utc(secs: u64) -> Civil {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem % 3600 / 60) as u32,
        second: (rem % 60) as u32,
    }
}

/// `2026-11-30 17:43:20`, local time.
pub fn datetime(ms: u64) -> String {
    let c = civil(ms);
    format!(
        "{}-{:02}-{:02} {:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// `17:43:20`, local time.
pub fn clock(ms: u64) -> String {
    let c = civil(ms);
    format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second)
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ---------------------------------------------------------------------------
// status
// ---------------------------------------------------------------------------

const STATUS_HEADERS: [&str; 10] = [
    "ID",
    "NAME",
    "STATE",
    "ITER",
    "EVALS",
    "BEST",
    "SPREAD",
    "IN FLIGHT",
    "WALL",
    "REASON",
];

/// The best speedup, starred when it was measured under the interpreter (not a GPU figure).
fn best_cells(best: Option<&BestSummary>) -> (Cell, Cell) {
    match best {
        Some(b) => {
            let star = if b.interpreted { "*" } else { "" };
            (
                Cell::num(format!("{}{star}", speedup(b.speedup))),
                Cell::num(percent(b.spread_pct)),
            )
        }
        None => (Cell::num("-"), Cell::num("-")),
    }
}

pub fn status_table(goals: &[GoalSummary], paint: Paint) -> String {
    let rows: Vec<Vec<Cell>> = goals
        .iter()
        .map(|g| {
            let (best, spread) = best_cells(g.best.as_ref());
            vec![
                Cell::new(&g.id),
                Cell::new(&g.name),
                Cell::new(g.state.as_str()).styled(state_style(g.state)),
                Cell::num(g.iteration.to_string()),
                Cell::num(g.evaluations.to_string()),
                best.styled(Style::Bold),
                spread,
                Cell::num(g.in_flight.to_string()),
                Cell::num(duration(g.wall_s)),
                Cell::new(match (&g.reason, &g.waiting) {
                    (Some(r), _) => truncate(r, 60),
                    (None, Some(_)) => "waiting (below)".to_string(),
                    (None, None) => String::new(),
                }),
            ]
        })
        .collect();
    let mut out = table(&STATUS_HEADERS, &rows, paint);
    // Why a goal waits, whole: it is what the user has to act on.
    for g in goals {
        if let Some(w) = &g.waiting {
            let _ = writeln!(out, "{} {} waits: {w}", g.id, g.name);
        }
    }
    if goals
        .iter()
        .any(|g| g.best.as_ref().is_some_and(|b| b.interpreted))
    {
        out.push_str("* measured under the Triton interpreter (CPU mode): not a GPU speedup\n");
    }
    out
}

/// The compact one-line status `watch` redraws.
pub fn status_line(g: &GoalSummary, paint: Paint, fit_text: Fit) -> String {
    let best = g.best.as_ref().map_or("best -".to_string(), |b| {
        format!(
            "best {} {} (iter {})",
            speedup(b.speedup),
            percent(b.spread_pct),
            b.iteration
        )
    });
    let mut line = format!(
        "{}  {}  iter {}  evals {}  {}  in flight {}  wall {}",
        g.name,
        paint.paint(g.state.as_str(), Some(state_style(g.state))),
        g.iteration,
        g.evaluations,
        best,
        g.in_flight,
        duration(g.wall_s),
    );
    if let Some(reason) = &g.reason {
        line.push_str(&format!("  ({})", fit(reason, 50, fit_text)));
    }
    if let Some(w) = &g.waiting {
        line.push_str(&format!("  waiting: {}", fit(w, 100, fit_text)));
    }
    line
}

// ---------------------------------------------------------------------------
// show
// ---------------------------------------------------------------------------

pub fn show(detail: &GoalDetail, paint: Paint) -> String {
    let g = &detail.summary;
    let mut out = format!(
        "{}  {}  {}\n",
        paint.paint(&g.name, Some(Style::Bold)),
        g.id,
        paint.paint(g.state.as_str(), Some(state_style(g.state)))
    );
    for (key, value) in spec_fields(&detail.spec)
        .into_iter()
        .chain(summary_fields(g))
    {
        let _ = writeln!(
            out,
            "  {}  {value}",
            paint.paint(&format!("{key:<10}"), Some(Style::Dim))
        );
    }
    out.push('\n');
    if detail.recent.is_empty() {
        out.push_str("no evaluations yet\n");
        return out;
    }
    out.push_str(&paint.paint("recent evaluations", Some(Style::Bold)));
    out.push('\n');
    let rows: Vec<Vec<Cell>> = detail
        .recent
        .iter()
        .map(|e| {
            let mut row = vec![
                Cell::num(e.iteration.to_string()),
                Cell::new(short_id(&e.candidate)),
                Cell::new(&e.seed),
            ];
            row.extend(result_cells(&e.result));
            row
        })
        .collect();
    out.push_str(&table(
        &[
            "ITER",
            "CANDIDATE",
            "SEED",
            "CLASS",
            "SPEEDUP",
            "SPREAD",
            "TIME",
            "MESSAGE",
        ],
        &rows,
        paint,
    ));
    out
}

/// Class, speedup, spread, elapsed time and the first line of the message of one result.
fn result_cells(r: &EvalResult) -> Vec<Cell> {
    let star = if r.interpreted { "*" } else { "" };
    vec![
        Cell::new(r.class.as_str()).styled(class_style(r.class)),
        Cell::num(
            r.speedup
                .map_or("-".into(), |s| format!("{}{star}", speedup(s))),
        ),
        Cell::num(r.spread_pct.map_or("-".into(), percent)),
        Cell::num(duration(r.elapsed_s)),
        Cell::new(
            r.message
                .as_deref()
                .map_or(String::new(), |m| truncate(m, 70)),
        ),
    ]
}

fn spec_fields(spec: &GoalSpec) -> Vec<(&'static str, String)> {
    let seeds: Vec<&str> = spec.seeds.iter().map(|s| s.name.as_str()).collect();
    vec![
        ("task", spec.task_dir.clone()),
        (
            "objective",
            format!("{} vs {}", spec.objective, spec.baseline),
        ),
        ("shapes", spec.shapes.join(", ")),
        ("seeds", seeds.join(", ")),
        ("budget", budget_text(spec)),
        ("stop", stop_text(spec)),
        ("agent", spec.agent.kind().to_string()),
        (
            "resources",
            format!(
                "{} GPU(s), priority {}",
                spec.resources.gpus, spec.resources.priority
            ),
        ),
    ]
}

fn budget_text(spec: &GoalSpec) -> String {
    let b = &spec.budget;
    joined_or_none([
        b.wall_s.map(|s| format!("wall {}", duration(s as f64))),
        b.iterations.map(|n| format!("{n} iterations")),
        b.gpu_hours.map(|h| format!("{h} GPU-hours")),
        b.tokens.map(|t| format!("{t} tokens")),
        b.cost.map(|c| {
            let price = b.price_per_1k_tokens.unwrap_or(0.0);
            format!("cost {c} at {price} per 1k tokens")
        }),
    ])
}

fn stop_text(spec: &GoalSpec) -> String {
    let s = &spec.stop;
    joined_or_none([
        s.target_speedup.map(|t| format!("target {}", speedup(t))),
        s.plateau.map(|p| format!("plateau {p} iterations")),
    ])
}

/// The present parts joined with " · ", or "none".
fn joined_or_none<const N: usize>(parts: [Option<String>; N]) -> String {
    let parts: Vec<String> = parts.into_iter().flatten().collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(" · ")
    }
}

fn summary_fields(g: &GoalSummary) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        ("owner", format!("uid {}", g.owner_uid)),
        ("created", datetime(g.created_ms)),
        ("updated", datetime(g.updated_ms)),
        (
            "progress",
            format!(
                "iteration {} · {} evaluations · {} in flight · wall {} · GPU {}",
                g.iteration,
                g.evaluations,
                g.in_flight,
                duration(g.wall_s),
                duration(g.gpu_s)
            ),
        ),
    ];
    fields.push(("best", g.best.as_ref().map_or("none yet".into(), best_text)));
    if g.tokens > 0 {
        fields.push((
            "tokens",
            format!("{} spent by the agent's endpoint", g.tokens),
        ));
    }
    if let Some(reason) = &g.reason {
        fields.push(("reason", reason.clone()));
    }
    if let Some(w) = &g.waiting {
        fields.push(("waiting", w.clone()));
    }
    fields
}

fn best_text(b: &BestSummary) -> String {
    let interp = if b.interpreted {
        " (interpreted: not a GPU figure)"
    } else {
        ""
    };
    format!(
        "{} {} at iteration {}: candidate {} (seed {}) config {}{interp}",
        speedup(b.speedup),
        percent(b.spread_pct),
        b.iteration,
        short_id(&b.candidate),
        b.seed,
        b.config
    )
}

// ---------------------------------------------------------------------------
// events
// ---------------------------------------------------------------------------

/// `seq  time  type  summary` for one event.
pub fn event_line(ev: &Event, paint: Paint, fit_text: Fit) -> String {
    let (summary, style) = event_summary(&ev.kind, fit_text);
    // 19 columns: the longest type name, `evaluation_finished`.
    let kind = paint.paint(&format!("{:<19}", ev.kind.type_name()), style);
    format!("{:>6}  {}  {kind}  {summary}", ev.seq, datetime(ev.time_ms))
        .trim_end()
        .to_string()
}

/// A short, human summary of an event and the colour its type deserves; `fit_text` says
/// whether long messages and configs are cut.
pub fn event_summary(kind: &EventKind, fit_text: Fit) -> (String, Option<Style>) {
    match kind {
        EventKind::DaemonStarted { version, pid, mode } => (
            format!("kerneld {version} pid {pid} ({mode} mode)"),
            Some(Style::Dim),
        ),
        EventKind::DaemonStopped { reason } => {
            (format!("daemon stopped: {reason}"), Some(Style::Dim))
        }
        EventKind::GoalEnqueued { spec, owner_uid } => (
            format!(
                "{} (task {}, agent {}) by uid {owner_uid}",
                spec.name,
                spec.task,
                spec.agent.kind()
            ),
            None,
        ),
        EventKind::GoalStateChanged { from, to, reason } => {
            let why = reason
                .as_deref()
                .map_or(String::new(), |r| format!(": {}", fit(r, 80, fit_text)));
            (format!("{from} → {to}{why}"), Some(state_style(*to)))
        }
        EventKind::SeedDescribed { seed, rejected, .. } => match rejected {
            Some(why) => (
                format!("seed {seed} rejected: {}", fit(why, 80, fit_text)),
                Some(Style::Red),
            ),
            None => (format!("seed {seed} described"), Some(Style::Dim)),
        },
        EventKind::CandidateProposed {
            iteration,
            candidate,
            seed,
            config,
            agent,
            ..
        } => (
            format!(
                "#{iteration} {} from {seed} by {agent} {}",
                short_id(candidate),
                fit(&config.to_string(), 60, fit_text)
            ),
            Some(Style::Dim),
        ),
        EventKind::EvaluationStarted {
            iteration,
            candidate,
            device,
            attempt,
        } => {
            let retry = if *attempt > 1 {
                format!(" (attempt {attempt})")
            } else {
                String::new()
            };
            (
                format!("#{iteration} {} on {device}{retry}", short_id(candidate)),
                Some(Style::Dim),
            )
        }
        EventKind::EvaluationFinished {
            iteration,
            candidate,
            result,
            ..
        } => (
            format!(
                "#{iteration} {} {}",
                short_id(candidate),
                result_summary(result, fit_text)
            ),
            Some(class_style(result.class)),
        ),
        EventKind::EvaluationAborted {
            iteration,
            candidate,
            reason,
            ..
        } => (
            format!(
                "#{iteration} {} aborted: {}",
                short_id(candidate),
                fit(reason, 80, fit_text)
            ),
            Some(Style::Yellow),
        ),
        EventKind::NewBest { best, previous } => {
            let before = previous.map_or(String::new(), |p| format!(" (was {})", speedup(p)));
            let text = format!(
                "#{} {} {} {}{before}",
                best.iteration,
                short_id(&best.candidate),
                speedup(best.speedup),
                percent(best.spread_pct)
            );
            (text, Some(Style::Bold))
        }
        EventKind::DeviceHealth {
            device,
            health,
            reason,
        } => {
            let why = reason
                .as_deref()
                .map_or(String::new(), |r| format!(": {}", fit(r, 80, fit_text)));
            let style = if *health == Health::Healthy {
                Style::Green
            } else {
                Style::Red
            };
            (format!("{device} {}{why}", health_str(health)), Some(style))
        }
        EventKind::AgentFailed {
            agent,
            message,
            failures,
        } => (
            format!("{agent} agent failed ({failures} in a row): {message}"),
            Some(Style::Yellow),
        ),
        EventKind::AgentRetrying {
            agent,
            message,
            attempt,
            retry_in_ms,
        } => (
            format!(
                "{agent} endpoint failed transiently ({attempt} in a row), retrying in {}: {}",
                duration(*retry_in_ms as f64 / 1000.0),
                fit(message, 100, fit_text)
            ),
            Some(Style::Yellow),
        ),
        EventKind::Downtime { from_ms, to_ms } => (
            format!(
                "daemon was down {:.0} s: not counted against the wall budget",
                to_ms.saturating_sub(*from_ms) as f64 / 1000.0
            ),
            Some(Style::Dim),
        ),
    }
}

/// `ok 1.85× ±2.1%` or `wrong_result: shape s16 seed 3`.
pub fn result_summary(r: &EvalResult, fit_text: Fit) -> String {
    let interp = if r.interpreted { " (interpreted)" } else { "" };
    match (r.class, r.speedup) {
        (ResultClass::Ok, Some(s)) => {
            format!(
                "ok {} {}{interp}",
                speedup(s),
                r.spread_pct.map_or(String::new(), percent)
            )
        }
        (class, _) => match &r.message {
            Some(m) => format!("{}: {}", class.as_str(), fit(m, 80, fit_text)),
            None => class.as_str().to_string(),
        },
    }
}

pub fn health_str(h: &Health) -> &'static str {
    match h {
        Health::Healthy => "healthy",
        Health::Drained => "drained",
    }
}

// ---------------------------------------------------------------------------
// gpus
// ---------------------------------------------------------------------------

pub fn gpus(result: &GpusResult, now_ms: u64, paint: Paint) -> String {
    let mut out = match &result.note {
        Some(note) => format!("mode: {} ({note})\n", result.mode),
        None => format!("mode: {}\n", result.mode),
    };
    let rows: Vec<Vec<Cell>> = result
        .devices
        .iter()
        .map(|d| {
            let style = if d.health == Health::Healthy {
                Style::Green
            } else {
                Style::Red
            };
            let health = match &d.health_reason {
                Some(r) => format!("{} ({})", health_str(&d.health), truncate(r, 40)),
                None => health_str(&d.health).to_string(),
            };
            let (goal, candidate, since) = match &d.lease {
                Some(l) => (
                    format!("{} #{}", l.goal_name, l.iteration),
                    short_id(&l.candidate),
                    duration(now_ms.saturating_sub(l.since_ms) as f64 / 1000.0),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            vec![
                Cell::new(&d.uuid),
                Cell::new(&d.name),
                Cell::new(health).styled(style),
                Cell::new(goal),
                Cell::new(candidate),
                Cell::num(since),
                Cell::num(d.evaluations.to_string()),
                Cell::num(duration(d.busy_s)),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "UUID",
            "NAME",
            "HEALTH",
            "LEASE",
            "CANDIDATE",
            "SINCE",
            "EVALS",
            "BUSY",
        ],
        &rows,
        paint,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerneld_protocol::wire::{GpuStatus, LeaseInfo};

    pub fn summary(name: &str, state: GoalState, best: Option<f64>) -> GoalSummary {
        GoalSummary {
            id: format!("g-{name}"),
            name: name.into(),
            task: "demo".into(),
            state,
            reason: None,
            iteration: 12,
            evaluations: 11,
            in_flight: 1,
            best: best.map(|s| BestSummary {
                candidate: "0123456789abcdef".into(),
                seed: "seed.py".into(),
                config: serde_json::json!({"BLOCK": 64}),
                speedup: s,
                spread_pct: 2.5,
                iteration: 9,
                interpreted: false,
            }),
            priority: 0,
            gpus: 1,
            owner_uid: 1000,
            created_ms: 0,
            updated_ms: 0,
            wall_s: 312.0,
            gpu_s: 200.0,
            tokens: 0,
            waiting: None,
        }
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(0.0), "0s");
        assert_eq!(duration(42.4), "42s");
        assert_eq!(duration(312.0), "5m12s");
        assert_eq!(duration(3.0 * 3600.0 + 4.0 * 60.0), "3h04m");
        assert_eq!(duration(2.0 * 86_400.0 + 3.0 * 3600.0), "2d03h");
        assert_eq!(duration(f64::NAN), "-");
        assert_eq!(duration(-1.0), "-");
    }

    #[test]
    fn speedups_keep_three_significant_digits() {
        assert_eq!(speedup(1.8512), "1.85×");
        assert_eq!(speedup(41.23), "41.2×");
        assert_eq!(speedup(123.4), "123×");
        assert_eq!(speedup(0.00412), "0.00412×");
        assert_eq!(speedup(0.0176), "0.0176×");
        assert_eq!(speedup(0.05), "0.0500×");
        assert_eq!(speedup(0.099_96), "0.1000×");
        assert_eq!(speedup(0.000_012_34), "0.0000123×");
        assert_eq!(speedup(0.5), "0.50×");
        assert_eq!(speedup(f64::INFINITY), "-");
    }

    #[test]
    fn utc_fallback_is_a_correct_calendar() {
        let c = utc(1_796_060_600); // 2026-11-30 17:43:20 UTC
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second),
            (2026, 11, 30, 17, 43, 20)
        );
        let epoch = utc(0);
        assert_eq!((epoch.year, epoch.month, epoch.day), (1970, 1, 1));
        let leap = utc(951_782_400); // 2000-02-29
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
    }

    #[test]
    fn table_aligns_columns_and_numbers() {
        let rows = vec![
            vec![Cell::new("a"), Cell::num("1")],
            vec![Cell::new("long"), Cell::num("100")],
        ];
        let text = table(&["K", "N"], &rows, Paint::OFF);
        assert_eq!(text, "K       N\na       1\nlong  100\n");
    }

    #[test]
    fn colour_is_only_escape_codes_and_keeps_alignment() {
        let rows = vec![vec![Cell::new("x").styled(Style::Red), Cell::new("y")]];
        let coloured = table(&["AB", "C"], &rows, Paint { enabled: true });
        let stripped = coloured
            .replace("\x1b[31m", "")
            .replace("\x1b[1m", "")
            .replace("\x1b[0m", "");
        assert_eq!(stripped, table(&["AB", "C"], &rows, Paint::OFF));
        assert!(!table(&["AB", "C"], &rows, Paint::OFF).contains('\x1b'));
    }

    #[test]
    fn status_table_has_every_column() {
        let mut done = summary("kda", GoalState::Completed, None);
        done.reason = Some("target_reached".into());
        let text = status_table(
            &[
                summary("mla-decode", GoalState::Running, Some(1.8512)),
                done,
            ],
            Paint::OFF,
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        for h in STATUS_HEADERS {
            assert!(lines[0].contains(h), "{h} missing in {}", lines[0]);
        }
        assert!(
            lines[1].contains("mla-decode")
                && lines[1].contains("running")
                && lines[1].contains("1.85×")
        );
        assert!(lines[1].contains("±2.5%") && lines[1].contains("5m12s"));
        assert!(lines[2].contains("completed") && lines[2].ends_with("target_reached"));
    }

    #[test]
    fn interpreted_best_is_starred_and_explained() {
        let mut g = summary("demo", GoalState::Running, Some(0.5));
        g.best.as_mut().unwrap().interpreted = true;
        let text = status_table(&[g], Paint::OFF);
        assert!(text.contains("0.50×*"));
        assert!(text.contains("interpreter"));
    }

    #[test]
    fn visible_truncation_keeps_colours_and_counts_only_text() {
        let red = Paint { enabled: true }.paint("abcdef", Some(Style::Red));
        assert_eq!(truncate_visible(&red, 10), red);
        let cut = truncate_visible(&format!("{red}ghij"), 5);
        assert_eq!(strip_ansi(&cut), "abcd…");
        assert!(cut.starts_with("\x1b[31m") && cut.ends_with("\x1b[0m"));
    }

    #[test]
    fn truncation_takes_first_line_with_ellipsis() {
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("line one\nline two", 20), "line one…");
        assert_eq!(truncate("abcdefghij", 5), "abcd…");
    }

    #[test]
    fn event_lines_summarise_results() {
        let ev = Event {
            seq: 42,
            time_ms: 0,
            goal: Some("g".into()),
            kind: EventKind::EvaluationFinished {
                iteration: 7,
                candidate: "abcdef0123456789".into(),
                device: "GPU-1".into(),
                result: EvalResult::failure(
                    ResultClass::WrongResult,
                    "shape s16 seed 3\ntrace",
                    1.0,
                ),
            },
        };
        let line = event_line(&ev, Paint::OFF, Fit::Cut);
        assert!(line.trim_start().starts_with("42  "));
        assert!(line.contains("evaluation_finished"));
        assert!(
            line.ends_with("#7 abcdef012345 wrong_result: shape s16 seed 3…"),
            "{line}"
        );
    }

    #[test]
    fn event_lines_keep_whole_messages_and_configs_off_a_terminal() {
        let message = format!("shape s16 seed 3: {}\nTraceback line", "x".repeat(120));
        let finished = EventKind::EvaluationFinished {
            iteration: 7,
            candidate: "abcdef0123456789".into(),
            device: "GPU-1".into(),
            result: EvalResult::failure(ResultClass::WrongResult, &message, 1.0),
        };
        let ev = Event {
            seq: 42,
            time_ms: 0,
            goal: Some("g".into()),
            kind: finished,
        };
        let whole = event_line(&ev, Paint::OFF, Fit::Whole);
        assert!(!whole.contains('\n') && !whole.contains('…'), "{whole}");
        assert!(whole.ends_with(&format!("{} ⏎ Traceback line", "x".repeat(120))));
        assert!(event_line(&ev, Paint::OFF, Fit::Cut).ends_with('…'));

        let config: serde_json::Value = serde_json::json!({
            "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4
        });
        let proposed = EventKind::CandidateProposed {
            iteration: 3,
            candidate: "abcdef0123456789".into(),
            seed: "seed.py".into(),
            config: config.clone(),
            agent: "search".into(),
            source: None,
            note: None,
            tokens: None,
        };
        let (text, _) = event_summary(&proposed, Fit::Whole);
        assert!(text.ends_with(&config.to_string()), "{text}");
        let (cut, _) = event_summary(&proposed, Fit::Cut);
        assert!(cut.ends_with('…'), "{cut}");
    }

    #[test]
    fn empty_no_color_does_not_turn_colour_off() {
        use std::ffi::OsStr;
        let xterm = Some(OsStr::new("xterm"));
        assert!(Paint::decide(true, None, xterm).enabled);
        assert!(Paint::decide(true, Some(OsStr::new("")), xterm).enabled);
        assert!(!Paint::decide(true, Some(OsStr::new("1")), xterm).enabled);
        assert!(!Paint::decide(true, None, Some(OsStr::new("dumb"))).enabled);
        assert!(!Paint::decide(false, None, xterm).enabled);
    }

    #[test]
    fn status_line_is_one_line() {
        let line = status_line(
            &summary("mla", GoalState::Running, Some(2.0)),
            Paint::OFF,
            Fit::Cut,
        );
        assert!(!line.contains('\n'));
        assert!(line.contains("best 2.00× ±2.5% (iter 9)"));
    }

    #[test]
    fn gpus_table_shows_leases() {
        let result = GpusResult {
            mode: "gpu".into(),
            note: None,
            devices: vec![GpuStatus {
                uuid: "GPU-abc".into(),
                name: "NVIDIA H200".into(),
                compute_capability: Some("9.0".into()),
                memory_total_mib: Some(143_771),
                sm_clock_mhz: Some(1980),
                health: Health::Healthy,
                health_reason: None,
                lease: Some(LeaseInfo {
                    goal: "g-1".into(),
                    goal_name: "mla".into(),
                    candidate: "feedfacecafebeef".into(),
                    iteration: 3,
                    since_ms: 10_000,
                }),
                worker_pid: Some(4242),
                evaluations: 5,
                busy_s: 75.0,
            }],
        };
        let text = gpus(&result, 40_000, Paint::OFF);
        assert!(text.starts_with("mode: gpu\n"));
        let row = text.lines().nth(2).unwrap();
        for part in [
            "GPU-abc",
            "NVIDIA H200",
            "healthy",
            "mla #3",
            "feedfacecafe",
            "30s",
            "5",
            "1m15s",
        ] {
            assert!(row.contains(part), "{part} missing in {row}");
        }
    }
}
