//! The control plane: JSON-RPC 2.0 over a Unix socket, one JSON object per line.
//!
//! Each connection reads requests and answers them in order. Lines longer than
//! `wire::MAX_LINE` get a -32600 answer and the connection is closed (the rest of the
//! line cannot be told from the next request); so does a line not finished within
//! `Limits::partial_line`, and a connection that sends no request within `Limits::idle`.
//! A line that is not UTF-8 gets -32700 and the connection goes on. Who may hold how many
//! connections is `admission`'s (a refused or displaced client is told why before the
//! close). The caller's uid comes from SO_PEERCRED and decides who may change a goal.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

pub use crate::admission::Limits;
use crate::admission::{Phase, Refusal, Table, Ticket};
use crate::engine::{Engine, RpcResult};
use crate::wire::*;
use kerneld_protocol::lines::{Framed, LineFramer};

/// Binds the socket: removes a stale file first (the redb lock already proved no
/// other daemon owns this state; a socket path shared by two state dirs is refused).
pub async fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the socket's directory {}: {e}",
                dir.display()
            )
        })?;
    }
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            anyhow::bail!(
                "another daemon is listening on {}; stop it, or start this one with another --socket",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .map_err(|e| anyhow::anyhow!("cannot remove stale socket {}: {e}", path.display()))?;
    }
    let listener = UnixListener::bind(path)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", path.display()))?;
    // Anyone who can reach the socket may read; changes are checked per goal owner.
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666));
    Ok(listener)
}

/// Accepts connections until `stop` is cancelled.
pub async fn serve(listener: UnixListener, engine: Arc<Engine>, stop: CancellationToken) {
    serve_with(listener, engine, stop, Limits::from_env()).await
}

pub async fn serve_with(
    listener: UnixListener,
    engine: Arc<Engine>,
    stop: CancellationToken,
    limits: Limits,
) {
    large_blocks_from_mmap();
    let table = Table::new(limits, &crate::shares::privileged());
    let mut last_refusal_logged: Option<Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
                    let ticket = match table.take(uid) {
                        Ok(admitted) => {
                            if let Some(owner) = admitted.took_from {
                                tracing::debug!(uid, owner, "connection taken from the user holding the most");
                            }
                            admitted.ticket
                        }
                        Err(Refusal::User) => {
                            refuse_user(&stream, limits.max_per_user);
                            continue;
                        }
                        Err(Refusal::Full(open)) => {
                            refuse(&stream, open);
                            if !matches!(last_refusal_logged, Some(t) if t.elapsed() < Duration::from_secs(60)) {
                                last_refusal_logged = Some(Instant::now());
                                tracing::warn!(
                                    "refusing connections: {open} already open (more refusals this minute are not logged)"
                                );
                            }
                            continue;
                        }
                    };
                    let engine = engine.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        if let Err(e) = serve_one(stream, engine, stop, limits, Some(ticket)).await {
                            tracing::debug!("connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = stop.cancelled() => break,
        }
    }
}

fn refuse_user(stream: &UnixStream, max: usize) {
    send_refusal(
        stream,
        format!(
            "you have {max} connections to kerneld open, the limit per user; close idle \
             clients (`kernelctl watch`, `events --follow`) and retry"
        ),
    );
}

/// Says why, without waiting (a fresh socket's buffer takes one short line), and closes.
fn refuse(stream: &UnixStream, open: usize) {
    send_refusal(
        stream,
        format!(
            "kerneld has {open} connections open, all it takes; close idle clients \
             (`kernelctl watch`, `events --follow`) and retry"
        ),
    );
}

fn send_refusal(stream: &UnixStream, message: String) {
    let err = RpcError::new(code::TOO_MANY_CONNECTIONS, message);
    if let Ok(mut line) = serde_json::to_vec(&Response::err(Value::Null, err)) {
        line.push(b'\n');
        let _ = stream.try_write(&line);
    }
}

/// One line read from a client.
enum Frame {
    Line(Vec<u8>),
    /// Longer than `MAX_LINE`: the rest of it cannot be told from the next request.
    TooLong,
    /// Started but not finished within `Limits::partial_line`.
    Unfinished,
    /// No request began within `Limits::idle`.
    Idle,
}

/// A line this long (or longer) makes the connection give memory back when it closes.
const RELEASE_AFTER: usize = 1 << 20;

