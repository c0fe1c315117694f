//! Issue #29's chains through the real binaries: `kernelctl enqueue --after
//! GOAL[:completed|:any]` and the goal file's `after` wait for another goal; a chain on a
//! goal that does not exist or already ended the wrong way is refused with a clear error;
//! a chain whose goal is cancelled while it waits is cancelled with the reason; nothing
//! else is touched.

use std::path::Path;
use std::time::Duration;

use kerneld::wire::GoalState;
use kerneld_e2e::*;

fn ctl(d: &Daemon, args: &[&str]) -> (bool, String) {
    let out = kernelctl(&d.socket, args);
    (out.status.success(), output_text(&out))
}

/// `kernelctl enqueue FILE --after AFTER`: the new goal's id, or the error.
fn enqueue_after(d: &Daemon, file: &Path, after: &str) -> Result<String, String> {
    let out = kernelctl(
        &d.socket,
        &["enqueue", file.to_str().unwrap(), "--after", after],
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(output_text(&out))
    }
}

#[test]
fn chained_goals_wait_run_or_are_cancelled_and_bad_chains_are_refused() {
    let dir = TempDir::new("chains");
    let kernels = stub_kernels(dir.path());
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    let first = enqueue(&d, &demo_goal(dir.path(), "reval", 3, ""));
    assert!(ctl(&d, &["pause", &first]).0);
    // By name, and by the goal file's `after` with :any.
    let then = enqueue_after(&d, &demo_goal(dir.path(), "fork-winner", 2, ""), "reval").unwrap();
    let any = enqueue(
        &d,
        &demo_goal(
            dir.path(),
            "cleanup",
            1,
            &format!("after = \"{first}:any\""),
        ),
    );
    std::thread::sleep(Duration::from_millis(500));
    let g = d.goal(&then);
    assert_eq!(g.state, GoalState::Queued);
    assert_eq!(
        g.waiting.as_deref(),
        Some(format!("waits for {first} (paused) to complete (after {first}:completed)").as_str())
    );
    let (_, status) = ctl(&d, &["status"]);
    assert!(
        status.contains(&format!("waits for {first} (paused) to complete")),
        "{status}"
    );
    assert_eq!(d.goal(&any).state, GoalState::Queued);
    assert!(ctl(&d, &["resume", &first]).0);
    for id in [&first, &then, &any] {
        assert_eq!(
            d.wait_terminal(id, Duration::from_secs(60)).state,
            GoalState::Completed,
            "{id}"
        );
    }
    // `then` started only after `first` completed.
    let evs = d.events(0);
    let at = |goal: &str, to: GoalState| {
        evs.iter()
            .position(|e| {
                e.goal.as_deref() == Some(goal)
                    && matches!(&e.kind, kerneld::wire::EventKind::GoalStateChanged { to: t, .. } if *t == to)
            })
            .unwrap()
    };
    assert!(at(&first, GoalState::Completed) < at(&then, GoalState::Running));

    // A goal cancelled while a chain waits: the :completed chain is cancelled, saying why;
    // the :any one runs.
    let doomed = enqueue(&d, &demo_goal(dir.path(), "doomed", 3, ""));
    assert!(ctl(&d, &["pause", &doomed]).0);
    let stranded = enqueue_after(&d, &demo_goal(dir.path(), "stranded", 1, ""), &doomed).unwrap();
    let anyway = enqueue_after(
        &d,
        &demo_goal(dir.path(), "anyway", 1, ""),
        &format!("{doomed}:any"),
    )
    .unwrap();
    assert!(ctl(&d, &["cancel", &doomed]).0);
    let s = d.wait_terminal(&stranded, Duration::from_secs(30));
    assert_eq!(s.state, GoalState::Cancelled);
    let why = s.reason.unwrap();
    assert!(
        why.contains(&format!(
            "the goal it runs after, {doomed}, cancelled instead of completing"
        )),
        "{why}"
    );
    assert_eq!(
        d.wait_terminal(&anyway, Duration::from_secs(60)).state,
        GoalState::Completed
    );

    // Refused at enqueue, with the reason; nothing enqueued.
    let before = d.status().len();
    let file = demo_goal(dir.path(), "refused", 1, "");
    let e = enqueue_after(&d, &file, &doomed).unwrap_err();
    assert!(
        e.contains("not enqueued: the goal it runs after")
            && e.contains("cancelled instead of completing"),
        "{e}"
    );
    let e = enqueue_after(&d, &file, "no-such-goal").unwrap_err();
    assert!(
        e.contains("after no-such-goal:completed: ") && e.contains("kernelctl status --all"),
        "{e}"
    );
    let e = enqueue_after(&d, &file, "reval:afterok").unwrap_err();
    assert!(
        e.contains("`afterok` after the goal is not a condition"),
        "{e}"
    );
    let bad = demo_goal(dir.path(), "badfile", 1, "after = \"x/y\"");
    let (ok, e) = ctl(&d, &["enqueue", bad.to_str().unwrap()]);
    assert!(!ok && e.contains("`x/y` is not a goal"), "{e}");
    assert_eq!(
        d.status().len(),
        before,
        "a refused chain enqueued something"
    );
    // The daemon is unharmed, and its log whole.
    let last = enqueue(&d, &demo_goal(dir.path(), "last", 1, ""));
    assert_eq!(
        d.wait_terminal(&last, Duration::from_secs(60)).state,
        GoalState::Completed
    );
    assert_dense(&d.events(0));
    assert!(d.stop().success());
}
