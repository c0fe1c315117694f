//! Whether a revalidated candidate still holds its win: its re-time against its
//! measurements before it (`kernelctl revalidate`, ops/revalidate.rs queues the re-times).

use super::wins;
use crate::noise::{self, Z_WIN};
use crate::projection::{GoalProjection, RetimeWork};
use crate::wire::*;

/// The `Revalidated` event for a revalidation's re-time; None for any other re-time.
/// `before`: the candidate's measurements before this re-time; `pooled`: with it.
///
/// The pooled rule (issue #23), as for a win: it lost its win when the re-time is lower
/// than its pooled figure by more than `Z_WIN` standard errors of the difference, each
/// with its own noise; it holds otherwise (and when it is higher). A re-time that is not a
/// correct, timed result does not hold.
pub(super) fn revalidated(
    w: &RetimeWork,
    proj: &GoalProjection,
    before: Option<&Pooled>,
    pooled: Option<&Pooled>,
    retime: &EvalResult,
) -> Option<EventKind> {
    let then = w.revalidate.as_ref()?;
    let request = w.request?;
    let prior = wins::prior_with(proj, w.iteration, pooled);
    let now = noise::pool(None, retime).and_then(|p| noise::figure(&p, &prior));
    let (Some(now), true) = (now, retime.is_scored()) else {
        let why = retime.message.clone().unwrap_or_default();
        return Some(EventKind::Revalidated {
            iteration: w.iteration,
            candidate: w.candidate.clone(),
            request,
            then_speedup: then.speedup,
            now_speedup: None,
            spread_pct: then.spread_pct,
            held: false,
            reason: format!(
                "the re-time was not a correct, timed result ({}{}{})",
                retime.class.as_str(),
                if why.is_empty() { "" } else { ": " },
                why
            ),
            rule: None,
        });
    };
    // What it was measured at: all its measurements before this one, else the figures
    // the request recorded, as one measurement.
    let was = before
        .and_then(|p| noise::figure(p, &prior))
        .unwrap_or_else(|| noise::known_figure(then.speedup, 1, &prior, &proj.spec.shapes));
    let (held, rule) = noise::holds(now, was);
    let noise_pct = Z_WIN * noise::se_diff_pct(&now, &was);
    let reason = format!(
        "now {:.3}× {} (measured {} over {} measurements; a loss must exceed {noise_pct:.1}%): {}",
        now.speedup,
        retime.timing_label(),
        wins::figure_text(&was),
        was.n,
        if held {
            "holds its win"
        } else {
            "lost its win beyond the noise"
        }
    );
    Some(EventKind::Revalidated {
        iteration: w.iteration,
        candidate: w.candidate.clone(),
        request,
        then_speedup: was.speedup,
        now_speedup: Some(now.speedup),
        spread_pct: noise_pct,
        held,
        reason,
        rule: Some(rule),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::wins::tests::{goal_with_best, timed};
    use serde_json::json;

    fn work() -> RetimeWork {
        RetimeWork {
            iteration: 1,
            candidate: "c1".into(),
            seed: "a.py".into(),
            config: json!({}),
            source_hash: None,
            request: Some(40),
            best: None,
            revalidate: Some(Revalidation {
                speedup: 2.0,
                spread_pct: 1.0,
            }),
            times: 1,
            for_best: false,
            done: 0,
            attempts: 1,
            aborted: 0,
        }
    }

    fn held(g: &GoalProjection, now: &EvalResult) -> bool {
        let before = g.measured.get(&1);
        let pooled = before.and_then(|b| noise::pool(Some(b), now));
        match revalidated(&work(), g, before, pooled.as_ref(), now) {
            Some(EventKind::Revalidated { held, rule, .. }) => {
                assert_eq!(rule.is_some(), now.is_scored());
                held
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn within_the_noise_holds_below_it_does_not() {
        // Measured 8 times at 2.0x, 1 % apart.
        let g = goal_with_best(2.0, 8, 0.01);
        assert!(held(&g, &timed(1.98)));
        assert!(held(&g, &timed(2.5)));
        assert!(!held(&g, &timed(1.5)));
        let wrong = EvalResult::failure(ResultClass::WrongResult, "max_abs 3", 0.1);
        assert!(!held(&g, &wrong));
    }

    #[test]
    fn other_retimes_record_nothing() {
        let mut w = work();
        w.revalidate = None;
        let g = goal_with_best(2.0, 2, 0.01);
        assert!(revalidated(&w, &g, None, None, &timed(2.0)).is_none());
    }
}
