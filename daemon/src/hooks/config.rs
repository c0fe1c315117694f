//! `[[hooks]]` in kerneld.toml: what an administrator may have kerneld run, on which
//! events, for whose goals. Read with the rest of the file (unknown keys refused by serde
//! with its position); every value is checked here, and a bad one is an error that names
//! the file, the line and what to write instead.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

/// The default time limit of one run of a hook.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest time limit a hook may have: a hook holds one of the few run slots while it
/// runs, so an hour-long one would starve the others.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// At most this many hooks: each event is matched against every one.
const MAX_HOOKS: usize = 64;

/// The events a hook can run on (`on = [...]`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "snake_case")]
pub enum HookOn {
    /// A goal left `queued` for `running` for the first time.
    GoalStarted,
    /// A goal completed: its target met, a budget spent, a plateau, its space exhausted.
    GoalFinished,
    /// A goal failed (every seed rejected, its agent broken).
    GoalFailed,
    GoalCancelled,
    /// A goal has a new best (beyond noise, after its re-time).
    NewBest,
    /// The circuit breaker paused a goal (its evaluations failed for a reason not the
    /// candidates', 3 in a row).
    BreakerTripped,
    /// A device was drained (a new hardware fault, a foreign process, throttling, ...).
    GpuUnhealthy,
    /// A drained device is healthy again.
    GpuHealthy,
    /// kerneld started after it had stopped without recording its stop (a crash, a kill,
    /// a power cut); a clean stop and start is not one.
    DaemonRestarted,
}

impl HookOn {
    pub const ALL: [HookOn; 9] = [
        HookOn::GoalStarted,
        HookOn::GoalFinished,
        HookOn::GoalFailed,
        HookOn::GoalCancelled,
        HookOn::NewBest,
        HookOn::BreakerTripped,
        HookOn::GpuUnhealthy,
        HookOn::GpuHealthy,
        HookOn::DaemonRestarted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookOn::GoalStarted => "goal_started",
            HookOn::GoalFinished => "goal_finished",
            HookOn::GoalFailed => "goal_failed",
            HookOn::GoalCancelled => "goal_cancelled",
            HookOn::NewBest => "new_best",
            HookOn::BreakerTripped => "breaker_tripped",
            HookOn::GpuUnhealthy => "gpu_unhealthy",
            HookOn::GpuHealthy => "gpu_healthy",
            HookOn::DaemonRestarted => "daemon_restarted",
        }
    }

    /// Whether the event is one goal's (the others are the daemon's or a device's).
    pub fn is_goal_event(self) -> bool {
        !matches!(
            self,
            HookOn::GpuUnhealthy | HookOn::GpuHealthy | HookOn::DaemonRestarted
        )
    }
}

impl std::fmt::Display for HookOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whose goals a hook runs for (goal events only; device and daemon events always pass).
#[derive(Debug, Clone, PartialEq)]
pub enum Owner {
    Uid(u32),
    /// A user name, looked up when a goal's event is matched (the account may be created
    /// after kerneld starts).
    Name(String),
}

/// One `[[hooks]]` entry, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct HookConfig {
    /// Names it in the log and the metrics, and for a goal's `notify`.
    pub name: String,
    pub on: Vec<HookOn>,
    /// The program (absolute, or a bare name looked up on PATH) and its arguments.
    pub command: Vec<String>,
    pub timeout: Duration,
    /// Only goals whose name matches one of these (`*` and `?` wildcards); empty: all.
    pub goals: Vec<glob::Pattern>,
    /// Only goals of these owners; empty: all.
    pub owners: Vec<Owner>,
    /// Runs only for goals whose goal file names it in `notify`.
    pub per_goal: bool,
    /// Variables set for it besides PATH and the event's KERNELD_* (e.g. MAILTO).
    pub env: BTreeMap<String, String>,
}

/// `[[hooks]]` as serde reads it: every value with its position.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    name: Spanned<String>,
    on: Spanned<Vec<Spanned<HookOn>>>,
    command: Spanned<Vec<String>>,
    timeout: Option<Spanned<String>>,
    goals: Option<Spanned<Vec<String>>>,
    owners: Option<Spanned<Vec<String>>>,
    per_goal: Option<bool>,
    env: Option<Spanned<BTreeMap<String, String>>>,
}

/// A hook's or a goal's hook name: what `notify` may list.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

/// Variables kerneld sets itself: a hook's `env` may not replace them.
fn reserved(var: &str) -> bool {
    var == "PATH" || var.starts_with("KERNELD_")
}

