//! The `llm` agent: an OpenAI-compatible chat-completions endpoint (hosted APIs, or a
//! local vLLM / llama.cpp / Ollama server) writes the next candidate.
//!
//! Every request restates the goal (system prompt: `agent::brief`), then gives the
//! compacted context, the best candidate so far and the last evaluation. The reply must
//! hold the whole module in one ```python block; a ```json block, if any, is the
//! configuration to evaluate. The API key is read from the environment variable the goal
//! names (never stored in the log).

use std::time::Duration;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};

use super::{Agent, AgentEnv, Proposal};
use crate::context;
use crate::projection::GoalProjection;
use crate::wire::EvaluationRecord;

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
    pub fn new(settings: &Value, env: AgentEnv) -> anyhow::Result<LlmAgent> {
        let url = settings
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim_end_matches('/');
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
            model: settings
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            api_key_env: settings
                .get("api_key_env")
                .and_then(Value::as_str)
                .unwrap_or("OPENAI_API_KEY")
                .to_string(),
            temperature: settings.get("temperature").and_then(Value::as_f64),
            timeout: settings
                .get("timeout_s")
                .and_then(Value::as_u64)
                .map_or(DEFAULT_TIMEOUT, Duration::from_secs),
            env,
        })
    }

    fn messages(&self, goal: &GoalProjection, history: &[EvaluationRecord]) -> Value {
        let system = format!(
            "You are a GPU kernel engineer writing Triton for NVIDIA Hopper.\n{}\n\
             Reply with the complete module in ONE ```python code block. Optionally add ONE ```json \
             block with the configuration to evaluate (keys and values from your SPACE).",
            super::brief(goal)
        );
        let mut user = context::compact(goal, history, context::budget(&goal.spec));
        if let Some(best) = &self.env.best_source {
            user.push_str("\n## The best candidate so far\n```python\n");
            user.push_str(best);
            user.push_str("\n```\n");
        } else if let Some(seed) = goal.spec.seeds.first() {
            user.push_str(&format!(
                "\n## The seed `{}`\n```python\n{}\n```\n",
                seed.name, seed.source
            ));
        }
        if let Some(last) = history.last() {
            if let Some(m) = &last.result.message {
                user.push_str(&format!("\n## The last evaluation's message\n{m}\n"));
            }
        }
        user.push_str("\nPropose a faster correct candidate, different from everything tried.");
        json!([{"role": "system", "content": system}, {"role": "user", "content": user}])
    }
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
    fn name(&self) -> &'static str {
        "llm"
    }

    fn slow(&self) -> bool {
        true
    }

    fn propose(
        &self,
        goal: &GoalProjection,
        history: &[EvaluationRecord],
        _iteration: u64,
    ) -> anyhow::Result<Option<Proposal>> {
        let mut body = json!({"model": self.model, "messages": self.messages(goal, history)});
        if let Some(t) = self.temperature {
            body["temperature"] = json!(t);
        }
        let agent = ureq::AgentBuilder::new().timeout(self.timeout).build();
        let mut req = agent
            .post(&self.endpoint)
            .set("Content-Type", "application/json");
        if let Ok(key) = std::env::var(&self.api_key_env) {
            req = req.set("Authorization", &format!("Bearer {key}"));
        }
        let reply = match req.send_json(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                bail!(
                    "{} answered HTTP {code}: {}",
                    self.endpoint,
                    text.chars().take(500).collect::<String>()
                )
            }
            Err(e) => bail!("cannot reach {}: {e}", self.endpoint),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(reply.into_reader(), MAX_REPLY),
            &mut text,
        )
        .context("reading the model's reply")?;
        let v: Value = serde_json::from_str(&text).context("the endpoint's reply is not JSON")?;
        let content = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .context("the reply has no choices[0].message.content")?;
        let Some(source) = fenced(content, "python")
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            bail!("the model's reply holds no ```python block");
        };
        let source = format!("{source}\n");
        let config = super::parse_config(fenced(content, "json"), "the reply's ```json block")?;
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
        }))
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
}
