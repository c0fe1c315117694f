//! Whether a revalidated candidate still holds its win: its re-time against the figures
//! it was measured at (`kernelctl revalidate`, ops/revalidate.rs queues the re-times).

use crate::projection::RetimeWork;
use crate::wire::*;

/// The `Revalidated` event for a revalidation's re-time; None for any other re-time.
///
/// It holds when the re-time is a correct, timed result whose speedup is no lower than the
/// one measured, less the noise: the larger of the two spreads (the rule a win passed).
pub(super) fn revalidated(w: &RetimeWork, retime: &EvalResult) -> Option<EventKind> {
    let then = w.revalidate.as_ref()?;
    let request = w.request?;
    let spread = then
        .spread_pct
        .max(retime.spread_pct.unwrap_or(0.0).max(0.0));
    let (now, held, reason) = if !retime.is_scored() {
        let why = retime.message.clone().unwrap_or_default();
        (
            None,
            false,
            format!(
                "the re-time was not a correct, timed result ({}{}{})",
                retime.class.as_str(),
                if why.is_empty() { "" } else { ": " },
                why
            ),
        )
    } else {
        let now = retime.speedup.unwrap_or(0.0);
        let floor = then.speedup * (1.0 - spread / 100.0);
        let held = now >= floor;
        let reason = format!(
            "now {now:.3}× (measured {:.3}×, spread {spread:.1}%): {}",
            then.speedup,
            if held {
                "holds its win"
            } else {
                "lost its win beyond the noise"
            }
        );
        (Some(now), held, reason)
    };
    Some(EventKind::Revalidated {
        iteration: w.iteration,
        candidate: w.candidate.clone(),
        request,
        then_speedup: then.speedup,
        now_speedup: now,
        spread_pct: spread,
        held,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::retime::tests::timed;
    use serde_json::json;

    fn work(speedup: f64, spread: f64) -> RetimeWork {
        RetimeWork {
            iteration: 3,
            candidate: "c3".into(),
            seed: "a.py".into(),
            config: json!({}),
            source_hash: None,
            request: Some(40),
            best: None,
            revalidate: Some(Revalidation {
                speedup,
                spread_pct: spread,
            }),
            times: 1,
            done: 0,
            attempts: 1,
            aborted: 0,
        }
    }

    fn held(e: Option<EventKind>) -> bool {
        match e {
            Some(EventKind::Revalidated { held, .. }) => held,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn within_the_noise_holds_below_it_does_not() {
        assert!(held(revalidated(&work(2.0, 3.0), &timed(1.95, 1.0))));
        assert!(held(revalidated(&work(2.0, 1.0), &timed(2.5, 1.0))));
        assert!(!held(revalidated(&work(2.0, 1.0), &timed(1.5, 2.0))));
        let wrong = EvalResult::failure(ResultClass::WrongResult, "max_abs 3", 0.1);
        assert!(!held(revalidated(&work(2.0, 1.0), &wrong)));
    }

    #[test]
    fn other_retimes_record_nothing() {
        let mut w = work(2.0, 1.0);
        w.revalidate = None;
        assert!(revalidated(&w, &timed(2.0, 1.0)).is_none());
    }
}
