//! `report`: a goal's progress over time, from its events, as a chart: SVG, PNG (the SVG
//! rendered in pure Rust), an HTML page (the chart and the table of bests), or text for
//! the terminal.
//!
//! The picture answers "is it still getting better, and how fast?": one dot per correct
//! evaluation (its speedup over the baseline, with whiskers for its noise), the best beyond
//! noise as a step line in its noise band, failures as marks on a strip below, the
//! baseline (1×) and the goal's target as reference lines.
//!
//! This file gathers the data (`Progress`); scale.rs, svg.rs, png.rs, html.rs and
//! terminal.rs draw it.

mod html;
mod png;
mod scale;
mod svg;
mod terminal;

use std::fmt::Write as _;
use std::path::Path;

use kerneld_protocol::wire::{Event, EventKind, GoalState, ResultClass};
use serde::Serialize;

use crate::render;

pub use svg::svg;
pub use terminal::terminal;

/// What `report -o FILE` writes, by FILE's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Svg,
    Png,
    Html,
}

impl Format {
    /// `.svg`, `.png`, `.html`/`.htm`; `-` (stdout) is SVG. Anything else: an error that
    /// says what is possible.
    pub fn for_path(path: &Path) -> Result<Format, String> {
        if path.as_os_str() == "-" {
            return Ok(Format::Svg);
        }
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        match ext.as_deref() {
            Some("svg") => Ok(Format::Svg),
            Some("png") => Ok(Format::Png),
            Some("html" | "htm") => Ok(Format::Html),
            _ => Err(format!(
                "cannot tell what to write to {}: name it .svg, .png or .html",
                path.display()
            )),
        }
    }

    /// The file's bytes.
    pub fn render(self, p: &Progress) -> Result<Vec<u8>, String> {
        match self {
            Format::Svg => Ok(svg(p).into_bytes()),
            Format::Png => png::png(&svg(p)),
            Format::Html => Ok(html::page(p).into_bytes()),
        }
    }
}

/// One finished evaluation.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub iteration: u64,
    pub time_ms: u64,
    pub candidate: String,
    pub class: ResultClass,
    /// Only for correct, timed results.
    pub speedup: Option<f64>,
    /// The measurement's noise (± percent), for the whiskers.
    pub spread_pct: Option<f64>,
    pub message: Option<String>,
}

