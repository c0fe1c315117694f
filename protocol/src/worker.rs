//! The worker protocol (docs/HARNESS.md section 3): what the daemon and a harness worker
//! (`kernels/harness/worker.py`) say to each other, one JSON object per line each way.
//!
//! The transport (`daemon/src/harness.rs`) adds each request's `id` and matches the reply
//! by it; these types are the rest of the line. Replies tolerate fields they do not name
//! (the worker may add some); requests carry only what the daemon decides. The timing
//! defaults live in the harness alone (`kernels/harness/evaluate.py` `DEFAULT_TIMING`):
//! a request carries `timing` only with what a goal sets (its `mode`, issue #23).
//!
//! `protocol/golden/worker/*.json` holds one example of every message; the Rust test
//! (`protocol/tests/golden.rs`) and the harness's Python tests read the same files.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::{EvalResult, ResultClass};

/// A request, tagged by `op`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Static checks and import of a candidate: its tunable space and default configuration.
    Describe(Describe),
    /// Correctness and timing of a candidate with one configuration.
    Evaluate(Evaluate),
    /// Compile-ahead (issue #12): start a runner for the candidate the daemon will ask to
    /// evaluate next and import it now, while the current one is timed. Answered at once;
    /// the `evaluate` with the same task, source and config gets that runner.
    Prepare(Prepare),
    /// Exit cleanly.
    Shutdown {},
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Describe {
    pub task_dir: String,
    /// The candidate's file (absolute).
    pub candidate: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Evaluate {
    pub task_dir: String,
    pub candidate: String,
    /// The proposed configuration; the harness fills in the candidate's defaults.
    pub config: Value,
    pub shapes: Vec<String>,
    pub baseline: String,
    /// Correctness seeds, fresh per evaluation (the daemon picks them, reproducibly).
    pub seeds: Vec<u64>,
    /// Only what a goal overrides; absent: the harness's `DEFAULT_TIMING`.
    #[serde(default, skip_serializing_if = "Timing::is_empty")]
    pub timing: Timing,
    /// Registers, spills, shared memory per kernel.
    pub profile: bool,
    /// Time it again (section 3, `retime`): a fresh runner, interleaved with a freshly
    /// timed baseline, timed shapes only, one seed, no profile. Sent as `evaluate` with
    /// this flag, which a worker that knows no `retime` answers with a plain evaluation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retime: bool,
}

/// `prepare`'s request: what the next `evaluate` will name.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Prepare {
    pub task_dir: String,
    pub candidate: String,
    pub config: Value,
    /// The shapes its `evaluate` will time (the goal's), so the runner compiles for those
    /// (and the held-out ones) ahead; empty: the task's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<String>,
    /// How many candidates the daemon keeps prepared for this worker (the judge holds one
    /// more: the one being evaluated). Absent from older daemons: 1.
    #[serde(default = "one")]
    pub ahead: usize,
}

fn one() -> usize {
    1
}

/// `prepare`'s answer: whether a runner is being prepared (a candidate the static checks
/// reject is not; its evaluation says why).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Prepared {
    #[serde(default)]
    pub accepted: bool,
    #[serde(default)]
    pub message: Option<String>,
}

/// Overrides of the harness's timing defaults; every field absent means "the default".
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Timing {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_reps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_noise_pct: Option<f64>,
    /// How the objective is timed (`gpu` or `as_called`): the goal's `timing`, sent by the
    /// daemon for every goal that names one (all goals enqueued since issue 23). The
    /// judge answers with what each figure is (`ShapeTiming::timing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::wire::TimingMethod>,
}

impl Timing {
    pub fn is_empty(&self) -> bool {
        *self == Timing::default()
    }
}

/// The worker's first line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Ready {
    /// Always `ready`.
    pub event: String,
    pub pid: u32,
    /// `gpu`, or `cpu` (Triton's interpreter, no device).
    pub mode: String,
    #[serde(default)]
    pub torch: Option<String>,
    #[serde(default)]
    pub triton: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
    /// torch's CUDA version and the NVIDIA driver's (GPU mode; null in CPU mode).
    #[serde(default)]
    pub cuda: Option<String>,
    #[serde(default)]
    pub driver: Option<String>,
    /// Name, uuid, compute capability; null in CPU mode.
    #[serde(default)]
    pub device: Value,
    /// The resource limits the worker runs under, as it reports them.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub limits: Value,
}

impl Ready {
    pub fn is_ready(&self) -> bool {
        self.event == "ready"
    }
}

