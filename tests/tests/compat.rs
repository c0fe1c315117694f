//! Logs written by earlier builds: every later build opens them and serves their goals
//! (as pueue and redb test their formats). `tests/fixtures/log-339715e` was written by
//! the binaries of commit 339715e (before the log had a format version): goal g1
//! (`finished.toml`, 3 iterations, completed) and goal g2 (`held.toml`, paused at
//! iteration 104), both on the demo task in CPU mode.

use std::time::Duration;

use kerneld::wire::{self, BestResult, Event, EventKind, GoalDetail, GoalState};
use kerneld_e2e::*;
use serde_json::json;

fn open_fixture(name: &str) -> (TempDir, Daemon) {
    let dir = TempDir::new("compat");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    // A copy: opening stamps the log with this build's format.
    std::fs::copy(
        repo_root()
            .join("tests/fixtures")
            .join(name)
            .join("kerneld.redb"),
        state.join("kerneld.redb"),
    )
    .unwrap();
    let d = Daemon::start(dir.path());
    (dir, d)
}

#[test]
fn a_log_of_build_339715e_is_served() {
    let (_dir, d) = open_fixture("log-339715e");

    let goals = d.status();
    assert_eq!(goals.len(), 2, "{goals:?}");
    let (done, held) = (&goals[0], &goals[1]);
    assert_eq!((done.id.as_str(), done.name.as_str()), ("g1", "finished"));
    assert_eq!(done.state, GoalState::Completed);
    assert_eq!(done.reason.as_deref(), Some("budget_iterations"));
    assert_eq!((done.iteration, done.evaluations), (3, 3));
    let best = done.best.as_ref().expect("g1 has a best");
    assert!(best.interpreted && best.speedup > 0.0);
    assert_eq!((held.id.as_str(), held.name.as_str()), ("g2", "held"));
    assert_eq!(held.state, GoalState::Paused);
    assert_eq!((held.iteration, held.evaluations), (104, 103));

    // show: the spec as enqueued then (agent settings included), and its evaluations.
    let detail: GoalDetail =
        serde_json::from_value(d.call(wire::method::SHOW, json!({"goal": "finished"}))).unwrap();
    assert_eq!(detail.spec.task, "demo");
    assert_eq!(detail.spec.agent.kind(), "search");
    assert_eq!(detail.spec.budget.iterations, Some(3));
    assert_eq!(detail.recent.len(), 3);
    assert!(detail.recent.iter().all(|r| r.result.correct));

    // events: the old log's, dense, then this daemon's start.
    let events: Vec<Event> = d.events(0);
    assert_dense(&events);
    let enqueued = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::GoalEnqueued { .. }))
        .count();
    assert_eq!(enqueued, 2);
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::DaemonStarted { .. }
    ));
    let g1: Vec<Event> =
        serde_json::from_value(d.call(wire::method::EVENTS, json!({"goal": "g1"}))).unwrap();
    assert!(g1.iter().all(|e| e.goal.as_deref() == Some("g1")));
    assert!(g1.iter().any(
        |e| matches!(&e.kind, EventKind::NewBest { best: b, .. } if b.candidate == best.candidate)
    ));

    // best: the winner's source and the configuration it ran with.
    let b: BestResult =
        serde_json::from_value(d.call(wire::method::BEST, json!({"goal": "g1"}))).unwrap();
    assert_eq!(b.summary.candidate, best.candidate);
    assert!(b.source.contains("\nBEST = {"), "{}", b.source);
    assert!(b.result.correct);

    // The client reads it too.
    let out = kernelctl(&d.socket, &["status"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("finished") && text.contains("held"), "{text}");

    // And the paused goal is still a goal this build can act on: cancel it.
    let out = kernelctl(&d.socket, &["cancel", "held"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(d.goal("g2").state, GoalState::Cancelled);

    // A restart on the stamped log serves the same goals.
    let socket = d.socket.clone();
    assert!(d.stop().success());
    let d = Daemon::start(_dir.path());
    assert_eq!(d.socket, socket);
    assert_eq!(d.goal("g1").evaluations, 3);
    assert_eq!(
        d.wait_terminal("g2", Duration::from_secs(5)).state,
        GoalState::Cancelled
    );
}