/// Reads lines (`kerneld_protocol::lines`, as the client does), bounded in the time one
/// may take and in the time before one begins. Cancel-safe: whatever was read stays in
/// the framer, so it may sit in a `select!`. Its line buffer (up to `MAX_LINE`) goes back
/// to the system when it is dropped.
struct LineReader {
    inner: BufReader<OwnedReadHalf>,
    framer: LineFramer,
    partial_since: Option<Instant>,
    timeout: Duration,
    /// Waiting for a request since then; None: not bound (follow mode).
    idle_since: Option<Instant>,
    idle: Duration,
    /// Bytes of the line being read, and the most one line of this connection held.
    in_line: usize,
    peak: usize,
}

impl LineReader {
    fn new(read: OwnedReadHalf, limits: &Limits) -> LineReader {
        LineReader {
            inner: BufReader::new(read),
            framer: LineFramer::new(MAX_LINE),
            partial_since: None,
            timeout: limits.partial_line,
            idle_since: Some(Instant::now()),
            idle: limits.idle,
            in_line: 0,
            peak: 0,
        }
    }

    /// The next line without its `\n` (or `\r\n`); None at the end of the stream.
    async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            let deadline = match (self.partial_since, self.idle_since) {
                (Some(t0), _) => Some((t0 + self.timeout, Frame::Unfinished)),
                (None, Some(t0)) => Some((t0 + self.idle, Frame::Idle)),
                (None, None) => None,
            };
            let chunk = match deadline {
                None => self.inner.fill_buf().await?,
                Some((at, late)) => {
                    match tokio::time::timeout_at(at.into(), self.inner.fill_buf()).await {
                        Ok(r) => r?,
                        Err(_) => return Ok(Some(late)),
                    }
                }
            };
            if chunk.is_empty() {
                // End of stream: an unterminated last request still counts.
                self.partial_since = None;
                return Ok(self.framer.finish().map(Frame::Line));
            }
            let (used, found) = self.framer.feed(chunk);
            self.inner.consume(used);
            self.in_line += used;
            self.peak = self.peak.max(self.in_line);
            match found {
                Some(Framed::Line(line)) => {
                    self.partial_since = None;
                    self.in_line = 0;
                    return Ok(Some(Frame::Line(line)));
                }
                Some(Framed::TooLong) => return Ok(Some(Frame::TooLong)),
                None => {
                    self.partial_since.get_or_insert_with(Instant::now);
                }
            }
        }
    }
}

impl Drop for LineReader {
    /// A connection that held a long line gives its memory back to the system: freed, it
    /// would stay in malloc's arenas (56 unfinished 8 MiB lines left 295 MB, issue #30).
    fn drop(&mut self) {
        if self.peak >= RELEASE_AFTER {
            self.framer = LineFramer::new(0);
            release_memory();
        }
    }
}

/// Large blocks straight from mmap (so freeing one unmaps it), set once per process:
/// glibc would otherwise raise its mmap threshold to the size of the first large block
/// freed, and serve the next ones from arenas that never shrink.
fn large_blocks_from_mmap() {
    #[cfg(target_env = "gnu")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: mallopt with integer arguments; glibc's documented tunable.
        ONCE.call_once(|| unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        });
    }
}

/// Gives malloc's free memory back to the system (off the async threads).
fn release_memory() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim takes a size and touches only malloc's own state.
        let trim = || unsafe {
            libc::malloc_trim(0);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn_blocking(trim)),
            Err(_) => trim(),
        }
    }
}

struct Conn {
    lines: LineReader,
    writer: OwnedWriteHalf,
    write_timeout: Duration,
    /// Fires when the connection was taken for another user's (admission.rs).
    evict: CancellationToken,
    ticket: Option<Ticket>,
}

impl Conn {
    fn phase(&self, phase: Phase) {
        if let Some(t) = &self.ticket {
            t.set_phase(phase);
        }
    }
}

/// Tells a connection taken for another user's why, and ends it.
async fn evicted(conn: &mut Conn) -> anyhow::Result<()> {
    let err = RpcError::new(
        code::TOO_MANY_CONNECTIONS,
        "kerneld closed this connection: every connection was taken and another user \
         needed one; you held the most, and this one had waited longest (reconnect to go on)",
    );
    let mut line = serde_json::to_vec(&Response::err(Value::Null, err))?;
    line.push(b'\n');
    // A client that does not read is not waited for.
    let write = conn.writer.write_all(&line);
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
    Ok(())
}

