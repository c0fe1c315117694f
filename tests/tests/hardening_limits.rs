//! The defects of issue #18, each through the real binaries: what a hostile or careless
//! local user could do to the daemon and its clients, and a damaged log.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kerneld::wire::{self, code};
use kerneld_e2e::*;
use serde_json::{json, Value};

/// One raw line to the daemon and the one line it answers (None: no answer in 5 s).
fn raw_exchange(socket: &Path, line: &str) -> Option<Value> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut reply = String::new();
    match BufReader::new(s).read_line(&mut reply) {
        Ok(n) if n > 0 => Some(serde_json::from_str(&reply).unwrap()),
        _ => None,
    }
}

/// Enqueues a goal text through the socket as root; the reply (result or error).
fn enqueue_text(d: &Daemon, dir: &Path, text: &str) -> Value {
    let path = dir.join("goal.toml");
    try_call(
        &d.socket,
        wire::method::ENQUEUE,
        json!({"path": path, "source": text, "unique": false, "files": {}}),
    )
    .unwrap()
}

fn error_message(reply: &Value) -> String {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error, got {reply}"))
        .to_string()
}

#[test]
fn a_request_with_a_null_id_gets_an_answer() {
    let dir = TempDir::new("nullid");
    let d = Daemon::start(dir.path());
    let reply = raw_exchange(
        &d.socket,
        r#"{"jsonrpc":"2.0","id":null,"method":"version"}"#,
    )
    .expect("no answer to a request with id null: its client would wait forever");
    assert_eq!(reply["id"], Value::Null, "{reply}");
    assert!(reply["result"]["version"].is_string(), "{reply}");
    // A true notification (no id at all) still gets none; the connection goes on.
    let mut s = UnixStream::connect(&d.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"version\"}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"version\"}\n")
        .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 7, "{v}");
}

/// Starts kerneld on `dir` expecting it to refuse: its exit status and what it said.
fn start_refused(dir: &Path) -> (i32, String) {
    let (status, text) = run_bounded(
        Command::new(binary("kerneld"))
            .args(daemon_args(dir))
            .env("KERNELD_LOG", "info"),
        Duration::from_secs(30),
    );
    let status = status.unwrap_or_else(|| panic!("kerneld neither started nor stopped:\n{text}"));
    (status.code().unwrap_or(-1), text)
}

#[test]
fn an_empty_log_file_stops_the_start_and_is_left_as_it_was() {
    let dir = TempDir::new("emptylog");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let log = state.join("kerneld.redb");
    std::fs::write(&log, b"").unwrap();
    let (code, text) = start_refused(dir.path());
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(log.to_str().unwrap()) && text.contains("empty"),
        "the message must name the file and what is wrong: {text}"
    );
    assert!(
        text.contains("kerneld check") || text.contains("backup"),
        "{text}"
    );
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        0,
        "the file was replaced"
    );
}

/// A log with one goal in it, written by a daemon that stopped cleanly.
fn log_with_a_goal(dir: &Path) -> std::path::PathBuf {
    let d = Daemon::start(dir);
    let id = enqueue(&d, &demo_goal(dir, "keep", 1000, ""));
    d.call(wire::method::PAUSE, json!({"goal": id}));
    let log = d.state_dir.join("kerneld.redb");
    assert!(d.stop().success());
    log
}

#[test]
fn a_truncated_log_stops_the_start_with_a_message_not_a_panic() {
    let dir = TempDir::new("trunclog");
    let log = log_with_a_goal(dir.path());
    let len = std::fs::metadata(&log).unwrap().len();
    for keep in [len / 2, 4096, 100] {
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_len(keep).unwrap();
        drop(f);
        let (code, text) = start_refused(dir.path());
        assert_ne!(
            code, 101,
            "kerneld panicked on a log cut to {keep} bytes:\n{text}"
        );
        assert!(!text.contains("panicked"), "{text}");
        assert_eq!(code, 1, "{text}");
        assert!(
            text.contains(log.to_str().unwrap()) && text.contains("kerneld check"),
            "cut to {keep} of {len} bytes: the message must name the file and what to do: {text}"
        );
        assert_eq!(
            std::fs::metadata(&log).unwrap().len(),
            keep,
            "the file was changed"
        );
    }
}

