//! The one definition of every type that crosses a process boundary: the JSON-RPC
//! envelope, the methods' parameters and results, and the events of the log.
//!
//! `kernelctl` uses these types directly (never a copy), so a change here is a
//! change of the protocol: keep fields additive (`#[serde(default)]`) where old
//! logs or old clients may meet new code.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol revision `version` reports; bump on an incompatible change.
pub const PROTOCOL: u32 = 1;

/// Longest accepted request or response line, in bytes. Goal files travel inside
/// `enqueue`, candidate sources inside `best`: both are far below this.
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// Largest event the daemon stores, as JSON. An `events` page is cut at half a line and
/// always holds at least one event, so with every event within this bound no page, and no
/// `event` notification, can outgrow a line: no one event can make the log unreadable.
pub const MAX_EVENT_BYTES: usize = MAX_LINE / 2;

/// A piece of a request quoted back in an error message: as sent, or its first 64
/// characters and its length. Errors echo what a user named, and a user may name 8 MB.
pub fn quote(text: &str) -> String {
    quote_at(text, 64)
}

/// `quote` with another length: at most `shown` characters of `text`, then its length.
pub fn quote_at(text: &str, shown: usize) -> String {
    match text.char_indices().nth(shown) {
        Some((cut, _)) => format!("{}… ({} bytes)", &text[..cut], text.len()),
        None => text.to_string(),
    }
}

mod chain;
mod events;
mod fork;
mod gpu;
mod measure;
mod params;
mod results;
mod retime;
mod spec;

pub use chain::*;
pub use events::*;
pub use fork::*;
pub use gpu::*;
pub use measure::*;
pub use params::*;
pub use results::*;
pub use retime::*;
pub use spec::*;

// ---------------------------------------------------------------------------
// JSON-RPC 2.0 envelope
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    /// Absent for a notification (the daemon accepts none, but must not answer one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    pub method: String,
    #[serde(default)]
    pub params: Value,
}

impl Request {
    pub fn new(id: u64, method: &str, params: impl Serialize) -> Self {
        Request {
            jsonrpc: "2.0".into(),
            id: Some(Value::from(id)),
            method: method.into(),
            params: serde_json::to_value(params).unwrap_or(Value::Null),
        }
    }
}

/// An answer. `R` is how its result is held: a `Value` for whoever reads one; the daemon
/// writes each result as JSON text once (`RawValue`), not first as a tree of values (half
/// of a large `status`'s time went into building and walking that tree).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response<R = Value> {
    pub jsonrpc: String,
    pub id: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<R>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

impl<R> Response<R> {
    pub fn ok(id: Value, result: R) -> Self {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: Some(result),
            error: None,
        }
    }
}

impl Response {
    pub fn err(id: Value, error: RpcError) -> Self {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: None,
            error: Some(error),
        }
    }
}

/// A server-to-client message without an id: the `event` stream of `events --follow`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Notification {
    pub jsonrpc: String,
    pub method: String,
    pub params: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

/// Error codes: the four standard ones plus the server's own (-32000..-32099).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// No goal has that id or name.
    pub const GOAL_NOT_FOUND: i64 = -32001;
    /// The goal file was rejected; `message` says file, line and what is expected.
    pub const INVALID_GOAL: i64 = -32002;
    /// The transition is not allowed from the goal's state (e.g. resume a completed goal).
    pub const INVALID_STATE: i64 = -32003;
    /// The caller may read but not change this goal (not its owner, root or admin group).
    pub const PERMISSION_DENIED: i64 = -32004;
    /// The goal has no correct candidate yet.
    pub const NO_BEST: i64 = -32005;
    /// The daemon is shutting down and accepts no new work.
    pub const SHUTTING_DOWN: i64 = -32006;
    /// Too many connections are open; close idle clients and retry.
    pub const TOO_MANY_CONNECTIONS: i64 = -32007;
    /// The caller (or every user together) has as many active goals as kerneld keeps;
    /// finish or cancel some first (`max_active_goals_per_user`, `max_active_goals`).
    pub const TOO_MANY_GOALS: i64 = -32008;
    /// The answer would be longer than `MAX_LINE`; ask for less (a page, one goal).
    pub const REPLY_TOO_LARGE: i64 = -32009;
}

