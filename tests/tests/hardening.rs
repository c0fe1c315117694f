//! Defences of the real binaries against their environment: workers that must not outlive
//! the daemon, a spool that cannot be emptied, and clients that hold the socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kerneld::wire::{self, EventKind};
use kerneld_e2e::*;
use serde_json::{json, Value};

fn alive(pid: i32) -> bool {
    // A zombie waiting for init to reap it counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z") | Some("X")
        ),
        Err(_) => false,
    }
}

#[test]
fn a_worker_stuck_in_a_candidate_dies_with_its_daemon() {
    let dir = TempDir::new("orphan");
    let goal = fault_goal(dir.path(), "hang", &["python_hang.py"], 1);
    let d = Daemon::start_with(dir.path(), &["--eval-timeout", "10m"]);
    enqueue(&d, &goal);
    let started = d.wait_until(Duration::from_secs(120), |d| {
        d.events(0)
            .iter()
            .any(|e| matches!(e.kind, EventKind::EvaluationStarted { .. }))
    });
    assert!(started, "the evaluation never started\n{}", d.log_text());
    // Well inside the candidate's endless loop.
    std::thread::sleep(Duration::from_secs(2));
    let workers = d.worker_pids();
    assert!(!workers.is_empty(), "no worker found\n{}", d.log_text());
    let log = d.log.clone();

    let t0 = Instant::now();
    d.kill9();
    while workers.iter().any(|&p| alive(p)) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t0.elapsed();
    let left: Vec<i32> = workers.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        left.is_empty(),
        "workers {left:?} outlived the daemon\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert!(took < Duration::from_secs(2), "workers took {took:?} to go");
    eprintln!("workers gone {took:?} after the daemon's SIGKILL");
}

