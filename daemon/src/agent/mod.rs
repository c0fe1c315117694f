//! Agents propose the next candidate of a goal. An agent sees the goal (its spec and
//! projection) and the goal's evaluation history, and returns a proposal or `None`
//! when it has nothing new to try.
//!
//! Agents keep no state of their own between calls: everything they need is in the
//! log, so a restarted daemon continues exactly where it stopped.

pub mod command;
pub mod hybrid;
pub mod llm;
pub mod retry;
pub mod search;
pub mod space;

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::projection::GoalProjection;
use crate::task::Task;
use crate::wire::{AgentSpec, ContextResult, EvaluationRecord};

/// The goal restated with the candidate contract: the top of every brief an agent that
/// writes code gets (GOAL.md for `command`, the system prompt for `llm`).
pub fn brief(goal: &GoalProjection) -> String {
    let spec = &goal.spec;
    let entry = Task::load(std::path::Path::new(&spec.task_dir))
        .map(|t| t.manifest.entry)
        .unwrap_or_else(|_| "?".into());
    format!(
        "{}\n## The candidate\n\
         One Python module with Triton kernels that defines\n\
         `{entry}(inputs: dict, out: dict, config: dict) -> None` (write every tensor of `out`;\n\
         allocate no outputs; never modify `inputs`), `SPACE` (parameter -> list of values) and\n\
         optionally `DEFAULT`. Only torch, triton, math, numpy, functools, typing, dataclasses\n\
         may be imported; no PyTorch calls for the heavy math; no third-party kernel libraries;\n\
         no threads, streams, timers or introspection. The task (reference, inputs, shapes,\n\
         tolerances) is in {}.\n",
        crate::context::goal_statement(spec),
        spec.task_dir
    )
}

/// What `kernelctl context` shows: exactly what the goal's agent gets on its next
/// iteration, from the same functions the agent uses. `llm`: the request's messages;
/// `command`: CONTEXT.md, and the names of the other files its directory holds;
/// `search`: the compacted context.
pub fn context_view(
    goal: &GoalProjection,
    history: &[EvaluationRecord],
    best_source: Option<&str>,
) -> ContextResult {
    let spec = &goal.spec;
    let budget = crate::context::budget(spec);
    let mut view = ContextResult {
        goal: goal.id.clone(),
        agent: spec.agent.kind().to_string(),
        text: String::new(),
        messages: Vec::new(),
        files: Vec::new(),
        budget_bytes: budget as u64,
        phase: None,
    };
    match &spec.agent {
        AgentSpec::Hybrid(h) => {
            let phase = hybrid::phase(goal, history, h.tune_evaluations);
            let inner = match &phase {
                hybrid::Phase::Tune { .. } => crate::context::compact(goal, history, budget),
                hybrid::Phase::Propose { .. } => {
                    let v = context_view(&hybrid::as_proposer(goal, h), history, best_source);
                    view.messages = v.messages;
                    view.files = v.files;
                    v.text
                }
            };
            let said = phase.to_string();
            view.text = format!("phase: {said}\n\n{inner}");
            view.phase = Some(said);
        }
        AgentSpec::Llm(_) => {
            view.messages = llm::messages(goal, history, best_source);
            for m in &view.messages {
                let _ = writeln!(
                    view.text,
                    "===== {} ({} bytes) =====",
                    m.role,
                    m.content.len()
                );
                view.text.push_str(&m.content);
                if !m.content.ends_with('\n') {
                    view.text.push('\n');
                }
            }
        }
        agent => {
            view.text = crate::context::compact(goal, history, budget);
            if let AgentSpec::Command(_) = agent {
                // The directory's other files, from the function that writes them.
                view.files = command::workdir_files(goal, history, best_source)
                    .map(|files| files.into_iter().map(|(name, _)| name))
                    .into_iter()
                    .flatten()
                    .filter(|name| name != "CONTEXT.md")
                    .collect();
            }
        }
    }
    view
}

