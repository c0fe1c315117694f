//! Metrics (issue #29): an opt-in, read-only Prometheus text endpoint
//! (`metrics_listen = "127.0.0.1:9464"` in kerneld.toml, or a unix socket's path), so a
//! lab that watches its GPUs in Prometheus and Grafana sees kerneld's goals beside them.
//!
//! Owner: `Endpoint`, bound at start before anything is written to the log (an address
//! in use stops the start with its name, and nothing is lost), served on tasks of its own.
//! API boundary: `Listen::parse`, `Endpoint::bind`, `Endpoint::serve`; the engine is only
//! read (`status`, `gpus`, and its event stream for the counters), never waited on with
//! its lock held. Invariants: GET /metrics only (anything else: 404 or 405), a request's
//! head bounded in size and time, at most `PARALLEL` scrapes at once.

mod render;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, Semaphore};
use tokio_util::sync::CancellationToken;

pub use render::{render, Counted, Scrape};

use crate::engine::Engine;
use crate::hooks::Hooks;
use crate::wire::{Event, EventKind, Health, StatusParams};

/// Scrapes served at once; more wait for a turn.
const PARALLEL: usize = 8;
/// A request's head: at most this many bytes, read within `HEAD_TIME`.
const HEAD_MAX: usize = 8192;
const HEAD_TIME: Duration = Duration::from_secs(5);