/// Sends an answer. One longer than `MAX_LINE`, which no client could read, is answered
/// with `REPLY_TOO_LARGE` instead: whatever a reply holds, the client hears why.
async fn send<R: Serialize>(conn: &mut Conn, reply: &Response<R>) -> anyhow::Result<()> {
    write_line(conn, reply_line(reply)?).await
}

/// The line that answers with `reply` (no newline yet): it, or `REPLY_TOO_LARGE`.
fn reply_line<R: Serialize>(reply: &Response<R>) -> serde_json::Result<Vec<u8>> {
    let line = serde_json::to_vec(reply)?;
    // The limit is the framer's (`lines::LineFramer`): MAX_LINE bytes before the newline.
    if line.len() <= MAX_LINE {
        return Ok(line);
    }
    serde_json::to_vec(&too_large(reply.id.clone(), line.len()))
}

fn too_large(id: Value, bytes: usize) -> Response {
    let err = RpcError::new(
        code::REPLY_TOO_LARGE,
        format!(
            "the answer is {bytes} bytes, more than the {MAX_LINE} a line may carry; ask for \
             less: one goal (`status GOAL`), a page (`status --all`, `events --limit N`)"
        ),
    );
    Response::err(id, err)
}

/// Sends a notification (an event: `wire::MAX_EVENT_BYTES` keeps it within a line).
async fn notify(conn: &mut Conn, msg: &impl Serialize) -> anyhow::Result<()> {
    write_line(conn, serde_json::to_vec(msg)?).await
}

async fn write_line(conn: &mut Conn, mut line: Vec<u8>) -> anyhow::Result<()> {
    line.push(b'\n');
    // An answer under way is finished even on a connection taken for another user (it
    // closes at its next wait); the write's own deadline bounds it.
    match tokio::time::timeout(conn.write_timeout, conn.writer.write_all(&line)).await {
        Ok(r) => Ok(r?),
        Err(_) => anyhow::bail!(
            "the client read nothing for {:?}; connection closed",
            conn.write_timeout
        ),
    }
}

/// Serves one client until it hangs up (public for the fuzz target, which drives the real
/// framing, parsing and dispatch through a socket pair).
pub async fn connection(
    stream: UnixStream,
    engine: Arc<Engine>,
    stop: CancellationToken,
    limits: Limits,
) -> anyhow::Result<()> {
    serve_one(stream, engine, stop, limits, None).await
}

