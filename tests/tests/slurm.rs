//! Slurm slots against a real one-node cluster (`kerneld_e2e::cluster`). Nothing is
//! mocked: jobs are real allocations and the harness worker runs under `srun`. Here: the
//! module on its own, the demo goal end to end on Slurm slots, local and Slurm slots
//! serving one goal, a clean stop. Faults (scancel, time limit, node failure, kill -9 of
//! the daemon) are in slurm_faults.rs. Skipped, with the reason printed, only when Slurm
//! cannot be installed (scripts/test.sh sets KERNELD_REQUIRE_SLURM when it could).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use kerneld::wire::{self, EventKind, GoalState};
use kerneld_e2e::cluster::*;
use kerneld_e2e::*;
use serde_json::json;

/// The module on its own: allocate, run the real harness worker as a job step with
/// `srun_prefix` (its stdio is the worker protocol), lose the job to `scancel`, and see
/// the worker's pipe close.
#[test]
fn a_worker_runs_as_a_job_step_and_dies_with_its_job() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-mod");
    let c = test_cluster(dir.path(), 1);
    let rt = runtime();
    let job = rt.block_on(async {
        let req = c.request(0).await.expect("salloc names a job");
        let id = req.id;
        let job = c.granted(req).await.expect("granted");
        assert_eq!(job.id, id);
        job
    });
    assert!(job.node.is_some(), "{job:?}");
    assert_eq!(c.slot_of(&job.name), Some(0));

    let prefix = c.srun_prefix(job.id);
    let mut child = Command::new(&prefix[0])
        .args(&prefix[1..])
        .arg(python())
        .arg("-u")
        .arg(repo_root().join("kernels/harness/worker.py"))
        .env("TRITON_INTERPRET", "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let lines = {
        let (tx, rx) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines() {
                let _ = tx.send(line.unwrap_or_default());
            }
        });
        rx
    };
    let ready: serde_json::Value =
        serde_json::from_str(&lines.recv_timeout(Duration::from_secs(180)).unwrap()).unwrap();
    assert_eq!(ready["event"], json!("ready"), "{ready}");
    writeln!(stdin, "{}", json!({"op": "ping", "id": 1})).unwrap();
    let pong: serde_json::Value =
        serde_json::from_str(&lines.recv_timeout(Duration::from_secs(30)).unwrap()).unwrap();
    assert_eq!(
        (pong["id"].clone(), pong["ok"].clone()),
        (json!(1), json!(true)),
        "{pong}"
    );

    rt.block_on(c.cancel(job.id)).unwrap();
    // The step goes with the job (SIGTERM, then SIGKILL after KillWait): stdout closes.
    let t0 = Instant::now();
    loop {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => panic!("the worker outlived its job"),
            Ok(_) => assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the worker outlived its job"
            ),
        }
    }
    let _ = child.wait();
    // Cancelling again is not an error (a job kerneld lets go of is always cancelled).
    rt.block_on(c.cancel(job.id)).unwrap();
    // Gone once Slurm finished tearing it down (COMPLETING).
    assert!(
        no_job_within(&c, &rt, Duration::from_secs(30)),
        "{:?}",
        alive(&c, &rt)
    );
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

/// `local = true`: this host's slot and the Slurm slots serve one goal side by side, and
/// `kernelctl gpus` lists both.
#[test]
fn local_and_slurm_slots_serve_the_same_goal() {
    let Some(_guard) = cluster() else { return };
    let dir = TempDir::new("slurm-mixed");
    let config = slurm_config(dir.path(), 1, "local = true");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 1);
    let rt = runtime();
    let v = d.call(wire::method::GPUS, json!({}));
    let names: Vec<&str> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["cpu", "slurm-0"]);
    let id = enqueue(
        &d,
        &demo_goal(dir.path(), "mixed", 6, "[resources]\ngpus = 2\n"),
    );
    let g = d.wait_terminal(&id, Duration::from_secs(600));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    let evs = d.events(0);
    assert_dense(&evs);
    let on = |dev: &str| {
        evs.iter()
            .filter(|e| matches!(&e.kind, EventKind::EvaluationFinished { device, .. } if device == dev))
            .count()
    };
    assert!(
        on("cpu") >= 1 && on("slurm-0") >= 1,
        "cpu {} slurm {}",
        on("cpu"),
        on("slurm-0")
    );
    assert_no_job_left(&d, &c, &rt);
    assert!(d.stop().success());
}

