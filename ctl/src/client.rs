//! The connection to kerneld: one JSON-RPC 2.0 request per line over a Unix stream socket.
//!
//! A `Client` sends a request and reads lines until the response with the same id arrives.
//! `follow` turns the connection into a stream of `event` notifications after the response
//! (the backlog) of an `events` request with `follow: true`.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kerneld_protocol::lines::{Framed, LineFramer};
use kerneld_protocol::wire::{self, EventsParams, Request, Response, RpcError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

/// How long an ordinary call waits for its answer before the daemon counts as unresponsive.
/// Every method answers from in-memory projections, so this is generous.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub enum ClientError {
    /// No daemon at the socket (missing, refused, not permitted); `kind` says which.
    Unreachable {
        socket: PathBuf,
        kind: io::ErrorKind,
        reason: String,
    },
    /// A daemon accepted the connection but did not answer in time.
    Unresponsive { socket: PathBuf },
    /// The daemon closed the connection before it answered (or while following).
    Closed { socket: PathBuf },
    /// The daemon answered with a JSON-RPC error.
    Rpc(RpcError),
    /// The daemon answered something this client cannot read.
    Protocol(String),
    /// The request would be longer than the daemon reads (`wire::MAX_LINE`): not sent.
    TooLarge { method: String, bytes: usize },
    /// Writing to or reading from the socket failed.
    Io(io::Error),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable { socket, reason, .. } => {
                write!(f, "cannot reach kerneld at {}: {reason}", socket.display())
            }
            ClientError::Unresponsive { socket } => {
                write!(
                    f,
                    "kerneld at {} did not answer within {} s",
                    socket.display(),
                    CALL_TIMEOUT.as_secs()
                )
            }
            ClientError::Closed { socket } => {
                write!(
                    f,
                    "kerneld closed the connection at {} (stopped or restarted?)",
                    socket.display()
                )
            }
            ClientError::Rpc(e) => f.write_str(&e.message),
            ClientError::Protocol(m) => write!(f, "unexpected answer from kerneld: {m}"),
            ClientError::TooLarge { method, bytes } => write!(
                f,
                "{method}: the request is {bytes} bytes, more than the {} kerneld reads in one \
                 request; nothing was sent (send smaller files)",
                wire::MAX_LINE
            ),
            ClientError::Io(e) => write!(f, "socket error: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

pub struct Client {
    socket: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Client {
    /// Connects to the daemon's socket; every failure to do so is `Unreachable`.
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        let unreachable = |e: io::Error| ClientError::Unreachable {
            socket: socket.to_path_buf(),
            kind: e.kind(),
            reason: connect_reason(&e),
        };
        let stream = UnixStream::connect(socket).map_err(unreachable)?;
        stream
            .set_read_timeout(Some(CALL_TIMEOUT))
            .map_err(unreachable)?;
        let reader = BufReader::new(stream.try_clone().map_err(unreachable)?);
        Ok(Client {
            socket: socket.to_path_buf(),
            writer: stream,
            reader,
            next_id: 1,
        })
    }

    /// One call: the raw `result` value, or the daemon's error.
    pub fn call_value(
        &mut self,
        method: &str,
        params: impl Serialize,
    ) -> Result<Value, ClientError> {
        let id = self.send(method, params)?;
        loop {
            let line = self.read_message()?.ok_or_else(|| self.closed())?;
            if let Some(response) = as_response(&line, id)? {
                return match (response.error, response.result) {
                    (Some(error), _) => Err(ClientError::Rpc(error)),
                    (None, result) => Ok(result.unwrap_or(Value::Null)),
                };
            }
            // A notification before our answer is not ours to handle: skip it.
        }
    }

    /// One call whose result is read into `T`.
    pub fn call<T: DeserializeOwned>(
        &mut self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, ClientError> {
        let value = self.call_value(method, params)?;
        decode(method, value)
    }

    /// `events` with `follow: true`: the backlog, then a stream of the events that follow.
    pub fn follow(
        mut self,
        mut params: EventsParams,
    ) -> Result<(Vec<Value>, EventStream), ClientError> {
        params.follow = true;
        let backlog = self.call_value(wire::method::EVENTS, &params)?;
        let Value::Array(backlog) = backlog else {
            return Err(ClientError::Protocol(format!(
                "events: expected an array, got {backlog}"
            )));
        };
        // Follow mode waits as long as the goal runs: no timeout on reads any more.
        self.writer
            .set_read_timeout(None)
            .map_err(ClientError::Io)?;
        Ok((backlog, EventStream { client: self }))
    }

    fn send(&mut self, method: &str, params: impl Serialize) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(&Request::new(id, method, params))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        // The daemon would answer "too long" and hang up while this is still writing:
        // say so here, before sending anything.
        if line.len() > wire::MAX_LINE {
            return Err(ClientError::TooLarge {
                method: method.to_string(),
                bytes: line.len(),
            });
        }
        line.push(b'\n');
        match self
            .writer
            .write_all(&line)
            .and_then(|()| self.writer.flush())
        {
            Ok(()) => Ok(id),
            Err(e) if is_disconnect(&e) => Err(self.why_closed(id)),
            Err(e) => Err(ClientError::Io(e)),
        }
    }

    /// The daemon hung up while this was still writing: it may have said why first (a
    /// refused connection gets its reason, then the close), and what it sent is still
    /// there to read after the broken pipe. That reason, else `Closed`.
    fn why_closed(&mut self, id: u64) -> ClientError {
        while let Ok(Some(message)) = self.read_message() {
            if let Ok(Some(Response {
                error: Some(error), ..
            })) = as_response(&message, id)
            {
                return ClientError::Rpc(error);
            }
        }
        self.closed()
    }

    /// The next line from the daemon as JSON; `None` at end of stream.
    fn read_message(&mut self) -> Result<Option<Value>, ClientError> {
        let mut buf = Vec::new();
        match read_line_bounded(&mut self.reader, &mut buf, wire::MAX_LINE) {
            Ok(0) => Ok(None),
            Ok(_) => serde_json::from_slice(&buf)
                .map(Some)
                .map_err(|e| ClientError::Protocol(format!("not JSON ({e})"))),
            Err(e) if is_timeout(&e) => Err(ClientError::Unresponsive {
                socket: self.socket.clone(),
            }),
            Err(e) if is_disconnect(&e) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                Err(ClientError::Protocol(e.to_string()))
            }
            Err(e) => Err(ClientError::Io(e)),
        }
    }

    fn closed(&self) -> ClientError {
        ClientError::Closed {
            socket: self.socket.clone(),
        }
    }
}

/// The `event` notifications of a followed `events` call, as raw JSON values (the `params`).
/// Ends (`None`) when the daemon closes the connection; dropping it disconnects.
pub struct EventStream {
    client: Client,
}

impl EventStream {
    /// The next event; `Ok(None)` when the daemon ended the stream.
    pub fn next_event(&mut self) -> Result<Option<Value>, ClientError> {
        loop {
            let Some(mut message) = self.client.read_message()? else {
                return Ok(None);
            };
            if message.get("method").and_then(Value::as_str)
                == Some(wire::method::EVENT_NOTIFICATION)
            {
                return Ok(Some(message["params"].take()));
            }
            // The daemon's last word before it closes (the connection was taken for
            // another user's): the reason, not a silent end.
            if let Some(error) = message.get("error").filter(|_| message["id"].is_null()) {
                return Err(ClientError::Rpc(
                    serde_json::from_value(error.clone())
                        .map_err(|e| ClientError::Protocol(e.to_string()))?,
                ));
            }
            // Anything else (a stray response) carries no event: skip it.
        }
    }
}

/// Reads one `\n`-terminated line (without the `\n`) of at most `limit` bytes, framed
/// as the daemon frames them (`kerneld_protocol::lines`). Returns the number of bytes
/// consumed, 0 at end of stream.
fn read_line_bounded(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<usize> {
    let mut framer = LineFramer::new(limit);
    let mut consumed = 0;
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            if let Some(last) = framer.finish() {
                buf.extend_from_slice(&last);
            }
            return Ok(consumed);
        }
        let (used, found) = framer.feed(chunk);
        reader.consume(used);
        consumed += used;
        match found {
            Some(Framed::Line(line)) => {
                buf.extend_from_slice(&line);
                return Ok(consumed);
            }
            Some(Framed::TooLong) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("line longer than {limit} bytes"),
                ))
            }
            None => {}
        }
    }
}

