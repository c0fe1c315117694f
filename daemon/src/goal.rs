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
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::limits;
use crate::task::Task;
use crate::userfile::UserFileError;
use crate::wire::{AgentSpec, Budget, GoalSpec, Resources, SeedSource, StopRules};

/// The objectives a goal may name.
pub const OBJECTIVES: &[&str] = &["geomean_speedup"];
/// The agents a goal file may name (SPEC section 7) ...
pub const AGENTS: &[&str] = &["search", "llm", "command"];
/// ... and those this build can run (`agent::for_goal`); a goal naming another is refused
/// at enqueue rather than failing later.
pub const AVAILABLE_AGENTS: &[&str] = &["search", "llm", "command"];
/// The `[agent]` keys each kind accepts.
const SEARCH_KEYS: &[&str] = &["kind", "context_bytes"];
const LLM_KEYS: &[&str] = &[
    "kind",
    "url",
    "model",
    "api_key_env",
    "temperature",
    "timeout",
    "context_bytes",
];
const COMMAND_KEYS: &[&str] = &["kind", "command", "timeout", "context_bytes"];
/// Bounds of `agent.context_bytes` (the size of the context an agent sees).
pub const CONTEXT_BYTES: std::ops::RangeInclusive<i64> = 1024..=1024 * 1024;
/// Bounds of `agent.temperature`, as OpenAI-compatible endpoints accept it.
pub const TEMPERATURE: std::ops::RangeInclusive<f64> = 0.0..=2.0;
/// Largest seed file sent with a goal.
pub const MAX_SEED_BYTES: u64 = 1 << 20;
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGoal {
    name: Spanned<String>,
    task: Spanned<String>,
    objective: Option<Spanned<String>>,
    baseline: Option<Spanned<String>>,
    shapes: Option<Spanned<Vec<String>>>,
    seed: Option<Spanned<OneOrMany>>,
    #[serde(default)]
    budget: RawBudget,
    #[serde(default)]
    stop: RawStop,
    agent: Option<RawAgent>,
    #[serde(default)]
    resources: RawResources,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    wall: Option<Spanned<String>>,
    iterations: Option<Spanned<i64>>,
    gpu_hours: Option<Spanned<f64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStop {
    target_speedup: Option<Spanned<f64>>,
    plateau: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    kind: Spanned<String>,
    // llm
    url: Option<Spanned<String>>,
    model: Option<Spanned<String>>,
    api_key_env: Option<Spanned<String>>,
    temperature: Option<Spanned<f64>>,
    // command
    command: Option<Spanned<Vec<String>>>,
    timeout: Option<Spanned<String>>,
    // every agent
    context_bytes: Option<Spanned<i64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    gpus: Option<Spanned<i64>>,
    priority: Option<Spanned<i64>>,
}

/// A rejection: where in the file, and what is expected there.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for GoalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

impl std::error::Error for GoalError {}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, column)
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: Range<usize>, message: impl Into<String>) -> GoalError {
        let (line, column) = line_col(self.text, span.start);
        GoalError {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }
}

/// Parses a duration such as `"10h"`, `"45m"`, `"90s"`, `"1h30m"` or `"2d"` into seconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    let too_long = || format!("duration too long: at most {}d", MAX_DURATION_S / 86_400);
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut saw_unit = false;
    for ch in t.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let unit = match ch {
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return Err(format!("unknown unit `{ch}`")),
        };
        if digits.is_empty() {
            return Err("a number must come before each unit".into());
        }
        // All digits, so a parse failure can only be overflow.
        let n: u64 = digits.parse().map_err(|_| too_long())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .filter(|&s| s <= MAX_DURATION_S)
            .ok_or_else(too_long)?;
        digits.clear();
        saw_unit = true;
    }
    if !digits.is_empty() || !saw_unit {
        return Err("every number needs a unit (d, h, m or s)".into());
    }
    if total == 0 {
        return Err("a duration must be longer than 0s".into());
    }
    Ok(total)
}

/// The seeds a goal file names, as written (empty when it names none or does not parse):
/// what `kernelctl` reads and sends, so it needs no TOML code of its own.
pub fn seed_refs(text: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct Seeds {
        seed: Option<OneOrMany>,
    }
    match toml::from_str::<Seeds>(text).ok().and_then(|s| s.seed) {
        Some(OneOrMany::One(one)) => vec![one],
        Some(OneOrMany::Many(many)) => many,
        None => Vec::new(),
    }
}