/// A clean stop cancels every job at once (and records it); the restart asks anew.
#[test]
fn a_clean_stop_cancels_the_jobs() {
    let Some(_guard) = cluster() else { return };
    let mut h = Held::new("slurm-stop", 1, "");
    let t0 = Instant::now();
    assert!(h.take().stop().success());
    assert!(t0.elapsed() < Duration::from_secs(30));
    // Cancelled at the stop; Slurm tears it down (COMPLETING) within KillWait.
    let gone = no_job_within(&h.cluster, &h.rt, Duration::from_secs(20));
    assert!(gone, "job {} outlived a clean stop: {:?}", h.job, h.alive());
    h.restart();
    let job = h.job;
    assert!(h.d().events(0).iter().any(|e| matches!(&e.kind,
        EventKind::SlurmJobEnded { job: j, reason, .. } if *j == job && reason.contains("stopped"))));
    h.complete();
}

/// A full cluster: the job waits PENDING, already in the log and in `kernelctl gpus`;
/// cancelling the goal that needed it cancels it.
#[test]
fn a_pending_job_is_logged_and_cancelled_once_not_needed() {
    let Some(_guard) = cluster() else { return };
    // Something else holds every CPU of the node.
    let hog = Command::new("salloc")
        .args([
            "--no-shell",
            "-p",
            "kerneld",
            "-J",
            "not-kerneld-hog",
            "--cpus-per-task=2",
            "--time=5",
        ])
        .output()
        .unwrap();
    assert!(hog.status.success(), "{hog:?}");
    let hog_id: String = String::from_utf8_lossy(&hog.stderr)
        .split("job allocation ")
        .nth(1)
        .unwrap()
        .trim()
        .to_string();
    struct Cancel(String);
    impl Drop for Cancel {
        fn drop(&mut self) {
            let _ = Command::new("scancel").arg(&self.0).output();
        }
    }
    let _hog = Cancel(hog_id);

    let dir = TempDir::new("slurm-pending");
    let config = slurm_config(dir.path(), 1, "");
    let d = start(dir.path(), &config);
    let c = test_cluster(&d.state_dir, 1);
    let rt = runtime();
    let id = enqueue(&d, &demo_goal(dir.path(), "pending", 2, ""));
    let sub = wait_event(&d, Duration::from_secs(60), "submission", |e| {
        matches!(e.kind, EventKind::SlurmJobSubmitted { .. })
    });
    let EventKind::SlurmJobSubmitted { job, .. } = sub.kind else {
        unreachable!()
    };
    let shown = d.wait_until(Duration::from_secs(30), |d| {
        let v = d.call(wire::method::GPUS, json!({}));
        v["devices"][0]["slurm"] == json!({"job": job, "state": "PENDING"})
    });
    assert!(shown, "{}", d.call(wire::method::GPUS, json!({})));
    assert_eq!(alive(&c, &rt), vec![job]);

    let out = kernelctl(&d.socket, &["cancel", &id]);
    assert!(out.status.success(), "{out:?}");
    let ended = wait_event(
        &d,
        Duration::from_secs(60),
        "the job's end",
        |e| matches!(&e.kind, EventKind::SlurmJobEnded { job: j, .. } if *j == job),
    );
    assert!(!d
        .events(0)
        .iter()
        .any(|e| matches!(e.kind, EventKind::SlurmJobStarted { .. })));
    assert!(ended.seq > sub.seq);
    assert!(
        no_job_within(&c, &rt, Duration::from_secs(30)),
        "{:?}",
        alive(&c, &rt)
    );
    assert_dense(&d.events(0));
    assert!(d.stop().success());
}

