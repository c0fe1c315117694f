//! The `llm` agent: an OpenAI-compatible chat-completions endpoint (hosted APIs, or a
//! local vLLM / llama.cpp / Ollama server) writes the next candidate.
//!
//! Every request restates the goal (system prompt: `agent::brief`), then gives the
//! compacted memory (the last evaluation included) and the best candidate so far, all
//! within the goal's budget (`messages`; `kernelctl context` shows them). The reply must
//! hold the whole module in one ```python block; a ```json block, if any, is the
//! configuration to evaluate. The API key is read from the environment variable the goal
//! names (never stored in the log).

use std::time::Duration;

use anyhow::bail;
use serde_json::{json, Value};

use super::retry::{self, EndpointError};
use super::{Agent, AgentEnv, Proposal};
use crate::context;
use crate::projection::GoalProjection;
use crate::wire::{ChatMessage, EvaluationRecord, LlmSettings};

/// Default limit of one request (generation of a long module takes a while).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Longest reply read.
const MAX_REPLY: u64 = 4 << 20;

pub struct LlmAgent {
    endpoint: String,
    model: String,
    api_key_env: String,
    temperature: Option<f64>,
    timeout: Duration,
    env: AgentEnv,
}

impl LlmAgent {
    pub fn new(settings: &LlmSettings, env: AgentEnv) -> anyhow::Result<LlmAgent> {
        let url = settings.url.trim_end_matches('/');
        if url.is_empty() {
            bail!("agent `llm` has no url");
        }
        // Accept the API base (".../v1") or the full endpoint.
        let endpoint = if url.ends_with("/chat/completions") {
            url.to_string()
        } else {
            format!("{url}/chat/completions")
        };
        Ok(LlmAgent {
            endpoint,
            model: settings.model.clone(),
            api_key_env: settings.api_key_env.clone(),
            temperature: settings.temperature,
            timeout: settings
                .timeout_s
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            env,
        })
    }
}

/// Asked at the end of every request.
const INSTRUCTION: &str = "Propose a faster correct candidate, different from everything tried.";

/// The messages of the next request: the goal and the contract (system), then the memory,
/// the best candidate so far (else the first seed) and the instruction (user). This is
/// what the agent sends and what `kernelctl context` shows.
///
/// The whole prompt (both messages) stays within the goal's budget (`context::budget`):
/// the system prompt is sent whole; of what is left, the source takes what it needs
/// but a quarter kept for the memory, clipped by `context::clip_source` beyond that;
/// the memory takes the rest.
pub fn messages(
    goal: &GoalProjection,
    history: &[EvaluationRecord],
    best_source: Option<&str>,
) -> Vec<ChatMessage> {
    let system = format!(
        "You are a GPU kernel engineer writing Triton for NVIDIA Hopper.\n{}\n\
         Reply with the complete module in ONE ```python code block. Optionally add ONE ```json \
         block with the configuration to evaluate (keys and values from your SPACE).",
        super::brief(goal)
    );
    let (title, source) = match (best_source, goal.spec.seeds.first()) {
        (Some(best), _) => ("## The best candidate so far".to_string(), best),
        (None, Some(seed)) => (format!("## The seed `{}`", seed.name), seed.source.as_str()),
        (None, None) => (String::new(), ""),
    };
    let source_section = |code: &str| {
        if title.is_empty() {
            String::new()
        } else {
            let newline = if code.ends_with('\n') { "" } else { "\n" };
            format!("{title}\n```python\n{code}{newline}```\n")
        }
    };
    let budget = context::budget(&goal.spec);
    // The bytes of the prompt besides the memory, given the source section's size.
    let around = |section: usize| system.len() + section + 1 + INSTRUCTION.len();
    let room = budget.saturating_sub(around(source_section("").len()));
    let wanted_memory = context::memory(history, &goal.confirmations, room).len();
    let code = context::clip_source(source, room - wanted_memory.min(room / 4));
    let code_section = source_section(&code);
    let memory_room = budget.saturating_sub(around(code_section.len()));
    let mut user = context::memory(history, &goal.confirmations, memory_room);
    user.push_str(&code_section);
    user.push('\n');
    user.push_str(INSTRUCTION);
    vec![
        ChatMessage {
            role: "system".into(),
            content: system,
        },
        ChatMessage {
            role: "user".into(),
            content: user,
        },
    ]
}

