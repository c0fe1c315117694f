//! Re-timing: `retime` (re-time a candidate N times), `retimes` (its progress and
//! stability summary), and the >10x flag that `show`, `report` and `context` print.

use serde::{Deserialize, Serialize};

/// A speedup above this over the goal's baseline is flagged until a re-time confirmed it.
pub const FLAG_SPEEDUP: f64 = 10.0;

/// The flag for a speedup: None at or below `FLAG_SPEEDUP`; else why it is flagged.
/// `confirmed`: Some(true) when its re-time confirmed the win.
pub fn confirm_flag(speedup: Option<f64>, confirmed: Option<bool>) -> Option<&'static str> {
    match speedup {
        Some(s) if s > FLAG_SPEEDUP => Some(if confirmed == Some(true) {
            "over 10x: re-timed and confirmed"
        } else {
            "over 10x: unconfirmed"
        }),
        _ => None,
    }
}

/// Most re-times one request may ask for (each is a full timed run on the device).
pub const MAX_RETIMES: u32 = 200;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetimeParams {
    pub goal: String,
    /// A candidate id (or a unique prefix of one); absent or `best`: the goal's best.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// How many re-times (1..=MAX_RETIMES).
    pub times: u32,
}

/// `revalidate`: re-measure a goal's best few candidates now, and record whether each
/// still holds its win beyond noise (one re-time each, through the `retime` machinery).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RevalidateParams {
    pub goal: String,
    /// How many of the best distinct candidates (default `REVALIDATE_TOP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<u32>,
}

/// Candidates `revalidate` re-measures unless told, and the most it takes.
pub const REVALIDATE_TOP: u32 = 3;
pub const MAX_REVALIDATE_TOP: u32 = 20;

/// `revalidate`'s answer: one re-time request per candidate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RevalidateTicket {
    pub goal: String,
    pub requests: Vec<RetimeTicket>,
}

/// What a revalidation's re-time is checked against: the candidate's figures as measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Revalidation {
    pub speedup: f64,
    pub spread_pct: f64,
}

/// `retime`'s answer: the request, queued (it runs on the goal's devices, one re-time
/// per lease, before new work).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetimeTicket {
    pub goal: String,
    /// The request's id: the sequence number of its `retime_requested` event.
    pub request: u64,
    pub candidate: String,
    pub iteration: u64,
    pub times: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetimesParams {
    pub goal: String,
    /// A request id; absent: the goal's latest request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<u64>,
}

/// One re-time of a request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RetimeRun {
    /// The `retime_finished` event's sequence number.
    pub seq: u64,
    pub class: super::ResultClass,
    #[serde(default)]
    pub speedup: Option<f64>,
    #[serde(default)]
    pub message: Option<String>,
}

/// One shape over a request's correct re-times.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ShapeStability {
    pub shape: String,
    /// The median over the re-times of the candidate's per-run median.
    pub candidate_us: f64,
    /// The largest |run median - candidate_us| / candidate_us, in %.
    pub candidate_dev_pct: f64,
    #[serde(default)]
    pub baseline_us: Option<f64>,
    #[serde(default)]
    pub baseline_dev_pct: Option<f64>,
}

/// A request's figures: issue #11's stability measure.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Stability {
    /// Correct, timed re-times the figures are taken over.
    pub n: usize,
    #[serde(default)]
    pub speedup_median: Option<f64>,
    /// Coefficient of variation (sample standard deviation / mean) of the geomean speedup, %.
    #[serde(default)]
    pub speedup_cv_pct: Option<f64>,
    /// The same for the geomean over shapes of the baseline's time.
    #[serde(default)]
    pub baseline_cv_pct: Option<f64>,
    /// The largest deviation of any shape's median from that shape's median over the runs, %.
    #[serde(default)]
    pub candidate_max_dev_pct: Option<f64>,
    #[serde(default)]
    pub baseline_max_dev_pct: Option<f64>,
    pub shapes: Vec<ShapeStability>,
    /// What the figures are: "GPU time", "as called", "interpreted" (`timing_label`), or
    /// the labels joined when the re-times were timed differently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RetimeReport {
    pub goal: String,
    pub request: u64,
    pub candidate: String,
    pub iteration: u64,
    pub times: u32,
    /// Re-times with a recorded result so far.
    pub done: u32,
    /// Every re-time has a result, or the goal ended and none will come.
    pub finished: bool,
    pub runs: Vec<RetimeRun>,
    pub stability: Stability,
    /// The candidate's speedup pooled over all its measurements (its first evaluation and
    /// every re-time, this request's included; issue #23), with its noise: what the win
    /// rule uses. Absent when the daemon holds no pooled measurements of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooled: Option<super::Figure>,
    /// Whether the candidate is the goal's best (its re-times tighten the best's interval).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_best: bool,
}
