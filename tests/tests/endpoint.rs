//! The `llm` agent against a flaky endpoint (a local HTTP server on 127.0.0.1 that plays a
//! script): transient failures (429 with Retry-After, bursts of 503, slow replies, resets,
//! garbled bodies) are retried with back-off and never fail the goal; a refused key fails
//! it at once, saying what to fix; the endpoint's `usage` is a budget.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::json;

/// What the stand-in endpoint does with one request.
#[derive(Clone)]
enum Step {
    /// An HTTP error status, with `Retry-After` seconds if given.
    Status(u16, Option<u64>),
    /// Answers only after this long (past the goal's request timeout).
    Slow(Duration),
    /// Reads the request and closes the connection without a reply.
    Reset,
    /// 200 with a body cut short.
    Garbled,
    /// A proposal of the demo seed with BLOCK_M, `usage.total_tokens` = 600.
    Propose(u64),
}

/// Serves `script` one step per connection; returns the endpoint's URL and, at the end,
/// when each request arrived.
fn serve(script: Vec<Step>) -> (String, std::thread::JoinHandle<Vec<Instant>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seed = std::fs::read_to_string(repo_root().join("kernels/demo/seeds/tiled.py")).unwrap();
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for step in script {
            let (mut stream, _) = listener.accept().unwrap();
            let _ = read_http_request(&stream);
            seen.push(Instant::now());
            match step {
                Step::Status(code, retry_after) => {
                    let headers =
                        retry_after.map_or(String::new(), |s| format!("Retry-After: {s}\r\n"));
                    let body =
                        json!({"error": {"message": format!("scripted {code}")}}).to_string();
                    write_http(&mut stream, &format!("{code} Scripted"), &headers, &body);
                }
                // On a thread of its own: the next request (after the client gave up)
                // must not queue behind it.
                Step::Slow(d) => {
                    std::thread::spawn(move || {
                        std::thread::sleep(d);
                        write_http(&mut stream, "200 OK", "", "{}");
                    });
                }
                Step::Reset => drop(stream),
                Step::Garbled => write_http(&mut stream, "200 OK", "", "{\"choices\": [{\"mess"),
                Step::Propose(block_m) => {
                    let reply =
                        chat_reply("Tiles.", &seed, &json!({"BLOCK_M": block_m}), Some(600));
                    write_http(&mut stream, "200 OK", "", &reply);
                }
            }
        }
        seen
    });
    (url, handle)
}

/// A daemon whose agent back-offs are scaled by `scale` (hours of 429s in seconds).
fn daemon(dir: &std::path::Path, scale: f64) -> Daemon {
    let config = dir.join("kerneld.toml");
    std::fs::write(&config, format!("agent_backoff_scale = {scale}\n")).unwrap();
    Daemon::start_env(
        dir,
        &["--config", config.to_str().unwrap()],
        &[("KD_TEST_KEY", "k")],
    )
}

fn llm_goal(dir: &std::path::Path, url: &str, budget: &str) -> std::path::PathBuf {
    let goal = dir.join("flaky.toml");
    std::fs::write(
        &goal,
        format!(
            "name = \"flaky\"\ntask = \"demo\"\n[budget]\n{budget}\n\
             [agent]\nkind = \"llm\"\nurl = \"{url}\"\nmodel = \"test-model\"\n\
             api_key_env = \"KD_TEST_KEY\"\ntimeout = \"1s\"\n"
        ),
    )
    .unwrap();
    goal
}