/// Checks the raw entries of `file` (its text for positions). Errors read
/// `FILE:LINE:COLUMN: [[hooks]] NAME: what is wrong; what to write`.
pub fn from_raw(file: &str, text: &str, raw: Vec<RawHook>) -> Result<Vec<HookConfig>, String> {
    let at = |span: std::ops::Range<usize>, name: &str, msg: String| {
        let (line, col) = line_col(text, span.start);
        let who = if name.is_empty() {
            "[[hooks]]".to_string()
        } else {
            format!("[[hooks]] `{name}`")
        };
        format!("{file}:{line}:{col}: {who}: {msg}")
    };
    if raw.len() > MAX_HOOKS {
        return Err(format!(
            "{file}: {} [[hooks]] entries; at most {MAX_HOOKS}",
            raw.len()
        ));
    }
    let mut hooks: Vec<HookConfig> = Vec::new();
    for r in raw {
        let name = r.name.get_ref().clone();
        if !valid_name(&name) {
            return Err(at(
                r.name.span(),
                "",
                format!(
                    "`name` = \"{}\": use letters, digits, '-' and '_' (at most 64), e.g. \"mail\"",
                    kerneld_protocol::wire::quote(&name)
                ),
            ));
        }
        if hooks.iter().any(|h| h.name == name) {
            return Err(at(
                r.name.span(),
                &name,
                "a second hook of this name; give each [[hooks]] entry its own `name`".into(),
            ));
        }
        let on: Vec<HookOn> = r.on.get_ref().iter().map(|o| *o.get_ref()).collect();
        if on.is_empty() {
            return Err(at(
                r.on.span(),
                &name,
                format!("`on` is empty; list events, e.g. on = [\"goal_finished\", \"goal_failed\"] (all: {})", all_names()),
            ));
        }
        let per_goal = r.per_goal.unwrap_or(false);
        if per_goal {
            if let Some(o) = r.on.get_ref().iter().find(|o| !o.get_ref().is_goal_event()) {
                return Err(at(
                    o.span(),
                    &name,
                    format!(
                        "`{}` is not a goal's event, and a per_goal hook runs only for the goals \
                         that name it in `notify`; give it a hook of its own without per_goal",
                        o.get_ref()
                    ),
                ));
            }
        }
        let command = r.command.get_ref().clone();
        match command.first() {
            None => {
                return Err(at(
                    r.command.span(),
                    &name,
                    "`command` is empty; write the program and its arguments, e.g. \
                     command = [\"/usr/local/lib/kerneld/mail.sh\", \"ops@example.org\"]"
                        .into(),
                ))
            }
            Some(p) if p.is_empty() || (p.contains('/') && !p.starts_with('/')) => {
                return Err(at(
                    r.command.span(),
                    &name,
                    format!(
                        "the program `{p}` is a relative path; write it absolute (hooks run in \
                         `/`), or a bare name to look up on PATH"
                    ),
                ))
            }
            Some(_) => {}
        }
        let timeout = match &r.timeout {
            None => DEFAULT_TIMEOUT,
            Some(t) => {
                let secs = crate::goal::parse_duration(t.get_ref()).map_err(|m| {
                    at(
                        t.span(),
                        &name,
                        format!("`timeout` = \"{}\": {m}; write e.g. \"30s\"", t.get_ref()),
                    )
                })?;
                let d = Duration::from_secs(secs);
                if d > MAX_TIMEOUT {
                    return Err(at(
                        t.span(),
                        &name,
                        format!(
                            "`timeout` = \"{}\" is longer than the 1h a hook may run",
                            t.get_ref()
                        ),
                    ));
                }
                d
            }
        };
        let (goals, owners, env) = filters_and_env(&r, &name, &at)?;
        hooks.push(HookConfig {
            name,
            on,
            command,
            timeout,
            goals,
            owners,
            per_goal,
            env,
        });
    }
    Ok(hooks)
}

/// A hook's `goals`, `owners` and `env`, checked.
type Filters = (Vec<glob::Pattern>, Vec<Owner>, BTreeMap<String, String>);

fn filters_and_env(
    r: &RawHook,
    name: &str,
    at: &dyn Fn(std::ops::Range<usize>, &str, String) -> String,
) -> Result<Filters, String> {
    let mut goals = Vec::new();
    if let Some(g) = &r.goals {
        for p in g.get_ref() {
            goals.push(glob::Pattern::new(p).map_err(|e| {
                at(
                    g.span(),
                    name,
                    format!("`goals`: `{p}` is not a pattern: {e}"),
                )
            })?);
        }
    }
    let mut owners = Vec::new();
    if let Some(o) = &r.owners {
        for who in o.get_ref() {
            owners.push(match who.parse::<u32>() {
                Ok(uid) => Owner::Uid(uid),
                Err(_) if !who.is_empty() && !who.contains(char::is_whitespace) => {
                    Owner::Name(who.clone())
                }
                Err(_) => {
                    return Err(at(
                        o.span(),
                        name,
                        format!("`owners`: `{who}` is neither a user name nor a uid"),
                    ))
                }
            });
        }
    }
    let env = r
        .env
        .as_ref()
        .map(|e| e.get_ref().clone())
        .unwrap_or_default();
    if let Some(var) = env
        .keys()
        .find(|k| reserved(k) || k.is_empty() || k.contains('=') || k.contains('\0'))
    {
        let e = r.env.as_ref().map(Spanned::span).unwrap_or(0..0);
        return Err(at(
            e,
            name,
            format!(
                "`env` cannot set `{var}`: PATH and KERNELD_* are kerneld's, and a name \
                 has no '='"
            ),
        ));
    }
    if let Some((var, _)) = env.iter().find(|(_, v)| v.contains('\0')) {
        let e = r.env.as_ref().map(Spanned::span).unwrap_or(0..0);
        return Err(at(e, name, format!("`env`: `{var}` holds a NUL byte")));
    }
    Ok((goals, owners, env))
}

