//! The chart as text: sparklines of the best and of the evaluations, a strip of
//! failures, bars of the latest new bests.

use std::fmt::Write as _;

use super::scale::YScale;
use super::svg::Frame;
use super::Progress;
use crate::render::{self, Paint, Style};

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
    if let Some(r) = p.rate_text() {
        out.push_str(&r);
        out.push('\n');
    }
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
        let line = format!(
            "#{} {}: {}",
            f.iteration,
            render::speedup(f.speedup),
            f.flag
        );
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
    // The daemon counts a new best only beyond the noise of both measurements.
    let mut out = format!(
        "\nnew bests beyond noise (iteration, speedup ± noise{})\n",
        p.timing
            .as_deref()
            .map_or(String::new(), |t| format!(", {t}"))
    );
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
            "  {:>6}  {painted}{pad}  {} {}",
            step.iteration,
            render::speedup(step.speedup),
            render::percent(step.spread_pct)
        );
    }
    out
}

fn bar(eighths: usize) -> String {
    const PARTS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];
    let mut s = "█".repeat(eighths / 8);
    let part = eighths % 8;
    if part > 0 {
        s.push(PARTS[part]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata::*;

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
        assert!(text.contains("3600 evaluations/hour"), "{text}");
        assert!(text.lines().filter(|l| l.contains('█')).count() >= 5);
        assert!(text.lines().all(|l| render::width(l) <= 80), "{text}");
    }

    #[test]
    fn bars_use_eighths() {
        assert_eq!(bar(8), "█");
        assert_eq!(bar(12), "█▌");
        assert_eq!(bar(1), "▏");
    }
}
