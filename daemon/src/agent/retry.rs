//! How an agent's endpoint failed, and how long to wait before asking it again.
//!
//! Hosted endpoints misbehave for hours (rate limits, overloaded backends, proxies that
//! reset connections), and none of that says anything about the goal: such failures are
//! `Transient`, retried with jittered exponential back-off that honours `Retry-After`,
//! and never fail a goal by themselves (its wall budget still ends it). A key that is
//! refused, a URL or model that does not exist, a reply with no candidate in it will not
//! heal overnight: those are `Permanent` and fail the goal at once, saying what to fix.
//! Anything else an agent returns (a repeat, a crashed program) keeps the old rule: a
//! few in a row fail the goal.

use std::time::{Duration, SystemTime};

use rand::Rng;

/// A failure the engine treats by its class (see the module's comment). Agents return
/// it inside their `anyhow::Error`; the engine finds it with `downcast_ref`.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("{message}")]
    Transient {
        message: String,
        /// What the endpoint asked for (`Retry-After`), if it did.
        retry_after: Option<Duration>,
    },
    #[error("{message}")]
    Permanent { message: String },
}

impl EndpointError {
    pub fn transient(message: impl Into<String>) -> EndpointError {
        EndpointError::Transient {
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn permanent(message: impl Into<String>) -> EndpointError {
        EndpointError::Permanent {
            message: message.into(),
        }
    }
}

/// First back-off after a transient failure, and the longest one (before `scale`).
const FIRST: Duration = Duration::from_secs(2);
const LONGEST: Duration = Duration::from_secs(5 * 60);
/// The longest `Retry-After` honoured: beyond it the endpoint is asked again anyway.
const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(60 * 60);

/// The wait before asking again after `attempt` transient failures in a row (1, 2, ...):
/// `FIRST` doubling up to `LONGEST`, of which a random half is taken ("equal jitter", so
/// goals sharing one endpoint do not come back in step); never less than `Retry-After`
/// (plus up to a tenth of it, for the same reason). `scale` multiplies the whole (the
/// daemon's `agent_backoff_scale`: tests compress hours into seconds).
pub fn backoff(attempt: u32, retry_after: Option<Duration>, scale: f64) -> Duration {
    let mut rng = rand::thread_rng();
    let exp = FIRST
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(LONGEST);
    let jittered = exp / 2 + exp.mul_f64(rng.gen_range(0.0..0.5));
    let wait = match retry_after.map(|r| r.min(LONGEST_RETRY_AFTER)) {
        Some(r) if !r.is_zero() => r + r.mul_f64(rng.gen_range(0.0..0.1)),
        _ => jittered,
    };
    wait.mul_f64(scale.max(0.0))
}

/// `Retry-After`: seconds, or an HTTP date (RFC 9110 §10.2.3).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// An HTTP error status from `endpoint`, classified, with what to do about it.
pub fn classify_status(
    endpoint: &str,
    model: &str,
    key_env: &str,
    code: u16,
    retry_after: Option<&str>,
    body: &str,
) -> EndpointError {
    let body: String = body.trim().chars().take(300).collect();
    let said = if body.is_empty() {
        String::new()
    } else {
        format!(" (it said: {body})")
    };
    let key = if key_env.is_empty() {
        "no key is sent (`agent.api_key_env` is empty)".to_string()
    } else {
        format!("the key comes from ${key_env} in kerneld's environment")
    };
    match code {
        408 | 409 | 425 | 429 | 500..=599 => EndpointError::Transient {
            message: format!("{endpoint} answered HTTP {code}{said}"),
            retry_after: retry_after.and_then(parse_retry_after),
        },
        401 => EndpointError::permanent(format!(
            "{endpoint} refused the API key (HTTP 401){said}: {key}; set a valid key there \
             and enqueue the goal again"
        )),
        403 => EndpointError::permanent(format!(
            "{endpoint} forbids this request (HTTP 403){said}: the key ({key}) has no access \
             to model `{model}`; use a key that has, or another `agent.model`"
        )),
        404 => EndpointError::permanent(format!(
            "{endpoint} does not exist or has no model `{model}` (HTTP 404){said}: check \
             `agent.url` (an API base such as https://host/v1) and `agent.model`"
        )),
        _ if body.to_ascii_lowercase().contains("model") => EndpointError::permanent(format!(
            "{endpoint} rejected model `{model}` (HTTP {code}){said}: check `agent.model` \
             against the models the endpoint serves"
        )),
        _ => EndpointError::permanent(format!(
            "{endpoint} rejected the request (HTTP {code}){said}: the endpoint may not be \
             OpenAI-compatible; check `agent.url`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after() {
        for attempt in 1..=12 {
            let exp = FIRST * (1u32 << (attempt - 1)).min(1 << 16);
            let exp = exp.min(LONGEST);
            let d = backoff(attempt, None, 1.0);
            assert!(d >= exp / 2 && d <= exp, "attempt {attempt}: {d:?}");
        }
        let d = backoff(1, Some(Duration::from_secs(60)), 1.0);
        assert!(
            d >= Duration::from_secs(60) && d <= Duration::from_secs(66),
            "{d:?}"
        );
        let d = backoff(1, Some(Duration::from_secs(60)), 0.001);
        assert!(d >= Duration::from_millis(60) && d <= Duration::from_millis(66));
        let d = backoff(3, Some(Duration::ZERO), 1.0);
        assert!(d >= Duration::from_secs(4), "{d:?}");
        assert!(backoff(1, Some(Duration::from_secs(1 << 30)), 1.0) <= LONGEST_RETRY_AFTER * 2);
    }

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        assert_eq!(parse_retry_after(" 120 "), Some(Duration::from_secs(120)));
        let soon = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(90));
        let d = parse_retry_after(&soon).unwrap();
        assert!(
            d > Duration::from_secs(80) && d <= Duration::from_secs(90),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn statuses_are_classified_with_what_to_fix() {
        let c = |code, body| {
            classify_status(
                "http://h/v1/chat/completions",
                "m",
                "K",
                code,
                Some("7"),
                body,
            )
        };
        for code in [429, 500, 502, 503, 504, 408] {
            assert!(
                matches!(c(code, ""), EndpointError::Transient { retry_after: Some(d), .. } if d.as_secs() == 7),
                "{code}"
            );
        }
        let msg = c(401, "bad key").to_string();
        assert!(
            msg.contains("HTTP 401") && msg.contains("$K") && msg.contains("bad key"),
            "{msg}"
        );
        assert!(c(404, "").to_string().contains("agent.model"));
        assert!(c(400, "model `x` not found")
            .to_string()
            .contains("rejected model `m`"));
        for code in [400, 401, 403, 404, 422] {
            assert!(
                matches!(c(code, ""), EndpointError::Permanent { .. }),
                "{code}"
            );
        }
    }
}
