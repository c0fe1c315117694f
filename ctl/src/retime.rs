//! `kernelctl retime` (re-time a candidate N times and print the stability summary), the
//! re-time events' one-line summaries, and the >10x flag that `show` and `report` print.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use kerneld_protocol::wire::{
    confirm_flag, method, Event, EventKind, GoalDetail, RetimeParams, RetimeReport, RetimeTicket,
    RetimesParams,
};

use crate::client::decode;
use crate::failure::Failure;
use crate::render::{self, fit, short_id, speedup, Cell, Fit, Paint, Style};
use crate::Ctx;

/// How often the request's progress is read while waiting.
const POLL: Duration = Duration::from_millis(500);

pub(crate) fn retime(
    ctx: &Ctx,
    goal: String,
    candidate: Option<String>,
    times: u32,
    wait: bool,
) -> Result<u8, Failure> {
    let params = RetimeParams {
        goal,
        candidate,
        times,
    };
    let ticket: RetimeTicket = decode(method::RETIME, ctx.call_value(method::RETIME, &params)?)?;
    if !wait {
        if ctx.json {
            ctx.print_json(&serde_json::to_value(&ticket).unwrap_or_default())?;
        } else {
            ctx.print_line(&format!(
                "{}: request {} queued: {} re-times of #{} {}",
                ticket.goal,
                ticket.request,
                ticket.times,
                ticket.iteration,
                short_id(&ticket.candidate)
            ))?;
        }
        return Ok(0);
    }
    ctx.note(&format!(
        "{}: request {}: {} re-times of #{} {} (each a fresh runner against a fresh baseline)",
        ticket.goal,
        ticket.request,
        ticket.times,
        ticket.iteration,
        short_id(&ticket.candidate)
    ));
    let ask = RetimesParams {
        goal: ticket.goal.clone(),
        request: Some(ticket.request),
    };
    let mut seen = 0;
    let report = loop {
        let value = ctx.call_value(method::RETIMES, &ask)?;
        let report: RetimeReport = decode(method::RETIMES, value.clone())?;
        if report.done > seen {
            seen = report.done;
            ctx.note(&format!("  {}/{} re-timed", report.done, report.times));
        }
        if report.finished {
            if ctx.json {
                ctx.print_json(&value)?;
            }
            break report;
        }
        std::thread::sleep(POLL);
    };
    if !ctx.json {
        ctx.print(&summary(&report, ctx.paint))?;
    }
    // Fewer correct re-times than asked: the figures are not the ones asked for.
    Ok(if report.stability.n == report.times as usize {
        0
    } else {
        1
    })
}

/// The stability summary for people.
pub(crate) fn summary(r: &RetimeReport, paint: Paint) -> String {
    let s = &r.stability;
    let pct = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.2} %"));
    let mut out = format!(
        "{} request {}: #{} {}: {} of {} re-times correct and timed\n",
        r.goal,
        r.request,
        r.iteration,
        short_id(&r.candidate),
        s.n,
        r.times
    );
    if let Some(t) = &s.timing {
        let _ = writeln!(out, "  figures: {t}");
    }
    let _ = writeln!(
        out,
        "  geomean speedup  median {}  CV {}\n  baseline geomean time  CV {}\n  largest shape deviation from its median  candidate {}  baseline {}",
        s.speedup_median.map_or("-".into(), speedup),
        pct(s.speedup_cv_pct),
        pct(s.baseline_cv_pct),
        pct(s.candidate_max_dev_pct),
        pct(s.baseline_max_dev_pct)
    );
    // What the win rule uses: every measurement of the candidate pooled (issue #23).
    if let Some(f) = &r.pooled {
        let _ = writeln!(
            out,
            "  pooled over all {} measurements (first evaluation and every re-time): {} ±{:.1}% (95 %){}",
            f.n,
            speedup(f.speedup),
            f.ci95_pct(),
            if r.is_best {
                ": the best's figure, its interval tightened"
            } else {
                ""
            }
        );
    }
    let rows: Vec<Vec<Cell>> = s
        .shapes
        .iter()
        .map(|sh| {
            vec![
                Cell::new(&sh.shape),
                Cell::num(format!("{:.2}", sh.candidate_us)),
                Cell::num(format!("{:.2} %", sh.candidate_dev_pct)),
                Cell::num(sh.baseline_us.map_or("-".into(), |b| format!("{b:.2}"))),
                Cell::num(pct(sh.baseline_dev_pct)),
            ]
        })
        .collect();
    out.push_str(&render::table(
        &[
            "SHAPE",
            "MEDIAN_US",
            "MAX_DEV",
            "BASELINE_US",
            "BASE_MAX_DEV",
        ],
        &rows,
        paint,
    ));
    for run in r.runs.iter().filter(|run| run.speedup.is_none()) {
        let _ = writeln!(
            out,
            "  re-time {} {}: {}",
            run.seq,
            run.class.as_str(),
            run.message.as_deref().unwrap_or("")
        );
    }
    out
}

