//! The SVG chart (also the source of the PNG and of the HTML page's picture).
//!
//! Layout, top to bottom: title and headline, legend, the y axis' title (horizontal, over
//! the tick labels, so the two never overlap), the plot, the strip of failures, the
//! iteration axis. Labels of the horizontal lines (baseline, target, best) sit in the right
//! margin, pushed apart where they would touch, never on a data point.

use std::fmt::Write as _;

use super::scale::{axis_labels, nice_step, YScale};
use super::{Progress, Step};
use crate::render;

pub(super) const W: f64 = 900.0;
pub(super) const H: f64 = 520.0;
/// The plot area; the strip of failure marks sits below it, above the x labels.
const LEFT: f64 = 78.0;
pub(super) const RIGHT: f64 = 775.0;
const TOP: f64 = 106.0;
const BOTTOM: f64 = 410.0;
const FAIL_Y: f64 = 426.0;
/// Rows of the header.
const LEGEND_Y: f64 = 74.0;
const AXIS_TITLE_Y: f64 = 94.0;
/// Right-margin labels closer than this (pixels, baseline to baseline) are pushed apart.
const LABEL_GAP: f64 = 14.0;

const DOT: &str = "#4C78A8";
const BEST: &str = "#E45756";
const FAIL: &str = "#B279A2";
const TARGET: &str = "#54A24B";
const BASE: &str = "#888888";
const GRID: &str = "#E6E6E6";
const INK: &str = "#333333";
/// DejaVu Sans first: the PNG is drawn with it (embedded), so both look alike.
const FONTS: &str = "DejaVu Sans, Helvetica, Arial, sans-serif";

/// Geometry of the plot: data coordinates to SVG pixels.
pub(super) struct Frame {
    pub y: YScale,
    pub first: u64,
    pub last: u64,
}

impl Frame {
    pub fn new(p: &Progress) -> Frame {
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
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="{FONTS}" font-size="12" fill="{INK}">"#
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
    reference_line(&mut s, &f, 1.0, BASE);
    if let Some(t) = p.target {
        reference_line(&mut s, &f, t, TARGET);
    }
    best_band(&mut s, &f, p);
    dots(&mut s, &f, p);
    failures(&mut s, &f, p);
    best_line(&mut s, &f, p);
    margin_labels(&mut s, &f, p);
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
    // A long headline (a long name, CPU mode's note) gets a smaller font, not cut off.
    let room = W - LEFT - 16.0;
    let size = (12.0 * room / text_width(&sub)).clamp(9.0, 12.0);
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="52" font-size="{size:.1}" fill="#666666">{}</text>"##,
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
            r#"<text class="tick" x="{lx}" y="{ly:.1}" text-anchor="end">{}</text>"#,
            esc(&label)
        );
    }
    let scale = if f.y.log {
        "speedup vs baseline (log scale)"
    } else {
        "speedup vs baseline"
    };
    let _ = writeln!(
        s,
        r##"<text class="axis-title" x="12" y="{AXIS_TITLE_Y}" fill="#555555">{scale}</text>"##
    );
}

/// Iteration ticks, each with the time since the first evaluation in grey below it.
fn x_axis(s: &mut String, f: &Frame, p: &Progress) {
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" x2="{RIGHT}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="{INK}"/>"#
    );
    for t in iteration_ticks(f.first, f.last) {
        let x = f.px(t);
        let (tick_end, label_y, time_y) = (BOTTOM + 4.0, FAIL_Y + 26.0, FAIL_Y + 40.0);
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{BOTTOM}" y2="{tick_end}" stroke="{INK}"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{label_y}" text-anchor="middle">{t}</text>"#
        );
        if let Some(elapsed) = p.elapsed_at(t) {
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

/// About eight round iteration numbers, whole ones only (a short goal gets 1, 2, 3).
pub(super) fn iteration_ticks(first: u64, last: u64) -> Vec<u64> {
    let step = nice_step((last - first) as f64 / 8.0).max(1.0) as u64;
    let start = first.div_ceil(step) * step;
    (start..=last).step_by(step as usize).collect()
}

/// A dashed horizontal line across the plot at `value`; its label is in the right margin.
fn reference_line(s: &mut String, f: &Frame, value: f64, colour: &str) {
    let y = f.py(value);
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.1}" y2="{y:.1}" stroke="{colour}" stroke-dasharray="5 4"/>"#
    );
}

/// The best beyond noise at `iteration`: the last new best at or before it.
fn best_at(p: &Progress, iteration: u64) -> Option<Step> {
    p.best
        .iter()
        .take_while(|s| s.iteration <= iteration)
        .last()
        .copied()
}

/// A correct result above the best line that the daemon did not count: within noise of
/// the best (it must beat the best by more than both their spreads).
fn within_noise_above(p: &Progress, iteration: u64, v: f64) -> bool {
    best_at(p, iteration).is_some_and(|b| v > b.speedup && b.iteration != iteration)
}