/// Declares every method once: its name (a constant in `method`, for the client) and
/// its variant of `Call` with the parameters it takes, so the server's dispatch, a
/// `match` on `Call`, is complete by construction.
macro_rules! methods {
    ($($(#[$doc:meta])* $variant:ident($params:ty) = $konst:ident $name:literal,)*) => {
        /// Method names, shared by the server's dispatch and the client.
        pub mod method {
            $(pub const $konst: &str = $name;)*
            /// The notification method carrying one event in follow mode.
            pub const EVENT_NOTIFICATION: &str = "event";
        }

        /// A request's method with its parameters, as the server dispatches it.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(tag = "method", content = "params")]
        pub enum Call {
            $($(#[$doc])* #[serde(rename = $name)] $variant($params),)*
        }

        impl Call {
            /// Every method the daemon answers.
            pub const METHODS: &'static [&'static str] = &[$($name),*];

            pub fn method(&self) -> &'static str {
                match self {
                    $(Call::$variant(_) => $name,)*
                }
            }
        }
    };
}

methods! {
    /// Parse and enqueue a goal file.
    Enqueue(EnqueueParams) = ENQUEUE "enqueue",
    Status(StatusParams) = STATUS "status",
    Show(GoalRef) = SHOW "show",
    Pause(GoalRef) = PAUSE "pause",
    Resume(GoalRef) = RESUME "resume",
    Cancel(GoalRef) = CANCEL "cancel",
    Best(GoalRef) = BEST "best",
    Events(EventsParams) = EVENTS "events",
    Context(GoalRef) = CONTEXT "context",
    Gpus(NoParams) = GPUS "gpus",
    Version(NoParams) = VERSION "version",
    /// Re-time a candidate N times (each a fresh runner against a fresh baseline).
    Retime(RetimeParams) = RETIME "retime",
    /// A `retime` request's progress and its stability summary.
    Retimes(RetimesParams) = RETIMES "retimes",
    /// Re-measure a goal's best few candidates now; record whether each still wins.
    Revalidate(RevalidateParams) = REVALIDATE "revalidate",
    /// A new goal from another's state as of one of its events.
    Fork(ForkParams) = FORK "fork",
}

/// Why a request's method and parameters are not a `Call`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// No such method (JSON-RPC -32601).
    UnknownMethod(String),
    /// The method exists; its parameters do not fit (-32602). The message names the method.
    InvalidParams(String),
}

impl Request {
    /// The typed call this request makes. Absent or null `params` are an empty object, so
    /// methods whose parameters are all optional may be called without any.
    pub fn call(&self) -> Result<Call, CallError> {
        if !Call::METHODS.contains(&self.method.as_str()) {
            return Err(CallError::UnknownMethod(self.method.clone()));
        }
        let params = if self.params.is_null() {
            Value::Object(Default::default())
        } else {
            self.params.clone()
        };
        let tagged = serde_json::json!({"method": self.method, "params": params});
        serde_json::from_value(tagged)
            .map_err(|e| CallError::InvalidParams(format!("{}: {e}", self.method)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_keeps_short_text_and_cuts_long_text_on_a_character() {
        assert_eq!(quote("g12"), "g12");
        let long = "é".repeat(100);
        let q = quote(&long);
        assert_eq!(q, format!("{}… (200 bytes)", "é".repeat(64)));
        assert_eq!(quote_at("abcdef", 3), "abc… (6 bytes)");
    }

    #[test]
    fn event_round_trips_with_flattened_kind() {
        let ev = Event {
            seq: 7,
            time_ms: 1,
            goal: Some("g1".into()),
            kind: EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                reason: None,
            },
        };
        let text = serde_json::to_string(&ev).unwrap();
        assert!(text.contains("\"type\":\"goal_state_changed\""));
        let back: Event = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn agent_specs_keep_the_logged_shape() {
        let logged = r#"{"kind":"llm","settings":{"url":"http://h/v1","model":"m","api_key_env":"K","timeout_s":60}}"#;
        let a: AgentSpec = serde_json::from_str(logged).unwrap();
        assert_eq!(a.kind(), AgentKind::Llm);
        assert_eq!(serde_json::to_string(&a).unwrap(), logged);
        let search: AgentSpec = serde_json::from_str(r#"{"kind":"search","settings":{}}"#).unwrap();
        assert_eq!(search, AgentSpec::default());
        assert!(
            serde_json::from_str::<AgentSpec>(r#"{"kind":"search","settings":{"url":"x"}}"#)
                .is_err()
        );
    }

    #[test]
    fn requests_become_typed_calls() {
        let r = Request::new(1, method::SHOW, GoalRef { goal: "g1".into() });
        assert!(matches!(r.call(), Ok(Call::Show(GoalRef { goal })) if goal == "g1"));
        let mut r = Request::new(2, method::STATUS, ());
        r.params = Value::Null;
        assert!(matches!(
            r.call(),
            Ok(Call::Status(StatusParams { goal: None, .. }))
        ));
        let r = Request::new(3, "frobnicate", ());
        assert_eq!(
            r.call().unwrap_err(),
            CallError::UnknownMethod("frobnicate".into())
        );
        let r = Request::new(4, method::PAUSE, serde_json::json!({"goal": 7}));
        assert!(matches!(r.call(), Err(CallError::InvalidParams(m)) if m.starts_with("pause: ")));
        for m in Call::METHODS {
            assert_ne!(*m, method::EVENT_NOTIFICATION);
        }
    }

    #[test]
    fn worker_result_parses_with_missing_optional_fields() {
        let r: EvalResult =
            serde_json::from_str(r#"{"class":"wrong_result","message":"shape s16 seed 3"}"#)
                .unwrap();
        assert_eq!(r.class, ResultClass::WrongResult);
        assert!(!r.is_scored());
    }
}
