//! Context compaction: the bounded memory an agent sees each iteration (SPEC section 7).
//!
//! Deterministic (same log, same text) and bounded by a byte budget. Sections in
//! order of importance, each cut before the next is dropped: the goal restated, the
//! best few candidates with their profiles, failures grouped by class and harness rule
//! with one example each, what was tried without helping (per parameter value), the
//! last evaluation. Every timing says what it is (issue #23): the GPU time of the call's
//! work, "as called" (host-inclusive), or Triton's CPU interpreter.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use crate::projection::GoalProjection;
use crate::wire::{
    confirm_flag, AgentKind, EvalResult, EvaluationRecord, GoalSpec, TimingMethod,
    LABEL_INTERPRETED,
};

/// Default budget of CONTEXT.md (`command`) and of the search agent's context.
pub const DEFAULT_BYTES: usize = 12 * 1024;
/// Default budget of an `llm` request: the whole prompt, the best source included.
pub const DEFAULT_PROMPT_BYTES: usize = 48 * 1024;
/// Best candidates kept in full.
const TOP: usize = 3;
/// Longest failure message kept.
const MESSAGE_CHARS: usize = 400;
/// Said once above the timings when any of them comes from the CPU interpreter.
pub const INTERPRETED_NOTE: &str = "Timings below come from Triton's CPU interpreter (no GPU): \
     they check correctness, not speed. Do not tune for them.\n";

/// The goal's budget in bytes: `agent.context_bytes`, else the agent kind's default.
pub fn budget(spec: &GoalSpec) -> usize {
    let default = match spec.agent.proposer().kind() {
        AgentKind::Llm => DEFAULT_PROMPT_BYTES,
        AgentKind::Search | AgentKind::Command | AgentKind::Hybrid => DEFAULT_BYTES,
    };
    spec.agent.context_bytes().map_or(default, |b| b as usize)
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
    match spec.timing {
        Some(TimingMethod::Gpu) => s.push_str(
            "Timing: the GPU time of each call's work (calls replayed from a CUDA graph): \
             host launch overhead does not count, the kernels' device time does.\n",
        ),
        Some(TimingMethod::AsCalled) => s.push_str(
            "Timing: as called (host-inclusive: each call launched from Python), so launch \
             overhead and host-side work count.\n",
        ),
        None => {}
    }
    let seeds: Vec<&str> = spec.seeds.iter().map(|s| s.name.as_str()).collect();
    let _ = writeln!(
        s,
        "Seeds: {}. Candidates must be correct on every shape (held-out included) to count.",
        seeds.join(", ")
    );
    s
}

/// The harness rule behind a failure: the result's `rule`, else the `rejected [rule]`
/// tag its message starts with (results logged before the field existed).
fn rule_of(r: &EvalResult) -> Option<&str> {
    if let Some(rule) = r.rule.as_deref().filter(|s| !s.is_empty()) {
        return Some(rule);
    }
    let tagged = r.message.as_deref()?.strip_prefix("rejected [")?;
    tagged.split_once(']').map(|(rule, _)| rule)
}