/// The configuration an agent gave (a JSON object), or `{}` (the candidate's DEFAULT).
pub fn parse_config(text: Option<&str>, what: &str) -> anyhow::Result<Value> {
    let Some(text) = text else {
        return Ok(Value::Object(Default::default()));
    };
    let v: Value =
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{what} is not JSON: {e}"))?;
    if !v.is_object() {
        anyhow::bail!("{what} must be a JSON object");
    }
    Ok(v)
}

/// Rejects a proposal the goal has already seen (measured or in flight).
pub fn check_new(
    goal: &GoalProjection,
    history: &[EvaluationRecord],
    source: &str,
    config: &Value,
) -> anyhow::Result<()> {
    let id = crate::candidate::CandidateIds::of(source, config);
    if let Some(prev) = history.iter().find(|r| id.matches(&r.candidate)) {
        anyhow::bail!(
            "the agent proposed a candidate already evaluated at iteration {}",
            prev.iteration
        );
    }
    if goal.pending.values().any(|p| id.matches(&p.candidate)) {
        anyhow::bail!("the agent proposed a candidate already being evaluated");
    }
    Ok(())
}

/// What an agent proposes: a seed's source (or a new source) and a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The seed this candidate derives from (its name in the goal spec).
    pub seed: String,
    pub config: Value,
    /// A new source (llm / command agents); None: the seed's own source.
    pub source: Option<String>,
    /// Why this one (for the log and the context).
    pub note: Option<String>,
    /// Tokens the endpoint spent on it (its `usage`), for the tokens and cost budgets.
    pub tokens: Option<u64>,
    /// Which of a hybrid's agents made it (`search`, `llm`, `command`), for the log.
    pub by: Option<&'static str>,
}

pub trait Agent: Send + Sync {
    /// True for agents that take long (an external program, a remote model): the engine
    /// then proposes without holding the log's commit lock, on a blocking thread.
    fn slow(&self) -> bool {
        false
    }
    /// True for agents whose proposal may be asked for before the previous result is in
    /// (compile-ahead, engine/ahead.rs): fast, and a pure function of its arguments.
    fn proposes_ahead(&self) -> bool {
        false
    }
    /// The next candidate for iteration `iteration`, or None when nothing untried is left.
    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        iteration: u64,
    ) -> anyhow::Result<Option<Proposal>>;
}

/// What an agent may need beyond the goal and its history.
#[derive(Clone, Default)]
pub struct AgentEnv {
    /// Where agents that work in files get their per-iteration working directories.
    pub work_root: PathBuf,
    /// The current best candidate's source (with its configuration), if any.
    pub best_source: Option<String>,
    /// Cancelled when the goal is paused or cancelled, or the daemon stops.
    pub cancel: CancellationToken,
    /// The names of kerneld's environment variables a `command` agent gets
    /// (kerneld.toml `command_env`); everything else is withheld.
    pub command_env: Vec<String>,
    /// A source the goal's candidates used, by its hash (the store's copy): a hybrid reads
    /// the structure it tunes from there.
    pub source_of: Option<SourceLookup>,
}

/// Looks a candidate's source up by its hash.
pub type SourceLookup = std::sync::Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The agent a goal asks for.
pub fn for_goal(goal: &GoalProjection, env: AgentEnv) -> anyhow::Result<Box<dyn Agent>> {
    for_spec(&goal.spec.agent, env)
}

/// The agent of these settings.
pub fn for_spec(spec: &AgentSpec, env: AgentEnv) -> anyhow::Result<Box<dyn Agent>> {
    match spec {
        AgentSpec::Search(_) => Ok(Box::new(search::SearchAgent)),
        AgentSpec::Command(settings) => Ok(Box::new(command::CommandAgent::new(settings, env)?)),
        AgentSpec::Llm(settings) => Ok(Box::new(llm::LlmAgent::new(settings, env)?)),
        AgentSpec::Hybrid(settings) => Ok(Box::new(hybrid::HybridAgent::new(settings, env)?)),
    }
}
