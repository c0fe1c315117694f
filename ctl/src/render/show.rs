//! `show`: one goal in full: its spec (with the shapes that actually ran), its progress,
//! its best and a table of the recent evaluations.

use std::fmt::Write as _;

use kerneld_protocol::wire::{BestSummary, EvalResult, GoalDetail, GoalSpec, GoalSummary};

use super::{
    class_style, datetime, duration, percent, short_id, speedup, state_style, table, truncate,
    Cell, Paint, Style,
};

/// Where the goal's evaluations run, for the `shapes` line of `show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Gpu,
    /// Triton's interpreter: the task's small smoke shapes run instead of the goal's.
    Cpu,
}

/// The shapes that actually ran, in the order the results list them: in CPU mode the
/// harness swaps the goal's shapes for the task's smoke shapes.
fn shapes_text(detail: &GoalDetail, mode: Mode) -> String {
    let goal = detail.spec.shapes.join(", ");
    if mode == Mode::Gpu {
        return goal;
    }
    let mut ran: Vec<&str> = Vec::new();
    for e in detail.recent.iter().filter(|e| e.result.interpreted) {
        for t in &e.result.shapes {
            if !ran.contains(&t.shape.as_str()) {
                ran.push(&t.shape);
            }
        }
    }
    let ran = if ran.is_empty() {
        "the task's smoke shapes".to_string()
    } else {
        ran.join(", ")
    };
    format!("{ran} (CPU mode: smoke shapes; on a GPU: {goal})")
}

pub fn show(detail: &GoalDetail, mode: Mode, paint: Paint) -> String {
    let g = &detail.summary;
    let mut out = format!(
        "{}  {}  {}\n",
        paint.paint(&g.name, Some(Style::Bold)),
        g.id,
        paint.paint(g.state.as_str(), Some(state_style(g.state)))
    );
    for (key, value) in spec_fields(&detail.spec, shapes_text(detail, mode))
        .into_iter()
        .chain(summary_fields(g))
    {
        let _ = writeln!(
            out,
            "  {}  {value}",
            paint.paint(&format!("{key:<10}"), Some(Style::Dim))
        );
    }
    if let Some(b) = &g.best {
        if let Some(flag) = crate::retime::show_flag(detail, b.iteration, Some(b.speedup)) {
            let _ = writeln!(
                out,
                "  {}  {flag}",
                paint.paint("flag      ", Some(Style::Yellow))
            );
        }
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
            // The >10x flag leads the message (retime.rs).
            if let Some(flag) = crate::retime::show_flag(detail, e.iteration, e.result.speedup) {
                let msg = row.pop().map(|c| c.text).unwrap_or_default();
                row.push(Cell::new(format!("[{flag}] {msg}").trim_end()).styled(Style::Yellow));
            }
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
            "TIMED",
            "TIME",
            "MESSAGE",
        ],
        &rows,
        paint,
    ));
    // Why a shape was timed otherwise than the goal asked (the judge's note), once each.
    let mut notes: Vec<String> = Vec::new();
    for e in &detail.recent {
        for t in &e.result.shapes {
            if let Some(n) = &t.timing_note {
                let line = format!("#{} {}: {}", e.iteration, t.shape, truncate(n, 120));
                if !notes.contains(&line) {
                    notes.push(line);
                }
            }
        }
    }
    for n in notes {
        let _ = writeln!(out, "  {}", paint.paint(&n, Some(Style::Yellow)));
    }
    if let Some(t) = super::phases::table_of(&detail.recent, paint) {
        out.push('\n');
        out.push_str(&paint.paint("where the time went (seconds per phase)", Some(Style::Bold)));
        out.push('\n');
        out.push_str(&t);
    }
    out
}

/// Class, speedup, spread, what the speedup is (GPU time, as called, interpreted), elapsed
/// time and the first line of the message of one result.
fn result_cells(r: &EvalResult) -> Vec<Cell> {
    let star = if r.interpreted { "*" } else { "" };
    let timed = if r.is_scored() { r.timing_label() } else { "-" };
    vec![
        Cell::new(r.class.as_str()).styled(class_style(r.class)),
        Cell::num(
            r.speedup
                .map_or("-".into(), |s| format!("{}{star}", speedup(s))),
        ),
        Cell::num(r.spread_pct.map_or("-".into(), percent)),
        Cell::new(timed),
        Cell::num(duration(r.elapsed_s)),
        Cell::new(
            r.message
                .as_deref()
                .map_or(String::new(), |m| truncate(m, 70)),
        ),
    ]
}