/// For the client, with the user's own rights: the seeds the goal file at `goal_file`
/// names that exist next to it (or at their absolute path) and are readable, keyed by
/// the seed as written. Seeds found nowhere are left to the daemon (the task's own
/// seeds); a seed too large or not text is an error naming the file.
pub fn local_seed_files(goal_file: &Path, text: &str) -> Result<BTreeMap<String, String>, String> {
    let goal_dir = goal_file.parent().unwrap_or(Path::new("."));
    let mut files = BTreeMap::new();
    for seed in seed_refs(text) {
        let path = goal_dir.join(&seed);
        match crate::userfile::read_regular(&path, MAX_SEED_BYTES) {
            Ok(source) => {
                files.insert(seed, source);
            }
            Err(e @ (UserFileError::TooLarge(_) | UserFileError::NotUtf8)) => {
                return Err(format!("seed {}", e.describe(&path, MAX_SEED_BYTES)))
            }
            // Missing, unreadable for this user, or not a file: the daemon says where it
            // looked (a seed of the task's own, perhaps).
            Err(UserFileError::Io(_) | UserFileError::NotRegular(_)) => {}
        }
    }
    Ok(files)
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

/// The key a value at `offset` belongs to, with its table (`budget.iterations`), read
/// from the text: serde's type errors name the type, not the key.
fn key_at(text: &str, offset: usize) -> Option<(String, String)> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start..];
    let line = &line[..line.find('\n').unwrap_or(line.len())];
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    if key.is_empty()
        || !key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return None;
    }
    let table = text[..line_start].lines().rev().find_map(|l| {
        let l = l.trim();
        l.strip_prefix('[')
            .and_then(|l| l.split_once(']'))
            .map(|(t, _)| t.trim().trim_matches(['[', ']']).to_string())
    });
    let full = match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key.to_string(),
    };
    Some((full, key.to_string()))
}

/// Plain words for the TOML and serde errors a person meets most.
fn explain_toml_error(text: &str, span: &Range<usize>, message: &str) -> String {
    const SEE: &str = "(see SPEC section 4 for the goal file format)";
    if message.contains("untagged enum OneOrMany") {
        return "`seed` must be a file name or a list of file names: write seed = \"splitkv.py\" \
                or seed = [\"a.py\", \"b.py\"]"
            .into();
    }
    let Some(rest) = message.strip_prefix("invalid type: ") else {
        return format!("{message} {SEE}");
    };
    let Some((found, expected)) = rest.split_once(", expected ") else {
        return format!("{message} {SEE}");
    };
    let want = match expected {
        "i64" | "u64" | "i32" | "u32" | "an integer" => "an integer",
        "f64" | "f32" | "a float" => "a number",
        "a string" => "a string (in quotes)",
        "a sequence" => "a list",
        e if e.starts_with("struct") || e.contains("map") => "a table",
        _ => return format!("{message} {SEE}"),
    };
    let quoted = found.strip_prefix("string ").map(|q| q.trim_matches('"'));
    let got = if quoted.is_some() {
        "a string"
    } else if found.starts_with("integer") {
        "an integer"
    } else if found.starts_with("floating point") {
        "a decimal number"
    } else if found.starts_with("boolean") {
        "true/false"
    } else if found.starts_with("sequence") {
        "a list"
    } else if found.starts_with("map") {
        "a table"
    } else {
        found
    };
    let Some((full, key)) = key_at(text, span.start) else {
        return format!("this value must be {want}, not {got} {SEE}");
    };
    let value_text = text.get(span.clone()).unwrap_or("").trim();
    let fix = match (want, quoted) {
        ("an integer", Some(q)) if q.trim().parse::<i64>().is_ok() => {
            format!(": write {key} = {}", q.trim())
        }
        ("a number", Some(q)) if q.trim().parse::<f64>().is_ok() => {
            format!(": write {key} = {}", q.trim())
        }
        ("a number", None) if got == "an integer" => format!(": write {key} = {value_text}.0"),
        ("a string (in quotes)", None) if !value_text.is_empty() && got != "a list" => {
            format!(": write {key} = \"{value_text}\"")
        }
        _ => String::new(),
    };
    format!("`{full}` must be {want}, not {got}{fix}")
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
    let raw: RawGoal = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        cx.err(
            span.clone(),
            explain_toml_error(text, &span, e.message().trim()),
        )
    })?;

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

    let agent = parse_agent(&cx, raw.agent, requester)?;

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

    Ok(GoalSpec {
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
    })
}