/// The first fenced block of the given language (```python / ```json), if any.
fn fenced<'a>(text: &'a str, lang: &str) -> Option<&'a str> {
    let open = format!("```{lang}");
    let start = text.find(&open)? + open.len();
    let body = &text[start..];
    let body = body
        .strip_prefix('\n')
        .or_else(|| body.find('\n').map(|i| &body[i + 1..]))?;
    let end = body.find("```")?;
    Some(&body[..end])
}

impl Agent for LlmAgent {
    fn slow(&self) -> bool {
        true
    }

    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        _iteration: u64,
    ) -> anyhow::Result<Option<Proposal>> {
        let messages = messages(goal, history, self.env.best_source.as_deref());
        let mut body = json!({"model": self.model, "messages": messages});
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        let agent = ureq::AgentBuilder::new().timeout(self.timeout).build();
        let mut req = agent
            .post(&self.endpoint)
            .set("Content-Type", "application/json");
        // An empty name: no key (an untrusted goal without one the admin shares).
        if let Some(key) = (!self.api_key_env.is_empty())
            .then(|| std::env::var(&self.api_key_env).ok())
            .flatten()
        {
            req = req.set("Authorization", &format!("Bearer {key}"));
        }
        let (content, tokens) = self.ask(req, body)?;
        let Some(source) = fenced(&content, "python")
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            return Err(EndpointError::permanent(format!(
                "the model's reply holds no ```python block (it began: {}): model `{}` does \
                 not follow the reply format; use a model that writes code, or a lower \
                 `agent.temperature`",
                content.trim().chars().take(200).collect::<String>(),
                self.model
            ))
            .into());
        };
        let source = format!("{source}\n");
        let config = super::parse_config(fenced(&content, "json"), "the reply's ```json block")?;
        super::check_new(goal, history, &source, &config)?;
        let note = content
            .split("```")
            .next()
            .and_then(|before| before.lines().map(str::trim).find(|l| !l.is_empty()))
            .map(|l| l.chars().take(300).collect());
        Ok(Some(Proposal {
            seed: "llm".into(),
            config,
            source: Some(source),
            note,
            tokens,
            by: None,
        }))
    }
}

