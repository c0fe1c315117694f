//! `report`: a goal's progress over time, from its events, as an SVG chart or a terminal chart.
//!
//! The picture answers "is it still getting better, and how fast?": one dot per correct
//! evaluation (its speedup over the baseline), the best-so-far as a step line, failures as
//! marks on a strip below, the baseline (1×) and the goal's target as reference lines.

use std::fmt::Write as _;

use kerneld_protocol::wire::{Event, EventKind, GoalState, ResultClass};
use serde::Serialize;

use crate::render::{self, Paint, Style};

/// One finished evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub iteration: u64,
    pub time_ms: u64,
    pub candidate: String,
    pub class: ResultClass,
    /// Only for correct, timed results.
    pub speedup: Option<f64>,
    pub message: Option<String>,
}

/// The best-so-far rises to `speedup` at `iteration`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Step {
    pub iteration: u64,
    pub speedup: f64,
}

/// Everything the charts show, gathered from the events of one goal.
#[derive(Debug, Clone, Serialize)]
pub struct Progress {
    /// The goal's id (`g9`), whether the user named it by id or by name.
    pub goal: String,
    /// The goal's name, from its goal file.
    pub name: String,
    pub state: Option<GoalState>,
    pub reason: Option<String>,
    pub target: Option<f64>,
    /// Timings came from Triton's interpreter (CPU mode): not GPU figures.
    pub interpreted: bool,
    pub points: Vec<Point>,
    /// Strictly rising; from the daemon's `new_best` events (or the points, when it has none).
    pub best: Vec<Step>,
    /// Correct evaluations over 10x, with why they are flagged (confirmed by a re-time or not).
    pub flags: Vec<crate::retime::Flagged>,
}

impl Progress {
    pub fn from_events(goal: &str, events: &[Event]) -> Progress {
        let mut p = Progress {
            goal: goal.to_string(),
            name: goal.to_string(),
            state: None,
            reason: None,
            target: None,
            interpreted: false,
            points: Vec::new(),
            best: Vec::new(),
            flags: Vec::new(),
        };
        let mut announced = Vec::new();
        for ev in events {
            p.absorb(ev, &mut announced);
        }
        p.points.sort_by_key(|pt| pt.iteration);
        let steps = if announced.is_empty() {
            p.scored()
                .map(|(iteration, speedup)| Step { iteration, speedup })
                .collect()
        } else {
            announced
        };
        p.best = rising(steps);
        p.flags = crate::retime::flagged(&p.points, events);
        p
    }

    fn absorb(&mut self, ev: &Event, announced: &mut Vec<Step>) {
        // The user may have named the goal by name: its events carry the id.
        if let Some(id) = &ev.goal {
            self.goal.clone_from(id);
        }
        match &ev.kind {
            EventKind::GoalEnqueued { spec, .. } => {
                self.name = spec.name.clone();
                self.target = spec.stop.target_speedup;
            }
            EventKind::GoalStateChanged { to, reason, .. } => {
                self.state = Some(*to);
                self.reason = reason.clone();
            }
            EventKind::EvaluationFinished {
                iteration,
                candidate,
                result,
                ..
            } => {
                self.interpreted |= result.interpreted;
                self.points.push(Point {
                    iteration: *iteration,
                    time_ms: ev.time_ms,
                    candidate: candidate.clone(),
                    class: result.class,
                    speedup: result.speedup.filter(|_| result.is_scored()),
                    message: result.message.clone(),
                });
            }
            EventKind::NewBest { best, .. } => {
                self.interpreted |= best.interpreted;
                announced.push(Step {
                    iteration: best.iteration,
                    speedup: best.speedup,
                })
            }
            _ => {}
        }
    }

