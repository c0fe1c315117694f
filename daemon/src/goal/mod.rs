//! Goal files (SPEC section 4): parsed with `toml` + serde, unknown keys and bad values
//! rejected with `file:line:column: message`, then checked against the task they name.
//!
//! Parsing is a pure function of the file's text, its path, the kernels directory and
//! what the engine says of the requester (`Requester`), so a rejected goal changes
//! nothing: nothing is written before `parse` succeeds.
//!
//! The daemon reads no file a user names outside the installed tasks: seeds that are not
//! in the task's directory are read by `kernelctl` with the user's own rights
//! (`local_seed_files`) and travel in the request.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use kerneld_protocol::limits;
use kerneld_protocol::seeds::OneOrMany;
pub use kerneld_protocol::seeds::{local_seed_files, seed_refs, MAX_SEED_BYTES};

mod agent;
mod errors;
mod schema;

pub use errors::GoalError;

use crate::task::Task;
use crate::wire::{self, Budget, GoalSpec, Resources, SeedSource, StopRules, TimingMethod};
use errors::Ctx;
use schema::RawGoal;

/// The objectives a goal may name.
pub const OBJECTIVES: &[&str] = &["geomean_speedup"];
/// Bounds of `agent.context_bytes` (the size of the context an agent sees).
pub const CONTEXT_BYTES: std::ops::RangeInclusive<i64> = 1024..=1024 * 1024;
/// Bounds of `agent.temperature`, as OpenAI-compatible endpoints accept it.
pub const TEMPERATURE: std::ops::RangeInclusive<f64> = 0.0..=2.0;
/// Longest duration accepted (ten years): far beyond any budget, and safe to turn into ms.
pub const MAX_DURATION_S: u64 = 3650 * 86_400;

/// What parsing needs to know of who enqueues. The engine fills it in (uids, groups);
/// `parse` only reads it, so it stays a pure function.
#[derive(Debug, Clone, Default)]
pub struct Requester {
    /// Root, kerneld's own user or its admin group: may name a task by path (its Python
    /// runs as kerneld's user).
    pub trusted: bool,
    /// May use a `command` agent: when kerneld runs as root the program runs as the
    /// goal's owner, so anyone may; otherwise it would run as kerneld's user, so only the
    /// trusted.
    pub may_run_commands: bool,
    /// Seed files read by the client with the user's rights: seed as written -> text.
    pub files: BTreeMap<String, String>,
    /// For an untrusted requester: the API keys in kerneld's environment it may have an
    /// `llm` agent send, each only to URLs under its prefix (the admin's `llm_keys`).
    /// Otherwise anyone could have kerneld send its keys to a server of their choosing.
    pub llm_keys: BTreeMap<String, String>,
}

impl Requester {
    /// Someone kerneld trusts fully (tests, tools running as kerneld's user).
    pub fn trusted(files: BTreeMap<String, String>) -> Requester {
        Requester {
            trusted: true,
            may_run_commands: true,
            files,
            llm_keys: BTreeMap::new(),
        }
    }
}

/// Parses a duration such as `"10h"`, `"45m"`, `"90s"`, `"1h30m"` or `"2d"` into seconds
/// (humantime's units: also `"90min"`, `"1.5h"`), whole seconds, without spaces.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    // One word, as in the goal file's examples: "10 hours" reads like prose and is
    // easy to get subtly wrong ("10 hours 30" has no unit on its 30).
    if t.chars().any(char::is_whitespace) {
        return Err("write it without spaces".into());
    }
    let too_long = || format!("duration too long: at most {}d", MAX_DURATION_S / 86_400);
    let d = humantime::parse_duration(t).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => too_long(),
        humantime::DurationError::UnknownUnit { unit, .. } if unit.is_empty() => {
            "every number needs a unit (d, h, m or s)".to_string()
        }
        humantime::DurationError::UnknownUnit { unit, .. } => format!("unknown unit `{unit}`"),
        humantime::DurationError::NumberExpected(_) => {
            "a number must come before each unit".to_string()
        }
        e => e.to_string(),
    })?;
    if d.subsec_nanos() != 0 {
        return Err("a duration is counted in whole seconds".into());
    }
    match d.as_secs() {
        0 => Err("a duration must be longer than 0s".into()),
        s if s > MAX_DURATION_S => Err(too_long()),
        s => Ok(s),
    }
}

