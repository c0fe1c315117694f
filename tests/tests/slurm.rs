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
                panic!("KERNELD_REQUIRE_SLURM is set and the Slurm test cluster did not start:\n{why}");
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
        assert!(!w.interrupt(Duration::from_millis(10)).await, "srun does not forward SIGINT");

        c.cancel(id).await.unwrap();
        let t0 = Instant::now();
        loop {
            let j = c.job(id).await.unwrap();
            if j.as_ref().is_none_or(|j| !j.is_running()) {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "job {id} still {j:?}");
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