    /// (iteration, speedup) of every correct, timed evaluation.
    fn scored(&self) -> impl Iterator<Item = (u64, f64)> + '_ {
        self.points
            .iter()
            .filter_map(|p| p.speedup.filter(|s| *s > 0.0).map(|s| (p.iteration, s)))
    }

    fn failures(&self) -> impl Iterator<Item = &Point> {
        self.points.iter().filter(|p| p.speedup.is_none())
    }

    pub fn best_now(&self) -> Option<Step> {
        self.best.last().copied()
    }

    /// Seconds from the first to the last finished evaluation.
    fn span_s(&self) -> Option<f64> {
        let first = self.points.iter().map(|p| p.time_ms).min()?;
        let last = self.points.iter().map(|p| p.time_ms).max()?;
        (last > first).then(|| (last - first) as f64 / 1000.0)
    }

    /// Seconds from the first evaluation to the first one at or after `iteration`.
    fn elapsed_at(&self, iteration: u64) -> Option<f64> {
        let start = self.points.first()?.time_ms;
        let at = self
            .points
            .iter()
            .find(|p| p.iteration >= iteration)?
            .time_ms;
        Some(at.saturating_sub(start) as f64 / 1000.0)
    }

    /// `20 compile_error, 14 wrong_result`: failures by class, most frequent first.
    pub fn failure_breakdown(&self) -> String {
        let mut counts: Vec<(ResultClass, usize)> = Vec::new();
        for p in self.failures() {
            match counts.iter_mut().find(|(c, _)| *c == p.class) {
                Some((_, n)) => *n += 1,
                None => counts.push((p.class, 1)),
            }
        }
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.as_str().cmp(b.0.as_str())));
        let parts: Vec<String> = counts
            .iter()
            .map(|(c, n)| format!("{n} {}", c.as_str()))
            .collect();
        parts.join(", ")
    }

    fn last_iteration(&self) -> u64 {
        let last_point = self.points.last().map_or(0, |p| p.iteration);
        last_point.max(self.best.last().map_or(0, |s| s.iteration))
    }

    /// `312 evaluations (14 failed) in 9h12m · best 41.2× at iteration 287 · completed (plateau)`
    pub fn headline(&self) -> String {
        let failed = self.failures().count();
        let mut text = format!("{} evaluations ({failed} failed)", self.points.len());
        if let Some(span) = self.span_s() {
            let _ = write!(text, " in {}", render::duration(span));
        }
        if let Some(b) = self.best_now() {
            let _ = write!(
                text,
                " · best {} at iteration {}",
                render::speedup(b.speedup),
                b.iteration
            );
        }
        if let Some(state) = self.state {
            let _ = write!(text, " · {state}");
            if let Some(r) = &self.reason {
                let _ = write!(text, " ({})", render::truncate(r, 40));
            }
        }
        text
    }
}