impl LlmAgent {
    /// Sends the request; the reply's content and its `usage.total_tokens`. Every failure
    /// is an `EndpointError`, classified (see `retry`).
    fn ask(&self, req: ureq::Request, body: Value) -> Result<(String, Option<u64>), EndpointError> {
        let endpoint = &self.endpoint;
        let reply = match req.send_json(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let retry_after = r.header("retry-after").map(str::to_string);
                let text = r.into_string().unwrap_or_default();
                return Err(retry::classify_status(
                    endpoint,
                    &self.model,
                    &self.api_key_env,
                    code,
                    retry_after.as_deref(),
                    &text,
                ));
            }
            Err(ureq::Error::Transport(t)) => {
                return Err(match t.kind() {
                    ureq::ErrorKind::InvalidUrl
                    | ureq::ErrorKind::UnknownScheme
                    | ureq::ErrorKind::InsecureRequestHttpsOnly => EndpointError::permanent(
                        format!("cannot use {endpoint}: {t}; check `agent.url`"),
                    ),
                    // Refused, reset, timed out, DNS, a proxy's garbage: the network or
                    // the server is having a bad moment.
                    _ => EndpointError::transient(format!("cannot reach {endpoint}: {t}")),
                });
            }
        };
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(reply.into_reader(), MAX_REPLY),
            &mut text,
        )
        .map_err(|e| EndpointError::transient(format!("reading {endpoint}'s reply: {e}")))?;
        // A body cut short or garbled on the way (a proxy, a reset mid-reply): ask again.
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            EndpointError::transient(format!(
                "{endpoint}'s reply is not JSON ({e}): {}",
                text.chars().take(200).collect::<String>()
            ))
        })?;
        let tokens = v
            .pointer("/usage/total_tokens")
            .and_then(Value::as_u64)
            .or_else(|| {
                let part = |k: &str| v.pointer(&format!("/usage/{k}")).and_then(Value::as_u64);
                Some(part("prompt_tokens")? + part("completion_tokens").unwrap_or(0))
            });
        let content = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                EndpointError::permanent(format!(
                    "{endpoint}'s reply has no choices[0].message.content (it was: {}): the \
                     endpoint is not an OpenAI-compatible chat-completions API, or model `{}` \
                     answered nothing; check `agent.url` and `agent.model`",
                    text.chars().take(200).collect::<String>(),
                    self.model
                ))
            })?;
        Ok((content.to_string(), tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_blocks_are_found() {
        let reply = "Use bigger tiles.\n```python\nSPACE = {}\n```\nand\n```json\n{\"B\": 64}\n```";
        assert_eq!(fenced(reply, "python"), Some("SPACE = {}\n"));
        assert_eq!(fenced(reply, "json"), Some("{\"B\": 64}\n"));
        assert_eq!(fenced("no code here", "python"), None);
    }

    fn llm_goal(context_bytes: Option<u64>, seed: &str) -> GoalProjection {
        let mut spec = crate::projection::test_spec(seed);
        spec.agent = crate::wire::AgentSpec::Llm(crate::wire::LlmSettings {
            url: "http://127.0.0.1:9/v1".into(),
            model: "m".into(),
            api_key_env: String::new(),
            temperature: None,
            timeout_s: None,
            context_bytes,
        });
        GoalProjection::new("g1", spec, 0, 0)
    }

    fn history(n: u64) -> Vec<EvaluationRecord> {
        use crate::wire::{EvalResult, ResultClass};
        (1..=n)
            .map(|i| EvaluationRecord {
                iteration: i,
                candidate: format!("c{i}"),
                seed: "a.py".into(),
                config: json!({"B": i}),
                source_hash: None,
                device: None,
                result: EvalResult::failure(
                    ResultClass::WrongResult,
                    format!("iteration {i}: {}", "mismatch ".repeat(100)),
                    1.0,
                ),
            })
            .collect()
    }

    fn long_source() -> String {
        let mut s = String::from("import triton\nSPACE = {\"B\": [1, 2]}\n");
        for i in 0..2000 {
            s.push_str(&format!("x{i} = {i}  # a line of the kernel\n"));
        }
        s.push_str("def matmul(inputs, out, config):\n    pass\n");
        s
    }

    fn size(messages: &[ChatMessage]) -> usize {
        messages.iter().map(|m| m.content.len()).sum()
    }

    #[test]
    fn the_whole_prompt_stays_within_the_budget() {
        let source = long_source();
        for budget in [2048u64, 4096, 16384] {
            let goal = llm_goal(Some(budget), "SPACE = {}\n");
            for n in [0, 3, 500] {
                let m = messages(&goal, &history(n), Some(&source));
                assert_eq!((m[0].role.as_str(), m[1].role.as_str()), ("system", "user"));
                assert!(size(&m) <= budget as usize, "{} > {budget}", size(&m));
                let user = &m[1].content;
                assert!(user.contains("## The best candidate so far\n```python\nimport triton\n"));
                assert!(
                    user.contains("lines omitted to fit the prompt's budget"),
                    "{user}"
                );
                assert!(user.contains("def matmul(inputs, out, config):\n    pass\n```\n"));
                assert!(user.ends_with(INSTRUCTION));
                assert!(user.starts_with("## Best candidates\n"), "{user}");
                assert_eq!(m, messages(&goal, &history(n), Some(&source)));
                if n > 0 && budget >= 4096 {
                    // The memory keeps its share beside a source that wants everything.
                    assert!(user.contains("## Failures by kind\n"), "{user}");
                }
            }
        }
    }

    #[test]
    fn a_source_that_fits_is_sent_whole_and_the_last_message_once() {
        let goal = llm_goal(
            None,
            "SPACE = {}\ndef matmul(inputs, out, config):\n    pass\n",
        );
        let h = history(2);
        let m = messages(&goal, &h, None);
        let user = &m[1].content;
        assert!(user.contains(
            "## The seed `a.py`\n```python\nSPACE = {}\ndef matmul(inputs, out, config):\n    pass\n```\n"
        ));
        assert_eq!(
            user.matches("iteration 2: mismatch").count(),
            2,
            "once in the failures, once as the last evaluation, nowhere else: {user}"
        );
        assert!(
            !m[1].content.contains("# Goal `g`"),
            "the goal is in the system prompt"
        );
        assert!(m[0].content.contains("# Goal `g`"));
        assert!(size(&m) <= context::DEFAULT_PROMPT_BYTES);
    }
}
