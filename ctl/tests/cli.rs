//! Runs the built `kernelctl` against a fake daemon on a temporary Unix socket.
//!
//! The fake answers with the real wire types; it checks the client (exit codes, output,
//! what it sends), not the daemon: the daemon's end-to-end tests live in `tests/`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use kerneld_protocol::wire::{
    code, BestResult, BestSummary, EvalResult, Event, EventKind, GoalState, GoalSummary,
    Notification, Request, Response, ResultClass, RpcError,
};
use serde_json::{json, Value};

/// What the fake daemon does with one request.
enum Reply {
    Ok(Value),
    Err(i64, &'static str),
    /// A follow: the backlog as the result, then these notifications, then hang up.
    Stream(Vec<Value>, Vec<Value>),
}

struct Fake {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    requests: Receiver<Request>,
}

impl Fake {
    /// Serves every connection on its own thread (watch holds two at once) until the test ends.
    fn start(answer: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("kerneld.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let (tx, requests) = channel();
        let answer = Arc::new(answer);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (tx, answer) = (tx.clone(), answer.clone());
                std::thread::spawn(move || serve(stream, &*answer, &tx));
            }
        });
        Fake {
            _dir: dir,
            socket,
            requests,
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        kernelctl()
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap()
    }

    fn methods(&self) -> Vec<String> {
        self.requests.try_iter().map(|r| r.method).collect()
    }
}

fn serve(
    stream: UnixStream,
    answer: &dyn Fn(&Request) -> Reply,
    tx: &std::sync::mpsc::Sender<Request>,
) {
    let mut writer = stream.try_clone().unwrap();
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let request: Request = serde_json::from_str(&line).unwrap();
        let id = request.id.clone().unwrap();
        let reply = answer(&request);
        let _ = tx.send(request);
        let (response, notes) = match reply {
            Reply::Ok(v) => (Response::ok(id, v), vec![]),
            Reply::Err(c, m) => (Response::err(id, RpcError::new(c, m)), vec![]),
            Reply::Stream(backlog, notes) => (Response::ok(id, Value::Array(backlog)), notes),
        };
        let streaming = !notes.is_empty();
        let _ = writeln!(writer, "{}", serde_json::to_string(&response).unwrap());
        for params in notes {
            let note = Notification {
                jsonrpc: "2.0".into(),
                method: "event".into(),
                params,
            };
            let _ = writeln!(writer, "{}", serde_json::to_string(&note).unwrap());
        }
        if streaming {
            return; // hang up, as a daemon that stops does
        }
    }
}

fn kernelctl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kernelctl"));
    cmd.env_remove("KERNELD_SOCKET")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn summary(state: GoalState) -> GoalSummary {
    GoalSummary {
        id: "g-1".into(),
        name: "mla-decode".into(),
        task: "mla".into(),
        state,
        reason: state.is_terminal().then(|| "target_reached".to_string()),
        iteration: 12,
        evaluations: 11,
        in_flight: 1,
        best: Some(best_summary(9, 1.8512)),
        priority: 0,
        gpus: 1,
        owner_uid: 1000,
        created_ms: 1_796_060_600_000,
        updated_ms: 1_796_060_900_000,
        wall_s: 312.0,
        gpu_s: 290.0,
        phases: None,
        tokens: 0,
        waiting: None,
        forked_from: None,
        environment_changed: None,
    }
}

fn best_summary(iteration: u64, speedup: f64) -> BestSummary {
    BestSummary {
        candidate: format!("cand{iteration:012}"),
        seed: "splitkv.py".into(),
        config: json!({"BLOCK_N": 64}),
        speedup,
        spread_pct: 2.1,
        iteration,
        interpreted: false,
        environment: None,
        measurements: Some(10),
        timing: Some("gpu".into()),
    }
}

fn event(seq: u64, kind: EventKind) -> Value {
    serde_json::to_value(Event {
        seq,
        time_ms: 1_796_060_600_000 + seq,
        goal: Some("g-1".into()),
        kind,
    })
    .unwrap()
}