/// Every reply: `ok`, and when false, `error` says why the request failed (a candidate
/// that fails its evaluation is still `ok` with a result saying how).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reply<T> {
    pub id: Option<u64>,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The request was abandoned on SIGINT (pause, cancel); the worker stays.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub aborted: bool,
    /// A CUDA error poisoned the worker's context: it answered, and exits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fatal: bool,
    #[serde(flatten)]
    pub body: T,
}

impl<T> Reply<T> {
    /// The body of a successful reply, else why the worker refused the request.
    pub fn into_body(self) -> Result<T, String> {
        if self.ok {
            Ok(self.body)
        } else {
            Err(self
                .error
                .unwrap_or_else(|| "the worker refused the request".into()))
        }
    }
}

/// `describe`'s answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Described {
    /// Parameter -> the values it may take; empty for a rejected candidate.
    #[serde(default)]
    pub space: Value,
    #[serde(default)]
    pub default: Value,
    /// `ok`, or `rejected` by a static rule (then `message` says which and where).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ResultClass>,
    /// Null unless rejected (the worker always writes it).
    #[serde(default)]
    pub message: Option<String>,
    /// The static rule that rejected it (`concurrency`, `syntax`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl Described {
    /// Why the candidate was rejected, when it was.
    pub fn rejection(&self) -> Option<String> {
        match self.class {
            None | Some(ResultClass::Ok) => None,
            Some(_) => Some(self.message.clone().unwrap_or_else(|| "rejected".into())),
        }
    }
}

/// `evaluate`'s answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Evaluated {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<EvalResult>,
}

/// `shutdown`'s answer (nothing beyond `ok`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Empty {}

/// Where one evaluation's time went, in seconds (docs/HARNESS.md `phases`). The judge
/// reports every phase but the `daemon_*` ones, which the engine measures and adds before
/// the result is recorded. Every field is optional on the wire: records of builds before
/// phases existed (and judges that report only some) read as zero / absent; names this
/// build does not know are kept in `other`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Phases {
    /// Static checks of the candidate's source.
    #[serde(default, rename = "static")]
    pub static_check: f64,
    /// The runner's own start-up (python, torch/triton import, CUDA init), mostly hidden
    /// because the judge starts a spare ahead.
    #[serde(default)]
    pub runner_start: f64,
    /// The part of `runner_start` this evaluation waited for.
    #[serde(default)]
    pub runner_wait: f64,
    #[serde(default)]
    pub import: f64,
    /// The candidate's first call (Triton compile, autotuning).
    #[serde(default)]
    pub compile: f64,
    #[serde(default)]
    pub correctness_candidate: f64,
    #[serde(default)]
    pub correctness_reference: f64,
    /// Compiling and timing the task's baseline.
    #[serde(default)]
    pub baseline: f64,
    #[serde(default)]
    pub timing: f64,
    #[serde(default)]
    pub timed_checks: f64,
    #[serde(default)]
    pub profile: f64,
    /// Inputs and outputs between judge and runner.
    #[serde(default)]
    pub transfers: f64,
    /// Off the critical path: the start, import and compile-only warm-up (Triton compiles)
    /// of a runner prepared while earlier candidates were timed (`prepare`); not part of
    /// the evaluation's time.
    #[serde(default)]
    pub ahead: f64,
    /// The daemon's share before this evaluation: from the previous result on the same
    /// slot to this request sent (recording that result, the stop rules, the scheduler,
    /// the agent's proposal, the start events). Absent on a slot's first evaluation and
    /// after the slot sat idle (no goal wanted it), where the interval is not overhead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_gap: Option<f64>,
    /// The daemon's share after it: from the reply to the record's commit starting (the
    /// commit itself is in the next evaluation's `daemon_gap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_record: Option<f64>,
    /// Phases a newer judge reports that this build has no name for.
    #[serde(flatten)]
    pub other: std::collections::BTreeMap<String, Value>,
}

