//! The goal specification (the parsed goal file), as enqueued and logged.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A goal as enqueued. Parsed from TOML by `goal::parse`, which rejects unknown keys and
/// bad values; stored in the `GoalEnqueued` event, so it is what every iteration aims at.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GoalSpec {
    pub name: String,
    /// The task directory, resolved to an absolute path at enqueue time.
    pub task: String,
    pub task_dir: String,
    pub objective: String,
    pub baseline: String,
    pub shapes: Vec<String>,
    /// Seed candidate files (absolute paths), and their sources as read at enqueue time,
    /// so a later edit of the file does not change a running goal.
    pub seeds: Vec<SeedSource>,
    pub budget: Budget,
    pub stop: StopRules,
    pub agent: AgentSpec,
    pub resources: Resources,
    /// How the objective is timed (the goal file's `timing`, default `gpu`). Absent from
    /// goals enqueued before issue 23: their requests name no method and the judge's
    /// default applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<super::TimingMethod>,
    /// Hooks this goal's events also run (issue #29): names of kerneld.toml's `[[hooks]]`
    /// entries marked `per_goal = true` (e.g. `notify = ["mail"]`). Absent before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
    /// Another goal this one waits for before it runs (issue #29, `--after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<super::Chain>,
}

impl GoalSpec {
    /// The method the objective is timed with (the judge's default for older goals).
    pub fn timing_method(&self) -> super::TimingMethod {
        self.timing.unwrap_or_default()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SeedSource {
    /// The file name (for people) ...
    pub name: String,
    /// ... and its text.
    pub source: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Budget {
    pub wall_s: Option<u64>,
    pub iterations: Option<u64>,
    pub gpu_hours: Option<f64>,
    /// Tokens the agent's endpoint may spend (its replies' `usage.total_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Money the agent's endpoint may cost, at `price_per_1k_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_1k_tokens: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StopRules {
    pub target_speedup: Option<f64>,
    pub plateau: Option<u64>,
}

/// The agent a goal runs, with its settings as `goal::parse` checked them. On the wire
/// (and in the log since the first build): `{"kind": "llm", "settings": {...}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", content = "settings", rename_all = "snake_case")]
pub enum AgentSpec {
    Search(SearchSettings),
    Llm(LlmSettings),
    Command(CommandSettings),
    /// A proposer (llm or command) gives structure, the search tunes it (issue #17 item 2).
    Hybrid(HybridSettings),
}

/// The kinds of agent (SPEC section 7), for matching without the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    Search,
    Llm,
    Command,
    Hybrid,
}

impl AgentKind {
    pub const ALL: [AgentKind; 4] = [
        AgentKind::Search,
        AgentKind::Llm,
        AgentKind::Command,
        AgentKind::Hybrid,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Search => "search",
            AgentKind::Llm => "llm",
            AgentKind::Command => "command",
            AgentKind::Hybrid => "hybrid",
        }
    }

    pub fn parse(name: &str) -> Option<AgentKind> {
        AgentKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl PartialEq<&str> for AgentKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for AgentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl AgentSpec {
    pub fn kind(&self) -> AgentKind {
        match self {
            AgentSpec::Search(_) => AgentKind::Search,
            AgentSpec::Llm(_) => AgentKind::Llm,
            AgentSpec::Command(_) => AgentKind::Command,
            AgentSpec::Hybrid(_) => AgentKind::Hybrid,
        }
    }

    /// The agent that writes code: the proposer of a hybrid, else the agent itself.
    pub fn proposer(&self) -> &AgentSpec {
        match self {
            AgentSpec::Hybrid(h) => h.proposer.proposer(),
            a => a,
        }
    }

    /// The settings as they are logged (a JSON object).
    pub fn settings(&self) -> Value {
        let v = match self {
            AgentSpec::Search(s) => serde_json::to_value(s),
            AgentSpec::Llm(s) => serde_json::to_value(s),
            AgentSpec::Command(s) => serde_json::to_value(s),
            AgentSpec::Hybrid(s) => serde_json::to_value(s),
        };
        v.unwrap_or(Value::Null)
    }

    /// `agent.context_bytes`, when the goal sets it.
    pub fn context_bytes(&self) -> Option<u64> {
        match self {
            AgentSpec::Search(s) => s.context_bytes,
            AgentSpec::Llm(s) => s.context_bytes,
            AgentSpec::Command(s) => s.context_bytes,
            AgentSpec::Hybrid(s) => s.proposer.context_bytes(),
        }
    }
}

impl Default for AgentSpec {
    fn default() -> AgentSpec {
        AgentSpec::Search(SearchSettings::default())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    /// An OpenAI-compatible API base (".../v1") or the full chat-completions endpoint.
    pub url: String,
    pub model: String,
    /// The environment variable holding the key; empty: send none.
    pub api_key_env: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CommandSettings {
    /// Program and arguments.
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_bytes: Option<u64>,
}

/// `kind = "hybrid"`: the proposer writes a kernel with its SPACE; the search agent then
/// tunes that SPACE for `tune_evaluations` evaluations before the proposer is asked again
/// (with the tuned results in its context).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HybridSettings {
    /// `llm` or `command`, with its own settings.
    pub proposer: Box<AgentSpec>,
    pub tune_evaluations: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    pub gpus: u32,
    pub priority: i32,
}