/// A seed inside the task's directory (or its seeds/ folder). Only plain relative names
/// are looked up, so a seed can never name a file outside the installed task.
fn task_seed_file(task_dir: &Path, seed: &str) -> Option<PathBuf> {
    let rel = Path::new(seed);
    let inside = !seed.is_empty()
        && rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !inside {
        return None;
    }
    [task_dir.join(rel), task_dir.join("seeds").join(rel)]
        .into_iter()
        .find(|p| p.is_file())
}

/// Parses and validates a goal file. `path` is used in messages and to resolve a
/// relative task path; `kernels_dir` is where task names are looked up; `requester`
/// says what this requester may name and carries the seed files its client sent.
pub fn parse(
    path: &str,
    text: &str,
    kernels_dir: &Path,
    requester: &Requester,
) -> Result<GoalSpec, GoalError> {
    let cx = Ctx { file: path, text };
    limits::goal_file(path, text.len() as u64).map_err(|m| cx.err(0..0, m))?;
    errors::check_types(&cx)?;
    let raw: RawGoal = toml::from_str(text).map_err(|e| errors::toml_error(&cx, &e))?;

    let name = raw.name.get_ref().trim().to_string();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(cx.err(
            raw.name.span(),
            "`name` must be non-empty and use only letters, digits, '-', '_' and '.'",
        ));
    }
    if name == "." || name == ".." {
        return Err(cx.err(
            raw.name.span(),
            format!("`name` cannot be `{name}`: choose a word, e.g. name = \"mla-splitkv\""),
        ));
    }
    if looks_like_id(&name) {
        return Err(cx.err(
            raw.name.span(),
            format!(
                "`name` cannot be `{name}`: names of the form g<number> are goal ids, and every \
                 command takes an id or a name; choose another, e.g. name = \"{name}-goal\""
            ),
        ));
    }

    limits::name(&name).map_err(|m| cx.err(raw.name.span(), m))?;

    let goal_dir = Path::new(path).parent().unwrap_or(Path::new("."));
    let task = Task::resolve(raw.task.get_ref(), goal_dir, kernels_dir, requester.trusted)
        .map_err(|m| cx.err(raw.task.span(), m))?;

    let objective = match &raw.objective {
        None => OBJECTIVES[0].to_string(),
        Some(o) if OBJECTIVES.contains(&o.get_ref().as_str()) => o.get_ref().clone(),
        Some(o) => {
            return Err(cx.err(
                o.span(),
                format!(
                    "unknown objective `{}`; expected one of: {}",
                    o.get_ref(),
                    OBJECTIVES.join(", ")
                ),
            ))
        }
    };

    let baseline = match &raw.baseline {
        None => task.manifest.default_baseline.clone(),
        Some(b) => {
            if !task.manifest.baselines.contains_key(b.get_ref()) {
                let known: Vec<&str> = task.manifest.baselines.keys().map(String::as_str).collect();
                return Err(cx.err(
                    b.span(),
                    format!(
                        "task `{}` has no baseline `{}`; it has: {}",
                        task.manifest.name,
                        b.get_ref(),
                        known.join(", ")
                    ),
                ));
            }
            b.get_ref().clone()
        }
    };

    let shapes = match &raw.shapes {
        None => task.manifest.default_shapes.clone(),
        Some(s) => {
            if s.get_ref().is_empty() {
                return Err(cx.err(s.span(), "`shapes` must name at least one shape"));
            }
            for (i, shape) in s.get_ref().iter().enumerate() {
                if s.get_ref()[..i].contains(shape) {
                    return Err(cx.err(
                        s.span(),
                        format!("shape `{shape}` is listed twice in `shapes`: list each once"),
                    ));
                }
                if !task.manifest.shapes.contains_key(shape) {
                    let known: Vec<&str> = task.shape_names().map(String::as_str).collect();
                    return Err(cx.err(
                        s.span(),
                        format!(
                            "task `{}` has no shape `{shape}`; it has: {}",
                            task.manifest.name,
                            known.join(", ")
                        ),
                    ));
                }
            }
            s.get_ref().clone()
        }
    };
    if shapes.is_empty() {
        return Err(cx.err(
            0..0,
            format!(
                "task `{}` declares no default shapes: set `shapes`",
                task.manifest.name
            ),
        ));
    }

    let timing = match &raw.timing {
        None => TimingMethod::default(),
        Some(t) => TimingMethod::parse(t.get_ref()).ok_or_else(|| {
            cx.err(
                t.span(),
                format!(
                    "unknown timing `{}`; expected one of: gpu (the GPU time of the call's \
                     work, replayed from a CUDA graph; the default), as_called (host-inclusive: \
                     each call launched from Python, as an eager caller sees it)",
                    wire::quote(t.get_ref())
                ),
            )
        })?,
    };

    let (seed_names, seed_span) = match &raw.seed {
        None => (task.manifest.seeds.clone(), 0..0),
        Some(s) => match s.get_ref() {
            OneOrMany::One(one) => (vec![one.clone()], s.span()),
            OneOrMany::Many(many) => (many.clone(), s.span()),
        },
    };
    if seed_names.is_empty() {
        return Err(cx.err(
            seed_span,
            "no seed candidate: set `seed`, or list `seeds` in the task's task.toml",
        ));
    }
    // A few seeds, each once: a seed's text is kept in the goal as many times as it is
    // named, so a short file naming one large seed thousands of times would otherwise grow
    // the daemon, the log and every reply that shows the goal. The count first: the
    // pairwise look for a repeat is then over at most 16 names, not a 1 MiB file's worth.
    limits::seeds(seed_names.len()).map_err(|m| cx.err(seed_span.clone(), m))?;
    for (i, seed) in seed_names.iter().enumerate() {
        if seed_names[..i].contains(seed) {
            return Err(cx.err(
                seed_span.clone(),
                format!(
                    "seed `{}` is named twice: name each seed once",
                    wire::quote(seed)
                ),
            ));
        }
    }
    let mut seeds = Vec::new();
    for seed in &seed_names {
        let from_task = task_seed_file(&task.dir, seed);
        let source = match (&from_task, requester.files.get(seed)) {
            (Some(file), _) => std::fs::read_to_string(file).map_err(|e| {
                cx.err(
                    seed_span.clone(),
                    format!("cannot read seed {}: {e}", file.display()),
                )
            })?,
            (None, Some(sent)) => {
                if sent.len() as u64 > MAX_SEED_BYTES {
                    return Err(cx.err(
                        seed_span.clone(),
                        format!(
                            "seed `{seed}` is {} bytes; a seed may be at most {MAX_SEED_BYTES} bytes",
                            sent.len()
                        ),
                    ));
                }
                sent.clone()
            }
            (None, None) => {
                return Err(cx.err(
                    seed_span.clone(),
                    format!(
                        "seed `{seed}` not found: it is not in the task's directory {} (or its \
                         seeds/ folder), and kernelctl sent no readable file {}; put the seed \
                         next to the goal file where you can read it, or name one of the \
                         task's seeds",
                        task.dir.display(),
                        goal_dir.join(seed).display()
                    ),
                ));
            }
        };
        let name = Path::new(seed)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| seed.clone());
        seeds.push(SeedSource { name, source });
    }

    let mut budget = Budget::default();
    if let Some(w) = &raw.budget.wall {
        let secs = parse_duration(w.get_ref()).map_err(|m| {
            cx.err(
                w.span(),
                format!(
                    "bad duration `{}`: {m}; write e.g. \"10h\", \"45m\", \"1h30m\"",
                    w.get_ref()
                ),
            )
        })?;
        budget.wall_s = Some(secs);
    }
    if let Some(i) = &raw.budget.iterations {
        let n = limits::int_in("budget.iterations", *i.get_ref(), &limits::ITERATIONS);
        budget.iterations = Some(n.map_err(|m| cx.err(i.span(), m))?);
    }
    if let Some(g) = &raw.budget.gpu_hours {
        let h = limits::positive_at_most(
            "budget.gpu_hours",
            *g.get_ref(),
            limits::GPU_HOURS_MAX,
            "8.0",
        );
        budget.gpu_hours = Some(h.map_err(|m| cx.err(g.span(), m))?);
    }
    if let Some(t) = &raw.budget.tokens {
        let n = limits::int_in("budget.tokens", *t.get_ref(), &limits::TOKENS);
        budget.tokens = Some(n.map_err(|m| cx.err(t.span(), m))?);
    }
    let positive = |v: &toml::Spanned<f64>, key: &str, max: f64, example: &str| {
        limits::positive_at_most(&format!("budget.{key}"), *v.get_ref(), max, example)
            .map_err(|m| cx.err(v.span(), m))
    };
    budget.price_per_1k_tokens = raw
        .budget
        .price_per_1k_tokens
        .as_ref()
        .map(|p| {
            positive(
                p,
                "price_per_1k_tokens",
                limits::PRICE_PER_1K_TOKENS_MAX,
                "0.01",
            )
        })
        .transpose()?;
    if let Some(c) = &raw.budget.cost {
        budget.cost = Some(positive(c, "cost", limits::COST_MAX, "20.0")?);
        if budget.price_per_1k_tokens.is_none() {
            return Err(cx.err(
                c.span(),
                "`budget.cost` needs `budget.price_per_1k_tokens` (what the endpoint charges \
                 per thousand tokens) to turn its token counts into money",
            ));
        }
    }

    let mut stop = StopRules::default();
    if let Some(t) = &raw.stop.target_speedup {
        let x = limits::positive_at_most(
            "stop.target_speedup",
            *t.get_ref(),
            limits::TARGET_SPEEDUP_MAX,
            "40.0",
        );
        stop.target_speedup = Some(x.map_err(|m| cx.err(t.span(), m))?);
    }
    if let Some(p) = &raw.stop.plateau {
        let n = limits::int_in("stop.plateau", *p.get_ref(), &limits::PLATEAU);
        stop.plateau = Some(n.map_err(|m| cx.err(p.span(), m))?);
    }

    let agent = agent::parse_agent(&cx, raw.agent, requester)?;

    let gpus = match &raw.resources.gpus {
        None => 1,
        Some(g) if (1..=64).contains(g.get_ref()) => *g.get_ref() as u32,
        Some(g) => return Err(cx.err(g.span(), "`resources.gpus` must be between 1 and 64")),
    };
    let priority = match &raw.resources.priority {
        None => 0,
        Some(p) if (-1000..=1000).contains(p.get_ref()) => *p.get_ref() as i32,
        Some(p) => {
            return Err(cx.err(
                p.span(),
                "`resources.priority` must be between -1000 and 1000",
            ))
        }
    };

    let notify = parse_notify(&cx, raw.notify.as_ref())?;
    let after = raw
        .after
        .as_ref()
        .map(|a| wire::Chain::parse(a.get_ref()).map_err(|m| cx.err(a.span(), m)))
        .transpose()?;

    let spec = GoalSpec {
        name,
        task: task.manifest.name.clone(),
        task_dir: task.dir.display().to_string(),
        objective,
        baseline,
        shapes,
        seeds,
        budget,
        stop,
        agent,
        resources: Resources { gpus, priority },
        timing: Some(timing),
        notify,
        after,
    };
    // The goal as it will be stored: whatever the file's fields and seeds, the first event
    // of the goal stays far below a reply line.
    let stored = serde_json::to_vec(&spec).map_or(usize::MAX, |v| v.len());
    limits::goal_stored(stored).map_err(|m| cx.err(0..0, m))?;
    Ok(spec)
}