/// Issue #24: a GPU Slurm slot's sandbox on the node. The policy of a Slurm GPU (what the
/// daemon gives a `slurm-N` slot) runs under the job's `srun`: kerneld-sandbox finds the
/// step's GPU in `SLURM_STEP_GPUS` and opens its node only, and passes Slurm's
/// CUDA_VISIBLE_DEVICES on. The test cluster's GPUs are stand-ins named
/// /dev/kerneld-fake-gpuN (/dev/null's numbers), so the node prefix is theirs here.
#[test]
fn a_slurm_steps_gpu_is_the_only_one_its_sandbox_opens() {
    use kerneld::sandbox::policy::{GpuNodes, Policy, PolicyInputs};
    let Some(_guard) = cluster() else { return };
    if sandbox_probe()["landlock_abi"].as_i64().unwrap_or(0) < 6 {
        eprintln!("skipped: no Landlock ABI >= 6");
        return;
    }
    let dir = TempDir::new("slurm-gpu-sbx");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let policy = Policy::build(&PolicyInputs {
        sandbox_bin: binary("kerneld-sandbox"),
        python: python(),
        kernels_dir: repo_root().join("kernels"),
        scratch: scratch.clone(),
        inbox: scratch.clone(),
        gpu: GpuNodes::Slurm,
        run_as: None,
        max_files: 4096,
        max_procs: 4096,
        max_address_space: 0,
        extra_ro: vec![],
        extra_exec: vec![],
        forbidden: vec![dir.path().join("state")],
        no_connect: true,
        best_effort: false,
    })
    .unwrap();
    let mut runner = policy.runner;
    assert_eq!(
        runner.dev_from_env,
        vec![("SLURM_STEP_GPUS".into(), "/dev/nvidia".into())]
    );
    runner.dev_from_env[0].1 = "/dev/kerneld-fake-gpu".into();
    // No NVIDIA driver on the test machine.
    runner.dev.retain(|d| d.exists());
    runner.rw.push(scratch.clone());
    let code = r#"
import os
mine = os.environ.get("SLURM_STEP_GPUS")
for n in range(64):  # (listing /dev is not granted; stat is)
    if not os.path.exists("/dev/kerneld-fake-gpu%d" % n):
        continue
    try:
        os.close(os.open("/dev/kerneld-fake-gpu%d" % n, os.O_WRONLY)); print(n, "ok")
    except OSError as e:
        print(n, "denied", e.errno)
print("step", mine, "visible", os.environ.get("CUDA_VISIBLE_DEVICES"))
"#;
    let c = test_cluster(dir.path(), 1);
    let rt = runtime();
    let job = rt.block_on(async {
        let req = c.request(0).await.expect("salloc names a job");
        c.granted(req).await.expect("granted")
    });
    let prefix = c.srun_prefix(job.id);
    let out = Command::new(&prefix[0])
        .args(&prefix[1..])
        .arg(binary("kerneld-sandbox"))
        .args(runner.to_args())
        .arg("--")
        .arg(python())
        .args(["-c", code])
        .output()
        .unwrap();
    rt.block_on(c.cancel(job.id)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = text.lines().last().unwrap_or("");
    let step: u32 = last
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no SLURM_STEP_GPUS in the step: {text}"));
    assert!(last.contains("visible "), "{text}");
    assert_ne!(last, format!("step {step} visible None"), "{text}");
    let opened: Vec<&str> = text.lines().filter(|l| l.ends_with(" ok")).collect();
    assert_eq!(opened, [format!("{step} ok")], "{text}");
    assert!(
        text.lines().filter(|l| l.contains(" denied 13")).count() >= 1,
        "the other stand-in GPU was not refused: {text}"
    );
}
