//! Issue #30, the circuit breaker: a goal whose every evaluation fails for a reason that
//! is not the candidate's (the worker cannot read its input, cannot start) is paused
//! after a few, within seconds, its budget untouched beyond them; `status`, `show` and the
//! digest say why; it is tried again after a back-off (and a restart keeps all that);
//! candidates' own failures count as before.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kerneld::wire::{self, EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::json;

/// A worker that answers what `harness/mode` beside it says at each request: `refuse`
/// (every evaluate refused, as when it cannot read the candidate's file), `wrong` (every
/// candidate judged wrong: its own failure), anything else a correct result.
const WORKER: &str = r#"
import json, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
def mode():
    try:
        return open(os.path.join(HERE, "mode")).read().strip()
    except OSError:
        return "refuse"
def send(o):
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
send({"event": "ready", "pid": os.getpid(), "mode": "cpu", "device": None})
for line in sys.stdin:
    req = json.loads(line)
    rid, op = req.get("id"), req.get("op")
    if op == "shutdown":
        send({"id": rid, "ok": True})
        break
    if op == "describe":
        send({"id": rid, "ok": True, "space": {"BLOCK": list(range(1, 200))},
              "default": {"BLOCK": 1}, "class": "ok", "message": None})
    elif op == "evaluate" and mode() == "refuse":
        send({"id": rid, "ok": False, "error": "cannot read candidate %s: [Errno 2] No such "
              "file or directory" % req.get("candidate")})
    elif op == "evaluate" and mode() == "wrong":
        send({"id": rid, "ok": True, "result": {"class": "wrong_result", "message": "max_abs 3",
              "rule": "tolerance", "correct": False, "interpreted": True, "elapsed_s": 0.001}})
    elif op == "evaluate":
        b = (req.get("config") or {}).get("BLOCK", 1)
        send({"id": rid, "ok": True, "result": {"class": "ok", "message": None, "correct": True,
              "interpreted": True, "speedup": 1.0 + b / 1000.0, "spread_pct": 0.1,
              "shapes": [], "elapsed_s": 0.001, "config": req.get("config")}})
    else:
        send({"id": rid, "ok": False, "error": "unknown op %r" % op})
"#;

/// A kernels directory with the demo task and `worker` as its harness worker, and a
/// config file with a short back-off.
fn setup(dir: &Path, worker: &str, mode: &str) -> (PathBuf, PathBuf) {
    let kernels = stub_kernels(dir);
    std::fs::write(kernels.join("harness/worker.py"), worker).unwrap();
    std::fs::write(kernels.join("harness/mode"), mode).unwrap();
    let config = dir.join("kerneld.toml");
    std::fs::write(&config, "breaker_backoff = \"5s\"\n").unwrap();
    (kernels, config)
}

fn start(dir: &Path, kernels: &Path, config: &Path) -> Daemon {
    Daemon::start_kernels(dir, kernels, &["--config", config.to_str().unwrap()], &[])
}

/// Waits until the goal is in `state`; how long that took.
fn wait_state(d: &Daemon, id: &str, state: GoalState, limit: Duration) -> Duration {
    let t0 = Instant::now();
    assert!(
        d.wait_until(limit, |d| d.goal(id).state == state),
        "goal {id} not {state} within {limit:?}: {:?}\n{}",
        d.goal(id),
        d.log_text()
    );
    t0.elapsed()
}