/// The best beyond noise rises to `speedup` at `iteration`: the daemon counts a result as
/// a new best only when it beats the old best by more than their noise (± `spread_pct`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Step {
    pub iteration: u64,
    pub speedup: f64,
    #[serde(default)]
    pub spread_pct: f64,
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
    /// What the speedups are (issue #23): "GPU time", "as called", "interpreted", or the
    /// labels joined when the goal's results were timed differently; None before a result.
    pub timing: Option<String>,
    pub points: Vec<Point>,
    /// Strictly rising; from the daemon's `new_best` events (or the points, when it has none).
    pub best: Vec<Step>,
    /// The daemon's last `new_best`, its speedup pooled with the re-times since (what
    /// `status` shows); None without one.
    pub current: Option<Step>,
    /// Correct evaluations over 10x, with why they are flagged (confirmed by a re-time or not).
    pub flags: Vec<crate::retime::Flagged>,
    /// The best's lineage (issue #29): each step from its seed, its speedup and what changed.
    pub lineage: Vec<crate::lineage::Step>,
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
            timing: None,
            points: Vec::new(),
            best: Vec::new(),
            current: None,
            flags: Vec::new(),
            lineage: Vec::new(),
        };
        let mut announced = Vec::new();
        let mut labels: Vec<&'static str> = Vec::new();
        for ev in events {
            p.absorb(ev, &mut announced);
            if let EventKind::EvaluationFinished { result, .. } = &ev.kind {
                if result.is_scored() && !labels.contains(&result.timing_label()) {
                    labels.push(result.timing_label());
                }
            }
        }
        labels.sort_unstable();
        p.timing = (!labels.is_empty()).then(|| labels.join(" and "));
        p.points.sort_by_key(|pt| pt.iteration);
        // The headline's best is the daemon's last word (under the pooled rule a new best
        // beats the old one's figure as re-timed since, which may be below what the old
        // one was announced at); the chart's line only rises.
        p.current = announced.last().copied();
        let steps = if announced.is_empty() {
            p.points
                .iter()
                .filter_map(|pt| {
                    pt.speedup.map(|speedup| Step {
                        iteration: pt.iteration,
                        speedup,
                        spread_pct: pt.spread_pct.unwrap_or(0.0),
                    })
                })
                .collect()
        } else {
            announced
        };
        p.best = rising(steps);
        p.flags = crate::retime::flagged(&p.points, events);
        let tree = crate::lineage::Tree::from_events(events);
        if let Ok(best) = tree.find("best") {
            p.lineage = crate::lineage::steps(&tree, best);
        }
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
                    spread_pct: result.spread_pct.filter(|s| s.is_finite() && *s >= 0.0),
                    message: result.message.clone(),
                });
            }
            EventKind::NewBest { best, .. } => {
                self.interpreted |= best.interpreted;
                announced.push(Step {
                    iteration: best.iteration,
                    speedup: best.speedup,
                    spread_pct: best.spread_pct,
                })
            }
            // A re-time of the best pools into its figure, as `status` shows it (the
            // daemon's projection does the same; the spread keeps the announced one, which
            // needs the daemon's noise prior).
            EventKind::RetimeFinished {
                iteration,
                pooled: Some(pooled),
                ..
            } => {
                if let (Some(last), Some(speedup)) = (
                    announced.last_mut().filter(|s| s.iteration == *iteration),
                    pooled.speedup(),
                ) {
                    last.speedup = speedup;
                }
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
        self.current.or_else(|| self.best.last().copied())
    }

    /// Seconds from the first to the last finished evaluation.
    fn span_s(&self) -> Option<f64> {
        let first = self.points.iter().map(|p| p.time_ms).min()?;
        let last = self.points.iter().map(|p| p.time_ms).max()?;
        (last > first).then(|| (last - first) as f64 / 1000.0)
    }

    /// Evaluations per hour between the first result and the last (the first one's
    /// start-up is not in the span): the goal's warm rate (issue #12).
    pub fn per_hour(&self) -> Option<f64> {
        let n = self.points.len();
        self.span_s()
            .filter(|_| n >= 2)
            .map(|s| (n - 1) as f64 * 3600.0 / s)
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
            let _ = write!(text, " · best {}", render::speedup(b.speedup));
            if let Some(t) = &self.timing {
                let _ = write!(text, " ({t})");
            }
            let _ = write!(text, " at iteration {}", b.iteration);
        }
        if let Some(state) = self.state {
            let _ = write!(text, " · {state}");
            if let Some(r) = &self.reason {
                let _ = write!(text, " ({})", render::truncate(r, 40));
            }
        }
        text
    }

    /// `1520 evaluations/hour (first to last result)`, after two results.
    pub fn rate_text(&self) -> Option<String> {
        self.per_hour()
            .map(|r| format!("{r:.0} evaluations/hour (first to last result)"))
    }

    /// The headline and the rate on one line (the SVG's and the HTML page's subtitle).
    pub fn headline_and_rate(&self) -> String {
        match self.rate_text() {
            Some(r) => format!("{} · {r}", self.headline()),
            None => self.headline(),
        }
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
        let raises = match out.last() {
            Some(b) => s.speedup > b.speedup,
            None => true,
        };
        if raises {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod testdata {
    use super::*;
    use kerneld_protocol::wire::{BestSummary, EvalResult};

    pub fn finished(seq: u64, iteration: u64, speedup: Option<f64>) -> Event {
        let result = match speedup {
            Some(s) => EvalResult {
                speedup: Some(s),
                correct: true,
                spread_pct: Some(1.0),
                timing: Some("gpu".into()),
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

    pub fn new_best(seq: u64, iteration: u64, speedup: f64) -> Event {
        let best = BestSummary {
            candidate: format!("c{iteration}"),
            seed: "seed.py".into(),
            config: serde_json::json!({}),
            speedup,
            spread_pct: 1.0,
            iteration,
            interpreted: false,
            environment: None,
            measurements: Some(2),
            timing: Some("gpu".into()),
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

    pub fn sample() -> Progress {
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
    pub fn assert_well_formed(xml: &str) {
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

    pub fn check_text(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            let known = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"];
            assert!(
                known.iter().any(|e| entity.starts_with(e)),
                "bare & in {text}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testdata::*;
    use super::*;

    #[test]
    fn progress_collects_points_failures_and_rising_best() {
        let p = sample();
        assert_eq!(p.points.len(), 10);
        assert_eq!(p.failures().count(), 2);
        assert_eq!(
            p.best_now(),
            Some(Step {
                iteration: 10,
                speedup: 12.0,
                spread_pct: 1.0,
            })
        );
        assert!(p
            .best
            .windows(2)
            .all(|w| w[1].speedup > w[0].speedup && w[1].iteration >= w[0].iteration));
        assert!(p.headline().starts_with(
            "10 evaluations (2 failed) in 9s · best 12.0× (GPU time) at iteration 10"
        ));
    }

    #[test]
    fn the_best_is_the_daemons_as_re_timed_and_a_lower_announced_best_stays() {
        use kerneld_protocol::wire::{EvalResult, Pooled, PooledShape, ResultClass};
        let retimed = |seq: u64, iteration: u64, mean_log: f64| Event {
            seq,
            time_ms: seq * 1000,
            goal: Some("g".into()),
            kind: EventKind::RetimeFinished {
                iteration,
                candidate: format!("c{iteration}"),
                device: "GPU-1".into(),
                result: EvalResult::failure(ResultClass::Ok, "", 1.0),
                request: None,
                pooled: Some(Pooled {
                    n: 3,
                    shapes: vec![PooledShape {
                        shape: "s".into(),
                        n: 3,
                        mean: mean_log,
                        m2: 0.0,
                        within: 0.0,
                    }],
                }),
            },
        };
        // best 2.0x at 1, re-timed to 1.5x; then 1.8x at 5 beats the re-timed figure
        let events = vec![
            finished(1, 1, Some(2.0)),
            new_best(2, 1, 2.0),
            retimed(3, 1, 1.5f64.ln()),
            finished(4, 5, Some(1.8)),
            new_best(5, 5, 1.8),
        ];
        let p = Progress::from_events("g", &events);
        assert_eq!(p.best.len(), 2, "{:?}", p.best);
        assert!((p.best[0].speedup - 1.5).abs() < 1e-9, "{:?}", p.best);
        assert_eq!(p.best_now().map(|s| s.iteration), Some(5));
        // without the re-time in the log the line still only rises, and the headline
        // still names the daemon's best
        let p = Progress::from_events("g", &[new_best(1, 1, 2.0), new_best(2, 5, 1.8)]);
        assert_eq!(p.best.len(), 1);
        assert_eq!(p.best_now().map(|s| s.iteration), Some(5));
    }

    #[test]
    fn headline_gives_the_warm_rate() {
        // 10 results over 9 s: 9 intervals → 3600 per hour.
        let p = sample();
        assert_eq!(p.per_hour(), Some(3600.0));
        assert_eq!(
            p.rate_text().as_deref(),
            Some("3600 evaluations/hour (first to last result)")
        );
        assert!(p
            .headline_and_rate()
            .ends_with(" · 3600 evaluations/hour (first to last result)"));
        assert!(Progress::from_events("g", &[]).rate_text().is_none());
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
                    speedup: 1.0,
                    spread_pct: 1.0,
                },
                Step {
                    iteration: 3,
                    speedup: 2.0,
                    spread_pct: 1.0,
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
    fn failures_are_counted_by_class() {
        let mut p = sample();
        p.points[0].speedup = None;
        p.points[0].class = ResultClass::WrongResult;
        assert_eq!(p.failure_breakdown(), "2 compile_error, 1 wrong_result");
        assert_eq!(p.elapsed_at(3), Some(2.0));
    }

    /// Interpreter speedups (0.003× … 1×) on the log axis: every gridline has its own,

    #[test]
    fn the_goal_is_named_by_its_id_even_when_asked_by_name() {
        let mut events = vec![finished(1, 1, Some(1.5))];
        events[0].goal = Some("g9".into());
        let p = Progress::from_events("long", &events);
        assert_eq!(p.goal, "g9");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["goal"], "g9");
    }
}