#[test]
fn a_spool_file_that_cannot_be_moved_is_enqueued_once_per_content() {
    let dir = TempDir::new("spool-stuck");
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    // `done` is a file, not a directory: no move can succeed (even for root).
    std::fs::write(spool.join("done"), "in the way\n").unwrap();
    let d = Daemon::start_with(dir.path(), &["--spool", spool.to_str().unwrap()]);
    let goal = demo_goal(dir.path(), "stuck", 1, "");
    std::fs::rename(&goal, spool.join("stuck.toml")).unwrap();

    let goals_named = |d: &Daemon| d.status().iter().filter(|g| g.name == "stuck").count();
    assert!(
        d.wait_until(Duration::from_secs(30), |d| goals_named(d) == 1),
        "not enqueued\n{}",
        d.log_text()
    );
    // Once it completed, `unique` no longer protects it: only the spool's memory does.
    let id = d
        .status()
        .iter()
        .find(|g| g.name == "stuck")
        .unwrap()
        .id
        .clone();
    d.wait_terminal(&id, Duration::from_secs(120));
    for i in 0..3 {
        // Any change in the directory makes the spool rescan it.
        std::fs::write(spool.join(format!("nudge-{i}.txt")), "x").unwrap();
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(spool.join("stuck.toml").is_file());
    assert_eq!(goals_named(&d), 1, "enqueued again\n{}", d.log_text());
    let log = d.log_text();
    assert_eq!(
        log.matches("cannot move it to done/").count(),
        1,
        "the stuck file is reported once\n{log}"
    );

    // New content at the same path is a new submission.
    let edited = std::fs::read_to_string(spool.join("stuck.toml")).unwrap() + "\n# again\n";
    std::fs::write(spool.join("stuck.toml"), edited).unwrap();
    assert!(
        d.wait_until(Duration::from_secs(30), |d| goals_named(d) == 2),
        "the edited file was not taken\n{}",
        d.log_text()
    );
}

fn connect(d: &Daemon) -> (UnixStream, BufReader<UnixStream>) {
    let s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn read_json(r: &mut BufReader<UnixStream>) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

fn at_eof(r: &mut BufReader<UnixStream>) -> bool {
    let mut rest = String::new();
    matches!(r.read_line(&mut rest), Ok(0))
}

const VERSION: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"version\"}\n";

#[test]
fn a_request_that_is_not_utf8_is_answered_and_the_connection_goes_on() {
    let dir = TempDir::new("utf8");
    let d = Daemon::start(dir.path());
    let (mut s, mut r) = connect(&d);
    s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}\n")
        .unwrap();
    let v = read_json(&mut r);
    assert_eq!(v["error"]["code"], -32700, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not UTF-8"),
        "{v}"
    );
    s.write_all(VERSION).unwrap();
    let v = read_json(&mut r);
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"]["mode"], "cpu");
}

#[test]
fn connections_beyond_the_cap_are_refused_with_a_reason() {
    let dir = TempDir::new("conncap");
    // Root (this test) may then fill the whole daemon; every uid's own cap is tested
    // in hardening_limits.rs.
    let d = Daemon::start_env(dir.path(), &[], &[("KERNELD_RPC_MAX_PER_USER", "64")]);
    // Each one answered a request, so each is surely counted.
    let mut open = Vec::new();
    for _ in 0..64 {
        let (mut s, mut r) = connect(&d);
        s.write_all(VERSION).unwrap();
        assert_eq!(read_json(&mut r)["id"], 7);
        open.push((s, r));
    }
    let (_s, mut r) = connect(&d);
    let v = read_json(&mut r);
    assert_eq!(v["error"]["code"], wire::code::TOO_MANY_CONNECTIONS, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("64 connections"),
        "{v}"
    );
    assert!(at_eof(&mut r), "a refused connection is closed");

    // One closes: a newcomer gets in again.
    drop(open.pop());
    assert!(
        d.wait_until(Duration::from_secs(10), |d| try_call(
            &d.socket,
            kerneld::wire::method::VERSION,
            json!({})
        )
        .is_ok_and(|v| v.get("result").is_some())),
        "no connection accepted after one closed"
    );
}

#[test]
fn an_unfinished_line_times_out_but_idle_and_following_clients_stay() {
    let dir = TempDir::new("partial");
    let d = Daemon::start_env(dir.path(), &[], &[("KERNELD_RPC_LINE_TIMEOUT_MS", "1000")]);

    let (mut follower, mut follow_r) = connect(&d);
    follower
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"events\",\"params\":{\"follow\":true}}\n",
        )
        .unwrap();
    assert_eq!(read_json(&mut follow_r)["id"], 1);
    let (mut idle, mut idle_r) = connect(&d);

    let t0 = Instant::now();
    let (mut slow, mut slow_r) = connect(&d);
    slow.write_all(b"{\"jsonrpc\":\"2.0\",").unwrap();
    let v = read_json(&mut slow_r);
    let took = t0.elapsed();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not finished"),
        "{v}"
    );
    assert!(at_eof(&mut slow_r));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );

    // Well past the timeout, the idle client asks and the follower hears of a new goal.
    std::thread::sleep(Duration::from_millis(1500));
    idle.write_all(VERSION).unwrap();
    assert_eq!(read_json(&mut idle_r)["id"], 7);
    let goal = demo_goal(dir.path(), "heard", 1, "");
    let id = enqueue(&d, &goal);
    let note = read_json(&mut follow_r);
    assert_eq!(
        note["method"],
        kerneld::wire::method::EVENT_NOTIFICATION,
        "{note}"
    );
    assert_eq!(note["params"]["goal"], id.as_str(), "{note}");
}