/// Orders steps by iteration and keeps only those that raise the best: a monotone line.
fn rising(mut steps: Vec<Step>) -> Vec<Step> {
    steps.sort_by_key(|s| s.iteration);
    let mut out: Vec<Step> = Vec::new();
    for s in steps
        .into_iter()
        .filter(|s| s.speedup.is_finite() && s.speedup > 0.0)
    {
        if out.last().is_none_or(|b| s.speedup > b.speedup) {
            out.push(s);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Scales
// ---------------------------------------------------------------------------

/// Maps a speedup to [0, 1]: logarithmic when the values span more than `LOG_SPAN`,
/// because ratios (0.5× and 2×) should sit symmetrically around the baseline.
#[derive(Debug, Clone, Copy)]
struct YScale {
    lo: f64,
    hi: f64,
    log: bool,
}

const LOG_SPAN: f64 = 4.0;

impl YScale {
    /// The exact range of the values, or `None` when there are none.
    fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && *v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        lo.is_finite().then_some((lo, hi))
    }

    /// A scale for an axis: widened to powers of two (log) or round steps (linear).
    fn fit(values: impl Iterator<Item = f64>) -> YScale {
        let Some((lo, hi)) = YScale::range(values) else {
            return YScale {
                lo: 0.0,
                hi: 2.0,
                log: false,
            };
        };
        if hi / lo > LOG_SPAN {
            YScale {
                lo: lo.log2().floor().exp2(),
                hi: hi.log2().ceil().exp2(),
                log: true,
            }
        } else {
            let step = nice_step((hi - lo).max(hi * 0.05) / 4.0);
            let lo = ((lo / step).floor() * step).max(0.0);
            let hi = (hi / step).ceil() * step;
            YScale {
                lo,
                hi: if hi > lo { hi } else { lo + step },
                log: false,
            }
        }
    }

    /// A scale exactly as wide as the values: eight block heights need all the room.
    fn tight(values: impl Iterator<Item = f64>) -> YScale {
        let Some((lo, hi)) = YScale::range(values) else {
            return YScale {
                lo: 0.0,
                hi: 2.0,
                log: false,
            };
        };
        let hi = if hi > lo { hi } else { lo * 1.01 + 1e-9 };
        YScale {
            lo,
            hi,
            log: hi / lo > LOG_SPAN,
        }
    }

    fn unit(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.max(f64::MIN_POSITIVE).log2() - self.lo.log2()) / (self.hi.log2() - self.lo.log2())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        t.clamp(0.0, 1.0)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.log2().round() as i32, self.hi.log2().round() as i32);
            let every = ((b - a) / 10 + 1).max(1) as usize;
            (a..=b)
                .step_by(every)
                .map(|e| f64::from(e).exp2())
                .collect()
        } else {
            linear_ticks(self.lo, self.hi, 5)
        }
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Round values from `lo` to `hi`, about `count` of them.
fn linear_ticks(lo: f64, hi: f64, count: u32) -> Vec<f64> {
    let step = nice_step((hi - lo) / f64::from(count));
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A speedup for an axis label: `0.25×`, `1×`, `1.5×`, `32×`, `0.00781×`: up to two
/// decimals from 1× up, three significant digits below, without trailing zeros; `extra`
/// more decimals where neighbouring ticks would read the same.
fn axis_label(v: f64, extra: usize) -> String {
    let a = v.abs();
    let decimals = if a >= 1.0 || a == 0.0 || !a.is_finite() {
        2
    } else {
        (2 - a.log10().floor() as i64).clamp(2, 12) as usize
    } + extra;
    let text = format!("{v:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}×")
}

/// Labels for the ticks of one axis, with as many more decimals as it takes to tell
/// every tick from its neighbours.
fn axis_labels(ticks: &[f64]) -> Vec<String> {
    let labels_with =
        |extra| -> Vec<String> { ticks.iter().map(|&t| axis_label(t, extra)).collect() };
    for extra in 0..6 {
        let labels = labels_with(extra);
        if labels.windows(2).all(|w| w[0] != w[1]) {
            return labels;
        }
    }
    labels_with(6)
}

// ---------------------------------------------------------------------------
// SVG
// ---------------------------------------------------------------------------

const W: f64 = 900.0;
const H: f64 = 500.0;
/// The plot area; the strip of failure marks sits below it, above the x labels.
const LEFT: f64 = 78.0;
const RIGHT: f64 = 870.0;
const TOP: f64 = 96.0;
const BOTTOM: f64 = 400.0;
const FAIL_Y: f64 = 416.0;

const DOT: &str = "#4C78A8";
const BEST: &str = "#E45756";
const FAIL: &str = "#B279A2";
const TARGET: &str = "#54A24B";
const GRID: &str = "#E6E6E6";
const INK: &str = "#333333";

/// Geometry of the plot: data coordinates to SVG pixels.
struct Frame {
    y: YScale,
    first: u64,
    last: u64,
}

impl Frame {
    fn new(p: &Progress) -> Frame {
        let values = p
            .scored()
            .map(|(_, s)| s)
            .chain(p.best.iter().map(|s| s.speedup));
        let y = YScale::fit(values.chain([1.0]).chain(p.target));
        let first_point = p.points.first().map_or(0, |pt| pt.iteration);
        let first = first_point.min(p.best.first().map_or(u64::MAX, |s| s.iteration));
        let last = p.last_iteration().max(first + 1);
        Frame { y, first, last }
    }

    fn px(&self, iteration: u64) -> f64 {
        let t = (iteration.saturating_sub(self.first)) as f64 / (self.last - self.first) as f64;
        LEFT + t * (RIGHT - LEFT)
    }

    fn py(&self, speedup: f64) -> f64 {
        BOTTOM - self.y.unit(speedup) * (BOTTOM - TOP)
    }
}

pub fn svg(p: &Progress) -> String {
    let f = Frame::new(p);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="Helvetica, Arial, sans-serif" font-size="12" fill="{INK}">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    title(&mut s, p);
    if p.points.is_empty() {
        let (x, y) = (W / 2.0, H / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{y}" text-anchor="middle" font-size="16">no evaluations yet</text>"#
        );
        s.push_str("</svg>\n");
        return s;
    }
    y_axis(&mut s, &f);
    x_axis(&mut s, &f, p);
    reference_line(&mut s, &f, 1.0, "#999999", "baseline 1×");
    if let Some(t) = p.target {
        reference_line(
            &mut s,
            &f,
            t,
            TARGET,
            &format!("target {}", render::speedup(t)),
        );
    }
    dots(&mut s, &f, p);
    failures(&mut s, &f, p);
    best_line(&mut s, &f, p);
    legend(&mut s);
    s.push_str("</svg>\n");
    s
}

fn title(s: &mut String, p: &Progress) {
    let name = esc(&p.name);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="30" font-size="18" font-weight="bold">{name}: speedup per evaluation</text>"#
    );
    let mut sub = p.headline();
    if let Some(f) = p.flags.last() {
        let _ = write!(sub, " · #{} {}", f.iteration, f.flag);
    }
    if p.interpreted {
        sub.push_str(" · interpreted (CPU mode): not GPU timings");
    }
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="52" fill="#666666">{}</text>"##,
        esc(&sub)
    );
}

