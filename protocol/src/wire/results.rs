//! Evaluation results (the harness worker's `result`, see docs/HARNESS.md).

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::worker::Phases;

/// How an evaluation ended. `Crashed`, `TimedOut` and `Quarantined` are assigned by the
/// daemon (the worker cannot report its own death); the rest come from the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultClass {
    Ok,
    Rejected,
    CompileError,
    WrongResult,
    Error,
    Crashed,
    TimedOut,
    Quarantined,
}

impl ResultClass {
    /// Every class, in the order the metrics list them.
    pub const ALL: [ResultClass; 8] = [
        ResultClass::Ok,
        ResultClass::Rejected,
        ResultClass::CompileError,
        ResultClass::WrongResult,
        ResultClass::Error,
        ResultClass::Crashed,
        ResultClass::TimedOut,
        ResultClass::Quarantined,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ResultClass::Ok => "ok",
            ResultClass::Rejected => "rejected",
            ResultClass::CompileError => "compile_error",
            ResultClass::WrongResult => "wrong_result",
            ResultClass::Error => "error",
            ResultClass::Crashed => "crashed",
            ResultClass::TimedOut => "timed_out",
            ResultClass::Quarantined => "quarantined",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShapeTiming {
    pub shape: String,
    pub median_us: f64,
    #[serde(default, deserialize_with = "zero_if_null")]
    pub spread_pct: f64,
    /// 0 when the shape has no baseline figure (a CPU-mode baseline that failed: the judge
    /// times the candidate alone and sends null).
    #[serde(default, deserialize_with = "zero_if_null")]
    pub baseline_us: f64,
    #[serde(default, deserialize_with = "zero_if_null")]
    pub baseline_spread_pct: f64,
    #[serde(default, deserialize_with = "zero_if_null")]
    pub speedup: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tflops: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pct_roofline: Option<f64>,
    /// The 95 % interval of the median, in % of it (the judge's figure), when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci_pct: Option<f64>,
    /// The same for the baseline's median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_ci_pct: Option<f64>,
    /// What `median_us` and `baseline_us` are (issue #23): `gpu` (the GPU time of the
    /// call's work, from a CUDA graph replay), `as_called` (host-inclusive, each call
    /// launched from Python) or `interpreted` (CPU mode). Absent from judges before it:
    /// `timing_label` says what their figures were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    /// Both figures, when the judge measured both (the objective's is also in
    /// `median_us`/`baseline_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_gpu_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_called_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_as_called_us: Option<f64>,
    /// Why a side was timed otherwise than the goal asked (e.g. "the candidate cannot be
    /// captured in a CUDA graph (...): timed as called").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_note: Option<String>,
}

/// A figure the judge may send as null (no such figure): read as 0, the value an absent one
/// takes.
fn zero_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(0.0))
}

impl ShapeTiming {
    /// A shape with only these figures (tests, the daemon's own results).
    pub fn new(shape: &str, median_us: f64, baseline_us: f64) -> ShapeTiming {
        ShapeTiming {
            shape: shape.to_string(),
            median_us,
            spread_pct: 0.0,
            baseline_us,
            baseline_spread_pct: 0.0,
            speedup: if median_us > 0.0 {
                baseline_us / median_us
            } else {
                0.0
            },
            gbps: None,
            tflops: None,
            pct_roofline: None,
            ci_pct: None,
            baseline_ci_pct: None,
            timing: None,
            gpu_us: None,
            baseline_gpu_us: None,
            as_called_us: None,
            baseline_as_called_us: None,
            timing_note: None,
        }
    }