async fn serve_one(
    stream: UnixStream,
    engine: Arc<Engine>,
    stop: CancellationToken,
    limits: Limits,
    ticket: Option<Ticket>,
) -> anyhow::Result<()> {
    let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
    let (read, writer) = stream.into_split();
    let mut conn = Conn {
        lines: LineReader::new(read, &limits),
        writer,
        write_timeout: limits.write,
        evict: ticket
            .as_ref()
            .map_or_else(CancellationToken::new, Ticket::evicted),
        ticket,
    };
    loop {
        conn.phase(Phase::Waiting);
        conn.lines.idle_since = Some(Instant::now());
        let frame = tokio::select! {
            f = conn.lines.next() => f?,
            _ = stop.cancelled() => return Ok(()),
            _ = conn.evict.cancelled() => return evicted(&mut conn).await,
        };
        conn.phase(Phase::Busy);
        let line = match frame {
            None => return Ok(()),
            Some(Frame::Line(l)) => l,
            Some(Frame::TooLong) => {
                let err = RpcError::new(
                    code::INVALID_REQUEST,
                    format!("request longer than {MAX_LINE} bytes"),
                );
                send(&mut conn, &Response::err(Value::Null, err)).await?;
                return Ok(());
            }
            Some(Frame::Unfinished) => {
                let err = RpcError::new(
                    code::INVALID_REQUEST,
                    format!(
                        "request line not finished (no newline) within {:?}; connection closed",
                        limits.partial_line
                    ),
                );
                send(&mut conn, &Response::err(Value::Null, err)).await?;
                return Ok(());
            }
            Some(Frame::Idle) => {
                let err = RpcError::new(
                    code::INVALID_REQUEST,
                    format!(
                        "no request within {:?}; connection closed (connect again to send one)",
                        limits.idle
                    ),
                );
                send(&mut conn, &Response::err(Value::Null, err)).await?;
                return Ok(());
            }
        };
        // The line ended at its newline, so the next request can still be read.
        let Ok(line) = String::from_utf8(line) else {
            let err = RpcError::new(code::PARSE_ERROR, "request is not UTF-8");
            send(&mut conn, &Response::err(Value::Null, err)).await?;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let (id, req) = match parse_request(&line) {
            Parsed::Request(id, req) => (id, req),
            Parsed::Notification => continue,
            Parsed::Invalid(reply) => {
                send(&mut conn, &reply).await?;
                continue;
            }
        };

        let call = match req.call() {
            Ok(c) => c,
            Err(CallError::UnknownMethod(m)) => {
                let err = RpcError::new(code::METHOD_NOT_FOUND, format!("no method `{m}`"));
                send(&mut conn, &Response::err(id, err)).await?;
                continue;
            }
            Err(CallError::InvalidParams(m)) => {
                let err = RpcError::new(code::INVALID_PARAMS, m);
                crate::audit::refused(uid, &req, &err);
                send(&mut conn, &Response::err(id, err)).await?;
                continue;
            }
        };
        if let Call::Events(p) = &call {
            if p.follow {
                return follow(conn, engine, id, p.clone(), stop, uid).await;
            }
        }
        match dispatch(&engine, call, uid).await {
            Ok(v) => send(&mut conn, &Response::ok(id, v)).await?,
            Err(e) => {
                crate::audit::refused(uid, &req, &e);
                send(&mut conn, &Response::err(id, e)).await?
            }
        }
    }
}

/// One request line, read as JSON-RPC 2.0.
pub enum Parsed {
    /// A request and the id its answer carries (`null` included: it is an id).
    Request(Value, Request),
    /// No `id` member at all: it gets no answer (the daemon has no notification methods).
    Notification,
    /// Not a request: the error to answer.
    Invalid(Response),
}

/// Reads one line as a request. Pure, so the fuzz target drives it directly.
pub fn parse_request(line: &str) -> Parsed {
    let v = match serde_json::from_str::<Value>(line) {
        Ok(v) => v,
        Err(e) => {
            let err = RpcError::new(code::PARSE_ERROR, format!("not JSON: {e}"));
            return Parsed::Invalid(Response::err(Value::Null, err));
        }
    };
    // serde reads `"id": null` as no id; JSON-RPC says it is one, and its client waits.
    let id = v.get("id").cloned();
    let valid_id = matches!(
        id,
        None | Some(Value::Null | Value::Number(_) | Value::String(_))
    );
    match serde_json::from_value::<Request>(v) {
        Ok(r) if r.jsonrpc == "2.0" && valid_id => match id {
            Some(id) => Parsed::Request(id, r),
            None => Parsed::Notification,
        },
        _ => {
            let id = id.filter(|_| valid_id).unwrap_or(Value::Null);
            let err = RpcError::new(
                code::INVALID_REQUEST,
                "not a JSON-RPC 2.0 request (jsonrpc \"2.0\", method, id a number or string)",
            );
            Parsed::Invalid(Response::err(id, err))
        }
    }
}

/// A result as the JSON text of the answer, written once (see `wire::Response`).
type Answer = Box<serde_json::value::RawValue>;

fn to_answer<T: Serialize>(r: RpcResult<T>) -> RpcResult<Answer> {
    r.and_then(|v| {
        serde_json::value::to_raw_value(&v)
            .map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
    })
}

/// One operation per method (engine/ops/); a new method that is not answered here does
/// not compile.
async fn dispatch(engine: &Engine, call: Call, uid: u32) -> RpcResult<Answer> {
    match call {
        Call::Enqueue(p) => to_answer(engine.enqueue(p, uid).await),
        Call::Status(p) => to_answer(engine.status(&p, uid)),
        Call::Show(p) => to_answer(engine.show(&p.goal, uid).await),
        Call::Pause(p) => to_answer(engine.pause(&p.goal, uid).await),
        Call::Resume(p) => to_answer(engine.resume(&p.goal, uid).await),
        Call::Cancel(p) => to_answer(engine.cancel(&p.goal, uid).await),
        Call::Best(p) => to_answer(engine.best(&p.goal, uid).await),
        Call::Events(p) => to_answer(engine.events(&p, uid).await),
        Call::Context(p) => to_answer(engine.context(&p.goal, uid).await),
        Call::Gpus(_) => to_answer(Ok(engine.gpus().await)),
        Call::Version(_) => to_answer(engine.version().await),
        Call::Retime(p) => to_answer(engine.retime(&p, uid).await),
        Call::Retimes(p) => to_answer(engine.retimes(&p, uid).await),
        Call::Fork(p) => to_answer(engine.fork(p, uid).await),
        Call::Revalidate(p) => to_answer(engine.revalidate(&p, uid).await),
    }
}

/// `events` with `follow`: the backlog as the response, then each new event as a
/// notification, until the client hangs up or the daemon stops. Subscribing before
/// reading the backlog, and skipping what the backlog already had, loses nothing.
async fn follow(
    mut conn: Conn,
    engine: Arc<Engine>,
    id: Value,
    p: EventsParams,
    stop: CancellationToken,
    uid: u32,
) -> anyhow::Result<()> {
    // A follower sends nothing: no idle deadline; it may be taken for another user.
    conn.lines.idle_since = None;
    conn.phase(Phase::Following);
    let mut rx = engine.subscribe();
    let goal = match p
        .goal
        .as_deref()
        .map(|g| engine.resolve_goal(g, uid))
        .transpose()
    {
        Ok(g) => g,
        Err(e) => return send(&mut conn, &Response::err(id, e)).await,
    };
    let backlog = match engine.events(&p, uid).await {
        Ok(b) => b,
        Err(e) => return send(&mut conn, &Response::err(id, e)).await,
    };
    let mut last = backlog.last().map_or(p.after.unwrap_or(0), |e| e.seq);
    if backlog.is_empty() && p.after.is_none() {
        last = engine.store().last_seq().unwrap_or(0);
    }
    send(
        &mut conn,
        &Response::ok(id, serde_json::value::to_raw_value(&backlog)?),
    )
    .await?;
    // The rest of a long backlog follows as notifications.
    catch_up(&mut conn, &engine, &goal, &mut last).await?;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(ev) => {
                    if ev.seq <= last || (goal.is_some() && ev.goal != goal) {
                        continue;
                    }
                    last = ev.seq;
                    notify(&mut conn, &event_notification(&ev)?).await?;
                }
                // Too slow a reader: catch up from the log itself.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    catch_up(&mut conn, &engine, &goal, &mut last).await?
                }
                Err(_) => return Ok(()),
            },
            // Follow mode takes no more requests: lines are ignored; a hang-up, an
            // unfinished or over-long line ends it.
            r = conn.lines.next() => if !matches!(r, Ok(Some(Frame::Line(_)))) { return Ok(()) },
            _ = stop.cancelled() => return Ok(()),
            _ = conn.evict.cancelled() => return evicted(&mut conn).await,
        }
    }
}

