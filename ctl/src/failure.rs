//! What went wrong, as the user sees it: the message, a hint where one helps (which
//! command to run, which socket to start the daemon on) and the exit code (0 ok,
//! 1 failed, 2 usage, 3 daemon not reachable), as text or as one JSON object.

use std::io;
use std::path::{Path, PathBuf};

use kerneld_protocol::wire::{code, RpcError};
use serde::Serialize;
use serde_json::Value;

use crate::client::ClientError;

/// Where the socket's path came from; said in the error when nothing listens there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SocketOrigin {
    Flag,
    Env,
    /// The default: every place looked at, in order.
    Default {
        tried: Vec<PathBuf>,
    },
}

/// Why a command did not succeed; each kind has its exit code.
#[derive(Debug)]
pub enum Failure {
    /// Whoever read our stdout has gone (`| head -1`): stop quietly, exit 0.
    StdoutClosed,
    Client(ClientError),
    /// Anything else that failed, with a message that names what (exit 1).
    Failed(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Client(e)
    }
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::StdoutClosed => 0,
            Failure::Client(
                ClientError::Unreachable { .. }
                | ClientError::Unresponsive { .. }
                | ClientError::Closed { .. },
            ) => 3,
            Failure::Client(_) | Failure::Failed(_) => 1,
        }
    }

    /// What went wrong, a hint where one helps, and the exit code.
    pub fn report(&self, socket: &Path, origin: &SocketOrigin) -> ErrorReport {
        let (code, message, hint) = match self {
            Failure::StdoutClosed => (None, String::new(), None),
            Failure::Failed(m) => (None, m.clone(), None),
            Failure::Client(e @ ClientError::Unreachable { kind, .. }) => {
                let message = match origin {
                    SocketOrigin::Default { tried } if *kind == io::ErrorKind::NotFound => {
                        let tried: Vec<String> =
                            tried.iter().map(|p| p.display().to_string()).collect();
                        format!(
                            "cannot reach kerneld: no socket at the default locations (tried {})",
                            tried.join(", ")
                        )
                    }
                    SocketOrigin::Env => format!("{e} (KERNELD_SOCKET)"),
                    _ => e.to_string(),
                };
                // The hint names the socket looked at first (the user's own, where there
                // is one), not the system one the client fell back to.
                let first = match origin {
                    SocketOrigin::Default { tried } => tried.first().map_or(socket, |p| p),
                    _ => socket,
                };
                (None, message, Some(start_hint(first)))
            }
            Failure::Client(e @ ClientError::Unresponsive { .. }) => (
                None,
                e.to_string(),
                Some("`systemctl status kerneld` or the daemon's log says what it is doing".into()),
            ),
            Failure::Client(ClientError::Rpc(rpc)) => {
                (Some(rpc.code), rpc.message.clone(), rpc_hint(rpc))
            }
            Failure::Client(e) => (None, e.to_string(), None),
        };
        ErrorReport {
            code,
            message,
            hint,
            exit: self.exit_code(),
        }
    }
}

/// A failure as the user sees it on stderr.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorReport {
    /// The daemon's JSON-RPC error code, when the daemon refused.
    pub code: Option<i64>,
    pub message: String,
    pub hint: Option<String>,
    pub exit: u8,
}

impl ErrorReport {
    /// `kernelctl: <what went wrong>`, and a line with a hint where one helps.
    pub fn text(&self) -> String {
        match &self.hint {
            Some(h) => format!("kernelctl: {}\nhint: {h}", self.message),
            None => format!("kernelctl: {}", self.message),
        }
    }

    /// `{"error":{"code":…,"message":…,"hint":…,"exit":N}}` in one line, for --json.
    pub fn json(&self) -> String {
        #[derive(Serialize)]
        struct Wrapped<'a> {
            error: &'a ErrorReport,
        }
        serde_json::to_string(&Wrapped { error: self }).unwrap_or_default()
    }
}

fn start_hint(socket: &Path) -> String {
    format!(
        "start the daemon with `systemctl start kerneld` (or `systemctl --user start kerneld`), \
         or run `kerneld --socket {}`; --socket or KERNELD_SOCKET pick another socket",
        socket.display()
    )
}