/// One dot per correct evaluation, with whiskers of its noise (± spread); hollow when it
/// lies above the best line but within noise of it.
fn dots(s: &mut String, f: &Frame, p: &Progress) {
    s.push_str("<g class=\"evaluations\">\n");
    // Smaller dots where there are many: hundreds of evaluations must not merge into a band.
    let r = (1000.0 / p.points.len().max(1) as f64).clamp(2.2, 3.5);
    for pt in &p.points {
        let Some(v) = pt.speedup else { continue };
        let spread = pt.spread_pct.unwrap_or(0.0);
        let x = f.px(pt.iteration);
        if spread > 0.0 {
            // As a ratio (× and ÷ 1 + spread): symmetric on the log axis, never below 0.
            let k = 1.0 + spread / 100.0;
            let (hi, lo) = (f.py(v * k), f.py(v / k));
            let _ = writeln!(
                s,
                r#"<path class="noise" d="M{x:.1} {hi:.1}V{lo:.1}M{a:.1} {hi:.1}h5M{a:.1} {lo:.1}h5" stroke="{DOT}" stroke-opacity="0.6" stroke-width="1"/>"#,
                a = x - 2.5
            );
        }
        let above = within_noise_above(p, pt.iteration, v);
        let tip = format!(
            "iteration {} · {} · {} {}{}",
            pt.iteration,
            render::short_id(&pt.candidate),
            render::speedup(v),
            render::percent(spread),
            if above {
                " · within noise of the best: not a new best"
            } else {
                ""
            }
        );
        let y = f.py(v);
        let fill = if above {
            r#"class="within-noise" fill="white" stroke-width="1.5""#
        } else {
            r##"fill="#4C78A8" fill-opacity="0.6""##
        };
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r:.1}" stroke="{DOT}" {fill}><title>{}</title></circle>"#,
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

/// The best as pixel vertices of a step line: flat until each new best, then up, carried
/// on to the last iteration.
pub(super) fn best_vertices(f: &Frame, p: &Progress) -> Vec<(f64, f64)> {
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

/// The noise of the best (± its spread) as a band along the step line: what a result
/// inside it cannot be told apart from.
fn best_band(s: &mut String, f: &Frame, p: &Progress) {
    s.push_str("<g class=\"band\">\n");
    for (i, step) in p.best.iter().enumerate() {
        let x0 = f.px(step.iteration);
        let x1 = p
            .best
            .get(i + 1)
            .map_or(f.px(f.last), |n| f.px(n.iteration));
        let k = 1.0 + step.spread_pct.max(0.0) / 100.0;
        let (top, bottom) = (f.py(step.speedup * k), f.py(step.speedup / k));
        let (w, h) = ((x1 - x0).max(1.0), (bottom - top).max(1.0));
        let _ = writeln!(
            s,
            r#"<rect x="{x0:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}" fill="{BEST}" fill-opacity="0.13"/>"#
        );
    }
    s.push_str("</g>\n");
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
            "new best at iteration {}: {} {}",
            step.iteration,
            render::speedup(step.speedup),
            render::percent(step.spread_pct)
        );
        let (x, y) = (f.px(step.iteration), f.py(step.speedup));
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{BEST}"><title>{}</title></circle>"#,
            esc(&tip)
        );
    }
}

/// Labels of the horizontal lines in the right margin: the best (bold), the target and
/// the baseline, each at its line's height unless it would touch its neighbour.
fn margin_labels(s: &mut String, f: &Frame, p: &Progress) {
    let mut labels: Vec<(f64, String, &str, bool)> =
        vec![(f.py(1.0), "baseline 1×".into(), BASE, false)];
    if let Some(t) = p.target {
        labels.push((
            f.py(t),
            format!("target {}", render::speedup(t)),
            TARGET,
            false,
        ));
    }
    if let Some(b) = p.best_now() {
        labels.push((
            f.py(b.speedup),
            format!("best {}", render::speedup(b.speedup)),
            BEST,
            true,
        ));
    }
    let ys = spread_apart(&labels.iter().map(|l| l.0).collect::<Vec<_>>());
    let x = RIGHT + 8.0;
    for ((_, text, colour, bold), y) in labels.iter().zip(ys) {
        let weight = if *bold { r#" font-weight="bold""# } else { "" };
        let y = y + 4.0;
        let _ = writeln!(
            s,
            r#"<text class="margin-label" x="{x}" y="{y:.1}" fill="{colour}"{weight}>{}</text>"#,
            esc(text)
        );
    }
}

/// The heights, moved as little as it takes to be `LABEL_GAP` apart, order kept.
pub(super) fn spread_apart(ys: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..ys.len()).collect();
    order.sort_by(|a, b| ys[*a].total_cmp(&ys[*b]));
    let mut placed = ys.to_vec();
    for k in 1..order.len() {
        let (prev, this) = (order[k - 1], order[k]);
        if placed[this] < placed[prev] + LABEL_GAP {
            placed[this] = placed[prev] + LABEL_GAP;
        }
    }
    placed
}

/// Width of `text` at 12 px in DejaVu Sans, generously: legend entries must not touch.
fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * 6.6
}

