//! End to end: the real `kerneld` and `kernelctl` binaries, a real socket, a real
//! redb file, the real Python harness running the demo task under Triton's
//! interpreter (CPU mode).

use std::time::Duration;

use kerneld::wire::{GoalDetail, GoalState, GoalSummary, ResultClass};
use kerneld_e2e::*;
use serde_json::json;

#[test]
fn demo_goal_completes_with_a_correct_best_through_kernelctl() {
    let dir = TempDir::new("demo");
    let d = Daemon::start(dir.path());
    let goal = demo_goal(dir.path(), "demo-e2e", 3, "");

    let out = kernelctl(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "enqueue failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(
        id.starts_with('g'),
        "enqueue should print the goal id, got {id:?}"
    );

    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    assert_eq!(g.reason.as_deref(), Some("budget_iterations"));
    assert_eq!(g.iteration, 3);
    assert_eq!(g.evaluations, 3);

    // status --json: the documented shape.
    let out = kernelctl(&d.socket, &["status", "--json"]);
    assert!(out.status.success());
    let all: Vec<GoalSummary> =
        serde_json::from_slice(&out.stdout).expect("status --json is a list of goals");
    let me = all.iter().find(|s| s.id == id).unwrap();
    let best = me.best.as_ref().expect("a best candidate");
    assert!(
        best.interpreted,
        "CPU-mode timings must be marked as interpreted"
    );
    assert!(best.speedup > 0.0);

    // The best evaluation was correct.
    let detail: GoalDetail = serde_json::from_value(d.call("show", json!({"goal": id}))).unwrap();
    let rec = detail
        .recent
        .iter()
        .find(|r| r.iteration == best.iteration)
        .unwrap();
    assert_eq!(rec.result.class, ResultClass::Ok);
    assert!(rec.result.correct);

    // best -o writes the winning source, with its configuration.
    let file = dir.path().join("best.py");
    let out = kernelctl(&d.socket, &["best", &id, "-o", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let src = std::fs::read_to_string(&file).unwrap();
    assert!(
        src.contains("def matmul"),
        "best source should be the candidate"
    );
    assert!(
        src.contains("BEST = {"),
        "best source should carry its configuration"
    );

    // A clean stop records itself.
    let status = d.stop();
    assert!(status.success(), "kerneld exited with {status:?}");
}

#[test]
fn bad_goal_files_are_refused_and_change_nothing() {
    let dir = TempDir::new("bad");
    let d = Daemon::start(dir.path());
    let before = d.call("version", json!({}))["last_seq"].as_u64().unwrap();

    let cases: &[(&str, &str, &str)] = &[
        ("syntax", "name = \"x\"\ntask = \"demo\n", "syntax.toml:2"),
        (
            "unknown-key",
            "name = \"x\"\ntask = \"demo\"\n[budget]\nwal = \"1h\"\n",
            "unknown field `wal`",
        ),
        (
            "bad-duration",
            "name = \"x\"\ntask = \"demo\"\n[budget]\nwall = \"ten hours\"\n",
            "bad duration",
        ),
        (
            "missing-task",
            "name = \"x\"\ntask = \"no-such-task\"\n",
            "task `no-such-task` not found",
        ),
        (
            "bad-shape",
            "name = \"x\"\ntask = \"demo\"\nshapes = [\"huge\"]\n",
            "has no shape `huge`",
        ),
    ];
    for (name, text, expect) in cases {
        let path = dir.path().join(format!("{}.toml", name.replace('-', "")));
        let path = if *name == "syntax" {
            dir.path().join("syntax.toml")
        } else {
            path
        };
        std::fs::write(&path, text).unwrap();
        let out = kernelctl(&d.socket, &["enqueue", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: expected exit 1, stderr: {stderr}"
        );
        assert!(
            stderr.contains(expect),
            "{name}: stderr should mention {expect:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{name}: nothing on stdout");
    }
    let after = d.call("version", json!({}))["last_seq"].as_u64().unwrap();
    assert_eq!(before, after, "a refused goal must not touch the log");
    assert!(d.status().is_empty());
}

#[test]
fn pause_resume_cancel_and_unique() {
    let dir = TempDir::new("life");
    let d = Daemon::start(dir.path());
    let goal = demo_goal(dir.path(), "life", 500, "");
    let id = enqueue(&d, &goal);

    // --unique returns the active goal instead of a second one.
    let out = kernelctl(&d.socket, &["enqueue", "--unique", goal.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), id);
    assert_eq!(d.status().len(), 1);

    assert!(
        d.wait_until(Duration::from_secs(120), |d| d.goal(&id).evaluations >= 1),
        "no evaluation finished"
    );
    let out = kernelctl(&d.socket, &["pause", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.goal(&id).state, GoalState::Paused);
    // The reply comes once the evaluation in flight is aborted and recorded: the slot is free.
    assert_eq!(
        d.goal(&id).in_flight,
        0,
        "lease not released by the time pause replied"
    );
    // Pausing a paused goal is not an error (cron jobs need no special case).
    assert!(kernelctl(&d.socket, &["pause", &id]).status.success());
    let paused_at = d.goal(&id).iteration;
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        d.goal(&id).iteration,
        paused_at,
        "a paused goal must not advance"
    );

    // Resuming twice: the second finds it running and succeeds without an event.
    assert!(kernelctl(&d.socket, &["resume", &id]).status.success());
    assert_eq!(d.goal(&id).state, GoalState::Running);
    assert!(kernelctl(&d.socket, &["resume", &id]).status.success());
    assert_eq!(d.goal(&id).state, GoalState::Running);
    assert!(
        d.wait_until(Duration::from_secs(120), |d| d.goal(&id).iteration
            > paused_at),
        "no progress after resume"
    );

    assert!(kernelctl(&d.socket, &["cancel", &id]).status.success());
    let g = d.goal(&id);
    assert_eq!(g.state, GoalState::Cancelled);
    assert!(kernelctl(&d.socket, &["cancel", &id]).status.success());
    // An ended goal cannot be paused: exit 1 with its state.
    let out = kernelctl(&d.socket, &["pause", &id]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cancelled"));

    // Unknown goal: exit 1 and a message; no daemon: exit 3.
    let out = kernelctl(&d.socket, &["show", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    let out = kernelctl(&dir.path().join("absent.sock"), &["status"]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn a_second_daemon_on_the_same_state_refuses_to_start() {
    let dir = TempDir::new("twice");
    let _d = Daemon::start(dir.path());
    let out = std::process::Command::new(binary("kerneld"))
        .args(["--state-dir", dir.path().join("state").to_str().unwrap()])
        .args(["--socket", dir.path().join("sock2").to_str().unwrap()])
        .args([
            "--kernels",
            repo_root().join("kernels").to_str().unwrap(),
            "--cpu",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already running"), "{stderr}");
}

#[test]
fn graceful_restart_continues_the_goal() {
    let dir = TempDir::new("restart");
    let d = Daemon::start(dir.path());
    let id = enqueue(&d, &demo_goal(dir.path(), "restart", 4, ""));
    assert!(d.wait_until(Duration::from_secs(120), |d| d.goal(&id).evaluations >= 1));
    let before = d.goal(&id);
    assert!(d.stop().success());

    let d = Daemon::start(dir.path());
    let after = d.goal(&id);
    assert!(after.iteration >= before.iteration);
    assert!(
        is_active(after.state) || after.state == GoalState::Completed,
        "{after:?}"
    );
    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed);
    assert_eq!(g.iteration, 4);
    let events = d.events(0);
    assert_dense(&events);
    // The abort of the evaluation in flight at the stop was recorded, and re-run.
    let types: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert!(types.contains(&"daemon_stopped"));
}

#[test]
fn malformed_requests_get_standard_errors() {
    use std::io::{BufRead, BufReader, Write};
    let dir = TempDir::new("rpc");
    let d = Daemon::start(dir.path());
    let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut ask = |line: &str| -> serde_json::Value {
        s.write_all(line.as_bytes()).unwrap();
        s.write_all(b"\n").unwrap();
        let mut reply = String::new();
        r.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap()
    };
    assert_eq!(ask("{not json")["error"]["code"], -32700);
    assert_eq!(
        ask(r#"{"jsonrpc":"1.0","id":1,"method":"status"}"#)["error"]["code"],
        -32600
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":2,"method":"frobnicate"}"#)["error"]["code"],
        -32601
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":3,"method":"show","params":{"nope":1}}"#)["error"]["code"],
        -32602
    );
    assert_eq!(
        ask(r#"{"jsonrpc":"2.0","id":4,"method":"show","params":{"goal":"g99"}}"#)["error"]["code"],
        -32001
    );
    let ok = ask(r#"{"jsonrpc":"2.0","id":5,"method":"version"}"#);
    assert_eq!(ok["id"], 5);
    assert_eq!(ok["result"]["mode"], "cpu");

    // An over-long line: an error, then the connection closes.
    let mut s2 = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    let big = vec![b'x'; kerneld::wire::MAX_LINE + 10];
    let _ = s2.write_all(&big);
    let _ = s2.write_all(b"\n");
    let mut reply = String::new();
    BufReader::new(s2).read_line(&mut reply).unwrap();
    let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(v["error"]["code"], -32600);
}

#[test]
fn the_wall_budget_ends_a_busy_goal() {
    let dir = TempDir::new("wall");
    let d = Daemon::start(dir.path());
    let goal = dir.path().join("wall.toml");
    std::fs::write(
        &goal,
        "name = \"wall\"\ntask = \"demo\"\n[budget]\nwall = \"6s\"\n",
    )
    .unwrap();
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(g.state, GoalState::Completed);
    assert_eq!(g.reason.as_deref(), Some("budget_wall"));
    assert!(g.wall_s >= 6.0 && g.wall_s < 20.0, "wall {}", g.wall_s);
}

#[test]
fn goal_files_dropped_in_the_spool_are_enqueued_or_rejected_with_a_reason() {
    let dir = TempDir::new("spool");
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let d = Daemon::start_with(dir.path(), &["--spool", spool.to_str().unwrap()]);
    // Written elsewhere and renamed in, as an editor or `mv` would.
    let good = demo_goal(dir.path(), "spooled", 1, "");
    std::fs::rename(&good, spool.join("spooled.toml")).unwrap();
    std::fs::write(
        spool.join("broken.toml"),
        "name = \"b\"\ntask = \"demo\"\nbogus = 1\n",
    )
    .unwrap();

    assert!(
        d.wait_until(Duration::from_secs(30), |d| d
            .status()
            .iter()
            .any(|g| g.name == "spooled")),
        "the spooled goal was not enqueued\n{}",
        d.log_text()
    );
    assert!(d.wait_until(Duration::from_secs(10), |_| spool
        .join("done/spooled.toml")
        .is_file()));
    assert!(d.wait_until(Duration::from_secs(10), |_| spool
        .join("rejected/broken.toml.error")
        .is_file()));
    let why = std::fs::read_to_string(spool.join("rejected/broken.toml.error")).unwrap();
    assert!(why.contains("bogus"), "{why}");
    assert_eq!(d.status().len(), 1);
}

#[test]
fn the_configuration_reloads_on_sighup_and_on_edit() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let dir = TempDir::new("reload");
    let conf = dir.path().join("kerneld.toml");
    std::fs::write(&conf, "eval_timeout = \"15m\"\n").unwrap();
    let d = Daemon::start_with(dir.path(), &["--config", conf.to_str().unwrap()]);

    // An edit (write a new file, rename it over the old one, as editors do) is picked up.
    let tmp = dir.path().join("kerneld.toml.new");
    std::fs::write(&tmp, "eval_timeout = \"20m\"\nmax_attempts = 5\n").unwrap();
    std::fs::rename(&tmp, &conf).unwrap();
    assert!(
        d.wait_until(Duration::from_secs(10), |d| d
            .log_text()
            .contains("max_attempts = 5")),
        "edit not applied:\n{}",
        d.log_text()
    );
    // A broken file is refused and the running configuration stays.
    std::fs::write(&conf, "eval_timeout = \"soon\"\n").unwrap();
    assert!(d.wait_until(Duration::from_secs(10), |d| d
        .log_text()
        .contains("NOT reloaded")));
    // SIGHUP reloads too.
    std::fs::write(&conf, "eval_timeout = \"30m\"\n").unwrap();
    std::thread::sleep(Duration::from_millis(800));
    kill(Pid::from_raw(d.child.id() as i32), Signal::SIGHUP).unwrap();
    assert!(d.wait_until(Duration::from_secs(10), |d| d
        .log_text()
        .contains("SIGHUP: configuration reloaded")));
    assert!(
        d.log_text().contains("eval_timeout = 1800s"),
        "{}",
        d.log_text()
    );
    // Still serving.
    assert!(d.status().is_empty());
}

#[test]
fn every_shipped_goal_file_parses() {
    let root = repo_root();
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for dir in ["config/goals", "kernels/mla", "kernels/kda"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml")
                && p.file_name().is_some_and(|n| n != "task.toml")
            {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 4, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let files = kerneld::goal::local_seed_files(&f, &text).unwrap();
        let spec = kerneld::goal::parse(
            f.to_str().unwrap(),
            &text,
            &root.join("kernels"),
            &kerneld::goal::Requester::trusted(files),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!spec.seeds.is_empty());
    }
}