/// The daemon's own hint (`data.hint`) when it gives one, else what the error code suggests.
fn rpc_hint(e: &RpcError) -> Option<String> {
    if let Some(h) = e
        .data
        .as_ref()
        .and_then(|d| d.get("hint"))
        .and_then(Value::as_str)
    {
        return Some(h.to_string());
    }
    // A message that already tells the user which command to run needs no second hint.
    if e.message.contains("`kernelctl ") {
        return None;
    }
    let hint = match e.code {
        code::GOAL_NOT_FOUND => "`kernelctl status` lists the goals, by id and name",
        code::INVALID_GOAL => "fix the goal file where the message says, then enqueue it again",
        code::INVALID_STATE => "`kernelctl status GOAL` shows the goal's state",
        code::PERMISSION_DENIED => "only the goal's owner, root or the admin group may change it",
        code::NO_BEST => {
            "no candidate is correct yet; `kernelctl show GOAL` lists the recent evaluations"
        }
        code::SHUTTING_DOWN => {
            "the daemon is stopping; try again once it is back (`systemctl status kerneld`)"
        }
        code::METHOD_NOT_FOUND
        | code::INVALID_PARAMS
        | code::INVALID_REQUEST
        | code::PARSE_ERROR => {
            "client and daemon may be of different versions; compare `kernelctl version`"
        }
        _ => return None,
    };
    Some(hint.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable(kind: io::ErrorKind) -> Failure {
        Failure::Client(ClientError::Unreachable {
            socket: "/x.sock".into(),
            kind,
            reason: "no such socket".into(),
        })
    }

    #[test]
    fn exit_codes_follow_the_contract() {
        let unreachable = unreachable(io::ErrorKind::NotFound);
        assert_eq!(unreachable.exit_code(), 3);
        let message = unreachable
            .report(Path::new("/x.sock"), &SocketOrigin::Flag)
            .text();
        assert!(message.starts_with("kernelctl: cannot reach kerneld at /x.sock"));
        assert!(
            message.contains("systemctl start kerneld")
                && message.contains("kerneld --socket /x.sock")
        );

        let rpc = Failure::Client(ClientError::Rpc(RpcError::new(
            code::GOAL_NOT_FOUND,
            "no goal named foo",
        )));
        assert_eq!(rpc.exit_code(), 1);
        assert_eq!(
            rpc.report(Path::new("/x"), &SocketOrigin::Flag).text(),
            "kernelctl: no goal named foo\nhint: `kernelctl status` lists the goals, by id and name"
        );
        assert_eq!(Failure::Failed("x".into()).exit_code(), 1);
    }

    #[test]
    fn a_missing_default_socket_lists_every_place_tried() {
        let origin = SocketOrigin::Default {
            tried: vec![
                "/run/user/1000/kerneld.sock".into(),
                "/run/kerneld/kerneld.sock".into(),
            ],
        };
        let report = unreachable(io::ErrorKind::NotFound).report(Path::new("/x.sock"), &origin);
        assert_eq!(report.exit, 3);
        assert!(
            report.message.contains(
                "no socket at the default locations (tried /run/user/1000/kerneld.sock, /run/kerneld/kerneld.sock)"
            ),
            "{}",
            report.message
        );
        // A socket that exists but refuses says so, at the one path it is.
        let refused =
            unreachable(io::ErrorKind::ConnectionRefused).report(Path::new("/x.sock"), &origin);
        assert!(refused
            .message
            .starts_with("cannot reach kerneld at /x.sock"));
        // The hint names the first place tried, not the fallback the client used.
        let hint = report.hint.as_deref().unwrap();
        assert!(
            hint.contains("kerneld --socket /run/user/1000/kerneld.sock"),
            "{hint}"
        );
        let from_env =
            unreachable(io::ErrorKind::NotFound).report(Path::new("/x.sock"), &SocketOrigin::Env);
        assert!(from_env.message.ends_with("(KERNELD_SOCKET)"));
    }

    #[test]
    fn json_errors_carry_code_message_hint_and_exit() {
        let rpc = Failure::Client(ClientError::Rpc(RpcError::new(
            code::GOAL_NOT_FOUND,
            "no goal named nosuch",
        )));
        let json = rpc.report(Path::new("/x"), &SocketOrigin::Flag).json();
        assert!(
            json.starts_with(r#"{"error":{"code":-32001,"message":"#),
            "{json}"
        );
        let json: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {
                "code": code::GOAL_NOT_FOUND,
                "message": "no goal named nosuch",
                "hint": "`kernelctl status` lists the goals, by id and name",
                "exit": 1,
            }})
        );
        let json: Value = serde_json::from_str(
            &Failure::Failed("cannot read goal file x".into())
                .report(Path::new("/x"), &SocketOrigin::Flag)
                .json(),
        )
        .unwrap();
        assert_eq!(json["error"]["code"], Value::Null);
        assert_eq!(json["error"]["hint"], Value::Null);
        assert_eq!(json["error"]["exit"], 1);
    }

    #[test]
    fn the_daemons_own_hint_wins() {
        let mut e = RpcError::new(code::INVALID_GOAL, "goal.toml:3: unknown key `budgett`");
        e.data = Some(serde_json::json!({"hint": "did you mean `budget`?"}));
        assert_eq!(rpc_hint(&e).as_deref(), Some("did you mean `budget`?"));
        assert_eq!(rpc_hint(&RpcError::new(-32099, "x")), None);
    }
}