/// `notify`: hook names, each once. Whether kerneld.toml has a `per_goal` hook of each
/// name is checked where the configuration is known (`hooks::Hooks::check_notify`).
fn parse_notify(
    cx: &Ctx<'_>,
    raw: Option<&toml::Spanned<Vec<String>>>,
) -> Result<Vec<String>, GoalError> {
    let Some(n) = raw else {
        return Ok(Vec::new());
    };
    if n.get_ref().len() > MAX_NOTIFY {
        return Err(cx.err(
            n.span(),
            format!("`notify` names at most {MAX_NOTIFY} hooks"),
        ));
    }
    for (i, name) in n.get_ref().iter().enumerate() {
        if !crate::hooks::valid_name(name) {
            return Err(cx.err(
                n.span(),
                format!(
                    "`notify`: `{}` is not a hook name (letters, digits, '-' and '_'; the \
                     names of kerneld.toml's [[hooks]] with per_goal = true)",
                    wire::quote(name)
                ),
            ));
        }
        if n.get_ref()[..i].contains(name) {
            return Err(cx.err(
                n.span(),
                format!("`notify` names hook `{name}` twice: name each once"),
            ));
        }
    }
    Ok(n.get_ref().clone())
}

/// Hooks one goal may select: a few (each runs on every event of the goal it listens to).
const MAX_NOTIFY: usize = 8;

/// True for `g` followed by digits only: the form of goal ids.
fn looks_like_id(name: &str) -> bool {
    name.strip_prefix('g')
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests;
