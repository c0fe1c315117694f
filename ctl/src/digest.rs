//! `kernelctl digest [--since 12h]`: what happened overnight, from the event log alone —
//! goals finished and why, new bests with their speedups, evaluations by class, device
//! hours, agent-endpoint trouble, daemon restarts and downtime. `status` on a terminal
//! starts with `one_line` of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kerneld_protocol::wire::{Event, EventKind, GoalState};
use serde::Serialize;

use crate::failure::Failure;
use crate::render::{self, Paint, Style};
use crate::Ctx;

/// The window `digest` and `status` look back over by default.
pub const DEFAULT_SINCE: &str = "12h";

#[derive(Debug, Default, Serialize)]
pub struct Digest {
    pub since_ms: u64,
    pub until_ms: u64,
    pub finished: Vec<Finished>,
    pub new_bests: Vec<NewBest>,
    /// Evaluations with a result, by class (`ok`, `wrong_result`, ...).
    pub evaluations: BTreeMap<String, u64>,
    /// Device-hours spent evaluating (GPU-hours; CPU-slot hours in CPU mode).
    pub gpu_hours: f64,
    /// Transient agent-endpoint failures retried, and agent failures recorded.
    pub agent_retries: u64,
    pub agent_failures: u64,
    pub restarts: u64,
    pub downtime_s: f64,
    /// Goals the circuit breaker paused (their evaluations failed, not by the
    /// candidates' fault), each with its last trip.
    pub halted: Vec<Halted>,
}

