//! What a timing is and how sure it is (issue #23): the method a goal's objective is timed
//! with, the labels every figure carries for people, and a candidate's measurements pooled
//! per shape with the figures the pooled rule decides wins on. The rule itself (variances,
//! the prior, z) is the daemon's (`daemon/src/noise.rs`); these are what the log records.

use serde::{Deserialize, Serialize};

/// How a goal's objective is timed (the goal file's `timing`; sent to the judge as
/// `timing.mode`). Serving runs decode kernels inside CUDA graphs, so the default is the
/// GPU time of the call's work; `as_called` keeps the host's launch cost in the figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingMethod {
    /// The GPU time of the call's work: a batch of calls captured in a CUDA graph and
    /// replayed, so the host's load cannot move it.
    #[default]
    Gpu,
    /// Host-inclusive: each call launched from Python, as an eager caller sees it.
    AsCalled,
}

impl TimingMethod {
    pub const ALL: [TimingMethod; 2] = [TimingMethod::Gpu, TimingMethod::AsCalled];

    /// The goal file's and the worker protocol's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingMethod::Gpu => "gpu",
            TimingMethod::AsCalled => "as_called",
        }
    }

    pub fn parse(text: &str) -> Option<TimingMethod> {
        TimingMethod::ALL.into_iter().find(|m| m.as_str() == text)
    }

    /// What a figure timed this way is, for people.
    pub fn label(self) -> &'static str {
        match self {
            TimingMethod::Gpu => LABEL_GPU,
            TimingMethod::AsCalled => LABEL_AS_CALLED,
        }
    }
}

impl std::fmt::Display for TimingMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub const LABEL_GPU: &str = "GPU time";
pub const LABEL_AS_CALLED: &str = "as called";
pub const LABEL_INTERPRETED: &str = "interpreted";
/// A result whose judge named a method this build does not know.
pub const LABEL_OTHER: &str = "timed otherwise";

/// The label of a figure the judge reported with `timing` (a result's or a shape's).
/// Judges before issue 23 named no method and launched every timed call from Python: their
/// GPU-mode figures are "as called"; CPU-mode figures are Triton's interpreter either way.
pub fn timing_label(timing: Option<&str>, interpreted: bool) -> &'static str {
    match timing {
        _ if interpreted => LABEL_INTERPRETED,
        Some("interpreted") => LABEL_INTERPRETED,
        Some("gpu") => LABEL_GPU,
        Some("as_called") | None => LABEL_AS_CALLED,
        Some(_) => LABEL_OTHER,
    }
}

/// A candidate's measurements pooled per shape: its first evaluation and every re-time
/// with a correct, timed result. Carried by the events that add a measurement
/// (`win_pending`, `retime_finished`), so the log alone says what each decision knew.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Pooled {
    /// Measurements pooled.
    pub n: u32,
    pub shapes: Vec<PooledShape>,
}

/// One shape of a pooled candidate: the log-speedup `ln(baseline_us / median_us)` of each
/// measurement, summarized (Welford: count, mean, sum of squared deviations).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PooledShape {
    pub shape: String,
    pub n: u32,
    pub mean: f64,
    pub m2: f64,
    /// The mean of the measurements' own variances of that log-speedup, from the judge's
    /// 95 % intervals of the medians (`ci_pct`, `baseline_ci_pct`); 0 when it gave none.
    #[serde(default)]
    pub within: f64,
}

impl Pooled {
    /// The pooled geomean speedup (the mean over shapes of each shape's mean log-speedup).
    pub fn speedup(&self) -> Option<f64> {
        if self.shapes.is_empty() {
            return None;
        }
        let sum: f64 = self.shapes.iter().map(|s| s.mean).sum();
        Some((sum / self.shapes.len() as f64).exp())
    }
}

/// A geomean speedup with its noise: pooled over `n` measurements, `se_pct` the standard
/// error of its logarithm in % (≈ relative standard error).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    pub speedup: f64,
    pub se_pct: f64,
    pub n: u32,
}

/// z of a two-sided 95 % interval: what people are shown as `±`.
pub const Z95: f64 = 1.959964;

impl Figure {
    /// Half the width of its 95 % interval, in % of the speedup (the `±` shown).
    pub fn ci95_pct(&self) -> f64 {
        ((Z95 * self.se_pct / 100.0).exp() - 1.0) * 100.0
    }
}

/// What the pooled rule decided a win (or a revalidation) on: the challenger's figure and
/// the one it was held against, each pooled over its own measurements with its own
/// noise, and how many standard errors of their difference had to be cleared.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    pub challenger: Figure,
    /// The best (a win) or the figures as measured before (a revalidation); absent when
    /// there was none to beat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<Figure>,
    pub z: f64,
}

impl Comparison {
    /// The one-sided lower bound of challenger / against at `z` (None without `against`).
    pub fn ratio_lower(&self) -> Option<f64> {
        let b = self.against?;
        let d = (self.challenger.speedup / b.speedup).ln();
        let se = (self.challenger.se_pct.powi(2) + b.se_pct.powi(2)).sqrt() / 100.0;
        Some((d - self.z * se).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_say_which_figure_it_is() {
        assert_eq!(timing_label(Some("gpu"), false), "GPU time");
        assert_eq!(timing_label(Some("as_called"), false), "as called");
        assert_eq!(timing_label(None, false), "as called");
        assert_eq!(timing_label(Some("gpu"), true), "interpreted");
        assert_eq!(timing_label(Some("interpreted"), false), "interpreted");
        assert_eq!(
            TimingMethod::parse("as_called"),
            Some(TimingMethod::AsCalled)
        );
        assert_eq!(TimingMethod::parse("wall"), None);
        assert_eq!(
            serde_json::to_value(TimingMethod::AsCalled).unwrap(),
            "as_called"
        );
    }

    #[test]
    fn pooled_speedup_and_bounds() {
        let p = Pooled {
            n: 2,
            shapes: vec![
                PooledShape {
                    shape: "a".into(),
                    n: 2,
                    mean: 2f64.ln(),
                    ..Default::default()
                },
                PooledShape {
                    shape: "b".into(),
                    n: 2,
                    mean: 8f64.ln(),
                    ..Default::default()
                },
            ],
        };
        assert!((p.speedup().unwrap() - 4.0).abs() < 1e-12);
        let f = Figure {
            speedup: 2.0,
            se_pct: 1.0,
            n: 3,
        };
        assert!((f.ci95_pct() - 1.979).abs() < 0.01, "{}", f.ci95_pct());
        let c = Comparison {
            challenger: Figure { speedup: 2.2, ..f },
            against: Some(f),
            z: 1.645,
        };
        let lower = c.ratio_lower().unwrap();
        assert!(lower > 1.0 && lower < 1.1, "{lower}");
    }
}
