//! A hanging and a crashing candidate through the real daemon: each gets its failure
//! class, its worker's process group is killed, and the next evaluation, on a fresh
//! worker, succeeds.

use std::time::Duration;

use kerneld::wire::{EventKind, GoalState, ResultClass};
use kerneld_e2e::*;

#[test]
fn hang_and_segfault_are_contained_and_the_next_evaluation_succeeds() {
    let dir = TempDir::new("faults");
    let d = Daemon::start_env(
        dir.path(),
        &["--eval-timeout", "30s"],
        &[("KERNELD_STATIC_ALLOW_IMPORTS", "ctypes")],
    );
    let goal = fault_goal(
        dir.path(),
        "faults",
        &["python_hang.py", "segfault.py", "tiled.py"],
        3,
    );
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");

    let events = d.events(0);
    assert_dense(&events);
    let mut classes = Vec::new();
    let mut finished_at = Vec::new();
    let mut started_at = Vec::new();
    for e in &events {
        match &e.kind {
            EventKind::EvaluationFinished {
                iteration, result, ..
            } => {
                classes.push((*iteration, result.class));
                finished_at.push((*iteration, e.time_ms));
            }
            EventKind::EvaluationStarted { iteration, .. } => {
                started_at.push((*iteration, e.time_ms))
            }
            _ => {}
        }
    }
    assert_eq!(
        classes,
        vec![
            (1, ResultClass::TimedOut),
            (2, ResultClass::Crashed),
            (3, ResultClass::Ok)
        ],
        "log:\n{}",
        d.log_text()
    );
    // From the timeout's record to the next evaluation's start: the slot was freed and a
    // fresh worker warmed up.
    let t_timeout = finished_at[0].1;
    let t_next = started_at.iter().find(|(i, _)| *i == 2).unwrap().1;
    eprintln!(
        "timeout → next evaluation started: {} ms",
        t_next.saturating_sub(t_timeout)
    );
    let best = d.goal(&id).best.expect("the honest seed is the best");
    assert_eq!(best.seed, "tiled.py");
}

#[test]
fn an_evaluation_that_never_gets_a_result_is_quarantined_not_retried_forever() {
    // The daemon dies (SIGKILL) during the same evaluation again and again: after
    // `max_attempts` (3) starts without a result the candidate is quarantined and the goal
    // moves on.
    let dir = TempDir::new("quar");
    let goal = fault_goal(dir.path(), "quar", &["python_hang.py", "tiled.py"], 2);
    let mut d = Daemon::start_with(dir.path(), &["--eval-timeout", "10m"]);
    let id = enqueue(&d, &goal);
    for attempt in 1..=3u32 {
        let started = d.wait_until(Duration::from_secs(60), |d| {
            d.events(0).iter().any(|e| {
                matches!(&e.kind, EventKind::EvaluationStarted { iteration: 1, attempt: a, .. } if *a == attempt)
            })
        });
        assert!(started, "attempt {attempt} never started\n{}", d.log_text());
        d.kill9();
        d = Daemon::start_with(dir.path(), &["--eval-timeout", "10m"]);
    }
    let g = d.wait_terminal(&id, Duration::from_secs(120));
    assert_eq!(g.state, GoalState::Completed);
    let events = d.events(0);
    assert_dense(&events);
    let classes: Vec<(u64, ResultClass)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::EvaluationFinished {
                iteration, result, ..
            } => Some((*iteration, result.class)),
            _ => None,
        })
        .collect();
    assert_eq!(
        classes,
        vec![(1, ResultClass::Quarantined), (2, ResultClass::Ok)]
    );
}