fn y_axis(s: &mut String, f: &Frame) {
    let ticks = f.y.ticks();
    for (t, label) in ticks.iter().copied().zip(axis_labels(&ticks)) {
        let y = f.py(t);
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.1}" y2="{y:.1}" stroke="{GRID}"/>"#
        );
        let (lx, ly) = (LEFT - 8.0, y + 4.0);
        let _ = writeln!(
            s,
            r#"<text x="{lx}" y="{ly:.1}" text-anchor="end">{}</text>"#,
            esc(&label)
        );
    }
    let scale = if f.y.log {
        "speedup vs baseline (log scale)"
    } else {
        "speedup vs baseline"
    };
    let mid = (TOP + BOTTOM) / 2.0;
    let _ = writeln!(
        s,
        r#"<text transform="translate(20 {mid}) rotate(-90)" text-anchor="middle">{scale}</text>"#
    );
}

/// Iteration ticks, each with the time since the first evaluation in grey below it.
fn x_axis(s: &mut String, f: &Frame, p: &Progress) {
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" x2="{RIGHT}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="{INK}"/>"#
    );
    for t in linear_ticks(f.first as f64, f.last as f64, 8) {
        let x = f.px(t as u64);
        let (tick_end, label_y, time_y) = (BOTTOM + 4.0, FAIL_Y + 26.0, FAIL_Y + 40.0);
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{BOTTOM}" y2="{tick_end}" stroke="{INK}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{label_y}" text-anchor="middle">{}</text>"#,
            t as u64
        );
        if let Some(elapsed) = p.elapsed_at(t as u64) {
            let label = format!("+{}", render::duration(elapsed));
            let _ = writeln!(
                s,
                r##"<text x="{x:.1}" y="{time_y}" text-anchor="middle" font-size="10" fill="#888888">{label}</text>"##
            );
        }
    }
    let (cx, cy) = ((LEFT + RIGHT) / 2.0, H - 14.0);
    let _ = writeln!(
        s,
        r#"<text x="{cx}" y="{cy}" text-anchor="middle">iteration (and time since the first evaluation)</text>"#
    );
    let (fx, fy) = (LEFT - 8.0, FAIL_Y + 4.0);
    let why = esc(&p.failure_breakdown());
    let _ = writeln!(
        s,
        r##"<text x="{fx}" y="{fy}" text-anchor="end" fill="#666666">failed<title>{why}</title></text>"##
    );
}

/// A dashed horizontal line at `value`, labelled at its left end (the newest points and the
/// best's label crowd the right end).
fn reference_line(s: &mut String, f: &Frame, value: f64, colour: &str, label: &str) {
    let y = f.py(value);
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.1}" y2="{y:.1}" stroke="{colour}" stroke-dasharray="5 4"/>"#
    );
    let (lx, ly) = (LEFT + 6.0, y - 5.0);
    let _ = writeln!(
        s,
        r#"<text x="{lx}" y="{ly:.1}" fill="{colour}">{}</text>"#,
        esc(label)
    );
}

fn dots(s: &mut String, f: &Frame, p: &Progress) {
    s.push_str("<g class=\"evaluations\">\n");
    for pt in &p.points {
        let Some(v) = pt.speedup else { continue };
        let tip = format!(
            "iteration {} · {} · {}",
            pt.iteration,
            render::short_id(&pt.candidate),
            render::speedup(v)
        );
        let (x, y) = (f.px(pt.iteration), f.py(v));
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{DOT}" fill-opacity="0.55"><title>{}</title></circle>"#,
            esc(&tip)
        );
    }
    s.push_str("</g>\n");
}

fn failures(s: &mut String, f: &Frame, p: &Progress) {
    s.push_str("<g class=\"failures\">\n");
    for pt in p.failures() {
        let (x, y) = (f.px(pt.iteration) - 3.0, FAIL_Y - 3.0);
        let why = pt
            .message
            .as_deref()
            .map_or(String::new(), |m| format!(": {}", render::truncate(m, 100)));
        let tip = format!("iteration {} · {}{why}", pt.iteration, pt.class.as_str());
        let _ = writeln!(
            s,
            r#"<path d="M{x:.1} {y:.1}l6 6m0 -6l-6 6" stroke="{FAIL}" stroke-width="1.5"><title>{}</title></path>"#,
            esc(&tip)
        );
    }
    s.push_str("</g>\n");
}