fn legend(s: &mut String) {
    let _ = writeln!(
        s,
        r#"<g class="legend" transform="translate({LEFT} {LEGEND_Y})">"#
    );
    // (the symbol, drawn at x = 0..12, and its text)
    let entries = [
        (
            format!(
                r#"<path d="M4 -10V2M1.5 -10h5M1.5 2h5" stroke="{DOT}" stroke-opacity="0.6"/><circle cx="4" cy="-4" r="3.5" fill="{DOT}" stroke="{DOT}" fill-opacity="0.6"/>"#
            ),
            "evaluation ± noise",
        ),
        (
            format!(
                r#"<circle cx="4" cy="-4" r="3.5" fill="white" stroke="{DOT}" stroke-width="1.5"/>"#
            ),
            "above the best, within noise",
        ),
        (
            format!(
                r#"<rect x="-6" y="-10" width="22" height="12" fill="{BEST}" fill-opacity="0.13"/><line x1="-6" x2="16" y1="-4" y2="-4" stroke="{BEST}" stroke-width="2.5"/>"#
            ),
            "best beyond noise (band: its noise)",
        ),
        (
            format!(r#"<path d="M1 -7l6 6m0 -6l-6 6" stroke="{FAIL}" stroke-width="1.5"/>"#),
            "failed / wrong",
        ),
    ];
    let mut x = 0.0;
    for (symbol, text) in entries {
        let _ = writeln!(
            s,
            r#"<g transform="translate({x:.0} 0)">{symbol}<text x="20" y="0">{}</text></g>"#,
            esc(text)
        );
        x += 20.0 + text_width(text) + 16.0;
    }
    s.push_str("</g>\n");
}

/// Escapes text for XML content and attribute values.
pub(super) fn esc(text: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::scale::axis_label;
    use crate::report::testdata::*;

    #[test]
    fn svg_is_well_formed_and_escapes_messages() {
        let svg = svg(&sample());
        assert_well_formed(&svg);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("&lt;ptx&gt; &amp; &quot;worse&quot;"));
        assert_eq!(
            svg.matches("<circle").count(),
            8 + 5 + 2,
            "8 dots, 5 best markers, 2 legend dots"
        );
        assert_eq!(
            svg.matches("class=\"noise\"").count(),
            8,
            "whiskers on every dot"
        );
        assert!(svg.contains("best beyond noise"));
        assert!(!svg.contains("best so far"));
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
    fn iteration_ticks_are_whole_and_round() {
        assert_eq!(iteration_ticks(1, 2), [1, 2]);
        assert_eq!(iteration_ticks(1, 80), [10, 20, 30, 40, 50, 60, 70, 80]);
        assert_eq!(iteration_ticks(0, 5), [0, 1, 2, 3, 4, 5]);
    }

    /// The y axis' title and its tick labels never share a row; the line labels sit in
    /// the right margin, clear of each other and of the first point.
    #[test]
    fn labels_do_not_overlap() {
        let svg = svg(&sample());
        let ys = |class: &str| -> Vec<f64> {
            svg.split(&format!("class=\"{class}\""))
                .skip(1)
                .map(|rest| {
                    let y = rest.split("y=\"").nth(1).unwrap();
                    y.split('"').next().unwrap().parse().unwrap()
                })
                .collect()
        };
        let title_y = ys("axis-title")[0];
        let top_tick = ys("tick").into_iter().fold(f64::INFINITY, f64::min);
        assert!(
            top_tick - title_y >= 12.0,
            "title {title_y}, top tick {top_tick}"
        );
        let mut margin = ys("margin-label");
        assert_eq!(margin.len(), 2, "baseline and best");
        margin.sort_by(f64::total_cmp);
        assert!(margin.windows(2).all(|w| w[1] - w[0] >= LABEL_GAP - 1e-9));
        assert!(svg.contains(&format!("class=\"margin-label\" x=\"{}\"", RIGHT + 8.0)));
        assert_eq!(spread_apart(&[100.0, 105.0, 300.0]), [100.0, 114.0, 300.0]);
        assert_eq!(spread_apart(&[105.0, 100.0]), [114.0, 100.0]);
    }

    /// A result above the best line that the daemon did not count (within noise) is drawn
    /// hollow, and the best's noise is a band along the line.
    #[test]
    fn results_within_noise_above_the_best_are_hollow() {
        let events = vec![
            finished(1, 1, Some(2.0)),
            new_best(2, 1, 2.0),
            finished(3, 2, Some(2.01)),
        ];
        let p = Progress::from_events("g", &events);
        assert!(within_noise_above(&p, 2, 2.01));
        assert!(!within_noise_above(&p, 1, 2.0));
        let svg = svg(&p);
        assert_eq!(svg.matches(r#"class="within-noise""#).count(), 1);
        let band = svg.split("<g class=\"band\">").nth(1).unwrap();
        assert_eq!(
            band.split("</g>").next().unwrap().matches("<rect").count(),
            1
        );
    }
}
