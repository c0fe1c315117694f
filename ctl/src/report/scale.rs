//! The y scale of the charts and its ticks: round values people read at a glance
//! (1, 2 and 5 times a power of ten), on a linear or a logarithmic axis.

/// Maps a speedup to [0, 1]: logarithmic when the values span more than `LOG_SPAN`,
/// because ratios (0.5× and 2×) should sit symmetrically around the baseline.
#[derive(Debug, Clone, Copy)]
pub(super) struct YScale {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
}

const LOG_SPAN: f64 = 4.0;

impl YScale {
    /// The exact range of the values, or `None` when there are none.
    pub fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && *v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        lo.is_finite().then_some((lo, hi))
    }

    /// A scale for an axis: widened to 1-2-5 values (log) or round steps (linear).
    pub fn fit(values: impl Iterator<Item = f64>) -> YScale {
        let Some((lo, hi)) = YScale::range(values) else {
            return YScale {
                lo: 0.0,
                hi: 2.0,
                log: false,
            };
        };
        if hi / lo > LOG_SPAN {
            YScale {
                lo: floor_125(lo),
                hi: ceil_125(hi),
                log: true,
            }
        } else {
            let step = nice_step((hi - lo).max(hi * 0.05) / 4.0);
            let lo = ((lo / step).floor() * step).max(0.0);
            let hi = (hi / step).ceil() * step;
            YScale {
                lo,
                hi: if hi > lo { hi } else { lo + step },
                log: false,
            }
        }
    }

    /// A scale exactly as wide as the values: eight block heights need all the room.
    pub fn tight(values: impl Iterator<Item = f64>) -> YScale {
        let Some((lo, hi)) = YScale::range(values) else {
            return YScale {
                lo: 0.0,
                hi: 2.0,
                log: false,
            };
        };
        let hi = if hi > lo { hi } else { lo * 1.01 + 1e-9 };
        YScale {
            lo,
            hi,
            log: hi / lo > LOG_SPAN,
        }
    }

    pub fn unit(&self, v: f64) -> f64 {
        let t = if self.log {
            (v.max(f64::MIN_POSITIVE).log2() - self.lo.log2()) / (self.hi.log2() - self.lo.log2())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        t.clamp(0.0, 1.0)
    }

    /// 1, 2 and 5 times each power of ten on a log axis (only the powers of ten when that
    /// makes too many); round steps on a linear one.
    pub fn ticks(&self) -> Vec<f64> {
        if !self.log {
            return linear_ticks(self.lo, self.hi, 5);
        }
        let within = |v: &f64| *v >= self.lo * (1.0 - 1e-9) && *v <= self.hi * (1.0 + 1e-9);
        let (a, b) = (
            self.lo.log10().floor() as i32,
            self.hi.log10().ceil() as i32,
        );
        let decades = |every: usize, mantissas: &[f64]| -> Vec<f64> {
            (a..=b)
                .step_by(every)
                .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
                .filter(within)
                .collect()
        };
        let all = decades(1, &[1.0, 2.0, 5.0]);
        if all.len() <= MAX_TICKS {
            return all;
        }
        let every = ((b - a) as usize / MAX_TICKS + 1).max(1);
        decades(every, &[1.0])
    }
}

/// More gridlines than this crowd an axis 300 pixels tall.
const MAX_TICKS: usize = 12;

/// The largest of 1, 2 or 5 times a power of ten that is at most `v`.
fn floor_125(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    [5.0, 2.0, 1.0]
        .iter()
        .map(|m| m * mag)
        .find(|x| *x <= v * (1.0 + 1e-9))
        .unwrap_or(mag)
}

/// The smallest of 1, 2 or 5 times a power of ten that is at least `v`.
fn ceil_125(v: f64) -> f64 {
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|x| *x >= v * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub(super) fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Round values from `lo` to `hi`, about `count` of them.
pub(super) fn linear_ticks(lo: f64, hi: f64, count: u32) -> Vec<f64> {
    let step = nice_step((hi - lo) / f64::from(count));
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A speedup for an axis label: `0.25×`, `1×`, `1.5×`, `32×`, `0.00781×`: up to two
/// decimals from 1× up, three significant digits below, without trailing zeros; `extra`
/// more decimals where neighbouring ticks would read the same.
pub(super) fn axis_label(v: f64, extra: usize) -> String {
    let a = v.abs();
    let decimals = if a >= 1.0 || a == 0.0 || !a.is_finite() {
        2
    } else {
        (2 - a.log10().floor() as i64).clamp(2, 12) as usize
    } + extra;
    let text = format!("{v:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}×")
}

/// Labels for the ticks of one axis, with as many more decimals as it takes to tell
/// every tick from its neighbours.
pub(super) fn axis_labels(ticks: &[f64]) -> Vec<String> {
    let labels_with =
        |extra| -> Vec<String> { ticks.iter().map(|&t| axis_label(t, extra)).collect() };
    for extra in 0..6 {
        let labels = labels_with(extra);
        if labels.windows(2).all(|w| w[0] != w[1]) {
            return labels;
        }
    }
    labels_with(6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata::*;
    use crate::report::{svg, Progress};

    #[test]
    fn log_axis_labels_below_a_hundredth_are_distinct() {
        let y = YScale::fit([0.0031, 0.0176, 0.3, 1.0].into_iter());
        assert!(y.log);
        let ticks = y.ticks();
        let labels = axis_labels(&ticks);
        assert!(ticks.len() >= 8, "{ticks:?}");
        assert_eq!(ticks.first(), Some(&0.002), "{ticks:?}");
        assert!(
            ticks.iter().all(|t| {
                let m = t / 10f64.powf(t.log10().floor());
                [1.0, 2.0, 5.0].iter().any(|k| (m - k).abs() < 1e-6)
            }),
            "{ticks:?}"
        );
        assert!(!labels.iter().any(|l| l == "0×"), "{labels:?}");
        let mut unique = labels.clone();
        unique.dedup();
        assert_eq!(unique, labels, "every label distinct");
        assert_eq!(axis_label(0.0078125, 0), "0.00781×");
        assert_eq!(axis_label(0.00390625, 0), "0.00391×");
        assert_eq!(axis_label(0.5, 0), "0.5×");

        let svg = svg(&Progress::from_events(
            "g",
            &[
                finished(1, 1, Some(0.0031)),
                finished(2, 2, Some(0.0176)),
                finished(3, 3, Some(0.3)),
            ],
        ));
        assert!(!svg.contains(">0×<"), "{svg}");
        // 1-2-5 ticks, not powers of two (0.00781× is hard to read).
        assert!(svg.contains(">0.005×<") && svg.contains(">0.01×<") && svg.contains(">0.2×<"));
        assert!(!svg.contains(">0.00781×<"), "{svg}");
    }

    #[test]
    fn close_linear_ticks_get_more_decimals() {
        assert_eq!(
            axis_labels(&[1.0, 1.005, 1.01]),
            ["1×", "1.005×", "1.01×"].map(String::from)
        );
    }
}