fn spec_fields(spec: &GoalSpec, shapes: String) -> Vec<(&'static str, String)> {
    let seeds: Vec<&str> = spec.seeds.iter().map(|s| s.name.as_str()).collect();
    vec![
        ("task", spec.task_dir.clone()),
        (
            "objective",
            format!(
                "{} vs {}, {}",
                spec.objective,
                spec.baseline,
                match spec.timing {
                    Some(m) => format!("{} (timing = \"{m}\")", m.label()),
                    None => "timed as the judge's default (the goal names no timing)".into(),
                }
            ),
        ),
        ("shapes", shapes),
        ("seeds", seeds.join(", ")),
        ("budget", budget_text(spec)),
        ("stop", stop_text(spec)),
        ("agent", spec.agent.kind().as_str().to_string()),
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
    if let Some(m) = &g.phases {
        fields.push(("phases", super::phases::means_text(m)));
    }
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
    if let Some(c) = &g.environment_changed {
        fields.push(("environment", c.clone()));
    }
    if let Some(o) = &g.forked_from {
        fields.push(("forked from", o.to_string()));
    }
    fields
}

fn best_text(b: &BestSummary) -> String {
    let interp = if b.interpreted {
        ": not a GPU figure"
    } else {
        ""
    };
    format!(
        "{} {} ({}{interp}) at iteration {}: candidate {} (seed {}) config {}",
        speedup(b.speedup),
        percent(b.spread_pct),
        super::best_kind(b),
        b.iteration,
        short_id(&b.candidate),
        b.seed,
        b.config
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::tests::summary;
    use kerneld_protocol::wire::{
        Budget, EvaluationRecord, GoalState, Resources, ResultClass, ShapeTiming, StopRules,
    };

    fn detail(interpreted: bool) -> GoalDetail {
        let timing = |shape: &str| -> ShapeTiming {
            serde_json::from_value(serde_json::json!({"shape": shape, "median_us": 10.0})).unwrap()
        };
        let result = EvalResult {
            speedup: Some(0.01),
            correct: true,
            interpreted,
            shapes: vec![timing("s16"), timing("s_odd")],
            ..EvalResult::failure(ResultClass::Ok, "", 1.0)
        };
        GoalDetail {
            summary: summary("demo", GoalState::Running, None),
            spec: GoalSpec {
                name: "demo".into(),
                task: "demo".into(),
                task_dir: "/k/demo".into(),
                objective: "geomean_speedup".into(),
                baseline: "torch_fp32".into(),
                shapes: vec!["m512".into(), "m1024_k4096".into()],
                seeds: vec![],
                budget: Budget::default(),
                stop: StopRules::default(),
                // As on the wire: the same on every version of the agent type.
                agent: serde_json::from_value(
                    serde_json::json!({"kind": "search", "settings": {}}),
                )
                .unwrap(),
                resources: Resources {
                    gpus: 1,
                    priority: 0,
                },
                timing: Some(kerneld_protocol::wire::TimingMethod::Gpu),
                notify: Vec::new(),
                after: None,
            },
            recent: vec![EvaluationRecord {
                iteration: 1,
                candidate: "abc".into(),
                seed: "tiled.py".into(),
                config: serde_json::json!({}),
                source_hash: None,
                result,
                device: None,
            }],
            confirmations: Default::default(),
        }
    }

    /// Every figure says what it is: the goal's method, the best's kind and pooling, each
    /// evaluation's TIMED column, and the judge's note where it timed otherwise.
    #[test]
    fn show_says_which_figure_each_number_is() {
        let mut d = detail(false);
        d.summary = summary("demo", GoalState::Running, Some(1.953));
        d.recent[0].result.timing = Some("gpu".into());
        let text = show(&d, Mode::Gpu, Paint::OFF);
        assert!(
            text.contains("vs torch_fp32, GPU time (timing = \"gpu\")"),
            "{text}"
        );
        assert!(
            text.contains("1.95× ±2.5% (GPU time, pooled over 10 measurements) at iteration 9"),
            "{text}"
        );
        let row = text.lines().find(|l| l.contains(" abc ")).unwrap();
        assert!(row.contains("GPU time"), "{row}");

        d.recent[0].result.timing = Some("as_called".into());
        d.recent[0].result.shapes[0].timing_note =
            Some("the candidate cannot be captured in a CUDA graph (sync): timed as called".into());
        d.spec.timing = None;
        let text = show(&d, Mode::Gpu, Paint::OFF);
        assert!(text.contains("timed as the judge's default"), "{text}");
        let row = text.lines().find(|l| l.contains(" abc ")).unwrap();
        assert!(row.contains("as called"), "{row}");
        assert!(
            text.contains("#1 s16: the candidate cannot be captured in a CUDA graph"),
            "{text}"
        );
        // CPU mode: interpreted, as before.
        let text = show(&detail(true), Mode::Cpu, Paint::OFF);
        let row = text.lines().find(|l| l.contains(" abc ")).unwrap();
        assert!(row.contains("interpreted"), "{row}");
    }

    /// In CPU mode `show` names the smoke shapes that ran, and the goal's for a GPU.
    #[test]
    fn show_lists_the_shapes_that_ran() {
        let line = |text: String| {
            text.lines()
                .find(|l| l.trim_start().starts_with("shapes"))
                .unwrap()
                .to_string()
        };
        let cpu = line(show(&detail(true), Mode::Cpu, Paint::OFF));
        assert!(
            cpu.ends_with("s16, s_odd (CPU mode: smoke shapes; on a GPU: m512, m1024_k4096)"),
            "{cpu}"
        );
        let gpu = line(show(&detail(false), Mode::Gpu, Paint::OFF));
        assert!(gpu.ends_with("  m512, m1024_k4096"), "{gpu}");
        let mut none_yet = detail(true);
        none_yet.recent.clear();
        let early = line(show(&none_yet, Mode::Cpu, Paint::OFF));
        assert!(
            early.contains("the task's smoke shapes (CPU mode"),
            "{early}"
        );
    }
}