#[test]
fn kerneld_check_reports_a_sound_log_and_a_damaged_one() {
    let dir = TempDir::new("checklog");
    let log = log_with_a_goal(dir.path());
    let check = |what: &str| {
        let (status, text) = run_bounded(
            Command::new(binary("kerneld"))
                .arg("check")
                .arg("--state-dir")
                .arg(dir.path().join("state")),
            Duration::from_secs(60),
        );
        let code = status.and_then(|s| s.code()).unwrap_or(-1);
        eprintln!("check ({what}): exit {code}\n{text}");
        (code, text)
    };
    let (code, text) = check("sound");
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("1 goal") && text.contains("events"), "{text}");
    assert!(text.contains("no problem"), "{text}");

    let len = std::fs::metadata(&log).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (code, text) = check("truncated");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains(log.to_str().unwrap()), "{text}");
    // Its advice is what to do next, not to run what just ran.
    assert!(
        text.contains("backup") && !text.contains("run `kerneld check`"),
        "{text}"
    );

    std::fs::remove_file(&log).unwrap();
    let (code, text) = check("missing");
    assert_eq!(code, 2, "{text}");
}

#[test]
fn kernelctl_enqueue_refuses_special_and_oversized_files_without_reading_them() {
    let dir = TempDir::new("goalfiles");
    let d = Daemon::start(dir.path());
    let fifo = dir.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let big = dir.path().join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(20 << 20).unwrap();
    let cases: [(&Path, &str); 4] = [
        (Path::new("/dev/zero"), "not a regular file"),
        (&fifo, "not a regular file"),
        (dir.path(), "not a regular file"),
        (&big, "at most"),
    ];
    for (file, expected) in cases {
        let (status, text) = run_bounded(
            Command::new(binary("kernelctl"))
                .arg("--socket")
                .arg(&d.socket)
                .arg("enqueue")
                .arg(file),
            Duration::from_secs(10),
        );
        let status = status.unwrap_or_else(|| panic!("kernelctl enqueue {} hung", file.display()));
        assert_eq!(status.code(), Some(1), "{}: {text}", file.display());
        assert!(
            text.contains(expected) && text.contains(file.to_str().unwrap()),
            "{}: {text}",
            file.display()
        );
    }
    assert!(d.status().is_empty());
}

#[test]
fn names_budgets_and_stop_values_outside_their_ranges_are_refused_naming_the_range() {
    let dir = TempDir::new("ranges");
    let d = Daemon::start(dir.path());
    let goal = |name: &str, budget: &str, stop: &str| {
        format!("name = \"{name}\"\ntask = \"demo\"\n[budget]\n{budget}\n[stop]\n{stop}\n")
    };
    let long_name = "n".repeat(100_000);
    let cases = [
        (
            goal("a", "iterations = 1000000000000000000", ""),
            "budget.iterations",
        ),
        (
            goal("a", "", "plateau = 1000000000000000000"),
            "stop.plateau",
        ),
        (goal("a", "gpu_hours = 1e308", ""), "budget.gpu_hours"),
        (
            goal("a", "", "target_speedup = 1e300"),
            "stop.target_speedup",
        ),
        (goal(&long_name, "", ""), "name"),
        (
            goal("a", "tokens = 9223372036854775807", ""),
            "budget.tokens",
        ),
        (
            goal("a", "price_per_1k_tokens = 0.01\ncost = 1e308", ""),
            "budget.cost",
        ),
        (
            goal("a", "price_per_1k_tokens = 1e308\ncost = 20.0", ""),
            "budget.price_per_1k_tokens",
        ),
    ];
    for (text, field) in &cases {
        let reply = enqueue_text(&d, dir.path(), text);
        let m = error_message(&reply);
        assert_eq!(reply["error"]["code"], code::INVALID_GOAL, "{field}: {m}");
        assert!(
            m.contains(field) && m.contains("between"),
            "{field}: the error must name the field and its range: {}",
            &m[..m.len().min(400)]
        );
    }
    assert!(d.status().is_empty());
}