/// True for `g` followed by digits only: the form of goal ids.
fn looks_like_id(name: &str) -> bool {
    name.strip_prefix('g')
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// Checks an llm endpoint: http or https, a host, an optional numeric port.
fn check_http_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("it must start with http:// or https://")?;
    if url.chars().any(char::is_whitespace) {
        return Err("it must not contain spaces".into());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(
            "it must not hold a user or password: kerneld sends the key from the \
                    environment variable named by `api_key_env`"
                .into(),
        );
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("its IPv6 address lacks a `]`")?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':'))
    {
        return Err("it needs a host name or address after the scheme".into());
    }
    if let Some(p) = port {
        if p.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("`{p}` is not a port number (1-65535)"));
        }
    }
    Ok(())
}

fn parse_agent(
    cx: &Ctx<'_>,
    raw: Option<RawAgent>,
    requester: &Requester,
) -> Result<AgentSpec, GoalError> {
    let Some(raw) = raw else {
        return Ok(AgentSpec {
            kind: "search".into(),
            settings: serde_json::Value::Object(Default::default()),
        });
    };
    let kind = raw.kind.get_ref().as_str();
    if !AGENTS.contains(&kind) {
        return Err(cx.err(
            raw.kind.span(),
            format!(
                "unknown agent kind `{kind}`; expected one of: {}",
                AGENTS.join(", ")
            ),
        ));
    }
    if !AVAILABLE_AGENTS.contains(&kind) {
        return Err(cx.err(
            raw.kind.span(),
            format!(
                "agent kind `{kind}` is not available in this build of kerneld; use one of: {}",
                AVAILABLE_AGENTS.join(", ")
            ),
        ));
    }
    let allowed = match kind {
        "llm" => LLM_KEYS,
        "command" => COMMAND_KEYS,
        _ => SEARCH_KEYS,
    };
    let present = [
        ("url", raw.url.as_ref().map(Spanned::span)),
        ("model", raw.model.as_ref().map(Spanned::span)),
        ("api_key_env", raw.api_key_env.as_ref().map(Spanned::span)),
        ("temperature", raw.temperature.as_ref().map(Spanned::span)),
        ("command", raw.command.as_ref().map(Spanned::span)),
        ("timeout", raw.timeout.as_ref().map(Spanned::span)),
        (
            "context_bytes",
            raw.context_bytes.as_ref().map(Spanned::span),
        ),
    ];
    if let Some((key, span)) = present
        .into_iter()
        .find_map(|(k, span)| span.filter(|_| !allowed.contains(&k)).map(|s| (k, s)))
    {
        return Err(cx.err(
            span,
            format!(
                "`agent.{key}` does not apply to agent kind `{kind}`; its keys are: {}",
                allowed.join(", ")
            ),
        ));
    }
    let mut settings = serde_json::Map::new();
    match kind {
        "llm" => {
            let Some(url) = raw.url else {
                return Err(cx.err(
                    raw.kind.span(),
                    "agent kind `llm` needs `url` (an OpenAI-compatible endpoint)",
                ));
            };
            check_http_url(url.get_ref()).map_err(|m| {
                cx.err(
                    url.span(),
                    format!(
                        "`agent.url` = \"{}\" is not a usable URL: {m}; write e.g. \
                         url = \"http://127.0.0.1:8000/v1\"",
                        url.get_ref()
                    ),
                )
            })?;
            let model = match raw.model {
                Some(m) if !m.get_ref().trim().is_empty() => m.get_ref().trim().to_string(),
                Some(m) => return Err(cx.err(m.span(), "`agent.model` must not be empty")),
                None => {
                    return Err(cx.err(
                        raw.kind.span(),
                        "agent kind `llm` needs `model` (the model name the endpoint serves, \
                         e.g. model = \"gpt-4o\")",
                    ))
                }
            };
            let api_key_env = match raw.api_key_env {
                None if !requester.trusted => {
                    // No key named: send kerneld's default key only where the admin allows it.
                    let allowed = requester
                        .llm_keys
                        .get("OPENAI_API_KEY")
                        .is_some_and(|prefix| url.get_ref().starts_with(prefix.as_str()));
                    if allowed {
                        "OPENAI_API_KEY".to_string()
                    } else {
                        String::new()
                    }
                }
                None => "OPENAI_API_KEY".to_string(),
                Some(v) if !requester.trusted => {
                    let name = v.get_ref();
                    match requester.llm_keys.get(name) {
                        Some(prefix) if url.get_ref().starts_with(prefix.as_str()) => name.clone(),
                        Some(prefix) => {
                            return Err(cx.err(
                                url.span(),
                                format!(
                                    "the key in `{name}` may only be sent to URLs under {prefix} \
                                     (kerneld.toml `llm_keys`); use that endpoint, or ask an \
                                     administrator"
                                ),
                            ))
                        }
                        None => {
                            return Err(cx.err(
                                v.span(),
                                format!(
                                    "`{name}` is not a key kerneld lets every user send: an admin \
                                     lists shared keys with the endpoint each may go to in \
                                     kerneld.toml `llm_keys`; for an endpoint that needs no key, \
                                     leave `api_key_env` out"
                                ),
                            ))
                        }
                    }
                }
                Some(v) => {
                    let name = v.get_ref();
                    if name.is_empty()
                        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(cx.err(
                            v.span(),
                            "`agent.api_key_env` must be an environment variable name \
                             (letters, digits and '_'), e.g. \"OPENAI_API_KEY\"",
                        ));
                    }
                    name.clone()
                }
            };
            settings.insert("url".into(), url.get_ref().clone().into());
            settings.insert("model".into(), model.into());
            settings.insert("api_key_env".into(), api_key_env.into());
            if let Some(t) = raw.temperature {
                if !TEMPERATURE.contains(t.get_ref()) {
                    return Err(cx.err(
                        t.span(),
                        format!(
                            "`agent.temperature` must be between {} and {}",
                            TEMPERATURE.start(),
                            TEMPERATURE.end()
                        ),
                    ));
                }
                settings.insert("temperature".into(), (*t.get_ref()).into());
            }
        }
        "command" => {
            let Some(cmd) = raw.command else {
                return Err(cx.err(
                    raw.kind.span(),
                    "agent kind `command` needs `command` (a list: program and arguments)",
                ));
            };
            if cmd.get_ref().is_empty() || cmd.get_ref()[0].trim().is_empty() {
                return Err(cx.err(cmd.span(), "`agent.command` must name a program"));
            }
            if !requester.may_run_commands {
                return Err(cx.err(
                    raw.kind.span(),
                    "agent kind `command` refused: kerneld does not run as root here, so the \
                     program would run as kerneld's own user, which only root, that user or \
                     kerneld's admin group may ask for; use kind = \"search\" or \"llm\", or \
                     have an administrator enqueue the goal",
                ));
            }
            settings.insert("command".into(), serde_json::json!(cmd.get_ref()));
        }
        _ => {}
    }
    if let Some(t) = raw.timeout {
        let secs = parse_duration(t.get_ref())
            .map_err(|m| cx.err(t.span(), format!("bad duration `{}`: {m}", t.get_ref())))?;
        settings.insert("timeout_s".into(), secs.into());
    }
    if let Some(c) = raw.context_bytes {
        if !CONTEXT_BYTES.contains(c.get_ref()) {
            return Err(cx.err(
                c.span(),
                format!(
                    "`agent.context_bytes` must be between {} (1 KiB) and {} (1 MiB)",
                    CONTEXT_BYTES.start(),
                    CONTEXT_BYTES.end()
                ),
            ));
        }
        settings.insert("context_bytes".into(), (*c.get_ref()).into());
    }
    Ok(AgentSpec {
        kind: kind.to_string(),
        settings: serde_json::Value::Object(settings),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_fixture() -> tempfile_dir::Dir {
        tempfile_dir::Dir::new()
    }

    /// A tiny self-cleaning temp dir holding a task, without a dev-dependency.
    mod tempfile_dir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "kerneld-goal-test-{}-{}",
                    std::process::id(),
                    rand::random::<u64>()
                ));
                std::fs::create_dir_all(p.join("demo/seeds")).unwrap();
                std::fs::write(
                    p.join("demo/task.toml"),
                    "name = \"demo\"\nentry = \"matmul\"\ndefault_shapes = [\"m64\"]\nseeds = [\"seeds/tiled.py\"]\n\
                     [baselines]\nreference = \"reference\"\n[shapes.m64]\nM = 64\n[shapes.m128]\nM = 128\n",
                )
                .unwrap();
                std::fs::write(p.join("demo/seeds/tiled.py"), "SPACE = {}\n").unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn parse_in(dir: &tempfile_dir::Dir, text: &str) -> Result<GoalSpec, GoalError> {
        let path = dir.0.join("goal.toml");
        parse(
            &path.display().to_string(),
            text,
            &dir.0,
            &Requester::trusted(local_seed_files(&path, text).unwrap()),
        )
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10h"), Ok(36_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn minimal_goal_takes_task_defaults() {
        let d = task_fixture();
        let g = parse_in(&d, "name = \"g\"\ntask = \"demo\"\n").unwrap();
        assert_eq!(g.shapes, vec!["m64"]);
        assert_eq!(g.baseline, "reference");
        assert_eq!(g.seeds.len(), 1);
        assert_eq!(g.agent.kind, "search");
        assert_eq!(g.resources.gpus, 1);
    }

    #[test]
    fn unknown_key_names_line() {
        let d = task_fixture();
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[budget]\nwal = \"1h\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("wal"), "{e}");
    }

    #[test]
    fn bad_duration_names_line_and_form() {
        let d = task_fixture();
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[budget]\nwall = \"10 hours\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("10h"), "{e}");
    }

    #[test]
    fn missing_task_is_explained() {
        let d = task_fixture();
        let e = parse_in(&d, "name = \"g\"\ntask = \"nope\"\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("task `nope` not found"), "{e}");
    }

    #[test]
    fn syntax_error_has_position() {
        let d = task_fixture();
        let e = parse_in(&d, "name = \"g\"\ntask = \n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn unknown_shape_and_baseline_list_choices() {
        let d = task_fixture();
        let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\nshapes = [\"m999\"]\n").unwrap_err();
        assert!(
            e.message.contains("m64") && e.message.contains("m128"),
            "{e}"
        );
        let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\nbaseline = \"cublas\"\n").unwrap_err();
        assert!(e.message.contains("reference"), "{e}");
    }

    #[test]
    fn agent_settings_are_checked_at_enqueue() {
        let d = task_fixture();
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"llm\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("needs `url`"), "{e}");
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"command\"\n",
        )
        .unwrap_err();
        assert!(e.message.contains("needs `command`"), "{e}");
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"magic\"\n",
        )
        .unwrap_err();
        assert!(e.message.contains("search, llm, command"), "{e}");
        let g = parse_in(&d, "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"llm\"\nurl = \"http://127.0.0.1:8000/v1\"\nmodel = \"m\"\n").unwrap();
        assert_eq!(g.agent.settings["api_key_env"], "OPENAI_API_KEY");
    }

    fn parse_as(
        dir: &tempfile_dir::Dir,
        text: &str,
        requester: &Requester,
    ) -> Result<GoalSpec, GoalError> {
        let path = dir.0.join("goal.toml");
        parse(&path.display().to_string(), text, &dir.0, requester)
    }

    fn untrusted(files: &[(&str, &str)]) -> Requester {
        Requester {
            trusted: false,
            may_run_commands: false,
            files: files
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            llm_keys: BTreeMap::new(),
        }
    }

    #[test]
    fn seeds_outside_the_task_come_only_from_the_client() {
        let d = task_fixture();
        // An absolute path is never read by the daemon, whoever asks.
        for who in [untrusted(&[]), Requester::trusted(Default::default())] {
            let e = parse_as(
                &d,
                "name = \"g\"\ntask = \"demo\"\nseed = \"/etc/hostname\"\n",
                &who,
            )
            .unwrap_err();
            assert_eq!(e.line, 3, "{e}");
            assert!(
                e.message.contains("not in the task's directory")
                    && e.message.contains("kernelctl sent no readable file"),
                "{e}"
            );
        }
        // Nor a relative path leaving the task directory.
        std::fs::write(d.0.join("outside.py"), "SPACE = {}\n").unwrap();
        let e = parse_as(
            &d,
            "name = \"g\"\ntask = \"demo\"\nseed = \"../outside.py\"\n",
            &untrusted(&[]),
        )
        .unwrap_err();
        assert!(e.message.contains("not found"), "{e}");
        // What the client sent is used, under the seed's file name.
        let g = parse_as(
            &d,
            "name = \"g\"\ntask = \"demo\"\nseed = [\"mine.py\", \"tiled.py\"]\n",
            &untrusted(&[("mine.py", "SPACE = {'A': [1]}\n")]),
        )
        .unwrap();
        assert_eq!(g.seeds[0].name, "mine.py");
        assert_eq!(g.seeds[0].source, "SPACE = {'A': [1]}\n");
        assert_eq!(g.seeds[1].name, "tiled.py");
    }

    #[test]
    fn client_reads_seeds_next_to_the_goal_file() {
        let d = task_fixture();
        std::fs::write(d.0.join("mine.py"), "SPACE = {}\n").unwrap();
        let text = "name = \"g\"\ntask = \"demo\"\nseed = [\"mine.py\", \"tiled.py\"]\n";
        assert_eq!(seed_refs(text), vec!["mine.py", "tiled.py"]);
        assert_eq!(seed_refs("seed = \"a.py\"\n"), vec!["a.py"]);
        assert!(seed_refs("name = \"g\"\n").is_empty());
        let files = local_seed_files(&d.0.join("goal.toml"), text).unwrap();
        assert_eq!(files.keys().collect::<Vec<_>>(), vec!["mine.py"]);
    }

    #[test]
    fn task_paths_only_from_trusted_requesters() {
        let d = task_fixture();
        let abs = format!("name = \"g\"\ntask = \"{}\"\n", d.0.join("demo").display());
        let e = parse_as(&d, &abs, &untrusted(&[])).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(
            e.message.contains("refused")
                && e.message.contains("kernels directory")
                && e.message.contains("installed task (demo)"),
            "{e}"
        );
        let e = parse_as(&d, "name = \"g\"\ntask = \"../x/demo\"\n", &untrusted(&[])).unwrap_err();
        assert!(e.message.contains("refused"), "{e}");
        assert!(parse_as(&d, &abs, &Requester::trusted(Default::default())).is_ok());
        // An installed task by name is fine for anyone.
        assert!(parse_as(&d, "name = \"g\"\ntask = \"demo\"\n", &untrusted(&[])).is_ok());
    }

    #[test]
    fn command_agent_needs_permission() {
        let d = task_fixture();
        let text =
            "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"command\"\ncommand = [\"true\"]\n";
        let e = parse_as(&d, text, &untrusted(&[])).unwrap_err();
        assert!(e.message.contains("agent kind `command` refused"), "{e}");
        let root_daemon = Requester {
            may_run_commands: true,
            ..untrusted(&[])
        };
        assert!(parse_as(&d, text, &root_daemon).is_ok());
    }

    #[test]
    fn untrusted_llm_goals_send_only_keys_the_admin_shares_and_only_where_pinned() {
        let d = task_fixture();
        let goal = |url: &str, key: &str| {
            format!(
                "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"llm\"\nurl = \"{url}\"\n\
                 model = \"m\"\n{key}"
            )
        };
        let key_of = |spec: GoalSpec| {
            spec.agent.settings["api_key_env"]
                .as_str()
                .unwrap()
                .to_string()
        };
        let mut who = untrusted(&[]);
        // No sharing configured: a named key is refused, an unnamed one becomes no key.
        let e = parse_as(
            &d,
            &goal("https://evil.example/v1", "api_key_env = \"AWS_SECRET\""),
            &who,
        )
        .unwrap_err();
        assert!(e.message.contains("llm_keys"), "{e}");
        let spec = parse_as(&d, &goal("https://evil.example/v1", ""), &who).unwrap();
        assert_eq!(key_of(spec), "");
        // Shared and pinned: only to its endpoint.
        who.llm_keys
            .insert("OPENAI_API_KEY".into(), "https://api.openai.com/".into());
        let spec = parse_as(&d, &goal("https://api.openai.com/v1", ""), &who).unwrap();
        assert_eq!(key_of(spec), "OPENAI_API_KEY");
        let e = parse_as(
            &d,
            &goal(
                "https://evil.example/v1",
                "api_key_env = \"OPENAI_API_KEY\"",
            ),
            &who,
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("may only be sent to URLs under https://api.openai.com/"),
            "{e}"
        );
        // Trusted requesters name any key.
        let spec = parse_in(
            &d,
            &goal("https://evil.example/v1", "api_key_env = \"AWS_SECRET\""),
        )
        .unwrap();
        assert_eq!(key_of(spec), "AWS_SECRET");
    }

    #[test]
    fn names_that_look_like_ids_are_refused() {
        let d = task_fixture();
        for name in ["g1", "g0042", ".", ".."] {
            let e = parse_in(&d, &format!("name = \"{name}\"\ntask = \"demo\"\n")).unwrap_err();
            assert_eq!(e.line, 1, "{e}");
            assert!(e.message.contains("cannot be"), "{e}");
        }
        assert!(e_ok(&d, "g"));
        assert!(e_ok(&d, "g1x"));
        assert!(e_ok(&d, "goal1"));
    }

    fn e_ok(d: &tempfile_dir::Dir, name: &str) -> bool {
        parse_in(d, &format!("name = \"{name}\"\ntask = \"demo\"\n")).is_ok()
    }

    #[test]
    fn agent_keys_and_values_are_checked() {
        let d = task_fixture();
        let agent = |body: &str| {
            parse_in(
                &d,
                &format!("name = \"g\"\ntask = \"demo\"\n[agent]\n{body}\n"),
            )
        };
        let e = agent("kind = \"search\"\nurl = \"http://x\"\ncommand = [\"a\"]").unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        assert!(
            e.message
                .contains("`agent.url` does not apply to agent kind `search`")
                && e.message.contains("kind, context_bytes"),
            "{e}"
        );
        let e = agent("kind = \"command\"\ncommand = [\"a\"]\nmodel = \"m\"").unwrap_err();
        assert!(e.message.contains("`agent.model` does not apply"), "{e}");
        let llm = "kind = \"llm\"\nmodel = \"m\"\n";
        for bad in [
            "not a url",
            "ftp://h/v1",
            "http://",
            "http://h:99999/v1",
            "http://u:p@h/",
        ] {
            let e = agent(&format!("{llm}url = \"{bad}\"")).unwrap_err();
            assert_eq!(e.line, 6, "{bad}: {e}");
            assert!(e.message.contains("not a usable URL"), "{bad}: {e}");
        }
        for good in [
            "http://127.0.0.1:8000/v1",
            "https://api.example.com/v1/chat/completions",
            "http://[::1]:8080",
        ] {
            agent(&format!("{llm}url = \"{good}\"")).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let e = agent("kind = \"llm\"\nurl = \"http://h/v1\"").unwrap_err();
        assert!(e.message.contains("needs `model`"), "{e}");
        let e = agent(&format!("{llm}url = \"http://h\"\ntemperature = -5.0")).unwrap_err();
        assert!(e.message.contains("between 0 and 2"), "{e}");
        let e = agent("kind = \"search\"\ncontext_bytes = 999999999999").unwrap_err();
        assert!(
            e.message
                .contains("between 1024 (1 KiB) and 1048576 (1 MiB)"),
            "{e}"
        );
        assert!(agent("kind = \"search\"\ncontext_bytes = 16384").is_ok());
    }

    #[test]
    fn duplicate_shapes_are_refused() {
        let d = task_fixture();
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\nshapes = [\"m64\", \"m64\"]\n",
        )
        .unwrap_err();
        assert!(e.message.contains("`m64` is listed twice"), "{e}");
    }

    #[test]
    fn type_errors_are_in_plain_words() {
        let d = task_fixture();
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[budget]\niterations = \"1000\"\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.column), (4, 14), "{e}");
        assert_eq!(
            e.message,
            "`budget.iterations` must be an integer, not a string: write iterations = 1000"
        );
        let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\nseed = 5\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(
            e.message
                .starts_with("`seed` must be a file name or a list of file names"),
            "{e}"
        );
        let e = parse_in(&d, "name = 7\ntask = \"demo\"\n").unwrap_err();
        assert!(
            e.message.contains(
                "`name` must be a string (in quotes), not an integer: write name = \"7\""
            ),
            "{e}"
        );
        let e = parse_in(
            &d,
            "name = \"g\"\ntask = \"demo\"\n[budget]\nwall = \"99999999999999999999h\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.message.contains("duration too long"), "{e}");
        assert!(parse_duration("3651d").unwrap_err().contains("too long"));
        assert_eq!(parse_duration("3650d"), Ok(MAX_DURATION_S));
    }
}
