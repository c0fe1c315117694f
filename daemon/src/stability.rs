//! The stability of repeated re-times of one candidate (issue #11's measure): per-shape
//! medians over the runs, the coefficient of variation of the geomean speedup (and of
//! the baseline's geomean time), and the largest deviation of any shape's median from
//! that shape's median over the runs. Pure: `retimes` feeds it a request's results.

use std::collections::BTreeMap;

use crate::wire::{EvalResult, ShapeStability, Stability};

/// The figures over the correct, timed results among `results` (others are ignored).
pub fn stability(results: &[&EvalResult]) -> Stability {
    let scored: Vec<&EvalResult> = results.iter().copied().filter(|r| r.is_scored()).collect();
    let speedups: Vec<f64> = scored.iter().filter_map(|r| r.speedup).collect();
    // shape -> (candidate medians, baseline medians), in run order.
    let mut by_shape: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut baseline_geo = Vec::new();
    for r in &scored {
        let mut logs = Vec::new();
        for s in &r.shapes {
            let e = by_shape.entry(s.shape.as_str()).or_default();
            e.0.push(s.median_us);
            if s.baseline_us > 0.0 {
                e.1.push(s.baseline_us);
                logs.push(s.baseline_us.ln());
            }
        }
        if !logs.is_empty() && logs.len() == r.shapes.len() {
            baseline_geo.push((logs.iter().sum::<f64>() / logs.len() as f64).exp());
        }
    }
    let shapes: Vec<ShapeStability> = by_shape
        .into_iter()
        .map(|(shape, (cand, base))| {
            let (bm, bd) = match median(&base) {
                Some(m) => (Some(m), Some(max_dev_pct(&base, m))),
                None => (None, None),
            };
            let cm = median(&cand).unwrap_or(0.0);
            ShapeStability {
                shape: shape.to_string(),
                candidate_us: cm,
                candidate_dev_pct: max_dev_pct(&cand, cm),
                baseline_us: bm,
                baseline_dev_pct: bd,
            }
        })
        .collect();
    let max = |v: Vec<f64>| v.into_iter().reduce(f64::max);
    let mut labels: Vec<&str> = scored.iter().map(|r| r.timing_label()).collect();
    labels.sort_unstable();
    labels.dedup();
    Stability {
        timing: (!labels.is_empty()).then(|| labels.join(" and ")),
        n: scored.len(),
        speedup_median: median(&speedups),
        speedup_cv_pct: cv_pct(&speedups),
        baseline_cv_pct: cv_pct(&baseline_geo),
        candidate_max_dev_pct: max(shapes.iter().map(|s| s.candidate_dev_pct).collect()),
        baseline_max_dev_pct: max(shapes.iter().filter_map(|s| s.baseline_dev_pct).collect()),
        shapes,
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// The largest |x - m| / m over `v`, in %.
fn max_dev_pct(v: &[f64], m: f64) -> f64 {
    if m <= 0.0 {
        return 0.0;
    }
    v.iter()
        .map(|x| (x - m).abs() / m * 100.0)
        .fold(0.0, f64::max)
}

/// Sample standard deviation over the mean, in %; None below two values.
fn cv_pct(v: &[f64]) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean > 0.0).then(|| var.sqrt() / mean * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ResultClass, ShapeTiming};

    fn run(speedup: f64, cand: &[f64], base: &[f64]) -> EvalResult {
        EvalResult {
            class: ResultClass::Ok,
            correct: true,
            speedup: Some(speedup),
            shapes: cand
                .iter()
                .zip(base)
                .enumerate()
                .map(|(i, (c, b))| ShapeTiming {
                    spread_pct: 1.0,
                    baseline_spread_pct: 1.0,
                    ..ShapeTiming::new(&format!("s{i}"), *c, *b)
                })
                .collect(),
            ..EvalResult::failure(ResultClass::Ok, "", 1.0)
        }
    }

    #[test]
    fn medians_deviations_and_cv_over_the_runs() {
        let a = run(2.0, &[10.0, 20.0], &[20.0, 40.0]);
        let b = run(2.2, &[11.0, 20.0], &[20.0, 44.0]);
        let c = run(1.8, &[10.0, 18.0], &[21.0, 40.0]);
        let failed = EvalResult::failure(ResultClass::Crashed, "x", 1.0);
        let s = stability(&[&a, &b, &failed, &c]);
        assert_eq!(s.n, 3);
        assert_eq!(s.speedup_median, Some(2.0));
        // sd of (2.0, 2.2, 1.8) = 0.2, mean 2.0: 10 %.
        assert!((s.speedup_cv_pct.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(s.shapes[0].candidate_us, 10.0);
        assert!((s.shapes[0].candidate_dev_pct - 10.0).abs() < 1e-9);
        assert!((s.shapes[1].baseline_dev_pct.unwrap() - 10.0).abs() < 1e-9);
        assert!((s.candidate_max_dev_pct.unwrap() - 10.0).abs() < 1e-9);
        assert!(s.baseline_cv_pct.unwrap() > 0.0);
        // Results of judges before issue 23 name no method: as called.
        assert_eq!(s.timing.as_deref(), Some("as called"));
        assert_eq!(stability(&[&failed]).speedup_cv_pct, None);
    }
}
