//! The `[agent]` table: which agent, and its settings checked for this requester (which
//! keys each kind takes, an endpoint's URL, whose API key may go where).

use toml::Spanned;

use super::errors::{Ctx, GoalError};
use super::schema::RawAgent;
use super::{parse_duration, Requester, CONTEXT_BYTES, TEMPERATURE};
use crate::wire::{
    AgentKind, AgentSpec, CommandSettings, HybridSettings, LlmSettings, SearchSettings,
};

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
/// Tuning evaluations between two proposals of a hybrid, unless the goal says.
const TUNE_EVALUATIONS: u64 = 8;
/// The most tuning evaluations a hybrid may ask for between two proposals.
const TUNE_MAX: i64 = 10_000;

/// Checks an llm endpoint (parsed by the `url` crate): http or https, a host, a port
/// other than 0, and no user or password in it.
fn check_http_url(text: &str) -> Result<(), String> {
    if text.chars().any(char::is_whitespace) {
        return Err("it must not contain spaces".into());
    }
    let url = url::Url::parse(text).map_err(|e| match e {
        url::ParseError::InvalidPort => "its port is not a number from 1 to 65535".to_string(),
        url::ParseError::EmptyHost => "it needs a host name or address after the scheme".into(),
        e => e.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("it must start with http:// or https://".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "it must not hold a user or password: kerneld sends the key from the \
             environment variable named by `api_key_env`"
                .into(),
        );
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("it needs a host name or address after the scheme".into());
    }
    if url.port() == Some(0) {
        return Err("`0` is not a port number (1-65535)".into());
    }
    Ok(())
}

pub(super) fn parse_agent(
    cx: &Ctx<'_>,
    raw: Option<RawAgent>,
    requester: &Requester,
) -> Result<AgentSpec, GoalError> {
    let Some(raw) = raw else {
        return Ok(AgentSpec::default());
    };
    let Some(kind) = AgentKind::parse(raw.kind.get_ref()) else {
        let kinds: Vec<&str> = AgentKind::ALL.iter().map(|k| k.as_str()).collect();
        return Err(cx.err(
            raw.kind.span(),
            format!(
                "unknown agent kind `{}`; expected one of: {}",
                raw.kind.get_ref(),
                kinds.join(", ")
            ),
        ));
    };
    if kind == AgentKind::Hybrid {
        return parse_hybrid(cx, raw, requester);
    }
    parse_kind(cx, raw, kind, requester)
}

/// `kind = "hybrid"`: `proposer` names the agent that writes kernels (its keys sit beside
/// it in `[agent]`), `tune_evaluations` how long the search tunes each one.
fn parse_hybrid(
    cx: &Ctx<'_>,
    mut raw: RawAgent,
    requester: &Requester,
) -> Result<AgentSpec, GoalError> {
    let Some(p) = raw.proposer.take() else {
        return Err(cx.err(
            raw.kind.span(),
            "agent kind `hybrid` needs `proposer` (\"llm\" or \"command\"), with that agent's \
             keys beside it in [agent]",
        ));
    };
    let kind = match AgentKind::parse(p.get_ref()) {
        Some(k @ (AgentKind::Llm | AgentKind::Command)) => k,
        _ => {
            return Err(cx.err(
                p.span(),
                format!(
                    "`agent.proposer` = \"{}\": the proposer must be \"llm\" or \"command\" \
                     (the search agent does the tuning)",
                    p.get_ref()
                ),
            ))
        }
    };
    let tune_evaluations = match raw.tune_evaluations.take() {
        Some(t) if (1..=TUNE_MAX).contains(t.get_ref()) => *t.get_ref() as u64,
        Some(t) => {
            return Err(cx.err(
                t.span(),
                format!("`agent.tune_evaluations` must be between 1 and {TUNE_MAX}"),
            ))
        }
        None => TUNE_EVALUATIONS,
    };
    let proposer = parse_kind(cx, raw, kind, requester)?;
    Ok(AgentSpec::Hybrid(HybridSettings {
        proposer: Box::new(proposer),
        tune_evaluations,
    }))
}

/// One kind's settings (a hybrid's proposer too).
fn parse_kind(
    cx: &Ctx<'_>,
    raw: RawAgent,
    kind: AgentKind,
    requester: &Requester,
) -> Result<AgentSpec, GoalError> {
    let allowed = match kind {
        AgentKind::Llm => LLM_KEYS,
        AgentKind::Command => COMMAND_KEYS,
        AgentKind::Search => SEARCH_KEYS,
        AgentKind::Hybrid => &["kind", "proposer", "tune_evaluations"],
    };
    let kind_span = raw.kind.span();
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
        ("proposer", raw.proposer.as_ref().map(Spanned::span)),
        (
            "tune_evaluations",
            raw.tune_evaluations.as_ref().map(Spanned::span),
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
    // Shared by every kind: checked first, so each kind's settings are built whole.
    let timeout_s = match raw.timeout {
        Some(t) => Some(
            parse_duration(t.get_ref())
                .map_err(|m| cx.err(t.span(), format!("bad duration `{}`: {m}", t.get_ref())))?,
        ),
        None => None,
    };
    let context_bytes = match raw.context_bytes {
        Some(c) if !CONTEXT_BYTES.contains(c.get_ref()) => {
            return Err(cx.err(
                c.span(),
                format!(
                    "`agent.context_bytes` must be between {} (1 KiB) and {} (1 MiB)",
                    CONTEXT_BYTES.start(),
                    CONTEXT_BYTES.end()
                ),
            ))
        }
        Some(c) => Some(*c.get_ref() as u64),
        None => None,
    };
    Ok(match kind {
        AgentKind::Llm => {
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
            let temperature = match raw.temperature {
                Some(t) if !TEMPERATURE.contains(t.get_ref()) => {
                    return Err(cx.err(
                        t.span(),
                        format!(
                            "`agent.temperature` must be between {} and {}",
                            TEMPERATURE.start(),
                            TEMPERATURE.end()
                        ),
                    ));
                }
                Some(t) => Some(*t.get_ref()),
                None => None,
            };
            AgentSpec::Llm(LlmSettings {
                url: url.get_ref().clone(),
                model,
                api_key_env,
                temperature,
                timeout_s,
                context_bytes,
            })
        }
        AgentKind::Command => {
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
            AgentSpec::Command(CommandSettings {
                command: cmd.into_inner(),
                timeout_s,
                context_bytes,
            })
        }
        AgentKind::Search => AgentSpec::Search(SearchSettings { context_bytes }),
        AgentKind::Hybrid => {
            return Err(cx.err(kind_span, "a hybrid's proposer must be `llm` or `command`"))
        }
    })
}
