//! Which candidates are re-timed, and which wins hold (issue #23): the decisions of the
//! pooled rule (`crate::noise`) over a goal's projection, as events. Pure: the rooms
//! (evaluation.rs, retime.rs) call these with the projection and the result in hand.
//!
//! - a first reading is re-timed (`WinPending`) when it is worth it (`noise::worth_retiming`
//!   against the best's pooled figure);
//! - its re-time decides (`check_win`): the challenger's measurements pooled, against the
//!   best's own, recomputed now (`noise::beats`); the new best's figure is the pooled
//!   estimate, and kerneld asks for re-times of it while its standard error is above
//!   `noise::BEST_SE_PCT` (at most `noise::BEST_MEASUREMENTS` in all);
//! - a revalidation holds unless its re-time is lower than the candidate's measurements
//!   before it beyond their noise (`noise::holds`).

use crate::noise::{self, NoisePrior};
use crate::projection::{GoalProjection, Pending, RetimeWork};
use crate::wire::*;

/// The best's figure as the rule sees it with `prior`: pooled over its measurements, else
/// (a best decided before issue 23, or carried by a fork) from its summary.
pub(super) fn best_figure(proj: &GoalProjection, prior: &NoisePrior) -> Option<Figure> {
    let b = proj.best.as_ref()?;
    Some(
        proj.measured
            .get(&b.iteration)
            .and_then(|p| noise::figure(p, prior))
            .unwrap_or_else(|| noise::summary_figure(b, prior, &proj.spec.shapes)),
    )
}

/// The `WinPending` for a first reading worth a re-time, with its measurement as the start
/// of its pooled ones; None for a result that is not (or that measures nothing).
pub(super) fn screen(proj: &GoalProjection, p: &Pending, result: &EvalResult) -> Option<EventKind> {
    let pooled = noise::pool(None, result)?;
    let first = noise::figure(&pooled, &proj.noise)?;
    if !noise::worth_retiming(first, best_figure(proj, &proj.noise)) {
        return None;
    }
    let best = BestSummary {
        candidate: p.candidate.clone(),
        seed: p.seed.clone(),
        // what ran, defaults filled in: the `BEST` a user takes must run as is
        config: result.config.clone().unwrap_or_else(|| p.config.clone()),
        speedup: result.speedup.unwrap_or(first.speedup),
        spread_pct: result.spread_pct.unwrap_or(0.0).max(0.0),
        iteration: p.iteration,
        interpreted: result.interpreted,
        environment: result.environment.clone(),
        measurements: None,
        timing: result.timing.clone(),
    };
    Some(EventKind::WinPending {
        best,
        source_hash: p.source_hash.clone(),
        pooled: Some(pooled),
    })
}

/// A candidate's measurements before a re-time of it: what the projection holds, else its
/// first evaluation (`first`, from the evaluation records).
pub(super) fn before(
    proj: &GoalProjection,
    iteration: u64,
    first: Option<&EvalResult>,
) -> Option<Pooled> {
    proj.measured
        .get(&iteration)
        .cloned()
        .or_else(|| first.and_then(|r| noise::pool(None, r)))
}

/// The goal's prior once the projection has learned `now` (as its fold will).
pub(super) fn prior_with(
    proj: &GoalProjection,
    iteration: u64,
    now: Option<&Pooled>,
) -> NoisePrior {
    let mut prior = proj.noise.clone();
    if let Some(p) = now {
        prior.learn(proj.measured.get(&iteration), p);
    }
    prior
}

