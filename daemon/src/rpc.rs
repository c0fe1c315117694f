//! The control plane: JSON-RPC 2.0 over a Unix socket, one JSON object per line.
//!
//! Each connection reads requests and answers them in order. Lines longer than
//! `wire::MAX_LINE` get a -32600 answer and the connection is closed (the codec
//! cannot resynchronise after an over-long line). The caller's uid comes from
//! SO_PEERCRED and decides who may change a goal.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};
use tokio_util::codec::{Framed, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, RpcResult};
use crate::wire::*;

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
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let engine = engine.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        if let Err(e) = connection(stream, engine, stop).await {
                            tracing::debug!("connection ended: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            _ = stop.cancelled() => break,
        }
    }
}

type Conn = Framed<UnixStream, LinesCodec>;

async fn send(conn: &mut Conn, msg: &impl Serialize) -> anyhow::Result<()> {
    conn.send(serde_json::to_string(msg)?).await?;
    Ok(())
}

async fn connection(
    stream: UnixStream,
    engine: Arc<Engine>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
    let mut conn = Framed::new(stream, LinesCodec::new_with_max_length(MAX_LINE));
    loop {
        let line = tokio::select! {
            l = conn.next() => l,
            _ = stop.cancelled() => return Ok(()),
        };
        let line = match line {
            None => return Ok(()),
            Some(Ok(l)) => l,
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                let err = RpcError::new(
                    code::INVALID_REQUEST,
                    format!("request longer than {MAX_LINE} bytes"),
                );
                send(&mut conn, &Response::err(Value::Null, err)).await?;
                return Ok(());
            }
            Some(Err(e)) => return Err(e.into()),
        };
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str::<Value>(&line) {
            Err(e) => {
                let err = RpcError::new(code::PARSE_ERROR, format!("not JSON: {e}"));
                send(&mut conn, &Response::err(Value::Null, err)).await?;
                continue;
            }
            Ok(v) => match serde_json::from_value::<Request>(v.clone()) {
                Ok(r) if r.jsonrpc == "2.0" => r,
                _ => {
                    let id = v.get("id").cloned().unwrap_or(Value::Null);
                    let err = RpcError::new(
                        code::INVALID_REQUEST,
                        "not a JSON-RPC 2.0 request (jsonrpc, method, id)",
                    );
                    send(&mut conn, &Response::err(id, err)).await?;
                    continue;
                }
            },
        };
        // A notification (no id) gets no answer; the daemon has no notification methods.
        let Some(id) = req.id.clone() else { continue };

        if req.method == method::EVENTS {
            let params: EventsParams = match params(&req) {
                Ok(p) => p,
                Err(e) => {
                    send(&mut conn, &Response::err(id, e)).await?;
                    continue;
                }
            };
            if params.follow {
                return follow(conn, engine, id, params, stop).await;
            }
        }
        let reply = match dispatch(&engine, &req, uid).await {
            Ok(v) => Response::ok(id, v),
            Err(e) => Response::err(id, e),
        };
        send(&mut conn, &reply).await?;
    }
}

fn params<T: DeserializeOwned>(req: &Request) -> RpcResult<T> {
    let p = if req.params.is_null() {
        Value::Object(Default::default())
    } else {
        req.params.clone()
    };
    serde_json::from_value(p)
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("{}: {e}", req.method)))
}

fn to_value<T: Serialize>(r: RpcResult<T>) -> RpcResult<Value> {
    r.and_then(|v| {
        serde_json::to_value(v).map_err(|e| RpcError::new(code::INTERNAL_ERROR, e.to_string()))
    })
}

async fn dispatch(engine: &Engine, req: &Request, uid: u32) -> RpcResult<Value> {
    match req.method.as_str() {
        method::ENQUEUE => to_value(engine.enqueue(params(req)?, uid).await),
        method::STATUS => {
            let p: StatusParams = params(req)?;
            to_value(engine.status(p.goal.as_deref()))
        }
        method::SHOW => to_value(engine.show(&params::<GoalRef>(req)?.goal).await),
        method::PAUSE => to_value(engine.pause(&params::<GoalRef>(req)?.goal, uid).await),
        method::RESUME => to_value(engine.resume(&params::<GoalRef>(req)?.goal, uid).await),
        method::CANCEL => to_value(engine.cancel(&params::<GoalRef>(req)?.goal, uid).await),
        method::BEST => to_value(engine.best(&params::<GoalRef>(req)?.goal).await),
        method::EVENTS => to_value(engine.events(&params(req)?).await),
        method::CONTEXT => to_value(engine.context(&params::<GoalRef>(req)?.goal).await),
        method::GPUS => to_value(Ok(engine.gpus())),
        method::VERSION => to_value(engine.version()),
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("no method `{other}`"),
        )),
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
) -> anyhow::Result<()> {
    let mut rx = engine.subscribe();
    let goal = match p
        .goal
        .as_deref()
        .map(|g| engine.resolve_goal(g))
        .transpose()
    {
        Ok(g) => g,
        Err(e) => return send(&mut conn, &Response::err(id, e)).await,
    };
    let backlog = match engine.events(&p).await {
        Ok(b) => b,
        Err(e) => return send(&mut conn, &Response::err(id, e)).await,
    };
    let mut last = backlog.last().map_or(p.after.unwrap_or(0), |e| e.seq);
    if backlog.is_empty() && p.after.is_none() {
        last = engine.store().last_seq().unwrap_or(0);
    }
    send(
        &mut conn,
        &Response::ok(id, serde_json::to_value(&backlog)?),
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
                    send(&mut conn, &event_notification(&ev)?).await?;
                }
                // Too slow a reader: catch up from the log itself.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    catch_up(&mut conn, &engine, &goal, &mut last).await?
                }
                Err(_) => return Ok(()),
            },
            // The client hung up (or sent something: follow mode takes no more requests).
            r = conn.next() => if r.is_none() { return Ok(()) },
            _ = stop.cancelled() => return Ok(()),
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
        let more = engine.events(&page).await.unwrap_or_default();
        if more.is_empty() {
            return Ok(());
        }
        for ev in more {
            *last = ev.seq;
            send(conn, &event_notification(&ev)?).await?;
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
