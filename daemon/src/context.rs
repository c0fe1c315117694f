//! Context compaction: the bounded memory an agent sees each iteration (SPEC section 7).
//!
//! Deterministic (same log, same text) and bounded by a byte budget. Sections in
//! order of importance, each cut before the next is dropped: the goal restated, the
//! best few candidates with their profiles, failures grouped by class with one
//! example each, what was tried without helping (per parameter value), the last
//! evaluation.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use crate::projection::GoalProjection;
use crate::wire::{EvaluationRecord, GoalSpec};

/// Default budget when the goal's agent settings give none.
pub const DEFAULT_BYTES: usize = 12 * 1024;
/// Best candidates kept in full.
const TOP: usize = 3;
/// Longest failure message kept.
const MESSAGE_CHARS: usize = 400;

pub fn budget(spec: &GoalSpec) -> usize {
    spec.agent
        .settings
        .get("context_bytes")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_BYTES, |b| b as usize)
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n).collect::<String>())
    }
}

/// The goal restated: what every iteration aims at.
pub fn goal_statement(spec: &GoalSpec) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Goal `{}`", spec.name);
    let _ = writeln!(
        s,
        "Make task `{}` faster: objective {} against baseline `{}` over shapes {}.",
        spec.task,
        spec.objective,
        spec.baseline,
        spec.shapes.join(", ")
    );
    if let Some(t) = spec.stop.target_speedup {
        let _ = writeln!(s, "Target: {t}× speedup.");
    }
    let seeds: Vec<&str> = spec.seeds.iter().map(|s| s.name.as_str()).collect();
    let _ = writeln!(
        s,
        "Seeds: {}. Candidates must be correct on every shape (held-out included) to count.",
        seeds.join(", ")
    );
    s
}

fn describe(rec: &EvaluationRecord) -> String {
    let r = &rec.result;
    let mut s = format!("iteration {} · {} {}", rec.iteration, rec.seed, rec.config);
    match r.speedup {
        Some(x) if r.is_scored() => {
            let _ = write!(s, " → {x:.3}× (spread {:.1}%)", r.spread_pct.unwrap_or(0.0));
        }
        _ => {
            let _ = write!(s, " → {}", r.class.as_str());
        }
    }
    s
}

fn profile_lines(rec: &EvaluationRecord) -> String {
    let mut s = String::new();
    // Under the interpreter, throughput figures and compiled-kernel resources mean nothing.
    let gpu = !rec.result.interpreted;
    for t in &rec.result.shapes {
        let _ = write!(
            s,
            "    {}: {:.2} µs vs {:.2} µs ({:.2}×)",
            t.shape, t.median_us, t.baseline_us, t.speedup
        );
        if let (true, Some(g)) = (gpu, t.gbps) {
            let _ = write!(s, ", {g:.0} GB/s");
        }
        if let (true, Some(p)) = (gpu, t.pct_roofline) {
            let _ = write!(s, ", {p:.0}% of roofline");
        }
        s.push('\n');
    }
    let kernels = rec.result.profile.get("kernels").and_then(Value::as_array);
    for k in kernels.into_iter().flatten().filter(|_| gpu) {
        let field = |name: &str| match k.get(name) {
            Some(Value::Number(n)) => n.to_string(),
            _ => "?".into(),
        };
        let _ = writeln!(
            s,
            "    kernel {}: {} registers, {} spills, {} B shared",
            k.get("name").and_then(Value::as_str).unwrap_or("?"),
            field("registers"),
            field("spills"),
            field("shared_bytes"),
        );
    }
    s
}

