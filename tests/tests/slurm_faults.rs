//! Slurm faults against the real one-node cluster: a job that Slurm ends under an
//! evaluation (`scancel`, its time limit, its node failing) makes the evaluation run
//! again on a new job and the goal complete; `kill -9` of the daemon while its job runs
//! leaves no orphan job and no gap in the log after the restart.

use std::process::Command;
use std::time::Duration;

use kerneld::wire::EventKind;
use kerneld_e2e::cluster::*;

#[test]
fn scancel_mid_evaluation_reruns_it_and_the_goal_completes() {
    let Some(_guard) = cluster() else { return };
    let h = Held::new("slurm-scancel", 2, "");
    std::thread::sleep(Duration::from_secs(2));
    let out = Command::new("scancel")
        .arg(h.job.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (abort, iteration, _) = h.abort(Duration::from_secs(120), "abort after scancel");
    // A new job for the slot, and the evaluation again on it.
    let job = h.job;
    wait_event(
        h.d(),
        Duration::from_secs(120),
        "a second job",
        |e| matches!(&e.kind, EventKind::SlurmJobStarted { job: j, .. } if *j != job),
    );
    assert!(h.job_ended_as(&h.d().events(0), "CANCEL"));
    let evs = h.complete();
    let rerun = evs.iter().any(|e| {
        e.seq > abort.seq
            && matches!(&e.kind, EventKind::EvaluationFinished { iteration: i, result, .. }
                if *i == iteration && result.is_scored())
    });
    assert!(rerun, "iteration {iteration} was not re-run to a result");
}

#[test]
fn kill9_of_the_daemon_while_jobs_run_leaves_no_orphan_and_no_gap() {
    let Some(_guard) = cluster() else { return };
    let mut h = Held::new("slurm-kill9", 2, "");
    let before = h.d().events(0);
    h.take().kill9();
    // The job outlives the daemon (an allocation, not a child process).
    assert_eq!(h.alive(), vec![h.job]);

    h.restart();
    // Reattached to the same job, not a second one for the slot.
    let last = before.last().unwrap().seq;
    let re = wait_event(h.d(), Duration::from_secs(30), "reattach", |e| {
        e.seq > last
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
    assert_eq!(rejob, h.job);
    let evs = h.complete();
    // Everything the first daemon logged is still there, unchanged.
    assert_eq!(&evs[..before.len()], &before[..]);
    let mut held = 0i32;
    for e in slurm_events(&evs) {
        match e.kind {
            EventKind::SlurmJobSubmitted { .. } => held += 1,
            EventKind::SlurmJobEnded { .. } => held -= 1,
            _ => {}
        }
        assert!(held <= 1, "the slot held two jobs at once: {e:?}");
    }
}

#[test]
fn a_job_killed_at_its_time_limit_reruns_the_evaluation() {
    let Some(_guard) = cluster() else { return };
    // Slurm's smallest limit: one minute (checked every ~30 s).
    let h = Held::new("slurm-timeout", 2, "time_limit = \"1m\"");
    let (_, _, reason) = h.abort(Duration::from_secs(180), "abort at the time limit");
    assert!(reason.contains("TIMEOUT"), "{reason}");
    let evs = h.d().events(0);
    assert!(h.job_ended_as(&evs, "TIMEOUT"));
    h.complete();
}

/// The node fails under the evaluation (slurmctld marks it DOWN: its jobs end NODE_FAIL).
#[test]
fn a_node_failure_reruns_the_evaluation() {
    let Some(_guard) = cluster() else { return };
    let h = Held::new("slurm-nodefail", 2, "");
    let job = h.job;
    let node = h
        .d()
        .events(0)
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
    let (_, _, reason) = h.abort(Duration::from_secs(120), "abort after the node failed");
    assert!(reason.contains("NODE_FAIL"), "{reason}");
    h.complete();
}

struct Resume(String);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("NodeName={}", self.0), "State=RESUME"])
            .output();
    }
}
