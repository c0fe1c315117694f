//! The win rule simulated with the noise measured on the H200 (issue #23): through the same
//! functions the daemon decides with (`pool`, `NoisePrior::learn`, `figure`,
//! `worth_retiming`, `beats`), a challenger's first evaluation is screened, re-timed once,
//! and decided against a best measured twice and then re-timed as kerneld does (`top_ups`).
//! Seeded Monte Carlo; the
//! rates are printed (`cargo test -p kerneld noise::sim -- --nocapture`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::wire::ShapeTiming;

/// Run-to-run noise per shape: the coefficient of variation (%) of a shape's median between
/// evaluations, candidate and baseline, GPU time (CUDA graph replay). Source: the H200,
/// 2026-12-03 (results/gpu/measurement-20261203): the same candidate evaluated four times
/// beside compile-ahead runners moved 0.1-0.2 % (b1_s8192, b128_s4096, both sides); the
/// shipped goal's first evaluation against its re-time, per shape, candidate / baseline:
/// 1.3 / 0.4 % (b1_s8192), 0.01 / 0.3 % (b64_s8192), 0.3 / 4.2 % (b1_s32768), 0.6 / 0.6 %
/// (b128_s4096); a difference of two readings is sqrt(2) CVs, and each figure below is
/// rounded up, the smallest to 0.3 %.
pub(crate) const H200_NOISE: &[(&str, f64, f64)] = &[
    ("b1_s8192", 1.0, 0.3),
    ("b64_s8192", 0.3, 0.3),
    ("b1_s32768", 0.3, 3.0),
    ("b128_s4096", 0.5, 0.5),
];
/// What the rule was designed against before that run (guesses from the graph figures of
/// one process: spin-merge kernels at 2.5-4.5 % between repeats): it must hold there too.
const PESSIMISTIC: &[(&str, f64, f64)] = &[
    ("b1_s8192", 0.3, 0.2),
    ("b64_s8192", 2.5, 1.2),
    ("b1_s32768", 0.5, 0.3),
    ("b128_s4096", 4.5, 1.2),
];
/// The judge's own 95 % interval of a median within one evaluation, % (uniform range).
const H200_CI_PCT: (f64, f64) = (0.3, 1.0);

/// The regime before GPU timing (host load moving "as called" figures, issue #23): the two
/// host-bound small shapes at CV 50 % and 20 %, the kernel-bound ones as on the H200. The
/// candidate's alone (`NOISY`), or the baseline's too (torch.compile as called under load:
/// 35 % and 15 %, `NOISY_BOTH`).
const NOISY: &[(&str, f64, f64)] = &[
    ("b1_s8192", 50.0, 0.2),
    ("b64_s8192", 2.5, 1.2),
    ("b1_s32768", 20.0, 0.3),
    ("b128_s4096", 4.5, 1.2),
];
const NOISY_BOTH: &[(&str, f64, f64)] = &[
    ("b1_s8192", 50.0, 35.0),
    ("b64_s8192", 2.5, 1.2),
    ("b1_s32768", 20.0, 15.0),
    ("b128_s4096", 4.5, 1.2),
];
const NOISY_CI_PCT: (f64, f64) = (5.0, 20.0);

/// Heavy tails: this share of medians is drawn with `TAIL_FACTOR` times the CV.
const TAIL_SHARE: f64 = 0.05;
const TAIL_FACTOR: f64 = 3.0;
thread_local! {
    /// Re-times kerneld spent on new bests in the trials of one `rates` call.
    static TOP_UPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Trials per rate: its Monte Carlo standard error is 0.35 % at 5 %, 0.3 % at 96 %.
const TRIALS: usize = 4000;

struct Regime {
    shapes: &'static [(&'static str, f64, f64)],
    ci_pct: (f64, f64),
}