/// The context text for a goal, at most `budget` bytes.
pub fn compact(goal: &GoalProjection, history: &[EvaluationRecord], budget: usize) -> String {
    let mut sections: Vec<String> = Vec::new();
    sections.push(goal_statement(&goal.spec));

    // Best few, with profiles.
    let mut scored: Vec<&EvaluationRecord> =
        history.iter().filter(|r| r.result.is_scored()).collect();
    scored.sort_by(|a, b| {
        b.result
            .speedup
            .partial_cmp(&a.result.speedup)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.iteration.cmp(&b.iteration))
    });
    let mut best = String::from("## Best candidates\n");
    if scored.is_empty() {
        best.push_str("None correct yet.\n");
    }
    for rec in scored.iter().take(TOP) {
        let _ = writeln!(best, "- {}", describe(rec));
        best.push_str(&profile_lines(rec));
    }
    sections.push(best);

    // Failures grouped by class, one (the latest) example each.
    let mut failures: BTreeMap<&str, (usize, &EvaluationRecord)> = BTreeMap::new();
    for rec in history.iter().filter(|r| !r.result.is_scored()) {
        let e = failures
            .entry(rec.result.class.as_str())
            .or_insert((0, rec));
        e.0 += 1;
        e.1 = rec;
    }
    if !failures.is_empty() {
        let mut f = String::from("## Failures by kind\n");
        for (class, (n, rec)) in &failures {
            let msg = rec.result.message.as_deref().unwrap_or("");
            let _ = writeln!(
                f,
                "- {class} ×{n}; e.g. iteration {} {}: {}",
                rec.iteration,
                rec.config,
                clip(msg, MESSAGE_CHARS)
            );
        }
        sections.push(f);
    }

    // What did not help: per parameter value, how many tries and the best speedup seen.
    if scored.len() > TOP {
        let mut per_value: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
        for rec in &scored {
            if let Some(obj) = rec.config.as_object() {
                for (k, v) in obj {
                    let e = per_value
                        .entry((k.clone(), v.to_string()))
                        .or_insert((0, 0.0));
                    e.0 += 1;
                    e.1 = e.1.max(rec.result.speedup.unwrap_or(0.0));
                }
            }
        }
        let mut t = format!(
            "## Tried ({} correct configurations); best speedup seen per parameter value\n",
            scored.len()
        );
        let mut last_param = String::new();
        for ((param, value), (n, best)) in &per_value {
            if *param != last_param {
                let _ = write!(t, "\n- {param}:");
                last_param = param.clone();
            }
            let _ = write!(t, " {value}→{best:.2}× ({n})");
        }
        t.push('\n');
        sections.push(t);
    }

    if let Some(last) = history.last() {
        let mut l = String::from("## Last evaluation\n");
        let _ = writeln!(l, "- {}", describe(last));
        if let Some(m) = &last.result.message {
            let _ = writeln!(l, "  {}", clip(m, MESSAGE_CHARS));
        }
        sections.push(l);
    }

    // Fit the budget: whole sections while they fit, then a cut one, then stop.
    let mut out = String::new();
    for s in sections {
        if out.len() + s.len() < budget {
            out.push_str(&s);
            out.push('\n');
        } else {
            let room = budget.saturating_sub(out.len() + 16);
            if room > 64 {
                let mut cut = room;
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                out.push_str(&s[..cut]);
                out.push_str("\n[… cut]\n");
            }
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EvalResult, ResultClass, ShapeTiming};
    use serde_json::json;

    fn rec(iteration: u64, speedup: Option<f64>, class: ResultClass) -> EvaluationRecord {
        let mut result =
            EvalResult::failure(class, format!("failure of iteration {iteration}"), 1.0);
        if let Some(x) = speedup {
            result = EvalResult {
                class: ResultClass::Ok,
                message: None,
                correct: true,
                speedup: Some(x),
                spread_pct: Some(1.0),
                shapes: vec![ShapeTiming {
                    shape: "s".into(),
                    median_us: 10.0 / x,
                    spread_pct: 1.0,
                    baseline_us: 10.0,
                    baseline_spread_pct: 1.0,
                    speedup: x,
                    gbps: Some(100.0),
                    tflops: None,
                    pct_roofline: Some(5.0),
                }],
                ..result
            };
        }
        EvaluationRecord {
            iteration,
            candidate: format!("c{iteration}"),
            seed: "a.py".into(),
            config: json!({"B": iteration % 4, "W": 4}),
            source_hash: None,
            device: None,
            result,
        }
    }

    fn history(n: u64) -> Vec<EvaluationRecord> {
        (1..=n)
            .map(|i| match i % 5 {
                0 => rec(i, None, ResultClass::WrongResult),
                1 => rec(i, None, ResultClass::CompileError),
                _ => rec(i, Some(1.0 + (i % 7) as f64 / 10.0), ResultClass::Ok),
            })
            .collect()
    }

    #[test]
    fn restates_the_goal_keeps_the_best_and_groups_failures() {
        let goal = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
        let text = compact(&goal, &history(40), DEFAULT_BYTES);
        assert!(text.starts_with("# Goal `g`"));
        assert!(text.contains("→ 1.600×"), "{text}");
        assert!(text.contains("wrong_result ×8"), "{text}");
        assert!(text.contains("compile_error ×8"), "{text}");
        assert!(text.contains("100 GB/s"));
        assert_eq!(
            text,
            compact(&goal, &history(40), DEFAULT_BYTES),
            "deterministic"
        );
    }

    #[test]
    fn stays_within_its_budget_however_long_the_history() {
        let goal = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
        for budget in [1024, 4096, DEFAULT_BYTES] {
            let text = compact(&goal, &history(5000), budget);
            assert!(text.len() <= budget, "{} > {budget}", text.len());
            assert!(
                text.starts_with("# Goal `g`"),
                "the goal always comes first"
            );
        }
    }
}