/// `show`'s flag for one evaluation (or the best) at `iteration`, when over 10x.
pub(crate) fn show_flag(
    detail: &GoalDetail,
    iteration: u64,
    s: Option<f64>,
) -> Option<&'static str> {
    confirm_flag(s, detail.confirmations.get(&iteration).copied())
}

/// A correct evaluation over 10x, as `report` flags it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Flagged {
    pub iteration: u64,
    pub speedup: f64,
    pub flag: &'static str,
}

/// The flagged points, given the goal's events (`win_checked` says which were confirmed).
pub(crate) fn flagged(points: &[crate::report::Point], events: &[Event]) -> Vec<Flagged> {
    let confirmed: BTreeMap<u64, bool> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::WinChecked {
                iteration,
                confirmed,
                ..
            } => Some((*iteration, *confirmed)),
            _ => None,
        })
        .collect();
    points
        .iter()
        .filter_map(|p| {
            let s = p.speedup?;
            let flag = confirm_flag(Some(s), confirmed.get(&p.iteration).copied())?;
            Some(Flagged {
                iteration: p.iteration,
                speedup: s,
                flag,
            })
        })
        .collect()
}

/// The one-line summaries of the re-time events (render::event_summary's other arms).
pub(crate) fn event_summary(kind: &EventKind, fit_text: Fit) -> (String, Option<Style>) {
    match kind {
        EventKind::WinPending { best, .. } => (
            format!(
                "#{} {} would be the new best at {}: re-timing it first",
                best.iteration,
                short_id(&best.candidate),
                speedup(best.speedup)
            ),
            Some(Style::Dim),
        ),
        EventKind::RetimeRequested {
            iteration,
            candidate,
            times,
            for_best: true,
            ..
        } => (
            format!(
                "#{iteration} {}: {times} re-times asked by kerneld for the new best (its own noise, before challengers face it)",
                short_id(candidate)
            ),
            Some(Style::Dim),
        ),
        EventKind::RetimeRequested {
            iteration,
            candidate,
            times,
            by_uid,
            ..
        } => (
            format!(
                "#{iteration} {}: {times} re-times asked by uid {by_uid}",
                short_id(candidate)
            ),
            None,
        ),
        EventKind::RetimeStarted {
            iteration,
            candidate,
            device,
            attempt,
            request,
        } => (
            format!(
                "#{iteration} {} on {device}{}{}",
                short_id(candidate),
                request.map_or(" (confirming a win)".into(), |r| format!(" (request {r})")),
                if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                }
            ),
            Some(Style::Dim),
        ),
        EventKind::RetimeFinished {
            iteration,
            candidate,
            result,
            ..
        } => (
            format!(
                "#{iteration} {} {}",
                short_id(candidate),
                render::result_summary(result, fit_text)
            ),
            Some(render::class_style(result.class)),
        ),
        EventKind::RetimeAborted {
            iteration,
            candidate,
            reason,
            ..
        } => (
            format!(
                "#{iteration} {} re-time aborted: {}",
                short_id(candidate),
                fit(reason, 80, fit_text)
            ),
            Some(Style::Yellow),
        ),
        EventKind::WinChecked {
            iteration,
            candidate,
            confirmed,
            reason,
            ..
        } => (
            format!(
                "#{iteration} {} {}: {}",
                short_id(candidate),
                if *confirmed {
                    "confirmed"
                } else {
                    "NOT confirmed"
                },
                fit(reason, 100, fit_text)
            ),
            Some(if *confirmed {
                Style::Green
            } else {
                Style::Yellow
            }),
        ),
        EventKind::Revalidated {
            iteration,
            candidate,
            held,
            reason,
            ..
        } => (
            format!(
                "revalidated #{iteration} {}: {}",
                short_id(candidate),
                fit(reason, 100, fit_text)
            ),
            Some(if *held { Style::Green } else { Style::Yellow }),
        ),
        EventKind::GoalForked { origin } => (format!("forked from {origin}"), Some(Style::Dim)),
        other => (other.type_name().to_string(), None),
    }
}
