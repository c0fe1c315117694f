//! The audit trail of refused changes: who (uid), what (the method and the goal or file it
//! named), when (the log line's time) and why, one line each in the daemon's log under
//! the target `audit` (`journalctl -u kerneld | grep audit`).
//!
//! Reads are not audited; a refused change is the trace of someone trying what they may
//! not (another user's goal) or of a broken client.

use serde_json::Value;

use crate::wire::{self, method, Request, RpcError};

/// Methods that change something: a goal's state, or new goals and device work
/// (fork, retime and revalidate record events and take GPU time).
const CHANGES: &[&str] = &[
    method::ENQUEUE,
    method::PAUSE,
    method::RESUME,
    method::CANCEL,
    method::FORK,
    method::RETIME,
    method::REVALIDATE,
];

/// Longest piece of a request quoted in one audit line (names and paths can be long).
const QUOTE: usize = 200;

fn quoted(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => wire::quote_at(s, QUOTE),
        Some(other) => wire::quote_at(&other.to_string(), QUOTE),
        None => "-".into(),
    }
}

/// Logs a change the daemon refused; other methods' errors are not logged.
pub fn refused(uid: u32, req: &Request, err: &RpcError) {
    if !CHANGES.contains(&req.method.as_str()) {
        return;
    }
    let target = req.params.get("goal").or_else(|| req.params.get("path"));
    let why = wire::quote_at(&err.message, QUOTE);
    tracing::warn!(
        target: "audit",
        "refused: uid {uid} {} {} (code {}): {why}",
        req.method,
        quoted(target),
        err.code
    );
}