/// The best-so-far as pixel vertices of a step line: flat until each new best, then up,
/// carried on to the last iteration.
fn best_vertices(f: &Frame, p: &Progress) -> Vec<(f64, f64)> {
    let mut v = Vec::new();
    for step in &p.best {
        let (x, y) = (f.px(step.iteration), f.py(step.speedup));
        if let Some(&(_, prev_y)) = v.last() {
            v.push((x, prev_y));
        }
        v.push((x, y));
    }
    if let Some(&(_, y)) = v.last() {
        v.push((f.px(f.last), y));
    }
    v
}

fn best_line(s: &mut String, f: &Frame, p: &Progress) {
    let vertices = best_vertices(f, p);
    if vertices.is_empty() {
        return;
    }
    let d: Vec<String> = vertices
        .iter()
        .enumerate()
        .map(|(i, (x, y))| format!("{}{x:.1} {y:.1}", if i == 0 { "M" } else { "L" }))
        .collect();
    let d = d.join(" ");
    let _ = writeln!(
        s,
        r#"<path class="best" d="{d}" fill="none" stroke="{BEST}" stroke-width="2.5" stroke-linejoin="round"/>"#
    );
    for step in &p.best {
        let tip = format!(
            "new best at iteration {}: {}",
            step.iteration,
            render::speedup(step.speedup)
        );
        let (x, y) = (f.px(step.iteration), f.py(step.speedup));
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{BEST}"><title>{}</title></circle>"#,
            esc(&tip)
        );
    }
    if let (Some(b), Some(&(x, y))) = (p.best_now(), vertices.last()) {
        let label = esc(&render::speedup(b.speedup));
        let ly = y - 8.0;
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{ly:.1}" text-anchor="end" fill="{BEST}" font-weight="bold">{label}</text>"#
        );
    }
}