#[test]
fn a_goal_survives_half_an_hour_of_429s_and_carries_on() {
    let dir = TempDir::new("flaky");
    let scale = 0.001;
    let d = daemon(dir.path(), scale);
    // 1 long Retry-After (3000 s: 3 s here, time to look at `status`), 29 of 60 s: 77
    // minutes of rate limiting; then a burst of 503s, a slow reply, a reset, a garbled
    // body, and the endpoint recovers.
    let mut script = vec![Step::Status(429, Some(3000))];
    script.extend(std::iter::repeat_n(Step::Status(429, Some(60)), 29));
    script.extend(std::iter::repeat_n(Step::Status(503, None), 4));
    script.extend([
        Step::Slow(Duration::from_secs(3)),
        Step::Reset,
        Step::Garbled,
    ]);
    script.extend([Step::Propose(16), Step::Propose(64)]);
    let transient = script.len() - 2;
    let (url, server) = serve(script);
    // Two replies of 600 tokens spend the token budget before the iterations run out.
    let id = enqueue(
        &d,
        &llm_goal(
            dir.path(),
            &url,
            "iterations = 10\ntokens = 1000\nwall = \"2h\"",
        ),
    );

    let watch = std::process::Command::new(binary("kernelctl"))
        .args(["--socket", d.socket.to_str().unwrap(), "watch", &id])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While it waits out the long Retry-After, `status` and `show` say why.
    let mut said = false;
    d.wait_until(Duration::from_secs(20), |d| {
        said = d.goal(&id).waiting.is_some_and(|w| w.contains("HTTP 429"));
        said
    });
    assert!(
        said,
        "status never said the goal waits on the endpoint\n{}",
        d.log_text()
    );
    let show = kernelctl(&d.socket, &["show", &id]);
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    let status = kernelctl(&d.socket, &["status"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        show.contains("waiting") && show.contains("HTTP 429"),
        "{show}"
    );
    assert!(
        status.contains("flaky waits: the llm endpoint failed transiently"),
        "{status}"
    );

    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!(g.reason.as_deref(), Some("budget_tokens"));
    assert_eq!((g.evaluations, g.tokens), (2, 1200));

    // Every transient failure is an event with its wait; none counts as an agent failure.
    let events = d.events(0);
    let retries: Vec<(u32, u64, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentRetrying {
                attempt,
                retry_in_ms,
                message,
                ..
            } => Some((*attempt, *retry_in_ms, message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), transient, "{retries:?}");
    let attempts: Vec<u32> = retries.iter().map(|r| r.0).collect();
    assert_eq!(attempts, (1..=transient as u32).collect::<Vec<_>>());
    assert!(!events
        .iter()
        .any(|e| matches!(e.kind, EventKind::AgentFailed { .. })));
    // Retry-After honoured: each 429's wait is at least what the endpoint asked, scaled.
    assert!(retries[0].1 >= 3000, "{:?}", retries[0]);
    for r in &retries[1..30] {
        assert!(r.2.contains("HTTP 429") && r.1 >= 60, "{r:?}");
    }
    let asked_ms: u64 = retries[..30].iter().map(|r| r.1).sum();
    assert!(
        asked_ms as f64 / scale >= 30.0 * 60_000.0,
        "{asked_ms} ms scaled"
    );
    for (r, what) in retries[30..]
        .iter()
        .zip(["HTTP 503", "HTTP 503", "HTTP 503", "HTTP 503"])
    {
        assert!(r.2.contains(what), "{r:?}");
    }
    let rest: Vec<&str> = retries[34..].iter().map(|r| r.2.as_str()).collect();
    assert!(
        rest[0].contains("cannot reach") || rest[0].contains("reading"),
        "slow: {rest:?}"
    );
    assert!(rest[2].contains("not JSON"), "garbled: {rest:?}");

    let arrived = server.join().unwrap();
    // The first wait (3000 s scaled: 3 s) was really waited.
    assert!(arrived[1] - arrived[0] >= Duration::from_secs(3));

    // `watch`, following the goal from the start, showed it waiting on the endpoint.
    let watch = watch.wait_with_output().unwrap();
    let watch = String::from_utf8_lossy(&watch.stdout).into_owned();
    assert!(
        watch.contains("waiting: the llm endpoint failed transiently"),
        "{watch}"
    );
}

#[test]
fn a_refused_key_fails_the_goal_at_once() {
    let dir = TempDir::new("refused");
    let d = daemon(dir.path(), 1.0);
    let (url, server) = serve(vec![Step::Status(401, None)]);
    let id = enqueue(&d, &llm_goal(dir.path(), &url, "iterations = 5"));
    let started = Instant::now();
    let g = d.wait_terminal(&id, Duration::from_secs(60));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(g.state, GoalState::Failed, "{g:?}");
    let reason = g.reason.unwrap_or_default();
    assert!(
        reason.contains("HTTP 401")
            && reason.contains("$KD_TEST_KEY")
            && reason.contains("valid key"),
        "{reason}"
    );
    assert_eq!(server.join().unwrap().len(), 1);
    let failed = d
        .events(0)
        .iter()
        .filter(|e| matches!(e.kind, EventKind::AgentFailed { .. }))
        .count();
    assert_eq!(failed, 1);
}
