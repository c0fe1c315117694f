//! The client as cron and scripts meet it: the real `kernelctl` with no terminal (stdin
//! null, stdout and stderr pipes), against the real `kerneld` or against no daemon at all.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use kerneld::paths::SYSTEM_SOCKET;
use kerneld::wire::{code, GoalState};
use kerneld_e2e::*;
use serde_json::Value;

/// `kernelctl ARGS` as cron runs it: no terminal, no XDG_RUNTIME_DIR, no KERNELD_SOCKET.
fn cron_kernelctl(args: &[&str], env: &[(&str, &Path)]) -> Output {
    Command::new(binary("kernelctl"))
        .args(args)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("KERNELD_SOCKET")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run kernelctl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// stderr holds exactly one JSON object, `{"error": {...}}`; returns the inner object.
fn json_error(out: &Output) -> Value {
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line on stderr, got {stderr:?}");
    let v: Value = serde_json::from_str(lines[0]).expect("stderr is JSON");
    let e = v["error"].clone();
    for key in ["code", "message", "hint", "exit"] {
        assert!(e.get(key).is_some(), "{key} missing in {v}");
    }
    assert_eq!(
        e["exit"].as_i64(),
        out.status.code().map(i64::from),
        "the object says the exit code"
    );
    e
}

#[test]
fn without_a_daemon_errors_exit_3_and_json_errors_are_json() {
    let dir = TempDir::new("nodaemon");
    let absent = dir.path().join("absent.sock");
    let absent_arg = absent.to_str().unwrap();

    let out = cron_kernelctl(&["--socket", absent_arg, "--json", "status"], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    let e = json_error(&out);
    assert_eq!(e["code"], Value::Null);
    assert!(e["message"].as_str().unwrap().contains(absent_arg), "{e}");
    assert!(e["hint"].as_str().unwrap().contains("systemctl"), "{e}");

    // Plain text for people: the message and a hint, still exit 3.
    let out = cron_kernelctl(&["--socket", absent_arg, "-q", "status"], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(text(&out.stderr).starts_with("kernelctl: cannot reach kerneld at"));

    // A usage error with --json is a JSON error too, exit 2.
    let out = cron_kernelctl(&["--json", "frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let e = json_error(&out);
    assert!(e["message"].as_str().unwrap().contains("frobnicate"), "{e}");

    // The default socket: the message lists every place looked at, in order.
    if Path::new(SYSTEM_SOCKET).exists() {
        eprintln!("skipping the default-socket check: {SYSTEM_SOCKET} exists here");
        return;
    }
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let out = cron_kernelctl(&["status"], &[("XDG_RUNTIME_DIR", &xdg)]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    let tried = format!(
        "tried {}, {SYSTEM_SOCKET}",
        xdg.join("kerneld.sock").display()
    );
    assert!(stderr.contains(&tried), "{tried:?} not in {stderr}");
}

#[test]
fn under_cron_quiet_commands_print_nothing_and_errors_still_reach_stderr() {
    let dir = TempDir::new("quiet");
    let d = Daemon::start(dir.path());
    let socket = d.socket.to_str().unwrap().to_string();
    let goal = demo_goal(dir.path(), "nightly", 1, "");
    let goal_arg = goal.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["--socket", &socket];
        all.extend_from_slice(args);
        cron_kernelctl(&all, &[])
    };
    let silent = |args: &[&str]| {
        let out = run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "", "{args:?} printed on stdout");
        assert_eq!(text(&out.stderr), "", "{args:?} printed on stderr");
    };

    // The SPEC's crontab line, twice: the second night finds the goal active.
    silent(&["-q", "enqueue", "--unique", goal_arg]);
    silent(&["-q", "enqueue", "--unique", goal_arg]);
    let id = d.status()[0].id.clone();
    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");

    let svg = dir.path().join("report.svg");
    let best = dir.path().join("best.py");
    for args in [
        vec!["status"],
        vec!["status", &id],
        vec!["status", "--json"],
        vec!["show", &id],
        vec!["events"],
        vec!["events", &id, "-n", "3"],
        vec!["context", &id],
        vec!["gpus"],
        vec!["best", &id],
        vec!["best", &id, "-o", best.to_str().unwrap()],
        vec!["report", &id],
        vec!["report", &id, "-o", svg.to_str().unwrap()],
        vec!["watch", &id],
        vec!["version"],
    ] {
        let mut quiet = vec!["-q"];
        quiet.extend(args);
        silent(&quiet);
    }
    assert!(std::fs::read_to_string(&best).unwrap().contains("def "));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    // Pause, resume and cancel of a second goal: silent too.
    let other = demo_goal(dir.path(), "other", 500, "");
    silent(&["-q", "enqueue", other.to_str().unwrap()]);
    silent(&["-q", "pause", "other"]);
    silent(&["-q", "resume", "other"]);
    silent(&["-q", "cancel", "other"]);

    // Errors still go to stderr, with their exit code, -q or not.
    let out = run(&["-q", "pause", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("nosuch"));

    // With --json the daemon's refusal is one JSON object carrying its code.
    let out = run(&["--json", "pause", "nosuch"]);
    assert_eq!(out.status.code(), Some(1));
    let e = json_error(&out);
    assert_eq!(e["code"].as_i64(), Some(code::GOAL_NOT_FOUND));
    assert!(e["message"].as_str().unwrap().contains("nosuch"), "{e}");

    // report --json names the goal by id, and by name, whichever the user gave.
    let out = run(&["report", "nightly", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["goal"], id.as_str());
    assert_eq!(report["name"], "nightly");

    // Without --socket, cron's environment has no XDG_RUNTIME_DIR; given one, the client
    // finds the daemon's socket there.
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    std::os::unix::fs::symlink(&d.socket, xdg.join("kerneld.sock")).unwrap();
    let out = cron_kernelctl(&["status", "--json"], &[("XDG_RUNTIME_DIR", &xdg)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `kerneld man` writes the daemon's page from its own clap definition (as `kernelctl man`
/// does the client's), for docs/INSTALL.md's install step.
#[test]
fn kerneld_writes_its_man_page() {
    let dir = TempDir::new("man");
    let out = Command::new(binary("kerneld"))
        .args(["man", "--out"])
        .arg(dir.path())
        .output()
        .expect("run kerneld man");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(dir.path().join("kerneld.1")).unwrap();
    assert!(page.contains(".TH kerneld 1"), "{page}");
    for flag in ["state\\-dir", "socket", "kernels", "cpu"] {
        assert!(page.contains(flag), "{flag} missing in {page}");
    }
    let out = Command::new(binary("kerneld")).arg("man").output().unwrap();
    assert!(text(&out.stdout).contains(".TH kerneld 1"));
}