/// Where the endpoint listens.
#[derive(Debug, Clone, PartialEq)]
pub enum Listen {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

impl Listen {
    /// `HOST:PORT` (an IP address and a port) or an absolute path (a unix socket).
    pub fn parse(text: &str) -> Result<Listen, String> {
        if text.starts_with('/') {
            return Ok(Listen::Unix(PathBuf::from(text)));
        }
        text.parse().map(Listen::Tcp).map_err(|_| {
            format!(
                "`metrics_listen = \"{}\"` is neither an address and port (\"127.0.0.1:9464\", \
                 \"[::1]:9464\") nor an absolute unix socket path (\"/run/kerneld/metrics.sock\")",
                crate::wire::quote(text)
            )
        })
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(a) => write!(f, "{a}"),
            Listen::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

enum Bound {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// The bound endpoint, not yet serving.
pub struct Endpoint {
    listen: Listen,
    bound: Bound,
}

impl Endpoint {
    /// Binds `listen`; an address in use or a path that cannot be a socket is an error that
    /// names it and what to do.
    pub async fn bind(listen: &Listen) -> Result<Endpoint, String> {
        let fail = |e: std::io::Error| {
            let hint = match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    "another program listens there: choose another `metrics_listen` in \
                     kerneld.toml, or stop that program"
                }
                std::io::ErrorKind::PermissionDenied => {
                    "kerneld may not bind it (a port below 1024, or a directory it cannot write)"
                }
                _ => "check `metrics_listen` in kerneld.toml",
            };
            format!("metrics endpoint {listen}: {e}; {hint}")
        };
        let bound = match listen {
            Listen::Tcp(a) => Bound::Tcp(tokio::net::TcpListener::bind(a).await.map_err(fail)?),
            Listen::Unix(p) => {
                // A socket left by an earlier kerneld is replaced; any other file is not.
                if let Ok(m) = std::fs::symlink_metadata(p) {
                    use std::os::unix::fs::FileTypeExt;
                    if !m.file_type().is_socket() {
                        return Err(format!(
                            "metrics endpoint {}: a file that is not a socket is there; \
                             remove it or choose another path",
                            p.display()
                        ));
                    }
                    let _ = std::fs::remove_file(p);
                }
                Bound::Unix(tokio::net::UnixListener::bind(p).map_err(fail)?)
            }
        };
        Ok(Endpoint {
            listen: listen.clone(),
            bound,
        })
    }

    /// Serves scrapes until `stop`, and keeps the counters from the engine's events.
    pub async fn serve(self, engine: Arc<Engine>, hooks: Arc<Hooks>, stop: CancellationToken) {
        tracing::info!("metrics at {}/metrics", self.listen);
        let counters = Arc::new(Counters::default());
        tokio::spawn(count(counters.clone(), engine.subscribe(), stop.clone()));
        let src = Arc::new(Source {
            engine,
            hooks,
            counters,
            started_s: crate::store::now_ms() as f64 / 1000.0,
        });
        let permits = Arc::new(Semaphore::new(PARALLEL));
        loop {
            let conn: Box<dyn Conn> = tokio::select! {
                _ = stop.cancelled() => break,
                c = accept(&self.bound) => match c {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!("metrics endpoint: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let src = src.clone();
            tokio::spawn(async move {
                let _ = answer(conn, &src).await;
                drop(permit);
            });
        }
        if let Listen::Unix(p) = &self.listen {
            let _ = std::fs::remove_file(p);
        }
    }
}

trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

async fn accept(b: &Bound) -> std::io::Result<Box<dyn Conn>> {
    Ok(match b {
        Bound::Tcp(l) => Box::new(l.accept().await?.0),
        Bound::Unix(l) => Box::new(l.accept().await?.0),
    })
}

struct Source {
    engine: Arc<Engine>,
    hooks: Arc<Hooks>,
    counters: Arc<Counters>,
    started_s: f64,
}

impl Source {
    async fn scrape(&self) -> String {
        let goals = self
            .engine
            .status(&StatusParams::default(), 0)
            .unwrap_or_default();
        let gpus = self.engine.gpus().await;
        render(&Scrape {
            version: env!("CARGO_PKG_VERSION"),
            goals: &goals,
            gpus: &gpus,
            counted: &self.counters.snapshot(),
            hooks: &self.hooks.stats(),
            started_s: self.started_s,
        })
    }
}

/// The request line of a head (`GET /metrics HTTP/1.1`): method and path.
fn request_line(head: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut parts = text.lines().next()?.split(' ');
    let method = parts.next()?.to_string();
    let path = parts.next()?.split('?').next()?.to_string();
    Some((method, path))
}

/// One request, one answer, then the connection closes.
async fn answer(mut conn: Box<dyn Conn>, src: &Source) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = tokio::time::timeout(HEAD_TIME, async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
            let n = conn.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
            if head.len() > HEAD_MAX {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    let (status, body, kind) = match (read, request_line(&head)) {
        (Ok(Ok(())), Some((m, p))) if head.len() <= HEAD_MAX => match (m.as_str(), p.as_str()) {
            ("GET" | "HEAD", "/metrics") => (
                "200 OK",
                src.scrape().await,
                "text/plain; version=0.0.4; charset=utf-8",
            ),
            ("GET" | "HEAD", "/") => (
                "200 OK",
                "kerneld metrics: GET /metrics\n".to_string(),
                "text/plain",
            ),
            ("GET" | "HEAD", _) => ("404 Not Found", "only /metrics\n".into(), "text/plain"),
            _ => (
                "405 Method Not Allowed",
                "read-only: GET /metrics\n".into(),
                "text/plain",
            ),
        },
        _ => (
            "400 Bad Request",
            "not an HTTP request\n".into(),
            "text/plain",
        ),
    };
    let head_only = head.starts_with(b"HEAD ");
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(reply.as_bytes()).await?;
    if !head_only {
        conn.write_all(body.as_bytes()).await?;
    }
    conn.shutdown().await
}

/// The counters kept since start, from the engine's committed events.
#[derive(Default)]
pub struct Counters {
    counted: Mutex<Counted>,
}

impl Counters {
    pub fn add(&self, ev: &Event) {
        let mut c = self.counted.lock().unwrap_or_else(|e| e.into_inner());
        match &ev.kind {
            EventKind::EvaluationFinished { result, .. } => {
                *c.evaluations
                    .entry(result.class.as_str().to_string())
                    .or_default() += 1;
            }
            EventKind::EvaluationAborted { .. } => c.aborted += 1,
            EventKind::NewBest { .. } => c.new_bests += 1,
            EventKind::DeviceHealth {
                health: Health::Drained,
                ..
            } => c.drains += 1,
            _ => {}
        }
    }

    pub fn snapshot(&self) -> Counted {
        self.counted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

async fn count(c: Arc<Counters>, mut rx: broadcast::Receiver<Event>, stop: CancellationToken) {
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = stop.cancelled() => return,
        };
        match ev {
            Ok(ev) => c.add(&ev),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("metrics missed {n} events: their counters are short by them")
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_an_address_or_an_absolute_path() {
        assert_eq!(
            Listen::parse("127.0.0.1:9464").unwrap(),
            Listen::Tcp("127.0.0.1:9464".parse().unwrap())
        );
        assert!(matches!(Listen::parse("[::1]:9464"), Ok(Listen::Tcp(_))));
        assert_eq!(
            Listen::parse("/run/kerneld/metrics.sock").unwrap(),
            Listen::Unix("/run/kerneld/metrics.sock".into())
        );
        for bad in ["localhost:9464", "9464", "metrics.sock", "127.0.0.1"] {
            let e = Listen::parse(bad).unwrap_err();
            assert!(e.contains("neither an address and port"), "{e}");
        }
    }

    #[test]
    fn the_request_line_gives_method_and_path() {
        assert_eq!(
            request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some(("GET".into(), "/metrics".into()))
        );
        assert_eq!(request_line(b"\xff\xfe"), None);
    }

    #[test]
    fn the_counters_follow_results_aborts_bests_and_drains() {
        use crate::wire::{EvalResult, ResultClass};
        let c = Counters::default();
        let ev = |kind| Event {
            seq: 1,
            time_ms: 1,
            goal: Some("g1".into()),
            kind,
        };
        for class in [ResultClass::Ok, ResultClass::Ok, ResultClass::WrongResult] {
            c.add(&ev(EventKind::EvaluationFinished {
                iteration: 1,
                candidate: "c".into(),
                device: "cpu".into(),
                result: EvalResult::failure(class, "", 0.1),
            }));
        }
        c.add(&ev(EventKind::EvaluationAborted {
            iteration: 2,
            candidate: "c".into(),
            device: "cpu".into(),
            reason: "measured across a hardware fault".into(),
        }));
        for health in [Health::Drained, Health::Healthy] {
            c.add(&ev(EventKind::DeviceHealth {
                device: "GPU-0".into(),
                health,
                reason: None,
            }));
        }
        let got = c.snapshot();
        assert_eq!(got.evaluations["ok"], 2);
        assert_eq!(got.evaluations["wrong_result"], 1);
        assert_eq!((got.aborted, got.new_bests, got.drains), (1, 0, 1));
    }

    #[tokio::test]
    async fn a_port_in_use_is_named_with_what_to_do() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = Listen::Tcp(taken.local_addr().unwrap());
        let e = Endpoint::bind(&listen).await.err().unwrap();
        assert!(
            e.starts_with(&format!("metrics endpoint {listen}: "))
                && e.contains("choose another `metrics_listen`"),
            "{e}"
        );
    }
}
