//! The goal file's schema (SPEC section 4), as serde reads it: every key with its span,
//! unknown keys refused. Types are checked before (`errors::check_types`), so serde
//! only ever reports syntax and unknown keys here.

use serde::Deserialize;
use toml::Spanned;

use kerneld_protocol::seeds::OneOrMany;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGoal {
    pub(super) name: Spanned<String>,
    pub(super) task: Spanned<String>,
    pub(super) objective: Option<Spanned<String>>,
    pub(super) baseline: Option<Spanned<String>>,
    pub(super) shapes: Option<Spanned<Vec<String>>>,
    pub(super) timing: Option<Spanned<String>>,
    pub(super) seed: Option<Spanned<OneOrMany>>,
    /// Per-goal hooks (issue #29): names of kerneld.toml's `per_goal` hooks.
    pub(super) notify: Option<Spanned<Vec<String>>>,
    /// A chain (issue #29): GOAL[:completed|:any].
    pub(super) after: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) budget: RawBudget,
    #[serde(default)]
    pub(super) stop: RawStop,
    pub(super) agent: Option<RawAgent>,
    #[serde(default)]
    pub(super) resources: RawResources,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudget {
    pub(super) wall: Option<Spanned<String>>,
    pub(super) iterations: Option<Spanned<i64>>,
    pub(super) gpu_hours: Option<Spanned<f64>>,
    pub(super) tokens: Option<Spanned<i64>>,
    pub(super) cost: Option<Spanned<f64>>,
    pub(super) price_per_1k_tokens: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStop {
    pub(super) target_speedup: Option<Spanned<f64>>,
    pub(super) plateau: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub(super) kind: Spanned<String>,
    // llm
    pub(super) url: Option<Spanned<String>>,
    pub(super) model: Option<Spanned<String>>,
    pub(super) api_key_env: Option<Spanned<String>>,
    pub(super) temperature: Option<Spanned<f64>>,
    // command
    pub(super) command: Option<Spanned<Vec<String>>>,
    pub(super) timeout: Option<Spanned<String>>,
    // hybrid
    pub(super) proposer: Option<Spanned<String>>,
    pub(super) tune_evaluations: Option<Spanned<i64>>,
    // every agent
    pub(super) context_bytes: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawResources {
    pub(super) gpus: Option<Spanned<i64>>,
    pub(super) priority: Option<Spanned<i64>>,
}
