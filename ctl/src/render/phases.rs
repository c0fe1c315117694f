//! Where evaluations' time went (issue #12): the per-phase table of `show` and the
//! goal's averages line. The phases come from the judge (`result.phases`) and the
//! daemon (`daemon_gap`, shown as DAEMON); old records without them show nothing.

use kerneld_protocol::wire::{EvaluationRecord, Phases};
use kerneld_protocol::worker::PhaseMeans;

use super::{table, Cell, Paint};

/// Rows of the phase table in `show` (the newest evaluations).
const ROWS: usize = 10;

/// Seconds with a resolution that suits phases from milliseconds to minutes.
pub fn secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        "-".into()
    } else if s == 0.0 {
        "0".into()
    } else if s < 0.1 {
        format!("{:.0}ms", s * 1000.0)
    } else if s < 10.0 {
        format!("{s:.2}s")
    } else {
        format!("{s:.0}s")
    }
}

/// The table's columns: a header and what it sums of one evaluation's phases.
fn columns(p: &Phases) -> [(&'static str, Option<f64>); 11] {
    [
        ("STATIC", Some(p.static_check)),
        ("RUNNER", Some(p.runner_wait)),
        ("IMPORT", Some(p.import)),
        ("COMPILE", Some(p.compile)),
        (
            "CORRECT",
            Some(p.correctness_candidate + p.correctness_reference),
        ),
        ("BASELINE", Some(p.baseline)),
        ("TIMING", Some(p.timing + p.timed_checks)),
        ("PROFILE", Some(p.profile)),
        ("XFER", Some(p.transfers)),
        // Done ahead, while the previous candidate was timed: not in TOTAL (compile-ahead).
        ("AHEAD", Some(p.ahead)),
        // The gap from the previous result to this request: it holds the previous
        // record's commit, so it alone is the daemon's share per evaluation.
        ("DAEMON", p.daemon_gap),
    ]
}

/// The recent evaluations' phases, newest last; None when none reported any.
pub fn table_of(recent: &[EvaluationRecord], paint: Paint) -> Option<String> {
    let with: Vec<&EvaluationRecord> = recent
        .iter()
        .filter(|e| !e.result.phases.is_empty())
        .collect();
    if with.is_empty() {
        return None;
    }
    let with = &with[with.len().saturating_sub(ROWS)..];
    let mut headers = vec!["ITER", "TOTAL"];
    headers.extend(columns(&Phases::default()).map(|(h, _)| h));
    headers.push("GPU-WORK");
    let rows: Vec<Vec<Cell>> = with
        .iter()
        .map(|e| {
            let p = &e.result.phases;
            let mut row = vec![
                Cell::num(e.iteration.to_string()),
                Cell::num(secs(e.result.elapsed_s)),
            ];
            row.extend(
                columns(p)
                    .into_iter()
                    .map(|(_, v)| Cell::num(v.map_or("-".into(), secs))),
            );
            row.push(Cell::num(secs(p.gpu_work())));
            row
        })
        .collect();
    Some(table(&headers, &rows, paint))
}

/// The goal's averages in one line (`show`'s `phases` field).
pub fn means_text(m: &PhaseMeans) -> String {
    let mut parts: Vec<String> = columns(&m.mean)
        .into_iter()
        .filter_map(|(h, v)| {
            v.filter(|v| *v > 0.0)
                .map(|v| format!("{} {}", h.to_lowercase(), secs(v)))
        })
        .collect();
    parts.insert(0, format!("mean over {} evaluations:", m.evaluations));
    if let Some(r) = m.evaluations_per_hour {
        parts.push(format!("· {r:.0} evaluations/hour"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_at_every_scale() {
        assert_eq!(secs(0.0), "0");
        assert_eq!(secs(0.0123), "12ms");
        assert_eq!(secs(2.345), "2.35s");
        assert_eq!(secs(63.2), "63s");
        assert_eq!(secs(f64::NAN), "-");
    }

    #[test]
    fn means_line_names_the_nonzero_phases_and_the_rate() {
        let m = PhaseMeans {
            evaluations: 4,
            mean: Phases {
                compile: 2.5,
                timing: 0.8,
                daemon_gap: Some(0.012),
                ..Phases::default()
            },
            evaluations_per_hour: Some(1520.4),
        };
        let t = means_text(&m);
        assert_eq!(
            t,
            "mean over 4 evaluations: compile 2.50s timing 0.80s daemon 12ms · 1520 evaluations/hour"
        );
    }
}
