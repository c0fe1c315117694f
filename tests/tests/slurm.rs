//! Slurm slots against a real one-node cluster (scripts/slurm-test-cluster.sh starts it:
//! Debian's slurm-wlm + munge, slurmctld + slurmd on this machine, a count-only `gpu`
//! gres). Nothing is mocked: jobs are real allocations, the harness worker runs under
//! `srun`, and the faults are Slurm's own (`scancel`, a time limit, `kill -9` of the
//! daemon while its jobs run).
//!
//! The tests share one cluster of 2 CPUs, so they run one at a time (`CLUSTER` lock).
//! Without Slurm (and no way to install it) they are skipped with the reason printed.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use kerneld::slurm::{Cluster, RawSlurmConfig, SlurmConfig};
use kerneld_e2e::*;
use serde_json::json;

/// Serializes the tests: one cluster, two CPUs.
static CLUSTER: Mutex<()> = Mutex::new(());
static READY: OnceLock<Result<(), String>> = OnceLock::new();

/// Starts the cluster once (installing Slurm if needed); None: skip, with the reason.
fn cluster() -> Option<MutexGuard<'static, ()>> {
    let ready = READY.get_or_init(|| {
        let out = Command::new(repo_root().join("scripts/slurm-test-cluster.sh"))
            .output()
            .map_err(|e| format!("cannot run scripts/slurm-test-cluster.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    match ready {
        Ok(()) => Some(CLUSTER.lock().unwrap_or_else(|p| p.into_inner())),
        Err(why) => {
            if std::env::var_os("KERNELD_REQUIRE_SLURM").is_some() {
                panic!(
                    "KERNELD_REQUIRE_SLURM is set and the Slurm test cluster did not start:\n{why}"
                );
            }
            eprintln!("SKIPPED: no Slurm test cluster: {why}");
            None
        }
    }
}

fn test_cluster(state_dir: &Path, max_jobs: u32) -> Cluster {
    let cfg = SlurmConfig::from_raw(
        RawSlurmConfig {
            partition: "kerneld".into(),
            account: None,
            qos: None,
            constraint: None,
            time_limit: Some("5m".into()),
            max_jobs: Some(max_jobs),
            idle_release: Some("5s".into()),
            gres: None,
            bin_dir: None,
            local: None,
        },
        |s, _| {
            kerneld::goal::parse_duration(s)
                .map(Duration::from_secs)
                .map_err(|e| e.to_string())
        },
    )
    .unwrap();
    Cluster::new(cfg, state_dir)
}

/// Job ids squeue shows for a cluster's jobs that are still alive (pending or running).
fn alive(c: &Cluster, rt: &tokio::runtime::Runtime) -> Vec<u64> {
    rt.block_on(c.our_jobs())
        .unwrap()
        .into_iter()
        .filter(|(_, j)| j.is_running() || j.is_pending() || j.state == "COMPLETING")
        .map(|(_, j)| j.id)
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The module on its own: allocate, run the real harness worker as a step (stdio = the
/// worker protocol), lose the job to `scancel`, and see the worker's end.
#[test]
fn a_worker_runs_as_a_job_step_and_dies_with_its_job() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-mod");
    let c = test_cluster(dir.path(), 1);
    let rt = runtime();
    rt.block_on(async {
        let req = c.request(0).await.expect("salloc names a job");
        let id = req.id;
        let job = c.granted(req).await.expect("granted");
        assert_eq!(job.id, id);
        assert!(job.node.is_some(), "{job:?}");
        assert_eq!(c.slot_of(&job.name), Some(0));
        let spec = kerneld::harness::WorkerSpec {
            python: python(),
            script: repo_root().join("kernels/harness/worker.py"),
            gpu_uuid: None,
            max_files: 4096,
            max_address_space: 0,
            start_timeout: Duration::from_secs(180),
            launcher: c.srun_prefix(id),
        };
        let mut w = kerneld::harness::Worker::start(&spec)
            .await
            .expect("the worker starts under srun and says ready");
        let pong = w
            .call(json!({"op": "ping"}), Duration::from_secs(30))
            .await
            .expect("ping over srun's stdio");
        assert_eq!(pong["ok"], json!(true), "{pong}");
        assert!(
            !w.interrupt(Duration::from_millis(10)).await,
            "srun does not forward SIGINT"
        );

        c.cancel(id).await.unwrap();
        let t0 = Instant::now();
        loop {
            let j = c.job(id).await.unwrap();
            if j.as_ref().is_none_or(|j| !j.is_running()) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "job {id} still {j:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The step went with the job: the worker's pipe is closed.
        let lost = w.call(json!({"op": "ping"}), Duration::from_secs(60)).await;
        assert!(
            matches!(lost, Err(kerneld::harness::WorkerError::Died { .. })),
            "a cancelled job's worker is gone: {lost:?}"
        );
        // Cancelling again is not an error (a job kerneld lets go of is always cancelled).
        c.cancel(id).await.unwrap();
    });
    assert!(alive(&c, &rt).is_empty());
}

// -- the daemon on Slurm slots ---------------------------------------------------------

use kerneld::wire::{self, Event, EventKind, GoalState};

/// A kerneld.toml whose only slots are `max_jobs` Slurm jobs in the test partition.
fn slurm_config(dir: &Path, max_jobs: u32, extra: &str) -> std::path::PathBuf {
    let path = dir.join("kerneld.toml");
    std::fs::write(
        &path,
        format!(
            "eval_timeout = \"10m\"\n[slurm]\npartition = \"kerneld\"\nmax_jobs = {max_jobs}\nidle_release = \"3s\"\n{extra}\n"
        ),
    )
    .unwrap();
    path
}

fn start(dir: &Path, config: &Path) -> Daemon {
    Daemon::start_env(
        dir,
        &["--config", config.to_str().unwrap()],
        // The hold seed below waits on a file (test-only imports).
        &[("KERNELD_STATIC_ALLOW_IMPORTS", "os,time")],
    )
}

/// The demo's seed, made to wait at each call while `hold` exists: an evaluation that
/// is in flight for as long as the test wants (then it runs like the demo's own).
fn hold_goal(
    dir: &Path,
    name: &str,
    hold: &Path,
    iterations: u64,
    extra: &str,
) -> std::path::PathBuf {
    let tiled = std::fs::read_to_string(repo_root().join("kernels/demo/seeds/tiled.py")).unwrap();
    let held = tiled.replacen(
        "def matmul(inputs: dict, out: dict, config: dict) -> None:\n",
        &format!(
            "def matmul(inputs: dict, out: dict, config: dict) -> None:\n    import os as _os, time as _time\n    while _os.path.exists({:?}):\n        _time.sleep(0.2)\n",
            hold.display().to_string()
        ),
        1,
    );
    assert_ne!(
        held, tiled,
        "the demo seed's matmul signature changed; update hold_goal"
    );
    std::fs::write(dir.join("held.py"), held).unwrap();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\ntask = \"demo\"\nseed = [\"held.py\"]\n{extra}\n[budget]\nwall = \"30m\"\niterations = {iterations}\n\n[agent]\nkind = \"search\"\n"
        ),
    )
    .unwrap();
    path
}

fn slurm_events(evs: &[Event]) -> Vec<&Event> {
    evs.iter()
        .filter(|e| e.kind.type_name().starts_with("slurm_job"))
        .collect()
}

/// Every job the log started also ended in the log, and Slurm holds none of ours.
fn assert_no_job_left(d: &Daemon, c: &Cluster, rt: &tokio::runtime::Runtime) {
    let ok = d.wait_until(Duration::from_secs(60), |_| alive(c, rt).is_empty());
    assert!(
        ok,
        "jobs left behind: {:?}; log:\n{}",
        alive(c, rt),
        d.log_text()
    );
    let evs = d.events(0);
    let mut open = std::collections::BTreeSet::new();
    for e in &evs {
        match &e.kind {
            EventKind::SlurmJobSubmitted { job, .. } => {
                open.insert(*job);
            }
            EventKind::SlurmJobEnded { job, .. } => {
                open.remove(job);
            }
            _ => {}
        }
    }
    // Idle release is recorded a tick after Slurm lets go of the job.
    let ok = d.wait_until(Duration::from_secs(30), |d| {
        let evs = d.events(0);
        open.iter().all(|j| {
            evs.iter()
                .any(|e| matches!(&e.kind, EventKind::SlurmJobEnded { job, .. } if job == j))
        })
    });
    assert!(ok, "jobs the log never saw end: {open:?}");
}

fn wait_event(d: &Daemon, limit: Duration, what: &str, f: impl Fn(&Event) -> bool) -> Event {
    let t0 = Instant::now();
    loop {
        if let Some(e) = d.events(0).into_iter().find(|e| f(e)) {
            return e;
        }
        assert!(
            t0.elapsed() < limit,
            "no {what} within {limit:?}; log:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn slurm_job_of(evs: &[Event], slot: &str) -> u64 {
    evs.iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::SlurmJobStarted { slot: s, job, .. } if s == slot => Some(*job),
            _ => None,
        })
        .expect("a running job for the slot")
}

#[test]
fn the_demo_goal_runs_end_to_end_on_slurm_slots() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-e2e");
    let config = slurm_config(dir.path(), 2, "");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 2);
    let rt = runtime();
    let id = enqueue(
        &d,
        &demo_goal(dir.path(), "onslurm", 4, "[resources]\ngpus = 2\n"),
    );

    // While it runs, `kernelctl gpus` shows the slots with their jobs.
    let seen = d.wait_until(Duration::from_secs(180), |d| {
        let v = d.call(wire::method::GPUS, json!({}));
        v["devices"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["slurm"]["state"] == json!("RUNNING")))
    });
    assert!(
        seen,
        "no Slurm slot with a running job; log:\n{}",
        d.log_text()
    );
    let out = kernelctl(&d.socket, &["gpus"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("SLURM JOB") && text.contains("slurm-0"),
        "{text}"
    );
    assert!(text.contains("RUNNING"), "{text}");

    let g = d.wait_terminal(&id, Duration::from_secs(600));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    assert_eq!(g.evaluations, 4);
    assert!(g.best.is_some());

    let evs = d.events(0);
    assert_dense(&evs);
    let devices: Vec<&String> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::EvaluationStarted { device, .. } => Some(device),
            _ => None,
        })
        .collect();
    assert!(!devices.is_empty());
    assert!(
        devices.iter().all(|d| d.starts_with("slurm-")),
        "{devices:?}"
    );
    let started: Vec<u64> = evs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SlurmJobStarted { job, node, .. } => {
                assert!(!node.is_empty());
                Some(*job)
            }
            _ => None,
        })
        .collect();
    assert!(
        !started.is_empty() && started.len() <= 2,
        "never more than max_jobs: {started:?}"
    );
    // Idle for 3 s after the goal: the jobs go back.
    assert_no_job_left(&d, &c, &rt);
    assert!(d.stop().success());
}

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
