//! The Slurm tests' shared pieces: the real one-node test cluster
//! (scripts/slurm-test-cluster.sh: Debian's slurm-wlm + munge, slurmctld + slurmd on this
//! machine, fake `gpu` gres devices), daemons configured for it, and a seed that holds an
//! evaluation in flight for as long as a test wants.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use kerneld::slurm::{Cluster, RawSlurmConfig, SlurmConfig};
use kerneld::wire::{Event, EventKind};

use crate::*;

/// Serializes the tests of one binary: one cluster, two CPUs.
static CLUSTER: Mutex<()> = Mutex::new(());
static READY: OnceLock<Result<(), String>> = OnceLock::new();

/// Starts the cluster once (installing Slurm if needed); None: skip, with the reason.
pub fn cluster() -> Option<MutexGuard<'static, ()>> {
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
        Ok(()) => {
            let guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
            clean_slate();
            Some(guard)
        }
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

/// Every test starts on an idle node. A job an earlier test (or an earlier run: slurmctld
/// restores its state) left behind would hold the node's CPUs, and the next test's job
/// would wait PENDING until its own time-out: cancel them all, and say so.
fn clean_slate() {
    // A node an earlier test's load made miss slurmd's heartbeats is DOWN (or DRAIN) and
    // every job waits PENDING until it is resumed, which Slurm does only on its own schedule.
    for (node, state) in node_states() {
        if ["down", "drain", "fail", "not_responding"]
            .iter()
            .any(|s| state.contains(s))
        {
            eprintln!("slurm test cluster: node {node} is {state}: resuming it");
            let _ = Command::new("scontrol")
                .args(["update", &format!("NodeName={node}"), "State=RESUME"])
                .output();
        }
    }
    let left = squeue_partition();
    if left.is_empty() {
        return;
    }
    eprintln!("slurm test cluster: cancelling jobs left by an earlier test: {left:?}");
    let _ = Command::new("scancel").args(["-p", PARTITION]).output();
    let t0 = Instant::now();
    while !squeue_partition().is_empty() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(250));
    }
    let still = squeue_partition();
    assert!(
        still.is_empty(),
        "jobs outlived scancel for 60 s on the test partition: {still:?}"
    );
}

/// The test partition (scripts/slurm-test-cluster.sh); only tests submit to it.
const PARTITION: &str = "kerneld";

/// Each node of the test partition and its state in lower case (`idle`, `down*`, ...).
pub fn node_states() -> Vec<(String, String)> {
    Command::new("sinfo")
        .args(["-h", "-N", "-p", PARTITION, "-o", "%N %T"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(n, s)| (n.to_string(), s.to_lowercase()))
                .collect()
        })
        .unwrap_or_default()
}