/// The systemd notify protocol as the unit sees it: READY once the socket accepts, then
/// WATCHDOG=1 and STATUS= from the scheduler's tick, RELOADING/READY around a SIGHUP,
/// STOPPING on SIGTERM.
#[test]
fn systemd_hears_ready_watchdog_status_reload_and_stop() {
    use std::os::unix::net::UnixDatagram;
    let dir = TempDir::new("notify");
    let path = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&path).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let notify = path.to_str().unwrap().to_string();
    // systemd sets WATCHDOG_PID to the service's pid: `exec` keeps the shell's pid.
    let mut child = Reap(
        Command::new("sh")
            .arg("-c")
            .arg("WATCHDOG_PID=$$ exec \"$0\" \"$@\"")
            .arg(binary("kerneld"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--socket")
            .arg(dir.path().join("sock"))
            .arg("--kernels")
            .arg(repo_root().join("kernels"))
            .arg("--python")
            .arg(python())
            .arg("--cpu")
            .env("NOTIFY_SOCKET", &notify)
            .env("WATCHDOG_USEC", "4000000") // pings at least every 4 s
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut heard: Vec<String> = Vec::new();
    let listen_until =
        |heard: &mut Vec<String>, deadline: Instant, want: &dyn Fn(&[String]) -> bool| {
            let mut buf = [0u8; 4096];
            while Instant::now() < deadline && !want(heard) {
                if let Ok(n) = listener.recv(&mut buf) {
                    heard.extend(
                        String::from_utf8_lossy(&buf[..n])
                            .lines()
                            .map(str::to_string),
                    );
                }
            }
        };
    let has = |h: &[String], what: &str| h.iter().any(|l| l.starts_with(what));
    listen_until(&mut heard, Instant::now() + Duration::from_secs(20), &|h| {
        has(h, "READY=1") && has(h, "WATCHDOG=1") && has(h, "STATUS=")
    });
    assert!(has(&heard, "READY=1"), "{heard:?}");
    assert!(has(&heard, "WATCHDOG=1"), "pinged from the tick: {heard:?}");
    let status = heard
        .iter()
        .find(|l| l.starts_with("STATUS=") && l.contains("devices busy"));
    assert!(
        status.is_some(),
        "a status line with goals and devices: {heard:?}"
    );

    heard.clear();
    let pid = nix::unistd::Pid::from_raw(child.0.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    listen_until(&mut heard, Instant::now() + Duration::from_secs(10), &|h| {
        has(h, "RELOADING=1") && has(h, "READY=1")
    });
    assert!(
        has(&heard, "RELOADING=1") && has(&heard, "MONOTONIC_USEC="),
        "{heard:?}"
    );
    assert!(has(&heard, "READY=1"), "{heard:?}");

    heard.clear();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    listen_until(&mut heard, Instant::now() + Duration::from_secs(10), &|h| {
        has(h, "STOPPING=1")
    });
    assert!(has(&heard, "STOPPING=1"), "{heard:?}");
    let status = child.0.wait().unwrap();
    assert!(status.success(), "clean stop: {status}");
}

/// A child process killed when the test ends, however it ends.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The sandbox trials (a Python start; in GPU mode CUDA inits, seconds) run beside the
/// first requests: `status` answers while they run, and what needs their finding
/// (`version`, an enqueue's admission) waits for it rather than failing.
#[test]
fn the_socket_answers_while_the_sandbox_trial_runs() {
    let dir = TempDir::new("slowtrial");
    let started = dir.path().join("probe-started");
    let ended = dir.path().join("probe-ended");
    // The real kerneld-sandbox, whose probe takes 6 s.
    let slow = dir.path().join("slow-sandbox");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --probe ]; then touch {s}; sleep 6; touch {e}; fi\nexec {bin} \"$@\"\n",
            s = started.display(),
            e = ended.display(),
            bin = binary("kerneld-sandbox").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("kerneld.toml");
    std::fs::write(
        &config,
        format!("sandbox_binary = {:?}\n", slow.display().to_string()),
    )
    .unwrap();
    let mut args = daemon_args(dir.path());
    args.extend(["--config".into(), config.into_os_string()]);
    let d = Daemon::spawn(dir.path(), &args, &[]);

    let t0 = Instant::now();
    let status = loop {
        if let Ok(v) = try_call(&d.socket, wire::method::STATUS, json!({})) {
            if v.get("result").is_some() {
                break v;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{}", d.log_text());
        std::thread::sleep(Duration::from_millis(10));
    };
    // (The trial may not even have begun: it runs on its own task.)
    assert!(
        !ended.exists(),
        "status answered only after the trial: {status}"
    );
    // `version` reports the sandbox, so it waits for the trial's finding.
    let version = d.call(wire::method::VERSION, json!({}));
    assert!(
        started.exists() && ended.exists(),
        "version answered before the trial ended"
    );
    let sandbox = &version["sandbox"];
    assert!(
        sandbox["probe"]["landlock_abi"].is_u64(),
        "the trial's probe is reported: {version}"
    );
    let id = enqueue(&d, &demo_goal(dir.path(), "after-trial", 1, ""));
    assert!(!id.is_empty());
    assert!(d.stop().success());
}