#[test]
fn huge_names_cannot_break_status_for_everyone() {
    let dir = TempDir::new("hugenames");
    let d = Daemon::start(dir.path());
    for i in 0..3 {
        let name = format!("{}{i}", "x".repeat(3_500_000));
        let reply = enqueue_text(
            &d,
            dir.path(),
            &format!("name = \"{name}\"\ntask = \"demo\"\n"),
        );
        assert!(reply.get("error").is_some(), "a 3.5 MB name was accepted");
    }
    let out = kernelctl(&d.socket, &["status"]);
    assert!(out.status.success(), "{}", output_text(&out));
}

#[test]
fn root_holding_many_connections_does_not_lock_other_users_out() {
    let Some(dir) = nobody_dir("rootconns") else {
        return;
    };
    let d = Daemon::start(dir.path());
    // As many idle connections as the daemon takes in all, from root.
    let held: Vec<UnixStream> = (0..64)
        .map(|_| UnixStream::connect(&d.socket).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let out = kernelctl_as_nobody(&d.socket, &["status"]);
    eprintln!("{}", output_text(&out));
    assert!(
        out.status.success(),
        "another user is locked out by root's idle connections: {}",
        output_text(&out)
    );
    drop(held);
}

#[test]
fn other_users_holding_connections_leave_room_for_root() {
    let Some(dir) = nobody_dir("nobodyconns") else {
        return;
    };
    let d = Daemon::start(dir.path());
    // Several users' worth of idle clients, all from uid 65534 here, is what one user can
    // hold at most; root still gets in.
    let mut holders = Vec::new();
    for _ in 0..64 {
        holders.push(
            Command::new(AS_NOBODY[0])
                .args(&AS_NOBODY[1..])
                .arg(binary("kernelctl"))
                .arg("--socket")
                .arg(&d.socket)
                .args(["events", "--follow"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let out = kernelctl(&d.socket, &["status"]);
    let mut still_following = 0;
    for mut h in holders {
        still_following += usize::from(h.try_wait().unwrap().is_none());
        let _ = h.kill();
        let _ = h.wait();
    }
    assert_eq!(still_following, 16, "the per-user cap (16) did not hold");
    assert!(
        out.status.success(),
        "root locked out: {}",
        output_text(&out)
    );
}

#[test]
fn a_name_resolves_to_the_callers_own_goal_first_and_ambiguity_lists_the_candidates() {
    let Some(dir) = nobody_dir("names") else {
        return;
    };
    let d = Daemon::start(dir.path());
    let goal = demo_goal(dir.path(), "shared", 100_000, "");
    std::fs::set_permissions(&goal, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let path = goal.to_str().unwrap();
    let enqueue_as = |wrapper: &[&str]| {
        let out = kernelctl_under(wrapper, &d.socket, &["enqueue", path]);
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let roots = enqueue_as(&[]);
    d.call(wire::method::CANCEL, json!({"goal": roots}));
    let nobodys = enqueue_as(&AS_NOBODY);
    let out = kernelctl_as_nobody(&d.socket, &["pause", &nobodys]);
    assert!(out.status.success(), "{}", output_text(&out));

    // Root's own (finished) goal of that name, not the other user's active one.
    let out = kernelctl(&d.socket, &["--json", "status", "shared"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v[0]["id"],
        roots.as_str(),
        "root's `shared` resolved to {v}"
    );
    let out = kernelctl(&d.socket, &["best", "shared"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&roots),
        "best named another goal: {}",
        output_text(&out)
    );
    // And the other user's name to theirs.
    let out = kernelctl_as_nobody(&d.socket, &["--json", "status", "shared"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["id"], nobodys.as_str(), "{v}");

    d.call(wire::method::CANCEL, json!({"goal": nobodys}));
}

#[test]
fn an_ambiguous_name_is_an_error_that_lists_the_candidates() {
    let Some(dir) = nobody_dir("ambig") else {
        return;
    };
    let d = Daemon::start(dir.path());
    let goal = demo_goal(dir.path(), "twin", 100_000, "");
    std::fs::set_permissions(&goal, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let out = kernelctl_as_nobody(&d.socket, &["enqueue", goal.to_str().unwrap()]);
        assert!(out.status.success(), "{}", output_text(&out));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let _ = kernelctl_as_nobody(&d.socket, &["pause", &id]);
        ids.push(id);
    }
    // Root owns no `twin`: both of the other user's are candidates.
    let out = kernelctl(&d.socket, &["show", "twin"]);
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(ids.iter().all(|id| text.contains(id.as_str())), "{text}");
    for id in ids {
        d.call(wire::method::CANCEL, json!({"goal": id}));
    }
}

#[test]
fn a_refused_change_is_audited_in_the_daemons_log() {
    let Some(dir) = nobody_dir("audit") else {
        return;
    };
    let d = Daemon::start(dir.path());
    let id = enqueue(&d, &demo_goal(dir.path(), "mine", 100_000, ""));
    d.call(wire::method::PAUSE, json!({"goal": id}));
    for verb in ["cancel", "resume"] {
        let out = kernelctl_as_nobody(&d.socket, &[verb, &id]);
        assert!(!out.status.success(), "{}", output_text(&out));
    }
    let log = d.log_text();
    for verb in ["cancel", "resume"] {
        assert!(
            audited(&log, NOBODY, verb, Some(&id)),
            "no audit line for the refused {verb}:\n{log}"
        );
    }
    // A goal file refused at enqueue is audited too (who, what).
    let bad = dir.path().join("bad.toml");
    write_public(&bad, "name = \"bad\"\ntask = \"no-such-task\"\n");
    let out = kernelctl_as_nobody(&d.socket, &["enqueue", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let log = d.log_text();
    assert!(
        audited(&log, NOBODY, "enqueue", Some("bad.toml")),
        "no audit line for the refused enqueue:\n{log}"
    );
    d.call(wire::method::CANCEL, json!({"goal": id}));
}

/// This process's copy of fd `fd` of process `pid` (pidfd_getfd): the same open file
/// description, as a child the daemon forked holds it until it execs. None where the
/// kernel (before 5.6) or the rights (ptrace over the non-dumpable daemon: root) refuse.
fn grab_fd(pid: i32, fd: i32) -> Option<std::os::fd::OwnedFd> {
    use nix::libc;
    use std::os::fd::FromRawFd;
    // SAFETY: plain syscalls; each fd returned is new and owned by the OwnedFd made here.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        if pidfd < 0 {
            return None;
        }
        let pidfd = std::os::fd::OwnedFd::from_raw_fd(pidfd as i32);
        let copy = libc::syscall(
            libc::SYS_pidfd_getfd,
            std::os::fd::AsRawFd::as_raw_fd(&pidfd),
            fd,
            0,
        );
        (copy >= 0).then(|| std::os::fd::OwnedFd::from_raw_fd(copy as i32))
    }
}

/// Issue #18 (the kill soak, kill 957): a child the daemon forked holds the daemon's open
/// file of the log until it execs, and one left by a SIGKILLed daemon (reparented to init,
/// still in execve or being torn down) held redb's `flock` with it: the next start was told
/// that a dead kerneld was "already running". Here this test holds that open file instead
/// of such a child. The next start must come up; a live second daemon is still refused at
/// once, with its owner's pid.
#[test]
fn a_log_held_open_by_another_process_after_the_daemon_was_killed_does_not_stop_the_start() {
    let dir = TempDir::new("heldlog");
    let d = Daemon::start(dir.path());
    let log = d.state_dir.join("kerneld.redb");
    let pid = d.child.id() as i32;
    let fd = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == log))
        .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .expect("the daemon has its log open");
    let Some(held) = grab_fd(pid, fd) else {
        eprintln!("skipped: pidfd_getfd is not allowed here (kernel 5.6+ and root needed)");
        return;
    };
    d.kill9();
    let me = format!("pid {} ", std::process::id());
    assert!(
        holders_of(&log).iter().any(|h| h.starts_with(&me)),
        "this test holds the killed daemon's open log: {:?}",
        holders_of(&log)
    );

    let d = Daemon::start(dir.path());
    let (code, text) = start_refused(dir.path());
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("already running") && text.contains(&format!("pid {}", d.child.id())),
        "a live daemon's log is refused, naming it: {text}"
    );
    drop(held);
    assert!(d.stop().success());
}