fn legend(s: &mut String) {
    let _ = writeln!(s, r#"<g class="legend" transform="translate({LEFT} 76)">"#);
    let _ = writeln!(
        s,
        r#"<circle cx="4" cy="-4" r="3.5" fill="{DOT}" fill-opacity="0.55"/><text x="12" y="0">evaluation</text>"#
    );
    let _ = writeln!(
        s,
        r#"<line x1="94" x2="116" y1="-4" y2="-4" stroke="{BEST}" stroke-width="2.5"/><text x="122" y="0">best so far</text>"#
    );
    let _ = writeln!(
        s,
        r#"<path d="M214 -7l6 6m0 -6l-6 6" stroke="{FAIL}" stroke-width="1.5"/><text x="226" y="0">failed / wrong</text>"#
    );
    s.push_str("</g>\n");
}

/// Escapes text for XML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Terminal
// ---------------------------------------------------------------------------

const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// At most this many of the latest new bests are listed as bars.
const BEST_ROWS: usize = 12;

/// Sparklines of the best-so-far and of the evaluations over iterations, a strip of
/// failures, and bars of the latest new bests; `columns` is the terminal width.
pub fn terminal(p: &Progress, columns: usize, paint: Paint) -> String {
    let mut out = format!(
        "{}  {}\n",
        paint.paint(&p.name, Some(Style::Bold)),
        p.headline()
    );
    if p.interpreted {
        out.push_str("(interpreted under CPU mode: timings are not GPU figures)\n");
    }
    if p.points.is_empty() {
        return out;
    }
    let f = Frame::new(p);
    let width = columns
        .saturating_sub(20)
        .clamp(10, 100)
        .min((f.last - f.first + 1) as usize);
    let span = (f.last - f.first + 1) as usize;
    let bucket = |iteration: u64| {
        ((iteration.saturating_sub(f.first)) as usize * width / span).min(width - 1)
    };

    let mut speeds = vec![Vec::new(); width];
    let mut fails = vec![false; width];
    for pt in &p.points {
        match pt.speedup {
            Some(v) => speeds[bucket(pt.iteration)].push(v),
            None => fails[bucket(pt.iteration)] = true,
        }
    }
    let medians: Vec<Option<f64>> = speeds.iter_mut().map(|v| median(v)).collect();
    let best = best_per_bucket(p, width, &bucket);
    // One scale for both lines, as tight as the data: the rows compare by height.
    let y = YScale::tight(best.iter().chain(&medians).flatten().copied());
    let spark = |cells: &[Option<f64>]| -> String {
        cells
            .iter()
            .map(|c| c.map_or(' ', |v| BLOCKS[(y.unit(v) * 7.0).round() as usize]))
            .collect()
    };
    let best_now = p
        .best_now()
        .map_or("-".into(), |b| render::speedup(b.speedup));
    let _ = writeln!(
        out,
        "best   {}  {best_now}",
        paint.paint(&spark(&best), Some(Style::Yellow))
    );
    let _ = writeln!(
        out,
        "median {}",
        paint.paint(&spark(&medians), Some(Style::Cyan))
    );
    let fail_row: String = fails.iter().map(|&x| if x { '×' } else { ' ' }).collect();
    let _ = writeln!(
        out,
        "fails  {}  {}",
        paint.paint(&fail_row, Some(Style::Red)),
        p.failures().count()
    );
    if p.failures().next().is_some() {
        let _ = writeln!(
            out,
            "       {}",
            render::truncate(&p.failure_breakdown(), columns.saturating_sub(8))
        );
    }
    let (a, b) = (f.first.to_string(), f.last.to_string());
    let gap = width.saturating_sub(a.len() + b.len()).max(1);
    let scale = format!(
        "{} to {}{}",
        render::speedup(y.lo),
        render::speedup(y.hi),
        if y.log { ", log" } else { "" }
    );
    let _ = writeln!(
        out,
        "       {a}{}{b}  iteration; heights {scale}",
        " ".repeat(gap)
    );
    out.push_str(&best_bars(p, paint));
    for f in &p.flags {
        let line = format!("#{} {}: {}", f.iteration, render::speedup(f.speedup), f.flag);
        let _ = writeln!(out, "{}", paint.paint(&line, Some(Style::Yellow)));
    }
    out
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

/// The best-so-far at the end of each column (None before the first best).
fn best_per_bucket(p: &Progress, width: usize, bucket: &dyn Fn(u64) -> usize) -> Vec<Option<f64>> {
    let mut cells = vec![None; width];
    for step in &p.best {
        cells[bucket(step.iteration)] = Some(step.speedup);
    }
    let mut current = None;
    for c in cells.iter_mut() {
        current = c.or(current);
        *c = current;
    }
    cells
}

/// Horizontal bars of the latest new bests, in eighths of a character.
fn best_bars(p: &Progress, paint: Paint) -> String {
    let Some(top) = p.best_now() else {
        return String::new();
    };
    const BAR: usize = 40;
    let mut out = String::from("\nnew bests (iteration, speedup)\n");
    let skip = p.best.len().saturating_sub(BEST_ROWS);
    if skip > 0 {
        let _ = writeln!(out, "  … {skip} earlier");
    }
    for step in &p.best[skip..] {
        let eighths = ((step.speedup / top.speedup) * (BAR * 8) as f64)
            .round()
            .max(1.0) as usize;
        let bar = bar(eighths);
        let pad = " ".repeat(BAR.saturating_sub(render::width(&bar)));
        let painted = paint.paint(&bar, Some(Style::Yellow));
        let _ = writeln!(
            out,
            "  {:>6}  {painted}{pad}  {}",
            step.iteration,
            render::speedup(step.speedup)
        );
    }
    out
}

fn bar(eighths: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let mut s = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push(PARTS[eighths % 8]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerneld_protocol::wire::{BestSummary, EvalResult};

    fn finished(seq: u64, iteration: u64, speedup: Option<f64>) -> Event {
        let result = match speedup {
            Some(s) => EvalResult {
                speedup: Some(s),
                correct: true,
                spread_pct: Some(1.0),
                ..EvalResult::failure(ResultClass::Ok, "", 1.0)
            },
            None => EvalResult::failure(ResultClass::CompileError, "bad <ptx> & \"worse\"", 1.0),
        };
        let kind = EventKind::EvaluationFinished {
            iteration,
            candidate: format!("c{iteration}"),
            device: "GPU-1".into(),
            result,
        };
        Event {
            seq,
            time_ms: seq * 1000,
            goal: Some("g".into()),
            kind,
        }
    }

    fn new_best(seq: u64, iteration: u64, speedup: f64) -> Event {
        let best = BestSummary {
            candidate: format!("c{iteration}"),
            seed: "seed.py".into(),
            config: serde_json::json!({}),
            speedup,
            spread_pct: 1.0,
            iteration,
            interpreted: false,
        };
        Event {
            seq,
            time_ms: seq * 1000,
            goal: Some("g".into()),
            kind: EventKind::NewBest {
                best,
                previous: None,
            },
        }
    }

    fn sample() -> Progress {
        let speeds = [
            Some(0.8),
            Some(1.2),
            None,
            Some(1.1),
            Some(3.5),
            None,
            Some(2.0),
            Some(9.0),
            Some(8.5),
            Some(12.0),
        ];
        let mut events = Vec::new();
        for (i, s) in speeds.iter().enumerate() {
            events.push(finished(events.len() as u64 + 1, i as u64 + 1, *s));
        }
        for (it, s) in [(1, 0.8), (2, 1.2), (5, 3.5), (8, 9.0), (10, 12.0)] {
            events.push(new_best(events.len() as u64 + 1, it, s));
        }
        Progress::from_events("g", &events)
    }

    /// A small XML checker: balanced tags, quoted attributes, no stray `<` or `&` in text.
    fn assert_well_formed(xml: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = xml;
        while let Some(open) = rest.find('<') {
            check_text(&rest[..open]);
            let close = rest[open..].find('>').expect("unclosed tag") + open;
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "'<' inside tag {tag}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.trim()),
                    "mismatched </{name}>"
                );
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes in {tag}"
            );
            check_text(tag);
            rest = &rest[close + 1..];
        }
        check_text(rest);
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    fn check_text(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            let known = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"];
            assert!(
                known.iter().any(|e| entity.starts_with(e)),
                "bare & in {text}"
            );
        }
    }

    #[test]
    fn progress_collects_points_failures_and_rising_best() {
        let p = sample();
        assert_eq!(p.points.len(), 10);
        assert_eq!(p.failures().count(), 2);
        assert_eq!(
            p.best_now(),
            Some(Step {
                iteration: 10,
                speedup: 12.0
            })
        );
        assert!(p
            .best
            .windows(2)
            .all(|w| w[1].speedup > w[0].speedup && w[1].iteration >= w[0].iteration));
        assert!(p
            .headline()
            .starts_with("10 evaluations (2 failed) in 9s · best 12.0× at iteration 10"));
    }

    #[test]
    fn best_falls_back_to_running_max_without_new_best_events() {
        let events: Vec<Event> = [Some(1.0), Some(0.5), Some(2.0), None, Some(1.5)]
            .iter()
            .enumerate()
            .map(|(i, s)| finished(i as u64 + 1, i as u64 + 1, *s))
            .collect();
        let p = Progress::from_events("g", &events);
        assert_eq!(
            p.best,
            vec![
                Step {
                    iteration: 1,
                    speedup: 1.0
                },
                Step {
                    iteration: 3,
                    speedup: 2.0
                }
            ]
        );
    }

    #[test]
    fn a_falling_new_best_does_not_bend_the_line_down() {
        let events = vec![
            new_best(1, 1, 2.0),
            new_best(2, 2, 1.5),
            new_best(3, 3, 3.0),
        ];
        let p = Progress::from_events("g", &events);
        assert_eq!(
            p.best.iter().map(|s| s.speedup).collect::<Vec<_>>(),
            [2.0, 3.0]
        );
    }

    #[test]
    fn svg_is_well_formed_and_escapes_messages() {
        let svg = svg(&sample());
        assert_well_formed(&svg);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("&lt;ptx&gt; &amp; &quot;worse&quot;"));
        assert_eq!(
            svg.matches("<circle").count(),
            8 + 5 + 1,
            "8 dots, 5 best markers, 1 legend dot"
        );
        assert!(
            svg.contains("(log scale)"),
            "0.8× to 12× spans more than 4×"
        );
    }

    #[test]
    fn svg_best_line_is_monotone_and_spans_to_the_last_iteration() {
        let p = sample();
        let f = Frame::new(&p);
        let v = best_vertices(&f, &p);
        assert!(v.windows(2).all(|w| w[1].0 >= w[0].0), "x never goes back");
        assert!(
            v.windows(2).all(|w| w[1].1 <= w[0].1),
            "y never goes down (SVG y grows downward)"
        );
        assert!(
            v.windows(2).all(|w| w[0].0 == w[1].0 || w[0].1 == w[1].1),
            "steps: horizontal or vertical"
        );
        assert!((v.last().unwrap().0 - RIGHT).abs() < 1e-9);
        let svg = svg(&p);
        let d = svg
            .split("class=\"best\" d=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let ys: Vec<f64> = d
            .split(['M', 'L'])
            .filter(|s| !s.trim().is_empty())
            .map(|xy| xy.split_whitespace().nth(1).unwrap().parse().unwrap())
            .collect();
        assert!(
            ys.len() >= 2 * p.best.len() && ys.windows(2).all(|w| w[1] <= w[0]),
            "{d}"
        );
    }

    #[test]
    fn svg_without_evaluations_is_still_a_picture() {
        let svg = svg(&Progress::from_events("g", &[]));
        assert_well_formed(&svg);
        assert!(svg.contains("no evaluations yet"));
    }

    #[test]
    fn svg_of_a_single_evaluation_has_finite_coordinates() {
        let svg = svg(&Progress::from_events("g", &[finished(1, 1, Some(1.0))]));
        assert_well_formed(&svg);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn linear_scale_for_a_narrow_range() {
        let y = YScale::fit([1.05, 1.3, 1.0].into_iter());
        assert!(!y.log && y.lo <= 1.0 && y.hi >= 1.3);
        let ticks = y.ticks();
        assert!(ticks.len() >= 3 && ticks.windows(2).all(|w| w[1] > w[0]));
        assert_eq!(axis_label(0.25, 0), "0.25×");
        assert_eq!(axis_label(1.0, 0), "1×");
        assert_eq!(axis_label(1.5, 0), "1.5×");
        assert_eq!(axis_label(32.0, 0), "32×");
    }

    #[test]
    fn terminal_chart_has_sparklines_and_bars() {
        let text = terminal(&sample(), 80, Paint::OFF);
        let lines: Vec<&str> = text.lines().collect();
        let best = lines.iter().find(|l| l.starts_with("best ")).unwrap();
        let levels: Vec<usize> = best
            .chars()
            .filter_map(|c| BLOCKS.iter().position(|b| *b == c))
            .collect();
        assert!(
            levels.windows(2).all(|w| w[1] >= w[0]),
            "best sparkline never falls: {best}"
        );
        assert_eq!(levels.last(), Some(&7), "the best ends at the top");
        assert!(best.ends_with("12.0×"));
        assert_eq!(
            lines
                .iter()
                .find(|l| l.starts_with("fails"))
                .unwrap()
                .matches('×')
                .count(),
            2
        );
        assert!(text.contains("new bests"));
        assert!(text.lines().filter(|l| l.contains('█')).count() >= 5);
        assert!(text.lines().all(|l| render::width(l) <= 80), "{text}");
    }

    #[test]
    fn failures_are_counted_by_class() {
        let mut p = sample();
        p.points[0].speedup = None;
        p.points[0].class = ResultClass::WrongResult;
        assert_eq!(p.failure_breakdown(), "2 compile_error, 1 wrong_result");
        assert_eq!(p.elapsed_at(3), Some(2.0));
    }

    /// Interpreter speedups (0.003× … 1×) on the log axis: every gridline has its own,
    /// readable label; none reads `0×`.
    #[test]
    fn log_axis_labels_below_a_hundredth_are_distinct() {
        let y = YScale::fit([0.0031, 0.0176, 0.3, 1.0].into_iter());
        assert!(y.log);
        let ticks = y.ticks();
        let labels = axis_labels(&ticks);
        assert!(ticks.len() >= 8, "{ticks:?}");
        assert!(!labels.iter().any(|l| l == "0×"), "{labels:?}");
        let mut unique = labels.clone();
        unique.dedup();
        assert_eq!(unique, labels, "every label distinct");
        assert_eq!(axis_label(0.0078125, 0), "0.00781×");
        assert_eq!(axis_label(0.00390625, 0), "0.00391×");
        assert_eq!(axis_label(0.5, 0), "0.5×");

        let svg = svg(&Progress::from_events(
            "g",
            &[
                finished(1, 1, Some(0.0031)),
                finished(2, 2, Some(0.0176)),
                finished(3, 3, Some(0.3)),
            ],
        ));
        assert!(!svg.contains(">0×<"), "{svg}");
        assert!(svg.contains(">0.00391×<") && svg.contains(">0.0156×<"));
    }

    #[test]
    fn close_linear_ticks_get_more_decimals() {
        assert_eq!(
            axis_labels(&[1.0, 1.005, 1.01]),
            ["1×", "1.005×", "1.01×"].map(String::from)
        );
    }

    #[test]
    fn the_goal_is_named_by_its_id_even_when_asked_by_name() {
        let mut events = vec![finished(1, 1, Some(1.5))];
        events[0].goal = Some("g9".into());
        let p = Progress::from_events("long", &events);
        assert_eq!(p.goal, "g9");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["goal"], "g9");
    }

    #[test]
    fn bars_use_eighths() {
        assert_eq!(bar(8), "█");
        assert_eq!(bar(12), "█▌");
        assert_eq!(bar(1), "▏");
    }
}
