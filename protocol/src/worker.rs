//! The worker protocol (docs/HARNESS.md section 3): what the daemon and a harness worker
//! (`kernels/harness/worker.py`) say to each other, one JSON object per line each way.
//!
//! The transport (`daemon/src/harness.rs`) adds each request's `id` and matches the reply
//! by it; these types are the rest of the line. Replies tolerate fields they do not name
//! (the worker may add some); requests carry only what the daemon decides. The timing
//! defaults live in the harness alone (`kernels/harness/evaluate.py` `DEFAULT_TIMING`):
//! a request carries `timing` only with what a goal overrides.
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
