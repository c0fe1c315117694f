//! Issue #30, the control socket under clients that hold it: a connection that sends
//! nothing is closed on a deadline; users holding every connection they can get do not
//! lock another user out; the memory of unfinished lines goes back when they close; a
//! refused client prints the daemon's reason.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kerneld::wire;
use kerneld_e2e::*;

/// The daemon's resident memory (VmRSS), in MB.
fn rss_mb(d: &Daemon) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb / 1024.0
}

/// Reads what the daemon sends until it closes: its lines.
fn read_to_close(s: &UnixStream) -> Vec<String> {
    let mut text = String::new();
    let _ = BufReader::new(s).read_to_string(&mut text);
    text.lines().map(String::from).collect()
}

#[test]
fn a_connection_that_sends_nothing_is_closed_on_its_deadline_and_a_follower_stays() {
    let dir = TempDir::new("idle");
    let d = Daemon::start_env(dir.path(), &[], &[("KERNELD_RPC_IDLE_TIMEOUT_MS", "1500")]);
    let mut follower = UnixStream::connect(&d.socket).unwrap();
    follower
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"events\",\"params\":{\"follow\":true}}\n",
        )
        .unwrap();
    let mut follow_r = BufReader::new(follower.try_clone().unwrap());
    let mut backlog = String::new();
    follow_r.read_line(&mut backlog).unwrap();

    // One that asks now and then stays; one that never asks is closed, told why.
    let mut asker = UnixStream::connect(&d.socket).unwrap();
    asker
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut asker_r = BufReader::new(asker.try_clone().unwrap());
    let t0 = Instant::now();
    let silent = UnixStream::connect(&d.socket).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let closer = std::thread::spawn(move || {
        let lines = read_to_close(&silent);
        (lines, t0.elapsed())
    });
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(800));
        asker
            .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"version\"}\n")
            .unwrap();
        let mut line = String::new();
        asker_r.read_line(&mut line).unwrap();
        assert!(line.contains("\"id\":7"), "{line}");
    }
    let (lines, took) = closer.join().unwrap();
    eprintln!("the silent connection was closed after {took:?}: {lines:?}");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("no request within"), "{lines:?}");

    // The follower, well past the deadline, still hears of a new goal.
    let id = enqueue(&d, &demo_goal(dir.path(), "heard", 1, ""));
    let mut note = String::new();
    follow_r.read_line(&mut note).unwrap();
    assert!(note.contains(&id), "{note}");
}