/// The goal's `breaker_tripped` events: (failures, trips, retry_in_ms).
fn trips(d: &Daemon, id: &str) -> Vec<(u32, u32, u64)> {
    d.events(0)
        .into_iter()
        .filter(|e| e.goal.as_deref() == Some(id))
        .filter_map(|e| match e.kind {
            EventKind::BreakerTripped {
                failures,
                trips,
                retry_in_ms,
                ..
            } => Some((failures, trips, retry_in_ms)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_goal_whose_every_evaluation_the_worker_refuses_is_paused_then_tried_again() {
    let dir = TempDir::new("brk");
    let (kernels, config) = setup(dir.path(), WORKER, "refuse");
    let d = start(dir.path(), &kernels, &config);
    let goal = demo_goal(dir.path(), "refused", 50, "");
    let id = enqueue(&d, &goal);

    let took = wait_state(&d, &id, GoalState::Paused, Duration::from_secs(30));
    let g = d.goal(&id);
    eprintln!(
        "paused after {} evaluations (iteration {}) in {took:?}",
        g.evaluations, g.iteration
    );
    assert!(g.evaluations <= 10 && g.iteration <= 10, "{g:?}");
    let reason = g.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("circuit breaker") && reason.contains("cannot read candidate"),
        "{reason}"
    );
    assert_eq!(trips(&d, &id), vec![(g.evaluations as u32, 1, 5000)]);

    // status, show and the digest say why; nothing is spent while it is paused.
    for args in [vec!["status"], vec!["show", &id], vec!["digest"]] {
        let out = kernelctl(&d.socket, &args);
        let text = output_text(&out);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("circuit breaker"), "{args:?}: {text}");
    }
    let spent = g.evaluations;

    // After the back-off (5 s) it is tried again: one failure trips it again, for 10 s.
    assert!(
        d.wait_until(Duration::from_secs(20), |d| trips(d, &id).len() == 2),
        "not tried again: {:?}\n{}",
        d.goal(&id),
        d.log_text()
    );
    let g = d.goal(&id);
    assert_eq!(g.state, GoalState::Paused);
    assert_eq!(g.evaluations, spent + 1, "{g:?}");
    assert_eq!(trips(&d, &id)[1], (1, 2, 10_000));

    // A restart keeps it paused, and when to try again.
    let state_reason = g.reason.clone();
    d.kill9();
    let d = start(dir.path(), &kernels, &config);
    let g = d.goal(&id);
    assert_eq!(
        (g.state, g.reason.clone()),
        (GoalState::Paused, state_reason)
    );
    let waiting = g.waiting.clone().unwrap_or_default();
    assert!(waiting.contains("tried again in"), "{g:?}");

    // The cause is fixed: the next try works, and the goal spends its budget as usual.
    std::fs::write(kernels.join("harness/mode"), "ok").unwrap();
    let g = d.wait_terminal(&id, Duration::from_secs(120));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!((g.iteration, g.evaluations), (50, 50));
    assert_eq!(trips(&d, &id).len(), 2);
}

#[test]
fn a_worker_that_cannot_start_pauses_the_goal_without_spending_its_budget() {
    let dir = TempDir::new("brkstart");
    let (kernels, config) = setup(dir.path(), "import sys\nsys.exit(3)\n", "");
    let d = start(dir.path(), &kernels, &config);
    let id = enqueue(&d, &demo_goal(dir.path(), "nostart", 100, ""));
    let took = wait_state(&d, &id, GoalState::Paused, Duration::from_secs(30));
    let g = d.goal(&id);
    eprintln!("paused in {took:?}: {:?}", g.reason);
    assert_eq!((g.iteration, g.evaluations), (0, 0), "{g:?}");
    let reason = g.reason.unwrap_or_default();
    assert!(
        reason.contains("circuit breaker") && reason.contains("worker"),
        "{reason}"
    );
    // `pause` takes it out of the breaker's hands: no try after the back-off.
    d.call(wire::method::PAUSE, json!({"goal": id}));
    std::thread::sleep(Duration::from_secs(7));
    let g = d.goal(&id);
    assert_eq!(g.state, GoalState::Paused);
    assert!(g.reason.unwrap_or_default().contains("paused by uid"));
    assert_eq!(trips(&d, &id).len(), 1);
    // And a user may resume it: back to the queue (it never ran).
    let out = kernelctl(&d.socket, &["resume", &id]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(matches!(
        d.goal(&id).state,
        GoalState::Queued | GoalState::Paused
    ));
}

#[test]
fn candidates_own_failures_count_as_before() {
    let dir = TempDir::new("brkwrong");
    let (kernels, config) = setup(dir.path(), WORKER, "wrong");
    let d = start(dir.path(), &kernels, &config);
    let id = enqueue(&d, &demo_goal(dir.path(), "wrong", 12, ""));
    let g = d.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    assert_eq!(g.evaluations, 12);
    assert!(trips(&d, &id).is_empty());
}