/// Whether a would-be best's win holds after its re-time: the `WinChecked` event, and the
/// `NewBest` when it does (None, None for a request's re-time, which decides nothing).
/// `pooled`: its measurements with the re-time's (None when the re-time measured nothing).
///
/// The challenger's figure is pooled over its first evaluation and the re-time; the best's
/// over all of its own measurements, recomputed now (another device may have confirmed a
/// best meanwhile, and the best's re-times tighten it). A re-time that is not a correct,
/// timed result (wrong, crashed, refused) confirms nothing.
pub(super) fn check_win(
    w: &RetimeWork,
    proj: &GoalProjection,
    retime: &EvalResult,
    pooled: Option<&Pooled>,
) -> (Option<EventKind>, Option<EventKind>) {
    let Some(first) = w.best.as_ref().filter(|_| w.request.is_none()) else {
        return (None, None);
    };
    let unconfirmed = |retimed_speedup, speedup, spread_pct, reason, rule| EventKind::WinChecked {
        iteration: w.iteration,
        candidate: w.candidate.clone(),
        confirmed: false,
        first_speedup: first.speedup,
        retimed_speedup,
        speedup,
        spread_pct,
        reason,
        rule,
    };
    let prior = prior_with(proj, w.iteration, pooled);
    let figure = pooled.and_then(|p| noise::figure(p, &prior));
    let (Some(again), Some(fig)) = (retime.speedup.filter(|_| retime.is_scored()), figure) else {
        let why = retime.message.clone().unwrap_or_default();
        let reason = format!(
            "the re-time was not a correct, timed result ({}{}{})",
            retime.class.as_str(),
            if why.is_empty() { "" } else { ": " },
            why
        );
        return (
            Some(unconfirmed(None, None, first.spread_pct, reason, None)),
            None,
        );
    };
    let best = best_figure(proj, &prior);
    let (won, rule) = noise::beats(fig, best);
    let read = format!(
        "re-timed at {again:.3}× {} (first {:.3}×): {} over {} measurements",
        retime.timing_label(),
        first.speedup,
        figure_text(&fig),
        fig.n
    );
    let against = match (&best, rule.ratio_lower()) {
        (Some(b), Some(lower)) => format!(
            "the best {} (lower bound of the ratio {lower:.3} at z {})",
            figure_text(b),
            rule.z
        ),
        _ => "no best to beat".to_string(),
    };
    if !won {
        let reason = format!("{read} does not clear {against}");
        let checked = unconfirmed(
            Some(again),
            Some(fig.speedup),
            fig.ci95_pct(),
            reason,
            Some(rule),
        );
        return (Some(checked), None);
    }
    let checked = EventKind::WinChecked {
        iteration: w.iteration,
        candidate: w.candidate.clone(),
        confirmed: true,
        first_speedup: first.speedup,
        retimed_speedup: Some(again),
        speedup: Some(fig.speedup),
        spread_pct: fig.ci95_pct(),
        reason: format!("{read} clears {against}"),
        rule: Some(rule),
    };
    let new_best = EventKind::NewBest {
        best: BestSummary {
            speedup: fig.speedup,
            spread_pct: fig.ci95_pct(),
            interpreted: first.interpreted || retime.interpreted,
            measurements: Some(fig.n),
            timing: retime.timing.clone().or_else(|| first.timing.clone()),
            ..first.clone()
        },
        previous: proj.best.as_ref().map(|b| b.speedup),
    };
    (Some(checked), Some(new_best))
}

/// kerneld's request for re-times of a new best whose standard error is still above
/// `noise::BEST_SE_PCT` (`noise::top_ups`), so that challengers face an interval its own
/// noise sets, not the luck of two readings; none where two readings are precise enough.
pub(super) fn top_up(w: &RetimeWork, best: &Figure, uid: u32) -> Option<EventKind> {
    let times = noise::top_ups(best);
    (times > 0).then(|| EventKind::RetimeRequested {
        iteration: w.iteration,
        candidate: w.candidate.clone(),
        seed: w.seed.clone(),
        config: w.config.clone(),
        source_hash: w.source_hash.clone(),
        times,
        by_uid: uid,
        revalidate: None,
        for_best: true,
    })
}