fn describe(rec: &EvaluationRecord) -> String {
    let r = &rec.result;
    let mut s = format!("iteration {} · {} {}", rec.iteration, rec.seed, rec.config);
    match r.speedup {
        Some(x) if r.is_scored() => {
            let _ = write!(s, " → {x:.3}× (");
            if r.timing_label() != LABEL_INTERPRETED {
                let _ = write!(s, "{}, ", r.timing_label());
            }
            let _ = write!(s, "spread {:.1}%", r.spread_pct.unwrap_or(0.0));
            if r.interpreted {
                s.push_str(", CPU interpreter: not a speed");
            }
            s.push(')');
        }
        _ => {
            let _ = write!(s, " → {}", r.class.as_str());
            if let Some(rule) = rule_of(r) {
                let _ = write!(s, " [{rule}]");
            }
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
            "    {}: {:.2} µs vs {:.2} µs ({:.2}×, {})",
            t.shape,
            t.median_us,
            t.baseline_us,
            t.speedup,
            t.timing_label(rec.result.interpreted)
        );
        // The other figure, when the judge measured both.
        let other = match t.timing.as_deref() {
            Some("gpu") => t
                .as_called_us
                .zip(t.baseline_as_called_us)
                .map(|(c, b)| ("as called", c, b)),
            Some("as_called") => t
                .gpu_us
                .zip(t.baseline_gpu_us)
                .map(|(c, b)| ("GPU time", c, b)),
            _ => None,
        };
        if let Some((what, c, b)) = other {
            let _ = write!(s, "; {what} {c:.2} µs vs {b:.2} µs");
        }
        if let (true, Some(g)) = (gpu, t.gbps) {
            let _ = write!(s, ", {g:.0} GB/s");
        }
        if let (true, Some(p)) = (gpu, t.pct_roofline) {
            let _ = write!(s, ", {p:.0}% of roofline");
        }
        if let Some(n) = &t.timing_note {
            let _ = write!(s, " [{}]", clip(n, 160));
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

/// The context text for a goal (its statement, then its memory), at most `budget` bytes.
pub fn compact(goal: &GoalProjection, history: &[EvaluationRecord], budget: usize) -> String {
    let mut statement = goal_statement(&goal.spec);
    // The best as the daemon holds it: its measurements pooled (first readings below).
    if let Some(b) = &goal.best {
        let pooled = b
            .measurements
            .map_or(String::new(), |n| format!(", pooled over {n} measurements"));
        let _ = writeln!(
            statement,
            "Current best: iteration {}, {:.3}× ±{:.1}% ({}{pooled}).",
            b.iteration,
            b.speedup,
            b.spread_pct,
            b.timing_label()
        );
    }
    let mut sections = vec![statement];
    sections.extend(memory_sections(history, &goal.confirmations));
    fit(sections, budget)
}

/// The memory alone, without the goal restated (the `llm` agent's system prompt already
/// holds it), at most `budget` bytes.
/// `confirmed`: the goal's re-timed would-be bests (iteration -> the win held), for the
/// >10x flag.
pub fn memory(
    history: &[EvaluationRecord],
    confirmed: &BTreeMap<u64, bool>,
    budget: usize,
) -> String {
    fit(memory_sections(history, confirmed), budget)
}

fn memory_sections(history: &[EvaluationRecord], confirmed: &BTreeMap<u64, bool>) -> Vec<String> {
    let mut sections: Vec<String> = Vec::new();

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
    // First in its section, so that no cut keeps the timings and loses the warning.
    if history.iter().any(|r| r.result.interpreted) {
        best.push_str(INTERPRETED_NOTE);
    }
    if scored.is_empty() {
        best.push_str("None correct yet.\n");
    }
    for rec in scored.iter().take(TOP) {
        let _ = write!(best, "- {}", describe(rec));
        // A speedup this large is more often a measurement (or a trick) than a kernel.
        match confirm_flag(rec.result.speedup, confirmed.get(&rec.iteration).copied()) {
            Some(flag) => {
                let _ = writeln!(best, " [{flag}]");
            }
            None => best.push('\n'),
        }
        best.push_str(&profile_lines(rec));
    }
    sections.push(best);

    // Failures grouped by class and rule (a syntax error and a banned call are different
    // lessons), one (the latest) example each.
    let mut failures: BTreeMap<(&str, Option<&str>), (usize, &EvaluationRecord)> = BTreeMap::new();
    for rec in history.iter().filter(|r| !r.result.is_scored()) {
        let e = failures
            .entry((rec.result.class.as_str(), rule_of(&rec.result)))
            .or_insert((0, rec));
        e.0 += 1;
        e.1 = rec;
    }
    if !failures.is_empty() {
        let mut f = String::from("## Failures by kind\n");
        for ((class, rule), (n, rec)) in &failures {
            let msg = rec.result.message.as_deref().unwrap_or("");
            let kind = match rule {
                Some(rule) => format!("{class} [{rule}]"),
                None => class.to_string(),
            };
            let _ = writeln!(
                f,
                "- {kind} ×{n}; e.g. iteration {} {}: {}",
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
    sections
}

/// Fits the budget: whole sections while they fit, then a cut one, then stop.
fn fit(sections: Vec<String>, budget: usize) -> String {
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

/// A candidate's source in at most `room` bytes: whole when it fits, else its head, its
/// `SPACE` / `DEFAULT` blocks and its tail (the entry point is usually last), each gap
/// replaced by a `# … N lines omitted …` line.
pub fn clip_source(source: &str, room: usize) -> String {
    if source.len() <= room {
        return source.to_string();
    }
    let lines: Vec<&str> = source.split_inclusive('\n').collect();
    let marker = |n: usize| {
        let s = if n == 1 { "" } else { "s" };
        format!("# … {n} line{s} omitted to fit the prompt's budget (agent.context_bytes) …\n")
    };
    // Room for the gap lines: at most one before, between and after each kept block.
    let blocks = parameter_blocks(&lines);
    let reserve = (blocks.len() + 2) * marker(lines.len()).len();
    let mut keep = vec![false; lines.len()];
    let mut used = reserve;
    for &(from, to) in &blocks {
        let size: usize = lines[from..to].iter().map(|l| l.len()).sum();
        if used + size <= room {
            keep[from..to].iter_mut().for_each(|k| *k = true);
            used += size;
        }
    }
    // Two thirds of what is left from the top, the rest from the bottom.
    let head_room = used + room.saturating_sub(used) * 2 / 3;
    for (i, line) in lines.iter().enumerate() {
        if keep[i] {
            continue;
        }
        if used + line.len() > head_room {
            break;
        }
        keep[i] = true;
        used += line.len();
    }
    for (i, line) in lines.iter().enumerate().rev() {
        if keep[i] {
            continue;
        }
        if used + line.len() > room {
            break;
        }
        keep[i] = true;
        used += line.len();
    }
    let mut out = String::new();
    let mut gap = 0;
    for (line, kept) in lines.iter().zip(&keep) {
        if *kept {
            if gap > 0 {
                out.push_str(&marker(gap));
                gap = 0;
            }
            out.push_str(line);
        } else {
            gap += 1;
        }
    }
    if gap > 0 {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&marker(gap));
    }
    if out.len() > room {
        // A budget too small for even the gap lines: a plain byte cut.
        let mut cut = room;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// The line ranges of the module's top-level `SPACE = …` and `DEFAULT = …` assignments.
fn parameter_blocks(lines: &[&str]) -> Vec<(usize, usize)> {
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let starts = ["SPACE", "DEFAULT"].iter().any(|name| {
            lines[i]
                .strip_prefix(name)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        });
        if !starts {
            i += 1;
            continue;
        }
        // The assignment runs until its brackets close.
        let from = i;
        let mut depth: i64 = 0;
        loop {
            for c in lines[i].chars() {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth -= 1,
                    _ => {}
                }
            }
            i += 1;
            if depth <= 0 || i == lines.len() {
                break;
            }
        }
        blocks.push((from, i));
    }
    blocks
}

#[cfg(test)]
mod tests;