/// Sends, as notifications, every logged event after `last` (page by page).
async fn catch_up(
    conn: &mut Conn,
    engine: &Engine,
    goal: &Option<String>,
    last: &mut u64,
) -> anyhow::Result<()> {
    loop {
        let page = EventsParams {
            goal: goal.clone(),
            after: Some(*last),
            limit: None,
            follow: false,
        };
        // `goal` is an id by now: it resolves alike for every caller.
        let more = engine.events(&page, 0).await.unwrap_or_default();
        if more.is_empty() {
            return Ok(());
        }
        for ev in more {
            *last = ev.seq;
            notify(conn, &event_notification(&ev)?).await?;
        }
    }
}

fn event_notification(ev: &Event) -> serde_json::Result<Notification> {
    Ok(Notification {
        jsonrpc: "2.0".into(),
        method: method::EVENT_NOTIFICATION.into(),
        params: serde_json::to_value(ev)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_longer_than_a_line_becomes_an_error_that_says_so() {
        let small = Response::ok(serde_json::json!(7), serde_json::json!("fine"));
        assert_eq!(
            reply_line(&small).unwrap(),
            serde_json::to_vec(&small).unwrap()
        );
        let huge = Response::ok(
            serde_json::json!(8),
            serde_json::json!("x".repeat(MAX_LINE)),
        );
        let line = reply_line(&huge).unwrap();
        assert!(line.len() < 1000);
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["id"], 8);
        assert_eq!(v["error"]["code"], code::REPLY_TOO_LARGE);
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ask for less"));
    }
}
