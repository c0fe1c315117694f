//! Text for people: tables, durations, times, colours, and one-line summaries of events.
//!
//! Every function returns a `String` (or lines of one) so it can be tested without a
//! terminal; colour is applied through a `Paint` (term.rs decides when it is on).

mod events;
mod gpu;
mod phases;
mod show;

pub use events::{event_line, health_str, result_summary};
pub use show::{show, Mode};

pub use crate::term::{
    clock, datetime, now_ms, terminal_columns, truncate, truncate_visible, width, Paint, Style,
};

use kerneld_protocol::wire::{
    BestSummary, GoalState, GoalSummary, GpusResult, Health, ResultClass, SandboxStatus, LABEL_GPU,
    LABEL_INTERPRETED,
};

// ---------------------------------------------------------------------------
// Colour
// ---------------------------------------------------------------------------

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

/// A noise `±x%`. Past 999 % a figure says nothing but "unknown" (interpreter timings pooled
/// as log-speedups reach ±1e37 %), so it reads `±>999%` rather than forty digits.
pub fn percent(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x > 999.0 {
        "±>999%".into()
    } else {
        format!("±{x:.1}%")
    }
}

/// What a best's figure is: `GPU time, pooled over 10 measurements` (issue #23), or its
/// label alone for a best decided before pooling.
pub fn best_kind(b: &BestSummary) -> String {
    match b.measurements {
        Some(n) => format!(
            "{}, pooled over {n} measurement{}",
            b.timing_label(),
            if n == 1 { "" } else { "s" }
        ),
        None => b.timing_label().to_string(),
    }
}

