//! Why a goal waits: a queued goal whose slot cannot start a worker says so, whole, in
//! `status` and `show` (not a bare `queued` with a truncated error under `gpus`).

use std::time::Duration;

use kerneld::wire::GoalState;
use kerneld_e2e::*;

#[test]
fn a_goal_whose_worker_cannot_start_says_why_it_waits() {
    let dir = TempDir::new("waits");
    // Every worker dies as it starts, as on a host whose driver is gone. (The sandbox gives
    // workers an allow-listed environment, so the break lives in the kernels directory's
    // worker itself, not in a PYTHONPATH.)
    let kernels = stub_kernels(dir.path());
    std::fs::write(
        kernels.join("harness/worker.py"),
        "raise RuntimeError('no usable CUDA driver (scripted by the test)')\n",
    )
    .unwrap();
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    let id = enqueue(&d, &demo_goal(dir.path(), "stuck", 2, ""));
    let mut waiting = String::new();
    let said = d.wait_until(Duration::from_secs(60), |d| {
        waiting = d.goal(&id).waiting.unwrap_or_default();
        waiting.contains("no usable CUDA driver")
    });
    assert!(said, "waiting: {waiting:?}\n{}", d.log_text());
    assert!(
        waiting.starts_with("no slot can start a worker: cpu"),
        "{waiting}"
    );
    assert!(waiting.contains("next try in"), "{waiting}");
    let g = d.goal(&id);
    assert_eq!((g.state, g.evaluations), (GoalState::Queued, 0));

    let out =
        |args: &[&str]| String::from_utf8_lossy(&kernelctl(&d.socket, args).stdout).into_owned();
    let status = out(&["status"]);
    assert!(status.contains("waiting (below)"), "{status}");
    assert!(
        status.contains("stuck waits: no slot can start a worker")
            && status.contains("RuntimeError: no usable CUDA driver (scripted by the test)"),
        "{status}"
    );
    let show = out(&["show", &id]);
    assert!(
        show.contains("waiting") && show.contains("no usable CUDA driver"),
        "{show}"
    );
}