/// A Python that uid `uid` can run, or None.
fn python_for(uid: u32) -> Option<PathBuf> {
    [python(), PathBuf::from("/usr/bin/python3")]
        .into_iter()
        .find(|py| {
            Command::new("setpriv")
                .args(as_uid(uid))
                .arg(py)
                .args(["-c", "pass"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn as_uid(uid: u32) -> Vec<String> {
    vec![
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".into(),
    ]
}

/// Connects as `uid` until the daemon refuses, holding every connection it got (idle:
/// nothing is sent) until the child's stdin closes. Returns the child and how many it got.
const HOLD: &str = r#"
import select, socket, sys
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    if select.select([s], [], [], 0.3)[0]:
        break  # refused: the daemon said why and closed
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"#;

fn hold_connections(py: &Path, uid: u32, socket: &Path) -> (Child, usize) {
    let mut child = Command::new("setpriv")
        .args(as_uid(uid))
        .arg(py)
        .args(["-c", HOLD])
        .arg(socket)
        .arg("64")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let n = line.trim().parse().unwrap_or_else(|_| panic!("{line:?}"));
    (child, n)
}

#[test]
fn four_users_holding_every_connection_they_can_get_do_not_stop_a_fifth_users_status() {
    let Some(dir) = nobody_dir("lockout") else {
        return;
    };
    let Some(py) = python_for(60001) else {
        eprintln!("skipped: no Python that another uid may run");
        return;
    };
    let d = Daemon::start(dir.path());
    let mut holders = Vec::new();
    for uid in 60001..=60004 {
        let (child, n) = hold_connections(&py, uid, &d.socket);
        eprintln!("uid {uid} holds {n} idle connections");
        holders.push(child);
    }
    // Everything ordinary users may hold is held: the old rule refused a fifth here.
    let fifth = [
        "setpriv",
        "--reuid=60005",
        "--regid=60005",
        "--clear-groups",
    ];
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = kernelctl_under(&fifth, &d.socket, &["status"]);
        assert!(
            out.status.success(),
            "a fifth user is locked out: {}",
            output_text(&out)
        );
        eprintln!("the fifth user's status answered in {:?}", t0.elapsed());
    }
    // And the holders' own clients still get in too (each holds its fair share at most).
    let out = kernelctl_under(
        &[
            "setpriv",
            "--reuid=60001",
            "--regid=60001",
            "--clear-groups",
        ],
        &d.socket,
        &["status"],
    );
    eprintln!("a holder's own status: {}", output_text(&out));
    for mut h in holders {
        let _ = h.kill();
        let _ = h.wait();
    }
}

#[test]
fn unfinished_lines_give_their_memory_back_when_they_close() {
    let dir = TempDir::new("rss");
    // 56 connections from this uid (root): every one the ordinary users could have.
    let d = Daemon::start_env(dir.path(), &[], &[("KERNELD_RPC_MAX_PER_USER", "64")]);
    let before = rss_mb(&d);
    let chunk = vec![b'x'; wire::MAX_LINE - 64];
    let mut open = Vec::new();
    for _ in 0..56 {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"")
            .unwrap();
        s.write_all(&chunk).unwrap();
        open.push(s);
    }
    // Everything written was read into the daemon's line buffers.
    std::thread::sleep(Duration::from_millis(500));
    let held = rss_mb(&d);
    drop(open);
    // Each closed line is read to its end as a last request (not JSON: answered, unread),
    // slowly in a debug build; then its memory goes.
    let t0 = Instant::now();
    let mut after = rss_mb(&d);
    while after >= 100.0 && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        after = rss_mb(&d);
    }
    std::thread::sleep(Duration::from_secs(1));
    let settled = rss_mb(&d);
    eprintln!(
        "daemon RSS: {before:.0} MB at start, {held:.0} MB with 56 unfinished 8 MiB lines, \
         {after:.0} MB {:?} after they closed, {settled:.0} MB a second later",
        t0.elapsed()
    );
    assert!(held > 300.0, "the lines were not buffered: {held:.0} MB");
    assert!(after < 100.0, "{after:.0} MB after the lines closed");
    // And it still answers.
    assert!(!d.status().iter().any(|g| g.name.is_empty()));
}

#[test]
fn a_refused_client_prints_the_refusal_not_a_closed_connection() {
    let dir = TempDir::new("refusal");
    let d = Daemon::start_env(dir.path(), &[], &[("KERNELD_RPC_MAX_PER_USER", "2")]);
    // Each one answered, so each is surely counted (and the start's are surely gone).
    std::thread::sleep(Duration::from_millis(300));
    let held: Vec<UnixStream> = (0..2)
        .map(|_| {
            let mut s = UnixStream::connect(&d.socket).unwrap();
            s.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"version\"}\n")
                .unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert!(line.contains("\"result\""), "{line}");
            s
        })
        .collect();
    for attempt in 0..8 {
        let out = kernelctl(&d.socket, &["status"]);
        let text = output_text(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "attempt {attempt}: {text}\n{}",
            d.log_text()
        );
        assert!(
            text.contains("you have 2 connections to kerneld open, the limit per user"),
            "attempt {attempt}: {text}"
        );
        assert!(!text.contains("closed the connection"), "{text}");
    }
    // A request large enough that the daemon closes while it is still being written.
    let big = dir.path().join("big.toml");
    std::fs::write(
        &big,
        format!(
            "name = \"big\"\ntask = \"demo\"\n#{}\n",
            "x".repeat((1 << 20) - 4096)
        ),
    )
    .unwrap();
    let out = kernelctl(&d.socket, &["enqueue", big.to_str().unwrap()]);
    let text = output_text(&out);
    assert!(
        text.contains("the limit per user") && out.status.code() == Some(1),
        "{text}"
    );
    drop(held);
}

#[test]
fn a_follower_taken_for_another_user_is_told_why() {
    let Some(dir) = nobody_dir("evict") else {
        return;
    };
    // 8 connections: 7 for ordinary users, the eighth kept for root.
    let d = Daemon::start_env(dir.path(), &[], &[("KERNELD_RPC_MAX_CONNECTIONS", "8")]);
    let as_a = [
        "setpriv",
        "--reuid=60011",
        "--regid=60011",
        "--clear-groups",
    ];
    let as_b = [
        "setpriv",
        "--reuid=60012",
        "--regid=60012",
        "--clear-groups",
    ];
    // One user follows the log 7 times: every connection ordinary users may hold.
    let mut followers: Vec<Child> = (0..7)
        .map(|_| {
            Command::new(as_a[0])
                .args(&as_a[1..])
                .arg(binary("kernelctl"))
                .arg("--socket")
                .arg(&d.socket)
                .args(["events", "--follow"])
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    assert!(followers
        .iter_mut()
        .all(|f| f.try_wait().unwrap().is_none()));
    // Another user gets in, taking one of them.
    let out = kernelctl_under(&as_b, &d.socket, &["status"]);
    assert!(out.status.success(), "{}", output_text(&out));
    // That follower ended, saying why.
    let t0 = Instant::now();
    let ended = loop {
        if let Some(i) = followers
            .iter_mut()
            .position(|f| f.try_wait().unwrap().is_some())
        {
            break followers.remove(i);
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no follower ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = ended.wait_with_output().unwrap();
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("kerneld closed this connection") && text.contains("another user"),
        "{text}"
    );
    for mut f in followers {
        let _ = f.kill();
        let _ = f.wait();
    }
}
