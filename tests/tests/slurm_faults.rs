//! Slurm faults against the real one-node cluster: a job that Slurm ends under an
//! evaluation (`scancel`, its time limit, its node failing) makes the evaluation run
//! again on a new job and the goal complete; `kill -9` of the daemon while its job runs
//! leaves no orphan job and no gap in the log after the restart.

use std::process::Command;
use std::time::Duration;

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::cluster::*;
use kerneld_e2e::*;

#[test]
fn scancel_mid_evaluation_reruns_it_and_the_goal_completes() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-scancel");
    let config = slurm_config(dir.path(), 1, "");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 1);
    let rt = runtime();
    let hold = dir.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let id = enqueue(&d, &hold_goal(dir.path(), "scancel", &hold, 2, ""));

    let first = wait_event(
        &d,
        Duration::from_secs(240),
        "evaluation start",
        |e| matches!(&e.kind, EventKind::EvaluationStarted { device, .. } if device == "slurm-0"),
    );
    let job = slurm_job_of(&d.events(0), "slurm-0");
    std::thread::sleep(Duration::from_secs(2));
    let out = Command::new("scancel")
        .arg(job.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let abort = wait_event(&d, Duration::from_secs(120), "abort after scancel", |e| {
        e.seq > first.seq && matches!(e.kind, EventKind::EvaluationAborted { .. })
    });
    let EventKind::EvaluationAborted {
        reason, iteration, ..
    } = &abort.kind
    else {
        unreachable!()
    };
    assert!(reason.contains(&format!("Slurm job {job}")), "{reason}");
    // A new job for the slot, and the evaluation again on it.
    wait_event(
        &d,
        Duration::from_secs(120),
        "a second job",
        |e| matches!(&e.kind, EventKind::SlurmJobStarted { job: j, .. } if *j != job),
    );
    std::fs::remove_file(&hold).unwrap();
    let g = d.wait_terminal(&id, Duration::from_secs(600));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    let evs = d.events(0);
    assert_dense(&evs);
    let rerun = evs.iter().any(|e| {
        e.seq > abort.seq
            && matches!(&e.kind, EventKind::EvaluationFinished { iteration: i, result, .. }
                if i == iteration && result.is_scored())
    });
    assert!(rerun, "iteration {iteration} was not re-run to a result");
    assert!(evs.iter().any(|e| matches!(&e.kind,
        EventKind::SlurmJobEnded { job: j, state: Some(s), .. } if *j == job && s.starts_with("CANCEL"))));
    assert_no_job_left(&d, &c, &rt);
    assert!(d.stop().success());
}

#[test]
fn kill9_of_the_daemon_while_jobs_run_leaves_no_orphan_and_no_gap() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-kill9");
    let config = slurm_config(dir.path(), 1, "");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 1);
    let rt = runtime();
    let hold = dir.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let id = enqueue(&d, &hold_goal(dir.path(), "kill9", &hold, 2, ""));
    wait_event(
        &d,
        Duration::from_secs(240),
        "evaluation start",
        |e| matches!(&e.kind, EventKind::EvaluationStarted { device, .. } if device == "slurm-0"),
    );
    let before = d.events(0);
    let job = slurm_job_of(&before, "slurm-0");
    d.kill9();
    // The job outlives the daemon (an allocation, not a child process).
    assert_eq!(alive(&c, &rt), vec![job]);

    let d = start(dir.path(), &config);
    // Reattached to the same job, not a second one for the slot.
    let re = wait_event(&d, Duration::from_secs(30), "reattach", |e| {
        e.seq > before.last().unwrap().seq
            && matches!(
                e.kind,
                EventKind::SlurmJobStarted {
                    reattached: true,
                    ..
                }
            )
    });
    let EventKind::SlurmJobStarted { job: rejob, .. } = re.kind else {
        unreachable!()
    };
    assert_eq!(rejob, job);
    std::fs::remove_file(&hold).unwrap();
    let g = d.wait_terminal(&id, Duration::from_secs(600));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    let evs = d.events(0);
    assert_dense(&evs);
    // Everything the first daemon logged is still there, unchanged.
    assert_eq!(&evs[..before.len()], &before[..]);
    let submitted = evs
        .iter()
        .filter(|e| matches!(e.kind, EventKind::SlurmJobSubmitted { .. }))
        .count();
    let held_at_once = {
        let mut n = 0i32;
        let mut most = 0;
        for e in slurm_events(&evs) {
            match e.kind {
                EventKind::SlurmJobSubmitted { .. } => n += 1,
                EventKind::SlurmJobEnded { .. } => n -= 1,
                _ => {}
            }
            most = most.max(n);
        }
        most
    };
    assert!(submitted >= 1);
    assert_eq!(held_at_once, 1, "a slot held two jobs at once");
    assert_no_job_left(&d, &c, &rt);
    assert!(d.stop().success());
}