fn finished(seq: u64, iteration: u64, speedup: Option<f64>) -> Value {
    let result = match speedup {
        Some(s) => EvalResult {
            correct: true,
            speedup: Some(s),
            spread_pct: Some(1.5),
            timing: Some("gpu".into()),
            ..EvalResult::failure(ResultClass::Ok, "", 2.0)
        },
        None => EvalResult::failure(ResultClass::CompileError, "triton: out of resources", 2.0),
    };
    event(
        seq,
        EventKind::EvaluationFinished {
            iteration,
            candidate: format!("c{iteration}"),
            device: "GPU-1".into(),
            result,
        },
    )
}

// ---------------------------------------------------------------------------

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["frobnicate"][..],
        &["show"],
        &["events", "g", "--limit", "many"],
        &[],
    ] {
        let out = kernelctl().args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn absent_socket_exits_3_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nothing-here.sock");
    let out = kernelctl()
        .arg("--socket")
        .arg(&socket)
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = text(&out.stderr);
    assert!(err.contains(&*socket.to_string_lossy()), "{err}");
    assert!(
        err.contains("systemctl start kerneld") && err.contains("kerneld --socket"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    // The environment variable names the socket just as well.
    let out = kernelctl()
        .env("KERNELD_SOCKET", &socket)
        .arg("gpus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).contains(&*socket.to_string_lossy()));
}

#[test]
fn status_prints_a_table() {
    let fake = Fake::start(|_| {
        Reply::Ok(serde_json::to_value(vec![summary(GoalState::Running)]).unwrap())
    });
    let out = fake.run(&["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("NAME") && lines[0].contains("BEST"),
        "{stdout}"
    );
    for part in [
        "g-1",
        "mla-decode",
        "running",
        "12",
        "11",
        "1.85×",
        "±2.1%",
        "5m12s",
    ] {
        assert!(lines[1].contains(part), "{part} missing: {stdout}");
    }
    assert!(!stdout.contains('\x1b'), "no colours off a terminal");
    assert_eq!(fake.methods(), ["status"]);
}

#[test]
fn status_json_is_the_result_as_is() {
    let served = serde_json::to_value(vec![summary(GoalState::Paused)]).unwrap();
    let answer = served.clone();
    let fake = Fake::start(move |_| Reply::Ok(answer.clone()));
    let out = fake.run(&["status", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, served);
}

#[test]
fn daemon_errors_exit_1_with_a_hint() {
    let fake = Fake::start(|_| Reply::Err(code::GOAL_NOT_FOUND, "no goal named nope"));
    let out = fake.run(&["show", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("kernelctl: no goal named nope\nhint: "),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn enqueue_sends_the_file_and_prints_only_the_id() {
    let fake =
        Fake::start(|_| Reply::Ok(json!({"id": "g-7", "name": "mla-decode", "created": true})));
    let dir = tempfile::tempdir().unwrap();
    let goal = dir.path().join("mla.toml");
    std::fs::write(&goal, "name = \"mla-decode\"\n").unwrap();
    let out = kernelctl()
        .current_dir(dir.path())
        .arg("--socket")
        .arg(&fake.socket)
        .args(["enqueue", "--unique", "mla.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "g-7\n");
    let request = fake.requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(request.method, "enqueue");
    assert_eq!(request.params["source"], "name = \"mla-decode\"\n");
    assert_eq!(request.params["unique"], true);
    let sent = PathBuf::from(request.params["path"].as_str().unwrap());
    assert!(sent.is_absolute() && sent.ends_with("mla.toml"), "{sent:?}");
}

#[test]
fn unreadable_goal_file_exits_1_naming_it() {
    let fake = Fake::start(|_| Reply::Ok(Value::Null));
    let out = fake.run(&["enqueue", "/no/such/goal.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("/no/such/goal.toml"),
        "{}",
        text(&out.stderr)
    );
    assert!(fake.methods().is_empty(), "nothing sent");
}

#[test]
fn best_writes_the_source_to_a_file() {
    let result = BestResult {
        goal: "g-1".into(),
        summary: best_summary(9, 1.85),
        source: "import triton\n".into(),
        result: EvalResult::failure(ResultClass::Ok, "", 1.0),
    };
    let served = serde_json::to_value(result).unwrap();
    let fake = Fake::start(move |_| Reply::Ok(served.clone()));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("best.py");
    let out = fake.run(&["best", "g-1", "-o", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "import triton\n");
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("1.85×"));

    let out = fake.run(&["best", "g-1"]);
    assert_eq!(text(&out.stdout), "import triton\n");
    assert!(out.stderr.is_empty());
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let many: Vec<Value> = (1..=5000).map(|i| finished(i, i, Some(1.0))).collect();
    let fake = Fake::start(move |_| Reply::Ok(Value::Array(many.clone())));
    let mut child = kernelctl()
        .arg("--socket")
        .arg(&fake.socket)
        .args(["events", "g-1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap(); // then dropped: `| head -1`
    assert!(first.contains("evaluation_finished"), "{first}");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn events_follow_json_prints_lines_until_the_daemon_hangs_up() {
    let fake = Fake::start(|_| {
        Reply::Stream(
            vec![finished(1, 1, Some(1.2))],
            vec![finished(2, 2, None), finished(3, 3, Some(2.0))],
        )
    });
    let out = fake.run(&["events", "g-1", "--follow", "--json"]);
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|v| v["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "the daemon went away: {}",
        text(&out.stderr)
    );
    let request = fake.requests.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(request.params["follow"], true);
}

#[test]
fn watch_ends_when_the_goal_completes() {
    let status_calls = Arc::new(AtomicUsize::new(0));
    let calls = status_calls.clone();
    let fake = Fake::start(move |req| match req.method.as_str() {
        "status" => {
            let state = if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                GoalState::Running
            } else {
                GoalState::Completed
            };
            Reply::Ok(serde_json::to_value(vec![summary(state)]).unwrap())
        }
        "events" => Reply::Stream(
            vec![],
            vec![event(
                5,
                EventKind::GoalStateChanged {
                    from: GoalState::Running,
                    to: GoalState::Completed,
                    reason: Some("target_reached".into()),
                },
            )],
        ),
        _ => Reply::Err(code::METHOD_NOT_FOUND, "no"),
    });
    let out = fake.run(&["watch", "mla-decode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.lines().last().unwrap().contains("completed"),
        "{stdout}"
    );
    assert!(!stdout.contains('\r'), "no redraws off a terminal");
}

/// A goal's history for the report: a best, a failure, a better best.
fn report_events() -> Vec<Value> {
    vec![
        finished(1, 1, Some(1.0)),
        event(
            2,
            EventKind::NewBest {
                best: best_summary(1, 1.0),
                previous: None,
            },
        ),
        finished(3, 2, None),
        finished(4, 3, Some(2.5)),
        event(
            5,
            EventKind::NewBest {
                best: best_summary(3, 2.5),
                previous: Some(1.0),
            },
        ),
    ]
}

#[test]
fn report_writes_an_svg() {
    let fake = Fake::start(|_| Reply::Ok(Value::Array(report_events())));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("progress.svg");
    let out = fake.run(&["report", "g-1", "-o", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&file).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("class=\"best\""));

    let out = fake.run(&["report", "g-1"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains("best 2.50× (GPU time) at iteration 3"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn completions_need_no_daemon() {
    let out = kernelctl()
        .args(["--socket", "/nonexistent.sock", "completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("kernelctl"));
}

#[test]
fn pause_reports_the_new_state_unless_quiet() {
    let fake = Fake::start(|req| {
        assert_eq!(req.params["goal"], "mla-decode");
        Reply::Ok(serde_json::to_value(summary(GoalState::Paused)).unwrap())
    });
    let out = fake.run(&["pause", "mla-decode"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("g-1: mla-decode  paused"),
        "{}",
        text(&out.stdout)
    );
    let out = fake.run(&["--quiet", "resume", "mla-decode"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    assert_eq!(fake.methods(), ["pause", "resume"]);
}

/// `--color` decides outright; under `auto`, NO_COLOR (non-empty) turns colour off and
/// CLICOLOR_FORCE turns it on even for a pipe, as anstream (and ripgrep, cargo) read them.
#[test]
fn colour_follows_the_flag_no_color_and_clicolor_force() {
    let fake = Fake::start(|_| {
        Reply::Ok(serde_json::to_value(vec![summary(GoalState::Running)]).unwrap())
    });
    let run = |env: &[(&str, &str)], args: &[&str]| -> String {
        let mut cmd = kernelctl();
        cmd.env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
        cmd.envs(env.iter().copied())
            .arg("--socket")
            .arg(&fake.socket);
        let out = cmd.args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let coloured = |s: &str| s.contains("\x1b[");
    assert!(!coloured(&run(&[], &["status"])), "a pipe: no colour");
    assert!(coloured(&run(&[("CLICOLOR_FORCE", "1")], &["status"])));
    assert!(
        coloured(&run(
            &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "")],
            &["status"]
        )),
        "an empty NO_COLOR does not count"
    );
    assert!(!coloured(&run(
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
        &["status"]
    )));
    assert!(coloured(&run(
        &[("NO_COLOR", "1")],
        &["--color", "always", "status"]
    )));
    assert!(!coloured(&run(
        &[("CLICOLOR_FORCE", "1")],
        &["status", "--color=never"]
    )));
    // Coloured or not, the same text.
    let plain = run(&[], &["status"]);
    let forced = run(&[], &["--color", "always", "status"]);
    let stripped = strip_escapes(&forced);
    assert_eq!(stripped, plain);

    let out = kernelctl()
        .args(["--color", "sometimes", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad --color is a usage error");
}

/// ESC [ ... letter sequences removed (what a terminal does not show).
fn strip_escapes(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A subcommand's help lists the global options once, under their own heading, in one
/// line each; the socket's default locations are told once, on the main page.
#[test]
fn global_options_are_shown_once_and_briefly() {
    let out = kernelctl().args(["status", "--help"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert_eq!(help.matches("Global options:").count(), 1, "{help}");
    for flag in ["--socket", "--json", "--quiet", "--color"] {
        assert_eq!(help.matches(flag).count(), 1, "{flag} once: {help}");
    }
    assert!(!help.contains("/run/kerneld"), "{help}");
    let main = text(&kernelctl().arg("--help").output().unwrap().stdout);
    assert!(
        main.contains("/run/kerneld/kerneld.sock") && main.contains("CLICOLOR_FORCE"),
        "{main}"
    );
}

/// `kernelctl man` writes roff from the clap definition: the main page to stdout, every
/// page with --out, and they say what --help says.
#[test]
fn man_pages_come_from_the_clap_definition() {
    let out = kernelctl()
        .args(["--socket", "/nonexistent.sock", "man"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.contains(".TH kernelctl 1"), "{page}");
    assert!(page.contains("Control kerneld"), "{page}");
    let dir = tempfile::tempdir().unwrap();
    let out = kernelctl()
        .args(["-q", "man", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for name in [
        "kernelctl.1",
        "kernelctl-status.1",
        "kernelctl-report.1",
        "kernelctl-man.1",
    ] {
        assert!(dir.path().join(name).is_file(), "{name} missing");
    }
    let report = std::fs::read_to_string(dir.path().join("kernelctl-report.1")).unwrap();
    assert!(
        report.contains(".png") && report.contains(".html"),
        "{report}"
    );
    // The goal file's keys, `timing` with its values (issue #23).
    let enqueue = std::fs::read_to_string(dir.path().join("kernelctl-enqueue.1")).unwrap();
    assert!(
        enqueue.contains("timing") && enqueue.contains("as_called"),
        "{enqueue}"
    );
}

/// -o picks the format by extension: PNG (a real image), HTML (chart and table), and a
/// name it cannot write is refused before the daemon is asked.
#[test]
fn report_writes_png_and_html_by_extension() {
    let fake = Fake::start(|_| Reply::Ok(Value::Array(report_events())));
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("r.png");
    let out = fake.run(&["report", "g-1", "-o", png.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let html = dir.path().join("r.html");
    let out = fake.run(&["report", "g-1", "-o", html.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg ") && page.contains("<table>"), "{page}");
    fake.methods();
    let out = fake.run(&[
        "report",
        "g-1",
        "-o",
        dir.path().join("r.jpg").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(".svg, .png or .html"),
        "{}",
        text(&out.stderr)
    );
    assert!(fake.methods().is_empty(), "nothing asked of the daemon");
}