#[derive(Debug, Serialize)]
pub struct Halted {
    pub goal: String,
    pub name: String,
    pub reason: String,
    /// Trips in this window.
    pub trips: u64,
    pub retry_in_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct Finished {
    pub goal: String,
    pub name: String,
    pub state: GoalState,
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct NewBest {
    pub goal: String,
    pub name: String,
    pub iteration: u64,
    pub speedup: f64,
    pub previous: Option<f64>,
    pub interpreted: bool,
    /// What the speedup is: "GPU time, pooled over 2 measurements", "as called", ...
    pub timing: String,
}

/// "12h", "90m", "2d", "1h30m" → seconds.
pub fn parse_since(text: &str) -> Result<u64, String> {
    let bad = || format!("bad duration `{text}`: write e.g. 12h, 90m, 2d, 1h30m");
    let (mut total, mut num) = (0u64, String::new());
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = num.parse().map_err(|_| bad())?;
        total = total.saturating_add(n.saturating_mul(unit));
        num.clear();
    }
    if !num.is_empty() || total == 0 {
        return Err(bad());
    }
    Ok(total)
}

/// The digest of `events` (the whole log, oldest first) over [since_ms, until_ms].
pub fn digest(events: &[Event], since_ms: u64, until_ms: u64) -> Digest {
    let mut d = Digest {
        since_ms,
        until_ms,
        ..Digest::default()
    };
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    let mut previous_ms = None;
    for ev in events {
        let goal = ev.goal.as_deref().unwrap_or("");
        if let EventKind::GoalEnqueued { spec, .. } = &ev.kind {
            names.insert(goal, &spec.name);
        }
        let in_window = ev.time_ms >= since_ms && ev.time_ms <= until_ms;
        let last = previous_ms.replace(ev.time_ms);
        if !in_window {
            continue;
        }
        let name = || names.get(goal).copied().unwrap_or(goal).to_string();
        match &ev.kind {
            EventKind::GoalStateChanged { to, reason, .. } if to.is_terminal() => {
                d.finished.push(Finished {
                    goal: goal.into(),
                    name: name(),
                    state: *to,
                    reason: reason.clone(),
                })
            }
            EventKind::NewBest { best, previous } => d.new_bests.push(NewBest {
                goal: goal.into(),
                name: name(),
                iteration: best.iteration,
                speedup: best.speedup,
                previous: *previous,
                interpreted: best.interpreted,
                timing: render::best_kind(best),
            }),
            EventKind::EvaluationFinished { result, .. } => {
                *d.evaluations
                    .entry(result.class.as_str().to_string())
                    .or_default() += 1;
                d.gpu_hours += result.elapsed_s.max(0.0) / 3600.0;
            }
            EventKind::AgentRetrying { .. } => d.agent_retries += 1,
            EventKind::BreakerTripped {
                reason,
                retry_in_ms,
                ..
            } => match d.halted.iter_mut().find(|h| h.goal == goal) {
                Some(h) => {
                    h.trips += 1;
                    h.reason = reason.clone();
                    h.retry_in_ms = *retry_in_ms;
                }
                None => d.halted.push(Halted {
                    goal: goal.into(),
                    name: name(),
                    reason: reason.clone(),
                    trips: 1,
                    retry_in_ms: *retry_in_ms,
                }),
            },
            EventKind::AgentFailed { .. } => d.agent_failures += 1,
            EventKind::DaemonStarted { .. } => {
                // Down from the log's previous event (a clean stop or a crash) to here.
                if let Some(last) = last {
                    d.restarts += 1;
                    d.downtime_s += ev.time_ms.saturating_sub(last) as f64 / 1000.0;
                }
            }
            _ => {}
        }
    }
    d
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

fn best_of(d: &Digest) -> Option<&NewBest> {
    d.new_bests
        .iter()
        .max_by(|a, b| a.speedup.total_cmp(&b.speedup))
}

/// One line: `last 12h: 2 goals finished (1 completed, 1 failed) · 3 new bests (top 1.92×
/// mla) · 41 evaluations (5 failed) · 0.52 GPU-h · 1 restart (down 3m)`.
pub fn one_line(d: &Digest, window: &str) -> String {
    let mut by_state: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &d.finished {
        *by_state.entry(f.state.as_str()).or_default() += 1;
    }
    let states: Vec<String> = by_state.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut parts = vec![if states.is_empty() {
        "no goal finished".to_string()
    } else {
        format!(
            "{} finished ({})",
            plural(d.finished.len() as u64, "goal"),
            states.join(", ")
        )
    }];
    parts.push(match best_of(d) {
        Some(b) => format!(
            "{} (top {} {})",
            plural(d.new_bests.len() as u64, "new best"),
            render::speedup(b.speedup),
            b.name
        ),
        None => "no new best".into(),
    });
    let total: u64 = d.evaluations.values().sum();
    let failed = total - d.evaluations.get("ok").copied().unwrap_or(0);
    parts.push(format!("{} ({failed} failed)", plural(total, "evaluation")));
    parts.push(format!("{:.2} GPU-h", d.gpu_hours));
    if !d.halted.is_empty() {
        parts.push(format!(
            "{} paused by the circuit breaker",
            plural(d.halted.len() as u64, "goal")
        ));
    }
    if d.agent_retries > 0 {
        parts.push(format!(
            "{} retried",
            plural(d.agent_retries, "endpoint failure")
        ));
    }
    parts.push(if d.restarts == 0 {
        "no restart".into()
    } else {
        format!(
            "{} (down {})",
            plural(d.restarts, "restart"),
            render::duration(d.downtime_s)
        )
    });
    format!("last {window}: {}", parts.join(" · "))
}

/// The full digest for a terminal or a file.
pub fn render(d: &Digest, window: &str, paint: Paint) -> String {
    let mut out = format!(
        "{}\n{}\n\n",
        paint.paint(
            &format!(
                "kerneld digest: {} to {}",
                render::datetime(d.since_ms),
                render::datetime(d.until_ms)
            ),
            Some(Style::Bold)
        ),
        one_line(d, window)
    );
    let section = |out: &mut String, title: &str| {
        let _ = writeln!(out, "{}", paint.paint(title, Some(Style::Bold)));
    };
    section(&mut out, "goals finished");
    if d.finished.is_empty() {
        out.push_str("  none\n");
    }
    for f in &d.finished {
        let why = f.reason.as_deref().unwrap_or("-");
        let _ = writeln!(out, "  {} {}  {}: {why}", f.goal, f.name, f.state.as_str());
    }
    if !d.halted.is_empty() {
        section(
            &mut out,
            "goals paused by the circuit breaker (evaluations failing, not by the candidates' fault)",
        );
    }
    for h in &d.halted {
        let _ = writeln!(
            out,
            "  {} {}  {} trip(s), last tried again after {}: {}",
            h.goal,
            h.name,
            h.trips,
            render::duration(h.retry_in_ms as f64 / 1000.0),
            h.reason
        );
    }
    section(&mut out, "new bests");
    if d.new_bests.is_empty() {
        out.push_str("  none\n");
    }
    for b in &d.new_bests {
        let from = b.previous.map_or("first".to_string(), |p| {
            format!("from {}", render::speedup(p))
        });
        let star = if b.interpreted {
            ": not a GPU figure"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {} {}  {} ({}{star}) at iteration {} ({from})",
            b.goal,
            b.name,
            render::speedup(b.speedup),
            b.timing,
            b.iteration
        );
    }
    section(&mut out, "evaluations by class");
    if d.evaluations.is_empty() {
        out.push_str("  none\n");
    }
    for (class, n) in &d.evaluations {
        let _ = writeln!(out, "  {class:<14} {n}");
    }
    let _ = writeln!(
        out,
        "{}\n  {:.3} device-hours evaluating\n  {} agent-endpoint failures retried, {} agent failures\n  {} (down {})",
        paint.paint("time", Some(Style::Bold)),
        d.gpu_hours,
        d.agent_retries,
        d.agent_failures,
        plural(d.restarts, "daemon restart"),
        render::duration(d.downtime_s)
    );
    out
}

/// The digest of the log over the last `since` (the whole log is read: digests of a
/// window are rare, and the daemon keeps no index by time).
pub fn window(ctx: &Ctx, since: &str) -> Result<Digest, Failure> {
    let secs = parse_since(since).map_err(Failure::Failed)?;
    let now = render::now_ms();
    let events = crate::follow::all_events(ctx, None)?;
    Ok(digest(&events, now.saturating_sub(secs * 1000), now))
}

/// `kernelctl digest`.
pub fn command(ctx: &Ctx, since: &str) -> Result<u8, Failure> {
    let d = window(ctx, since)?;
    if ctx.json {
        ctx.print_line(&serde_json::to_string(&d).unwrap_or_default())?;
    } else {
        ctx.print(&render(&d, since, ctx.paint))?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_units() {
        assert_eq!(parse_since("12h"), Ok(43_200));
        assert_eq!(parse_since("1h30m"), Ok(5_400));
        assert_eq!(parse_since("2d"), Ok(172_800));
        for bad in ["", "12", "h", "3w", "0h"] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}