fn all_names() -> String {
    HookOn::ALL.map(HookOn::as_str).join(", ")
}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        hooks: Vec<RawHook>,
    }

    fn parse(text: &str) -> Result<Vec<HookConfig>, String> {
        let doc: Doc = toml::from_str(text).map_err(|e| e.message().to_string())?;
        from_raw("k.toml", text, doc.hooks)
    }

    #[test]
    fn a_full_entry_reads_with_its_defaults() {
        let h = parse(
            "[[hooks]]\nname = \"mail\"\non = [\"goal_finished\", \"new_best\"]\n\
             command = [\"/usr/local/lib/kerneld/mail.sh\", \"ops@lab\"]\n\
             goals = [\"mla-*\"]\nowners = [\"alice\", \"1001\"]\nper_goal = true\n\
             env = { MAILTO = \"ops@lab\" }\n",
        )
        .unwrap();
        assert_eq!(h[0].on, vec![HookOn::GoalFinished, HookOn::NewBest]);
        assert_eq!(h[0].timeout, DEFAULT_TIMEOUT);
        assert!(h[0].goals[0].matches("mla-decode") && !h[0].goals[0].matches("kda"));
        assert_eq!(
            h[0].owners,
            vec![Owner::Name("alice".into()), Owner::Uid(1001)]
        );
        assert!(h[0].per_goal);
        assert_eq!(h[0].env["MAILTO"], "ops@lab");
    }

    #[test]
    fn bad_entries_are_refused_with_their_position_and_what_to_write() {
        let base = |extra: &str| {
            format!("[[hooks]]\nname = \"h\"\non = [\"goal_failed\"]\ncommand = [\"/bin/true\"]\n{extra}")
        };
        let cases = [
            (
                base("timeout = \"2 h\""),
                "k.toml:5:11: [[hooks]] `h`: `timeout` = \"2 h\": write it without spaces",
            ),
            (base("timeout = \"2h\""), "longer than the 1h"),
            (base("env = { PATH = \"/x\" }"), "`env` cannot set `PATH`"),
            (
                base("env = { KERNELD_GOAL = \"x\" }"),
                "cannot set `KERNELD_GOAL`",
            ),
            (base("owners = [\"a b\"]"), "neither a user name nor a uid"),
            (base("goals = [\"[x\"]"), "is not a pattern"),
            (
                base("on = [\"gpu_unhealthy\"]\nper_goal = true")
                    .replace("on = [\"goal_failed\"]\n", ""),
                "k.toml:4:7: [[hooks]] `h`: `gpu_unhealthy` is not a goal's event",
            ),
            (
                "[[hooks]]\nname = \"a b\"\non = [\"new_best\"]\ncommand = [\"x\"]\n".into(),
                "k.toml:2:8: [[hooks]]: `name` = \"a b\"",
            ),
            (
                "[[hooks]]\nname = \"h\"\non = []\ncommand = [\"x\"]\n".into(),
                "k.toml:3:6: [[hooks]] `h`: `on` is empty",
            ),
            (
                "[[hooks]]\nname = \"h\"\non = [\"new_best\"]\ncommand = []\n".into(),
                "`command` is empty",
            ),
            (
                "[[hooks]]\nname = \"h\"\non = [\"new_best\"]\ncommand = [\"bin/mail\"]\n".into(),
                "`bin/mail` is a relative path",
            ),
            (
                format!(
                    "{}{}",
                    base(""),
                    base("").replace("goal_failed", "new_best")
                ),
                "k.toml:6:8: [[hooks]] `h`: a second hook of this name",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{text}\n→ {e}\nwanted: {want}");
        }
        // serde's own refusals: an unknown event (with the list), an unknown key.
        let e = parse("[[hooks]]\nname = \"h\"\non = [\"goal_done\"]\ncommand = [\"x\"]\n")
            .unwrap_err();
        assert!(
            e.contains("unknown variant `goal_done`") && e.contains("goal_finished"),
            "{e}"
        );
        let e = parse(&base("retries = 3")).unwrap_err();
        assert!(e.contains("unknown field `retries`"), "{e}");
    }
}