/// The response to request `id` in `message`, or `None` when the message is something else.
fn as_response(message: &Value, id: u64) -> Result<Option<Response>, ClientError> {
    if message.get("method").is_some() {
        return Ok(None);
    }
    let response: Response = serde_json::from_value(message.clone())
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    // An error about an unreadable request carries id null: it is still the answer to ours.
    if response.id == id || (response.id.is_null() && response.error.is_some()) {
        Ok(Some(response))
    } else {
        Ok(None)
    }
}

/// A result value read into the type the method returns.
pub fn decode<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|e| ClientError::Protocol(format!("{method}: {e}")))
}

fn connect_reason(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such socket".into(),
        io::ErrorKind::ConnectionRefused => "connection refused (no daemon listening)".into(),
        io::ErrorKind::PermissionDenied => {
            "permission denied (is this user allowed on the socket?)".into()
        }
        _ => e.to_string(),
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lines_split_and_reject_overlong() {
        let mut r = io::Cursor::new(b"{\"a\":1}\nxyz".to_vec());
        let mut buf = Vec::new();
        assert_eq!(read_line_bounded(&mut r, &mut buf, 100).unwrap(), 8);
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert_eq!(read_line_bounded(&mut r, &mut buf, 100).unwrap(), 3);
        assert_eq!(buf, b"xyz");
        buf.clear();
        assert_eq!(read_line_bounded(&mut r, &mut buf, 100).unwrap(), 0);

        let mut long = io::Cursor::new(vec![b'x'; 20]);
        let err = read_line_bounded(&mut long, &mut Vec::new(), 10).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn responses_match_by_id_and_skip_notifications() {
        let ok = serde_json::json!({"jsonrpc": "2.0", "id": 3, "result": [1]});
        assert!(as_response(&ok, 3).unwrap().is_some());
        assert!(as_response(&ok, 4).unwrap().is_none());
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "event", "params": {}});
        assert!(as_response(&note, 3).unwrap().is_none());
        let parse_error = serde_json::json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32700, "message": "parse error"}});
        assert!(as_response(&parse_error, 3)
            .unwrap()
            .unwrap()
            .error
            .is_some());
    }
}
