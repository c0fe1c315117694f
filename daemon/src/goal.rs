//! Goal files (SPEC section 4): parsed with `toml` + serde, unknown keys and bad values
//! rejected with `file:line:column: message`, then checked against the task they name.
//!
//! Parsing is a pure function of the file's text, its path and the kernels directory,
//! so a rejected goal changes nothing: nothing is written before `parse` succeeds.

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::task::Task;
use crate::wire::{AgentSpec, Budget, GoalSpec, Resources, SeedSource, StopRules};

/// The objectives a goal may name.
pub const OBJECTIVES: &[&str] = &["geomean_speedup"];
/// The agents a goal file may name (SPEC section 7) ...
pub const AGENTS: &[&str] = &["search", "llm", "command"];
/// ... and those this build can run (`agent::for_goal`); a goal naming another is refused
/// at enqueue rather than failing later.
pub const AVAILABLE_AGENTS: &[&str] = &["search", "llm", "command"];

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
    url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    temperature: Option<f64>,
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
        let n: u64 = digits
            .parse()
            .map_err(|_| "a number must come before each unit".to_string())?;
        total = total.saturating_add(n.saturating_mul(unit));
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

/// Parses and validates a goal file. `path` is used in messages and to resolve a
/// relative task or seed path; `kernels_dir` is where task names are looked up.
pub fn parse(path: &str, text: &str, kernels_dir: &Path) -> Result<GoalSpec, GoalError> {
    let cx = Ctx { file: path, text };
    let raw: RawGoal = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim().to_string();
        cx.err(
            span,
            format!("{message} (see SPEC section 4 for the goal file format)"),
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

    let goal_dir = Path::new(path).parent().unwrap_or(Path::new("."));
    let task = Task::resolve(raw.task.get_ref(), goal_dir, kernels_dir)
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
            for shape in s.get_ref() {
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
        let found = [
            task.dir.join(seed),
            task.dir.join("seeds").join(seed),
            goal_dir.join(seed),
        ]
        .into_iter()
        .find(|p| p.is_file());
        let Some(file) = found else {
            return Err(cx.err(
                seed_span.clone(),
                format!("seed `{seed}` not found in {} (or its seeds/ folder) nor next to the goal file", task.dir.display()),
            ));
        };
        let source = std::fs::read_to_string(&file).map_err(|e| {
            cx.err(
                seed_span.clone(),
                format!("cannot read seed {}: {e}", file.display()),
            )
        })?;
        let name = file
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
        if *i.get_ref() < 1 {
            return Err(cx.err(i.span(), "`budget.iterations` must be at least 1"));
        }
        budget.iterations = Some(*i.get_ref() as u64);
    }
    if let Some(g) = &raw.budget.gpu_hours {
        if !(g.get_ref().is_finite() && *g.get_ref() > 0.0) {
            return Err(cx.err(g.span(), "`budget.gpu_hours` must be a positive number"));
        }
        budget.gpu_hours = Some(*g.get_ref());
    }

    let mut stop = StopRules::default();
    if let Some(t) = &raw.stop.target_speedup {
        if !(t.get_ref().is_finite() && *t.get_ref() > 0.0) {
            return Err(cx.err(
                t.span(),
                "`stop.target_speedup` must be a positive number (e.g. 40.0)",
            ));
        }
        stop.target_speedup = Some(*t.get_ref());
    }
    if let Some(p) = &raw.stop.plateau {
        if *p.get_ref() < 1 {
            return Err(cx.err(p.span(), "`stop.plateau` must be at least 1 iteration"));
        }
        stop.plateau = Some(*p.get_ref() as u64);
    }

    let agent = parse_agent(&cx, raw.agent)?;

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

fn parse_agent(cx: &Ctx<'_>, raw: Option<RawAgent>) -> Result<AgentSpec, GoalError> {
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
    let mut settings = serde_json::Map::new();
    match kind {
        "llm" => {
            let Some(url) = raw.url else {
                return Err(cx.err(
                    raw.kind.span(),
                    "agent kind `llm` needs `url` (an OpenAI-compatible endpoint)",
                ));
            };
            settings.insert("url".into(), url.into());
            settings.insert("model".into(), raw.model.unwrap_or_default().into());
            settings.insert(
                "api_key_env".into(),
                raw.api_key_env
                    .unwrap_or_else(|| "OPENAI_API_KEY".into())
                    .into(),
            );
            if let Some(t) = raw.temperature {
                settings.insert("temperature".into(), t.into());
            }
        }
        "command" => {
            let Some(cmd) = raw.command else {
                return Err(cx.err(
                    raw.kind.span(),
                    "agent kind `command` needs `command` (a list: program and arguments)",
                ));
            };
            if cmd.get_ref().is_empty() {
                return Err(cx.err(cmd.span(), "`agent.command` must name a program"));
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
        if *c.get_ref() < 1024 {
            return Err(cx.err(c.span(), "`agent.context_bytes` must be at least 1024"));
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
        parse(&path.display().to_string(), text, &dir.0)
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
}