#[test]
fn a_job_killed_at_its_time_limit_reruns_the_evaluation() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-timeout");
    // Slurm's smallest limit: one minute (checked every ~30 s).
    let config = slurm_config(dir.path(), 1, "time_limit = \"1m\"");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 1);
    let rt = runtime();
    let hold = dir.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let id = enqueue(&d, &hold_goal(dir.path(), "timelimit", &hold, 2, ""));
    let first = wait_event(
        &d,
        Duration::from_secs(240),
        "evaluation start",
        |e| matches!(&e.kind, EventKind::EvaluationStarted { device, .. } if device == "slurm-0"),
    );
    let job = slurm_job_of(&d.events(0), "slurm-0");
    let abort = wait_event(
        &d,
        Duration::from_secs(180),
        "abort at the time limit",
        |e| e.seq > first.seq && matches!(e.kind, EventKind::EvaluationAborted { .. }),
    );
    let EventKind::EvaluationAborted { reason, .. } = &abort.kind else {
        unreachable!()
    };
    assert!(
        reason.contains(&format!("Slurm job {job}")) && reason.contains("TIMEOUT"),
        "{reason}"
    );
    std::fs::remove_file(&hold).unwrap();
    let g = d.wait_terminal(&id, Duration::from_secs(600));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    let evs = d.events(0);
    assert_dense(&evs);
    assert!(evs.iter().any(|e| matches!(&e.kind,
        EventKind::SlurmJobEnded { job: j, state: Some(s), .. } if *j == job && s == "TIMEOUT")));
    assert_no_job_left(&d, &c, &rt);
    assert!(d.stop().success());
}

/// The node fails under the evaluation (slurmctld marks it DOWN: its jobs end NODE_FAIL).
#[test]
fn a_node_failure_reruns_the_evaluation() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-nodefail");
    let config = slurm_config(dir.path(), 1, "");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 1);
    let rt = runtime();
    let hold = dir.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let id = enqueue(&d, &hold_goal(dir.path(), "nodefail", &hold, 2, ""));
    let first = wait_event(
        &d,
        Duration::from_secs(240),
        "evaluation start",
        |e| matches!(&e.kind, EventKind::EvaluationStarted { device, .. } if device == "slurm-0"),
    );
    let evs = d.events(0);
    let job = slurm_job_of(&evs, "slurm-0");
    let node = evs
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SlurmJobStarted { job: j, node, .. } if *j == job => Some(node.clone()),
            _ => None,
        })
        .unwrap();
    let down = Command::new("scontrol")
        .args([
            "update",
            &format!("NodeName={node}"),
            "State=DOWN",
            "Reason=kerneld-test-node-failure",
        ])
        .output()
        .unwrap();
    assert!(down.status.success(), "{down:?}");
    // The node comes back whatever happens next (ReturnToService=2 returns it once
    // slurmd registers; RESUME in case it has not).
    let _resume = Resume(node);
    let abort = wait_event(
        &d,
        Duration::from_secs(120),
        "abort after the node failed",
        |e| e.seq > first.seq && matches!(e.kind, EventKind::EvaluationAborted { .. }),
    );
    let EventKind::EvaluationAborted { reason, .. } = &abort.kind else {
        unreachable!()
    };
    assert!(
        reason.contains(&format!("Slurm job {job}")) && reason.contains("NODE_FAIL"),
        "{reason}"
    );
    std::fs::remove_file(&hold).unwrap();
    let g = d.wait_terminal(&id, Duration::from_secs(600));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    assert_dense(&d.events(0));
    assert_no_job_left(&d, &c, &rt);
    assert!(d.stop().success());
}

struct Resume(String);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("NodeName={}", self.0), "State=RESUME"])
            .output();
    }
}
