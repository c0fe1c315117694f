//! One line per event: `seq  time  type  summary`, coloured by what happened; long
//! messages cut on a terminal, whole (one line still) in a pipe.

use kerneld_protocol::wire::{EvalResult, Event, EventKind, Health, ResultClass};

use super::{
    class_style, datetime, fit, percent, short_id, speedup, state_style, Fit, Paint, Style,
};

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
                spec.agent.kind().as_str()
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
                "#{} {} {} {} ({}){before}",
                best.iteration,
                short_id(&best.candidate),
                speedup(best.speedup),
                percent(best.spread_pct),
                super::best_kind(best)
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
                super::duration(*retry_in_ms as f64 / 1000.0),
                fit(message, 100, fit_text)
            ),
            Some(Style::Yellow),
        ),
        EventKind::BreakerTripped {
            reason,
            failures,
            trips,
            retry_in_ms,
        } => (
            format!(
                "paused: {failures} evaluation(s) in a row failed, not by the candidates' \
                 fault (trip {trips}); tried again in {}: {}",
                super::duration(*retry_in_ms as f64 / 1000.0),
                fit(reason, 100, fit_text)
            ),
            Some(Style::Red),
        ),
        EventKind::Downtime { from_ms, to_ms } => (
            format!(
                "daemon was down {:.0} s: not counted against the wall budget",
                to_ms.saturating_sub(*from_ms) as f64 / 1000.0
            ),
            Some(Style::Dim),
        ),
        EventKind::SlurmJobSubmitted {
            slot,
            job,
            partition,
            ..
        } => (
            format!("{slot}: Slurm job {job} submitted to partition {partition}"),
            Some(Style::Dim),
        ),
        EventKind::SlurmJobStarted {
            slot,
            job,
            node,
            reattached,
        } => (
            format!(
                "{slot}: Slurm job {job} {} on {node}",
                if *reattached { "reattached" } else { "running" }
            ),
            Some(Style::Green),
        ),
        EventKind::SlurmJobEnded {
            slot,
            job,
            state,
            reason,
        } => (
            format!(
                "{slot}: Slurm job {job} ended{}: {}",
                state
                    .as_deref()
                    .map_or(String::new(), |s| format!(" ({s})")),
                fit(reason, 80, fit_text)
            ),
            Some(Style::Yellow),
        ),
        other => crate::retime::event_summary(other, fit_text),
    }
}

/// `ok 1.85× ±2.1% (GPU time)` or `wrong_result: shape s16 seed 3`: a speedup says
/// which figure it is ("GPU time", "as called", "interpreted").
pub fn result_summary(r: &EvalResult, fit_text: Fit) -> String {
    match (r.class, r.speedup) {
        (ResultClass::Ok, Some(s)) => {
            let spread = r
                .spread_pct
                .map_or(String::new(), |p| format!(" {}", percent(p)));
            format!("ok {}{spread} ({})", speedup(s), r.timing_label())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