impl Phases {
    /// The judge's phases in the order an evaluation runs them, with the names the
    /// judge uses (`daemon_*` excluded; see `daemon`).
    pub fn judge(&self) -> [(&'static str, f64); 12] {
        [
            ("static", self.static_check),
            ("runner_start", self.runner_start),
            ("runner_wait", self.runner_wait),
            ("import", self.import),
            ("compile", self.compile),
            ("correctness_candidate", self.correctness_candidate),
            ("correctness_reference", self.correctness_reference),
            ("baseline", self.baseline),
            ("timing", self.timing),
            ("timed_checks", self.timed_checks),
            ("profile", self.profile),
            ("transfers", self.transfers),
        ]
    }

    /// The daemon's measured shares, where measured.
    pub fn daemon(&self) -> [(&'static str, Option<f64>); 2] {
        [
            ("daemon_gap", self.daemon_gap),
            ("daemon_record", self.daemon_record),
        ]
    }

    /// Seconds the GPU did candidate or baseline work: candidate correctness calls,
    /// baseline compile + timing, timed batches and their checks. Compile, import and
    /// the reference oracle are not counted (they are what throughput work takes off
    /// the GPU's path, or not candidate/baseline work).
    pub fn gpu_work(&self) -> f64 {
        self.correctness_candidate + self.baseline + self.timing + self.timed_checks
    }

    /// Nothing reported (an old record, or a result the daemon wrote itself).
    pub fn is_empty(&self) -> bool {
        *self == Phases::default()
    }

    /// `phases` as found in a result: a malformed one (a judge bug) reads as absent
    /// rather than making the whole result unreadable.
    pub fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Phases, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(serde_json::from_value(v).unwrap_or_default())
    }
}

/// Sums of the phases of a goal's evaluations (the goal's projection keeps one, folded
/// from `EvaluationFinished`); `means` is what `status` shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseTotals {
    /// Evaluations that reported phases.
    pub evaluations: u64,
    pub sum: Phases,
    /// How many of them carried `daemon_gap` / `daemon_record`.
    pub with_gap: u64,
    pub with_record: u64,
    /// Unix milliseconds of the first and last result (any result, phases or not).
    #[serde(default)]
    pub first_ms: Option<u64>,
    #[serde(default)]
    pub last_ms: Option<u64>,
    /// Results recorded, phases or not (the rate's numerator).
    #[serde(default)]
    pub results: u64,
}

/// A goal's average phases (`status`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PhaseMeans {
    /// Evaluations the means are over.
    pub evaluations: u64,
    /// Mean seconds per phase (`daemon_*` over the evaluations that carried them).
    pub mean: Phases,
    /// Results per hour between the first result and the last (absent before two):
    /// the warm rate, without the first evaluation's start-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evaluations_per_hour: Option<f64>,
}

impl PhaseTotals {
    /// Folds one recorded result, finished at `time_ms`.
    pub fn add(&mut self, p: &Phases, time_ms: u64) {
        self.results += 1;
        self.first_ms.get_or_insert(time_ms);
        self.last_ms = Some(time_ms);
        if p.is_empty() {
            return;
        }
        self.evaluations += 1;
        let s = &mut self.sum;
        for (dst, src) in [
            (&mut s.static_check, p.static_check),
            (&mut s.runner_start, p.runner_start),
            (&mut s.runner_wait, p.runner_wait),
            (&mut s.import, p.import),
            (&mut s.compile, p.compile),
            (&mut s.correctness_candidate, p.correctness_candidate),
            (&mut s.correctness_reference, p.correctness_reference),
            (&mut s.baseline, p.baseline),
            (&mut s.timing, p.timing),
            (&mut s.timed_checks, p.timed_checks),
            (&mut s.profile, p.profile),
            (&mut s.transfers, p.transfers),
            (&mut s.ahead, p.ahead),
        ] {
            *dst += src;
        }
        if let Some(g) = p.daemon_gap {
            self.with_gap += 1;
            *s.daemon_gap.get_or_insert(0.0) += g;
        }
        if let Some(r) = p.daemon_record {
            self.with_record += 1;
            *s.daemon_record.get_or_insert(0.0) += r;
        }
    }

    /// The means, or None before any evaluation reported phases.
    pub fn means(&self) -> Option<PhaseMeans> {
        if self.evaluations == 0 {
            return None;
        }
        let n = self.evaluations as f64;
        let s = &self.sum;
        let div = |x: f64| x / n;
        let per = |x: Option<f64>, k: u64| x.filter(|_| k > 0).map(|x| x / k as f64);
        let mean = Phases {
            static_check: div(s.static_check),
            runner_start: div(s.runner_start),
            runner_wait: div(s.runner_wait),
            import: div(s.import),
            compile: div(s.compile),
            correctness_candidate: div(s.correctness_candidate),
            correctness_reference: div(s.correctness_reference),
            baseline: div(s.baseline),
            timing: div(s.timing),
            timed_checks: div(s.timed_checks),
            profile: div(s.profile),
            transfers: div(s.transfers),
            ahead: div(s.ahead),
            daemon_gap: per(s.daemon_gap, self.with_gap),
            daemon_record: per(s.daemon_record, self.with_record),
            other: Default::default(),
        };
        let evaluations_per_hour = match (self.first_ms, self.last_ms) {
            (Some(a), Some(b)) if b > a && self.results >= 2 => {
                Some((self.results - 1) as f64 * 3_600_000.0 / (b - a) as f64)
            }
            _ => None,
        };
        Some(PhaseMeans {
            evaluations: self.evaluations,
            mean,
            evaluations_per_hour,
        })
    }
}