/// `1.234× ±0.8 %`: a figure and half its 95 % interval.
pub(crate) fn figure_text(f: &Figure) -> String {
    format!("{:.3}× ±{:.1}%", f.speedup, f.ci95_pct())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::noise::Z_WIN;
    use serde_json::json;

    pub(in crate::engine) fn work(speedup: f64) -> RetimeWork {
        RetimeWork {
            iteration: 4,
            candidate: "c4".into(),
            seed: "a.py".into(),
            config: json!({}),
            source_hash: None,
            request: None,
            best: Some(BestSummary {
                candidate: "c4".into(),
                seed: "a.py".into(),
                config: json!({}),
                speedup,
                spread_pct: 1.0,
                iteration: 4,
                interpreted: false,
                environment: None,
                measurements: None,
                timing: Some("gpu".into()),
            }),
            revalidate: None,
            times: 1,
            for_best: false,
            done: 0,
            attempts: 1,
            aborted: 0,
        }
    }

    /// A correct, timed result of one shape `s` at `speedup`, the judge's interval 0.5 %.
    pub(in crate::engine) fn timed(speedup: f64) -> EvalResult {
        let mut r = crate::noise::tests::timed(&[("s", 10.0 / speedup, 10.0)], Some(0.5));
        r.timing = Some("gpu".into());
        r
    }

    /// A goal whose best (iteration 1) was measured `n` times at `speedup`, the goal's
    /// noise learned from them (each reading `jitter` apart).
    pub(in crate::engine) fn goal_with_best(speedup: f64, n: u32, jitter: f64) -> GoalProjection {
        let mut g = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
        let mut p: Option<Pooled> = None;
        for i in 0..n {
            let s = speedup * (1.0 + jitter * if i % 2 == 0 { 1.0 } else { -1.0 });
            let next = noise::pool(p.as_ref(), &timed(s)).unwrap();
            g.noise.learn(p.as_ref(), &next);
            p = Some(next);
        }
        let mut b = work(speedup).best.unwrap();
        b.iteration = 1;
        b.candidate = "c1".into();
        g.best = Some(b);
        g.measured.insert(1, p.unwrap());
        g
    }

    fn challenger(first: f64, again: f64) -> (RetimeWork, Pooled, EvalResult) {
        let w = work(first);
        let p = noise::pool(None, &timed(first)).unwrap();
        let r = timed(again);
        let pooled = noise::pool(Some(&p), &r).unwrap();
        (w, pooled, r)
    }

    #[test]
    fn a_clear_win_is_confirmed_at_its_pooled_figure() {
        let g = goal_with_best(1.5, 8, 0.002);
        let (w, pooled, r) = challenger(2.0, 1.8);
        let (c, b) = check_win(&w, &g, &r, Some(&pooled));
        let Some(EventKind::WinChecked {
            confirmed,
            speedup,
            rule,
            reason,
            ..
        }) = c
        else {
            panic!("no check")
        };
        assert!(confirmed, "{reason}");
        assert!(
            reason.starts_with("re-timed at 1.800× GPU time (first 2.000×)"),
            "{reason}"
        );
        // The pooled estimate: the geomean of the two readings, not the lower one.
        let pooled_speedup = (2.0f64 * 1.8).sqrt();
        assert!((speedup.unwrap() - pooled_speedup).abs() < 1e-9);
        let rule = rule.unwrap();
        assert_eq!((rule.z, rule.challenger.n), (Z_WIN, 2));
        assert_eq!(rule.against.unwrap().n, 8);
        let Some(EventKind::NewBest { best, previous }) = b else {
            panic!("no best")
        };
        assert!((best.speedup - pooled_speedup).abs() < 1e-9);
        assert_eq!((best.measurements, previous), (Some(2), Some(1.5)));
        assert_eq!(best.timing.as_deref(), Some("gpu"));
        // A noisy new best: kerneld asks for re-times of it, as many as would bring its
        // standard error to BEST_SE_PCT (2 x 3² = 18 measurements), at most BEST_MEASUREMENTS.
        let noisy = Figure {
            speedup: best.speedup,
            se_pct: 3.0 * noise::BEST_SE_PCT,
            n: 2,
        };
        let twice = Figure {
            se_pct: 2.0 * noise::BEST_SE_PCT,
            ..noisy
        };
        // Twice the target: 2 x 2² = 8 measurements, 6 more.
        assert!(matches!(
            top_up(&w, &twice, 0),
            Some(EventKind::RetimeRequested { times: 6, .. })
        ));
        let Some(EventKind::RetimeRequested {
            times, for_best, ..
        }) = top_up(&w, &noisy, 0)
        else {
            panic!("no top-up")
        };
        assert_eq!((times, for_best), (noise::BEST_MEASUREMENTS - 2, true));
        // One measured precisely enough gets none.
        let precise = Figure {
            se_pct: noise::BEST_SE_PCT / 2.0,
            ..noisy
        };
        assert!(top_up(&w, &precise, 0).is_none());
    }

    #[test]
    fn a_win_within_the_noise_is_not_confirmed_and_no_bar_is_left() {
        // The best's readings 20 % apart: a noisy best. A challenger 10 % ahead does not
        // clear it; the refusal changes nothing of the best.
        let g = goal_with_best(1.5, 2, 0.1);
        let (w, pooled, r) = challenger(1.7, 1.6);
        let (c, b) = check_win(&w, &g, &r, Some(&pooled));
        assert!(b.is_none());
        let Some(EventKind::WinChecked {
            confirmed: false,
            reason,
            ..
        }) = c
        else {
            panic!("{c:?}")
        };
        assert!(reason.contains("does not clear the best"), "{reason}");
        // The same best re-timed six more times at its figure: its interval tightens and
        // the same challenger now clears it (the old rule kept the largest spread forever).
        let mut g2 = goal_with_best(1.5, 2, 0.1);
        let mut p = g2.measured[&1].clone();
        for _ in 0..6 {
            let next = noise::pool(Some(&p), &timed(1.5)).unwrap();
            g2.noise.learn(Some(&p), &next);
            p = next;
        }
        g2.measured.insert(1, p);
        let (c, _) = check_win(&w, &g2, &r, Some(&pooled));
        assert!(
            matches!(
                c,
                Some(EventKind::WinChecked {
                    confirmed: true,
                    ..
                })
            ),
            "{c:?}"
        );
    }

    #[test]
    fn a_wrong_retime_confirms_nothing_and_a_request_decides_nothing() {
        let wrong = EvalResult::failure(ResultClass::WrongResult, "shape s seed 1", 1.0);
        let g = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
        let (c, b) = check_win(&work(2.0), &g, &wrong, None);
        let Some(EventKind::WinChecked {
            confirmed, reason, ..
        }) = c
        else {
            panic!("no check")
        };
        assert!(!confirmed && reason.contains("wrong_result"), "{reason}");
        assert!(b.is_none());
        let mut w = work(2.0);
        w.request = Some(9);
        assert_eq!(check_win(&w, &g, &timed(3.0), None), (None, None));
    }

    #[test]
    fn only_first_readings_worth_it_are_retimed() {
        let g = goal_with_best(1.5, 8, 0.002);
        let p = Pending {
            iteration: 7,
            candidate: "c7".into(),
            seed: "a.py".into(),
            config: json!({}),
            source_hash: None,
            attempts: 1,
            aborted: 0,
        };
        assert!(screen(&g, &p, &timed(1.2)).is_none());
        let Some(EventKind::WinPending { best, pooled, .. }) = screen(&g, &p, &timed(1.7)) else {
            panic!("a clear lead is re-timed")
        };
        assert_eq!((best.iteration, pooled.unwrap().n), (7, 1));
        let wrong = EvalResult::failure(ResultClass::WrongResult, "x", 1.0);
        assert!(screen(&g, &p, &wrong).is_none());
        // No best yet: every correct, timed reading.
        let empty = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
        assert!(screen(&empty, &p, &timed(0.3)).is_some());
    }
}