/// The mark a best's figure gets in tables, and what it means (one footnote per mark):
/// interpreted (CPU mode) and "as called" figures are not the GPU time of the kernel.
fn best_mark(b: &BestSummary) -> &'static str {
    match b.timing_label() {
        LABEL_INTERPRETED => "*",
        LABEL_GPU => "",
        _ => "†",
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

/// The best speedup, marked when it is not the GPU time (`best_mark`).
fn best_cells(best: Option<&BestSummary>) -> (Cell, Cell) {
    match best {
        Some(b) => {
            let star = best_mark(b);
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
            out.push_str(&format!("{} {} waits: {w}\n", g.id, g.name));
        }
    }
    // A best that may no longer win (its environment changed since it was measured).
    for g in goals {
        if let Some(c) = &g.environment_changed {
            out.push_str(&format!("{} {}: {c}\n", g.id, g.name));
        }
    }
    let marked = |mark: &str| {
        goals
            .iter()
            .any(|g| g.best.as_ref().is_some_and(|b| best_mark(b) == mark))
    };
    if marked("*") {
        out.push_str("* measured under the Triton interpreter (CPU mode): not a GPU speedup\n");
    }
    if marked("†") {
        out.push_str("† timed as called (host-inclusive, each call launched from Python), not the GPU time\n");
    }
    out
}

/// The compact one-line status `watch` redraws.
pub fn status_line(g: &GoalSummary, paint: Paint, fit_text: Fit) -> String {
    let best = g.best.as_ref().map_or("best -".to_string(), |b| {
        format!(
            "best {} {} {} (iter {})",
            speedup(b.speedup),
            percent(b.spread_pct),
            b.timing_label(),
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
// gpus
// ---------------------------------------------------------------------------

pub fn gpus(result: &GpusResult, now_ms: u64, paint: Paint) -> String {
    let mut out = match &result.note {
        Some(note) => format!("mode: {} ({note})\n", result.mode),
        None => format!("mode: {}\n", result.mode),
    };
    // Slurm slots add a column: the job behind the slot (id@node, state, time left).
    let slurm = result
        .devices
        .iter()
        .any(|d| d.slurm.is_some() || d.uuid.starts_with("slurm-"));
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
            let mut row = vec![
                Cell::new(&d.uuid),
                Cell::new(&d.name),
                Cell::new(health).styled(style),
                Cell::new(goal),
                Cell::new(candidate),
                Cell::num(since),
                Cell::num(d.evaluations.to_string()),
                Cell::num(duration(d.busy_s)),
            ];
            if slurm {
                row.push(Cell::new(match &d.slurm {
                    Some(j) => format!(
                        "{}@{} {}{}",
                        j.job,
                        j.node.as_deref().unwrap_or("-"),
                        j.state,
                        j.time_left_s
                            .map_or(String::new(), |t| format!(" {} left", duration(t as f64)))
                    ),
                    None => "-".into(),
                }));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "UUID",
        "NAME",
        "HEALTH",
        "LEASE",
        "CANDIDATE",
        "SINCE",
        "EVALS",
        "BUSY",
    ];
    if slurm {
        headers.push("SLURM JOB");
    }
    out.push_str(&table(&headers, &rows, paint));
    out.push_str(&gpu::why_drained(result, paint));
    out.push_str(&gpu::all_readings(result));
    if let Some(sb) = &result.sandbox {
        out.push_str(&sandbox(sb, paint));
    }
    out
}

/// The evaluation sandbox: in force or not, what it restricts, what is missing.
pub fn sandbox(sb: &SandboxStatus, paint: Paint) -> String {
    let head = if sb.complete {
        paint.paint("sandbox: in force", Some(Style::Green))
    } else if sb.allow_unsandboxed {
        paint.paint(
            "sandbox: INCOMPLETE, and allow_unsandboxed = true: code-writing goals run anyway",
            Some(Style::Red),
        )
    } else {
        paint.paint(
            "sandbox: INCOMPLETE: goals whose agent writes code are refused",
            Some(Style::Red),
        )
    };
    let mut out = format!(
        "{head}
"
    );
    for r in &sb.restricts {
        out.push_str(&format!(
            "  {r}
"
        ));
    }
    for w in &sb.widened {
        out.push_str(&format!(
            "  widened for CUDA: {}: {} (with it strict: {})\n",
            w.layer, w.level, w.reason
        ));
    }
    if let Some(first) = sb.trials.first() {
        let how = if first.ok {
            "CUDA started under the strict policy".to_string()
        } else {
            format!(
                "{} runs; the strict policy failed: {}",
                sb.trials.len(),
                first.error.as_deref().unwrap_or("?")
            )
        };
        out.push_str(&format!("  GPU trial: {how}\n"));
    }
    for p in &sb.problems {
        out.push_str(&format!(
            "  missing: {p}
"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::term::strip_ansi;
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
                environment: None,
                measurements: Some(10),
                timing: Some("gpu".into()),
            }),
            priority: 0,
            gpus: 1,
            owner_uid: 1000,
            created_ms: 0,
            updated_ms: 0,
            wall_s: 312.0,
            gpu_s: 200.0,
            phases: None,
            tokens: 0,
            waiting: None,
            forked_from: None,
            environment_changed: None,
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
    fn status_line_is_one_line() {
        let line = status_line(
            &summary("mla", GoalState::Running, Some(2.0)),
            Paint::OFF,
            Fit::Cut,
        );
        assert!(!line.contains('\n'));
        assert!(
            line.contains("best 2.00× ±2.5% GPU time (iter 9)"),
            "{line}"
        );
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
                slurm: None,
                readings: None,
            }],
            sandbox: None,
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

    #[test]
    fn gpus_table_shows_slurm_jobs() {
        use kerneld_protocol::wire::SlurmJobStatus;
        let slot = |uuid: &str, slurm: Option<SlurmJobStatus>| GpuStatus {
            uuid: uuid.into(),
            name: "Slurm gpu (gpu:1)".into(),
            compute_capability: None,
            memory_total_mib: None,
            sm_clock_mhz: None,
            health: Health::Healthy,
            health_reason: None,
            lease: None,
            worker_pid: None,
            evaluations: 0,
            busy_s: 0.0,
            slurm,
            readings: None,
        };
        let result = GpusResult {
            mode: "gpu".into(),
            note: None,
            sandbox: None,
            devices: vec![
                slot(
                    "slurm-0",
                    Some(SlurmJobStatus {
                        job: 17,
                        node: Some("node3".into()),
                        state: "RUNNING".into(),
                        time_left_s: Some(3600),
                    }),
                ),
                slot("slurm-1", None),
            ],
        };
        let text = gpus(&result, 0, Paint::OFF);
        assert!(text.lines().nth(1).unwrap().contains("SLURM JOB"), "{text}");
        let row = text.lines().nth(2).unwrap();
        assert!(
            row.contains("17@node3 RUNNING 1h") && row.contains("left"),
            "{row}"
        );
        assert!(
            text.lines().nth(3).unwrap().trim_end().ends_with('-'),
            "{text}"
        );
    }

    #[test]
    fn the_sandbox_says_what_the_gpu_trial_widened_and_why() {
        use kerneld_protocol::wire::{SandboxStatus, SandboxTrial, SandboxWidening};
        let mut sb = SandboxStatus {
            complete: true,
            allow_unsandboxed: false,
            runner_uid: 999,
            runner_user: "kerneld-runner".into(),
            probe: None,
            restricts: vec!["sockets: made but reaching nothing".into()],
            problems: vec![],
            widened: vec![],
            trials: vec![SandboxTrial {
                variant: "strict".into(),
                ok: true,
                error: None,
            }],
        };
        let text = strip_ansi(&sandbox(&sb, Paint::OFF));
        assert!(text.starts_with("sandbox: in force\n"), "{text}");
        assert!(
            text.contains("  GPU trial: CUDA started under the strict policy\n"),
            "{text}"
        );
        sb.complete = false;
        sb.trials[0] = SandboxTrial {
            variant: "strict".into(),
            ok: false,
            error: Some("the runner: Error 304".into()),
        };
        sb.widened = vec![SandboxWidening {
            layer: "proc-write".into(),
            level: "a runner writes its own /proc/<pid>".into(),
            reason: "the runner: Error 304".into(),
        }];
        let text = strip_ansi(&sandbox(&sb, Paint::OFF));
        assert!(text.contains(
            "  widened for CUDA: proc-write: a runner writes its own /proc/<pid> (with it strict: the runner: Error 304)\n"
        ), "{text}");
        assert!(
            text.contains("GPU trial: 1 runs; the strict policy failed: the runner: Error 304"),
            "{text}"
        );
    }
}