fn normal(rng: &mut StdRng) -> f64 {
    // Box-Muller: rand_distr is not a dependency.
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    let v: f64 = rng.gen();
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

/// A median's relative noise: lognormal with the shape's CV, heavy-tailed.
fn jitter(rng: &mut StdRng, cv_pct: f64) -> f64 {
    let tail = rng.gen::<f64>() < TAIL_SHARE;
    let sd = cv_pct / 100.0 * if tail { TAIL_FACTOR } else { 1.0 };
    (sd * normal(rng)).exp()
}

/// One evaluation of a candidate `ratio` times as fast as the best, as the judge reports it.
fn evaluation(rng: &mut StdRng, regime: &Regime, ratio: f64) -> EvalResult {
    let (lo, hi) = regime.ci_pct;
    let shapes: Vec<ShapeTiming> = regime
        .shapes
        .iter()
        .map(|(name, cv_c, cv_b)| {
            let base = 100.0 * jitter(rng, *cv_b);
            let cand = 50.0 / ratio * jitter(rng, *cv_c);
            ShapeTiming {
                ci_pct: Some(rng.gen_range(lo..hi)),
                baseline_ci_pct: Some(rng.gen_range(lo..hi)),
                ..ShapeTiming::new(name, cand, base)
            }
        })
        .collect();
    super::tests::scored(shapes)
}

/// A candidate measured `times` times, its repeats learned by the goal's prior.
fn measured(
    rng: &mut StdRng,
    regime: &Regime,
    ratio: f64,
    times: u32,
    prior: &mut NoisePrior,
) -> Pooled {
    let mut p: Option<Pooled> = None;
    for _ in 0..times {
        let next = pool(p.as_ref(), &evaluation(rng, regime, ratio)).expect("timed");
        prior.learn(p.as_ref(), &next);
        p = Some(next);
    }
    p.expect("measured")
}

/// One challenger `ratio` times as fast as the best, after `history` refuted challengers
/// (each measured twice) taught the goal its noise: (re-timed, accepted).
fn trial(rng: &mut StdRng, regime: &Regime, ratio: f64, history: usize) -> (bool, bool) {
    let mut prior = NoisePrior::default();
    for _ in 0..history {
        measured(rng, regime, 1.0, 2, &mut prior);
    }
    // The new best: its first evaluation and its confirmation, then the re-times kerneld
    // asks for while its standard error is above BEST_SE_PCT (`top_ups`).
    let mut best = measured(rng, regime, 1.0, 2, &mut prior);
    let more = top_ups(&figure(&best, &prior).expect("shapes"));
    for _ in 0..more {
        let next = pool(Some(&best), &evaluation(rng, regime, 1.0)).expect("timed");
        prior.learn(Some(&best), &next);
        best = next;
    }
    TOP_UPS.with(|t| t.set(t.get() + u64::from(more)));
    // Its first evaluation: record() screens it against the best as the prior is then.
    let first = measured(rng, regime, ratio, 1, &mut prior);
    let screen = figure(&first, &prior).expect("shapes");
    if !worth_retiming(screen, figure(&best, &prior)) {
        return (false, false);
    }
    // The re-time the win triggers: check_win decides on both readings.
    let retimed = pool(Some(&first), &evaluation(rng, regime, ratio)).expect("timed");
    prior.learn(Some(&first), &retimed);
    let (won, _) = beats(
        figure(&retimed, &prior).expect("shapes"),
        figure(&best, &prior),
    );
    (true, won)
}

/// (re-timed, accepted) rates over `TRIALS` seeded trials.
fn rates(seed: u64, regime: &Regime, ratio: f64, history: usize) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut screened, mut accepted) = (0, 0);
    for _ in 0..TRIALS {
        let (s, a) = trial(&mut rng, regime, ratio, history);
        screened += usize::from(s);
        accepted += usize::from(a);
    }
    let n = TRIALS as f64;
    (screened as f64 / n, accepted as f64 / n)
}

fn report(what: &str, seed: u64, regime: &Regime, ratio: f64, history: usize) -> f64 {
    TOP_UPS.with(|t| t.set(0));
    let (screened, accepted) = rates(seed, regime, ratio, history);
    let top_ups = TOP_UPS.with(|t| t.get()) as f64 / TRIALS as f64;
    println!(
        "{what}: {:.0} % faster, after {history} refuted challengers: re-timed {:.1} %, accepted {:.1} %, \
         kerneld's re-times per new best {top_ups:.2} ({TRIALS} trials)",
        (ratio - 1.0) * 100.0,
        screened * 100.0,
        accepted * 100.0
    );
    accepted
}

#[test]
fn on_the_h200_a_5_pct_better_candidate_wins_and_an_equal_one_does_not() {
    // The noise measured on the H200, and the guess the rule was designed against before.
    for (what, shapes) in [("H200", H200_NOISE), ("pessimistic", PESSIMISTIC)] {
        let regime = Regime {
            shapes,
            ci_pct: H200_CI_PCT,
        };
        // history 0: the first challenger of the goal's first best (its prior is the
        // best's own repeats); 5: later in the night.
        for (seed, history) in [(23, 0), (2023, 5)] {
            let better = report(what, seed, &regime, 1.05, history);
            let equal = report(what, seed + 1, &regime, 1.0, history);
            assert!(better >= 0.95, "{what}: 5 % better accepted only {better}");
            assert!(equal <= 0.05, "{what}: equal accepted {equal}");
        }
    }
}

#[test]
fn in_the_old_noisy_regime_the_rule_does_not_freeze() {
    for (what, shapes, seed) in [("noisy", NOISY, 49), ("noisy both", NOISY_BOTH, 4949)] {
        let noisy = Regime {
            shapes,
            ci_pct: NOISY_CI_PCT,
        };
        for history in [0, 5] {
            let seed = seed + 10 * history as u64;
            let better = report(what, seed, &noisy, 1.3, history);
            let equal = report(what, seed + 1, &noisy, 1.0, history);
            // One evaluation's geomean moves by 13-17 % here: two evaluations of the
            // challenger cannot resolve 30 % every time, whatever the rule. What the rule
            // must not do is freeze: its bar is the two candidates' own noise, not a
            // spread kept from the best's worst reading (the old rule needed the lower of
            // two readings to beat the best by its ±49 %, which a 30 % lead never does).
            assert!(better >= 0.4, "30 % better accepted only {better}");
            assert!(equal <= 0.05, "equal accepted {equal}");
        }
    }
}