/// `JOBID NAME STATE REASON` of every job in the test partition, one string each.
pub fn squeue_partition() -> Vec<String> {
    Command::new("squeue")
        .args(["-h", "-p", PARTITION, "-o", "%i %j %T %r"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub fn test_cluster(state_dir: &Path, max_jobs: u32) -> Cluster {
    let cfg = SlurmConfig::from_raw(
        RawSlurmConfig {
            partition: PARTITION.into(),
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
pub fn alive(c: &Cluster, rt: &tokio::runtime::Runtime) -> Vec<u64> {
    rt.block_on(c.our_jobs())
        .unwrap()
        .into_iter()
        .filter(|(_, j)| j.is_running() || j.is_pending() || j.state == "COMPLETING")
        .map(|(_, j)| j.id)
        .collect()
}

/// Whether none of the cluster's jobs is alive within `limit` (a cancelled job stays
/// COMPLETING until Slurm has killed its steps).
pub fn no_job_within(c: &Cluster, rt: &tokio::runtime::Runtime, limit: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if alive(c, rt).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    alive(c, rt).is_empty()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A kerneld.toml whose only slots are `max_jobs` Slurm jobs in the test partition.
pub fn slurm_config(dir: &Path, max_jobs: u32, extra: &str) -> PathBuf {
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

pub fn start(dir: &Path, config: &Path) -> Daemon {
    Daemon::start_env(
        dir,
        &["--config", config.to_str().unwrap()],
        // The hold seed below waits on a file (test-only imports).
        &[("KERNELD_STATIC_ALLOW_IMPORTS", "os,time")],
    )
}

/// The demo's seed, made to wait at each call while `hold` exists: an evaluation that
/// is in flight for as long as the test wants (then it runs like the demo's own).
pub fn hold_goal(dir: &Path, name: &str, hold: &Path, iterations: u64, extra: &str) -> PathBuf {
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

pub fn slurm_events(evs: &[Event]) -> Vec<&Event> {
    evs.iter()
        .filter(|e| e.kind.type_name().starts_with("slurm_job"))
        .collect()
}

/// Every job the log started also ended in the log, and Slurm holds none of ours.
pub fn assert_no_job_left(d: &Daemon, c: &Cluster, rt: &tokio::runtime::Runtime) {
    let ok = no_job_within(c, rt, Duration::from_secs(60));
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

pub fn wait_event(d: &Daemon, limit: Duration, what: &str, f: impl Fn(&Event) -> bool) -> Event {
    let t0 = Instant::now();
    loop {
        if let Some(e) = d.events(0).into_iter().find(|e| f(e)) {
            return e;
        }
        if t0.elapsed() >= limit {
            let kinds: Vec<&str> = d.events(0).iter().map(|e| e.kind.type_name()).collect();
            panic!(
                "no {what} within {limit:?}; events: {kinds:?}; squeue: {:?}; nodes: {:?}; log:\n{}",
                squeue_partition(),
                node_states(),
                d.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

pub fn slurm_job_of(evs: &[Event], slot: &str) -> u64 {
    evs.iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::SlurmJobStarted { slot: s, job, .. } if s == slot => Some(*job),
            _ => None,
        })
        .expect("a running job for the slot")
}

/// A daemon on one Slurm slot whose goal (2 iterations of the hold seed) has its first
/// evaluation in flight on `slurm-0`, held there until `complete`.
pub struct Held {
    pub dir: TempDir,
    pub config: PathBuf,
    daemon: Option<Daemon>,
    pub cluster: Cluster,
    pub rt: tokio::runtime::Runtime,
    hold: PathBuf,
    pub goal: String,
    /// The held evaluation's `evaluation_started`.
    pub started: Event,
    /// The job it runs in.
    pub job: u64,
}

impl Held {
    pub fn new(tag: &str, iterations: u64, slurm_extra: &str) -> Held {
        let dir = TempDir::new(tag);
        let config = slurm_config(dir.path(), 1, slurm_extra);
        let d = start(dir.path(), &config);
        let cluster = test_cluster(&d.state_dir, 1);
        let hold = dir.path().join("hold");
        std::fs::write(&hold, "").unwrap();
        let goal = enqueue(&d, &hold_goal(dir.path(), tag, &hold, iterations, ""));
        let started = wait_event(
            &d,
            Duration::from_secs(240),
            "evaluation start",
            |e| matches!(&e.kind, EventKind::EvaluationStarted { device, .. } if device == "slurm-0"),
        );
        let job = slurm_job_of(&d.events(0), "slurm-0");
        Held {
            dir,
            config,
            daemon: Some(d),
            cluster,
            rt: runtime(),
            hold,
            goal,
            started,
            job,
        }
    }

    pub fn d(&self) -> &Daemon {
        self.daemon.as_ref().expect("a daemon is running")
    }

    /// Takes the daemon out (to stop or kill it); `restart` starts the next one.
    pub fn take(&mut self) -> Daemon {
        self.daemon.take().expect("a daemon is running")
    }

    pub fn restart(&mut self) {
        assert!(self.daemon.is_none(), "stop or kill the daemon first");
        self.daemon = Some(start(self.dir.path(), &self.config));
    }

    pub fn alive(&self) -> Vec<u64> {
        alive(&self.cluster, &self.rt)
    }

    /// The first abort after the held evaluation started: the event, its iteration and
    /// reason, which names the job.
    pub fn abort(&self, limit: Duration, what: &str) -> (Event, u64, String) {
        let after = self.started.seq;
        let e = wait_event(self.d(), limit, what, |e| {
            e.seq > after && matches!(e.kind, EventKind::EvaluationAborted { .. })
        });
        let EventKind::EvaluationAborted {
            iteration, reason, ..
        } = &e.kind
        else {
            unreachable!()
        };
        let (iteration, reason) = (*iteration, reason.clone());
        assert!(
            reason.contains(&format!("Slurm job {}", self.job)),
            "{reason}"
        );
        (e, iteration, reason)
    }

    /// Whether the log ended the held job with a state starting with `state`.
    pub fn job_ended_as(&self, evs: &[Event], state: &str) -> bool {
        evs.iter().any(|e| {
            matches!(&e.kind, EventKind::SlurmJobEnded { job, state: Some(s), .. }
                if *job == self.job && s.starts_with(state))
        })
    }

    /// Lets the evaluations go and waits for the goal to complete; checks that the log
    /// has no gap and that no job is left, stops the daemon, and returns the log.
    pub fn complete(mut self) -> Vec<Event> {
        let _ = std::fs::remove_file(&self.hold);
        let d = self.take();
        let g = d.wait_terminal(&self.goal, Duration::from_secs(600));
        assert_eq!(g.state, crate::GoalState::Completed, "{g:?}");
        let evs = d.events(0);
        assert_dense(&evs);
        assert_no_job_left(&d, &self.cluster, &self.rt);
        assert!(d.stop().success());
        evs
    }
}