    /// What this shape's `median_us`/`baseline_us` are, for people (`timing_label`).
    pub fn timing_label(&self, interpreted: bool) -> &'static str {
        super::timing_label(self.timing.as_deref(), interpreted)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EvalResult {
    pub class: ResultClass,
    #[serde(default)]
    pub message: Option<String>,
    /// The harness rule behind a rejection or a wrong result (`syntax`, `torch-heavy-math`,
    /// `tolerance`, `nonfinite`, …), when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(default)]
    pub correct: bool,
    #[serde(default)]
    pub interpreted: bool,
    #[serde(default)]
    pub speedup: Option<f64>,
    #[serde(default)]
    pub spread_pct: Option<f64>,
    /// The method the speedup was timed with (`gpu`, `as_called`, `interpreted`; see
    /// `ShapeTiming::timing`); absent from judges before issue 23.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
    #[serde(default)]
    pub shapes: Vec<ShapeTiming>,
    /// Per (shape, seed, output) correctness figures, as the worker reported them.
    #[serde(default)]
    pub checks: Value,
    /// Registers, spills, shared memory per kernel; an ncu summary where available.
    #[serde(default)]
    pub profile: Value,
    /// The GPU that measured it (uuid, SM clock, throttle reasons, discarded samples).
    #[serde(default)]
    pub device: Value,
    #[serde(default)]
    pub elapsed_s: f64,
    /// The full configuration the harness ran: the proposal with the candidate's defaults
    /// filled in (an agent may propose only some keys). What `best -o` writes as `BEST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
    /// Where the evaluation's time went (the judge's phases + the daemon's share).
    #[serde(
        default,
        skip_serializing_if = "Phases::is_empty",
        deserialize_with = "Phases::lenient"
    )]
    pub phases: Phases,
    /// A re-time (`retime`, docs/HARNESS.md section 3): timed again in a fresh runner,
    /// interleaved with a freshly timed baseline, one correctness seed, no profile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retimed: bool,
    /// What measured it (the worker's ready line and kerneld's version), filled in by the
    /// daemon; absent in results logged before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
}

/// The software and hardware a result was measured with. A best measured under another
/// environment than today's may no longer win (`kernelctl revalidate`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Environment {
    pub kerneld: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triton: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
}

impl Environment {
    /// From a worker's ready line (`{"torch": ..., "device": {"name": ...}, ...}`).
    pub fn from_ready(ready: &Value, kerneld: &str) -> Environment {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        Environment {
            kerneld: kerneld.to_string(),
            mode: text(ready.get("mode")),
            gpu: text(ready.get("device").and_then(|d| d.get("name"))),
            driver: text(ready.get("driver")),
            cuda: text(ready.get("cuda")),
            torch: text(ready.get("torch")),
            triton: text(ready.get("triton")),
            python: text(ready.get("python")),
        }
    }

    /// What differs from `now`, as `torch 2.10 -> 2.11` items; fields `now` does not know
    /// (a kerneld that has not started a worker yet) are not compared.
    pub fn changes(&self, now: &Environment) -> Vec<String> {
        let mut out = Vec::new();
        if self.kerneld != now.kerneld && !now.kerneld.is_empty() {
            out.push(format!("kerneld {} -> {}", self.kerneld, now.kerneld));
        }
        let pairs = [
            ("mode", &self.mode, &now.mode),
            ("GPU", &self.gpu, &now.gpu),
            ("driver", &self.driver, &now.driver),
            ("CUDA", &self.cuda, &now.cuda),
            ("torch", &self.torch, &now.torch),
            ("triton", &self.triton, &now.triton),
        ];
        for (what, then, now) in pairs {
            if let Some(n) = now {
                if then.as_ref() != Some(n) {
                    let t = then.as_deref().unwrap_or("unknown");
                    out.push(format!("{what} {t} -> {n}"));
                }
            }
        }
        out
    }
}

impl EvalResult {
    /// A result the daemon writes itself (worker death, timeout, quarantine, bad reply).
    pub fn failure(class: ResultClass, message: impl Into<String>, elapsed_s: f64) -> Self {
        EvalResult {
            class,
            message: Some(message.into()),
            rule: None,
            correct: false,
            interpreted: false,
            speedup: None,
            spread_pct: None,
            timing: None,
            shapes: Vec::new(),
            checks: Value::Null,
            profile: Value::Null,
            device: Value::Null,
            elapsed_s,
            config: None,
            phases: Phases::default(),
            retimed: false,
            environment: None,
        }
    }

    /// What its speedup is, for people: "GPU time", "as called" or "interpreted".
    pub fn timing_label(&self) -> &'static str {
        super::timing_label(self.timing.as_deref(), self.interpreted)
    }

    /// Correct and timed: a candidate that may become the best.
    pub fn is_scored(&self) -> bool {
        self.class == ResultClass::Ok && self.correct && self.speedup.is_some_and(f64::is_finite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_without_a_baseline_figure_reads() {
        // a CPU-mode judge whose baseline failed: the candidate timed alone, nulls beside it
        let v = serde_json::json!({"shape": "b1", "median_us": 20.5, "spread_pct": 1.5,
            "baseline_us": null, "baseline_spread_pct": null, "speedup": null});
        let t: ShapeTiming = serde_json::from_value(v).unwrap();
        assert_eq!((t.median_us, t.baseline_us, t.speedup), (20.5, 0.0, 0.0));
        // the candidate's own figure stays required
        let v = serde_json::json!({"shape": "b1", "median_us": null});
        assert!(serde_json::from_value::<ShapeTiming>(v).is_err());
    }
}
