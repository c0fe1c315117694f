//! The scheduling policy on devices the test drives: the daemon runs in-process
//! (`kerneld::run_with`) over a `ScriptedLayer` of fake GPUs whose workers use
//! Triton's interpreter, with the real socket, redb file and Python harness.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kerneld::gpu::{DeviceLayer, HealthReading, ScriptedLayer};
use kerneld::wire::{Event, EventKind, GoalState, GpusResult, Health};
use kerneld::{Config, RunOptions};
use kerneld_e2e::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct InProcess {
    rt: tokio::runtime::Runtime,
    stop: CancellationToken,
    done: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    socket: std::path::PathBuf,
}

impl InProcess {
    fn start(dir: &std::path::Path, devices: Arc<dyn DeviceLayer>) -> InProcess {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let socket = dir.join("sock");
        let mut cfg = Config::new(dir.join("state"), socket.clone());
        cfg.python = python();
        cfg.kernels_dir = repo_root().join("kernels");
        let stop = CancellationToken::new();
        let done = rt.spawn(kerneld::run_with(
            cfg,
            stop.clone(),
            RunOptions {
                devices: Some(devices),
                ..Default::default()
            },
        ));
        let t0 = Instant::now();
        while try_call(&socket, "version", json!({})).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "in-process daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        InProcess {
            rt,
            stop,
            done: Some(done),
            socket,
        }
    }

    fn call(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let v = try_call(&self.socket, method, params).unwrap();
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    fn enqueue(&self, dir: &std::path::Path, name: &str, extra: &str) -> String {
        let path = demo_goal(dir, name, 100_000, extra);
        let r = self.call(
            "enqueue",
            json!({"path": path, "source": std::fs::read_to_string(&path).unwrap()}),
        );
        r["id"].as_str().unwrap().to_string()
    }

    fn events(&self) -> Vec<Event> {
        serde_json::from_value(self.call("events", json!({}))).unwrap()
    }

    fn gpus(&self) -> GpusResult {
        serde_json::from_value(self.call("gpus", json!({}))).unwrap()
    }

    /// Evaluations started per goal since `after`.
    fn starts_since(&self, after: u64) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for e in self.events() {
            if e.seq > after {
                if let EventKind::EvaluationStarted { .. } = e.kind {
                    *m.entry(e.goal.clone().unwrap()).or_default() += 1;
                }
            }
        }
        m
    }

    fn last_seq(&self) -> u64 {
        self.call("version", json!({}))["last_seq"]
            .as_u64()
            .unwrap()
    }

    fn wait(&self, limit: Duration, mut f: impl FnMut(&InProcess) -> bool) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if f(self) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(done) = self.done.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(60), done).await });
        }
    }
}

#[test]
fn priority_then_fair_share_then_pause_hands_over() {
    let dir = TempDir::new("sched");
    let d = InProcess::start(dir.path(), Arc::new(ScriptedLayer::new(1)));
    let a = d.enqueue(dir.path(), "a", "");
    let b = d.enqueue(dir.path(), "b", "");
    // Both goals at priority 0 share the one device evaluation by evaluation.
    let start = d.last_seq();
    assert!(d.wait(Duration::from_secs(180), |d| d
        .starts_since(start)
        .values()
        .sum::<usize>()
        >= 8));
    let share = d.starts_since(start);
    let (na, nb) = (
        share.get(&a).copied().unwrap_or(0),
        share.get(&b).copied().unwrap_or(0),
    );
    assert!(
        na.abs_diff(nb) <= 1,
        "fair share expected, got a={na} b={nb}"
    );

    // A higher-priority goal takes every evaluation while it runs.
    let hi = d.enqueue(dir.path(), "hi", "[resources]\npriority = 5\n");
    assert!(d.wait(Duration::from_secs(60), |d| d
        .starts_since(start)
        .get(&hi)
        .copied()
        .unwrap_or(0)
        >= 1));
    let from = d.last_seq();
    assert!(d.wait(Duration::from_secs(180), |d| d
        .starts_since(from)
        .values()
        .sum::<usize>()
        >= 4));
    let s = d.starts_since(from);
    assert_eq!(
        s.get(&a).copied().unwrap_or(0) + s.get(&b).copied().unwrap_or(0),
        0,
        "lower priorities must wait: {s:?}"
    );

    // Pausing it hands the device to the others at once.
    let worker_before = d.gpus().devices[0].worker_pid;
    assert!(worker_before.is_some());
    let paused_at = Instant::now();
    d.call("pause", json!({"goal": hi}));
    let handed = d.wait(Duration::from_secs(30), |d| {
        d.gpus().devices[0]
            .lease
            .as_ref()
            .is_some_and(|l| l.goal == a || l.goal == b)
    });
    assert!(
        handed,
        "the device did not go to another goal after the pause"
    );
    eprintln!("lease hand-over after pause: {:?}", paused_at.elapsed());
    let ev = d.events();
    let abort = ev
        .iter()
        .find(|e| matches!(&e.kind, EventKind::EvaluationAborted { reason, .. } if reason.contains("paused")))
        .expect("the paused goal's evaluation was aborted and recorded");
    assert!(d.wait(Duration::from_secs(30), |d| d
        .events()
        .iter()
        .any(
            |e| e.seq > abort.seq && matches!(e.kind, EventKind::EvaluationStarted { .. })
        )));
    let ev = d.events();
    let next = ev
        .iter()
        .find(|e| e.seq > abort.seq && matches!(e.kind, EventKind::EvaluationStarted { .. }))
        .unwrap();
    // The worker abandons the evaluation (SIGINT) and stays: no worker restart in between.
    eprintln!(
        "abort → next evaluation started: {} ms",
        next.time_ms - abort.time_ms
    );
    // No device was ever leased twice: every start on it follows the previous end.
    assert_no_double_lease(&ev);
}

#[test]
fn a_goal_with_two_gpus_spreads_and_a_drained_device_gets_no_lease() {
    let dir = TempDir::new("drain");
    let layer = Arc::new(ScriptedLayer::new(2));
    let d = InProcess::start(dir.path(), layer.clone());
    let g = d.enqueue(dir.path(), "wide", "[resources]\ngpus = 2\n");
    let start = d.last_seq();
    assert!(
        d.wait(Duration::from_secs(180), |d| {
            let devs: std::collections::BTreeSet<String> = d
                .events()
                .into_iter()
                .filter(|e| e.seq > start)
                .filter_map(|e| match e.kind {
                    EventKind::EvaluationStarted { device, .. } => Some(device),
                    _ => None,
                })
                .collect();
            devs.len() == 2
        }),
        "a gpus = 2 goal should evaluate on both devices"
    );

    // A foreign process appears on device 1: it is drained and gets no new lease.
    layer.set_health(
        "GPU-test-1",
        HealthReading {
            foreign_pids: vec![4242],
            ..Default::default()
        },
    );
    assert!(
        d.wait(Duration::from_secs(30), |d| d.gpus().devices[1].health
            == Health::Drained),
        "not drained"
    );
    assert!(d.gpus().devices[1]
        .health_reason
        .as_deref()
        .unwrap_or("")
        .contains("4242"));
    assert!(d.wait(Duration::from_secs(60), |d| d.gpus().devices[1]
        .lease
        .is_none()));
    let from = d.last_seq();
    assert!(d.wait(Duration::from_secs(120), |d| d
        .starts_since(from)
        .get(&g)
        .copied()
        .unwrap_or(0)
        >= 3));
    let on_drained = d.events().into_iter().filter(|e| e.seq > from).any(|e| {
        matches!(&e.kind, EventKind::EvaluationStarted { device, .. } if device == "GPU-test-1")
    });
    assert!(!on_drained, "a drained device got a lease");

    // Healthy again: it comes back.
    layer.set_health("GPU-test-1", HealthReading::default());
    assert!(
        d.wait(Duration::from_secs(30), |d| d.gpus().devices[1].health
            == Health::Healthy),
        "not restored"
    );
    let ev = d.events();
    assert!(ev.iter().any(|e| matches!(
        &e.kind,
        EventKind::DeviceHealth {
            health: Health::Drained,
            ..
        }
    )));
    assert_no_double_lease(&ev);
    let state: Vec<kerneld::wire::GoalSummary> =
        serde_json::from_value(d.call("status", json!({}))).unwrap();
    assert_eq!(state[0].state, GoalState::Running);
}

#[test]
fn without_nvml_the_daemon_runs_in_cpu_mode() {
    // This machine (and CI) has no libnvidia-ml: discovery must fall back, and say why.
    let cfg = Config::new("/tmp/unused".into(), "/tmp/unused.sock".into());
    let layer = kerneld::gpu::discover(&cfg);
    if layer.mode() == "gpu" {
        eprintln!("NVML and a Hopper GPU are present here; the CPU fallback is not exercised");
        return;
    }
    let note = layer.note().unwrap();
    assert!(note.starts_with("CPU mode:"), "{note}");
    assert_eq!(layer.devices().len(), 1);
    assert_eq!(layer.devices()[0].uuid, "cpu");
}

/// From the log alone: on each device, evaluations never overlap (a start is followed
/// by its finish or abort, or by a daemon restart, before the next start).
fn assert_no_double_lease(events: &[Event]) {
    let mut busy: std::collections::HashMap<String, u64> = Default::default();
    for e in events {
        match &e.kind {
            EventKind::DaemonStarted { .. } => busy.clear(),
            EventKind::EvaluationStarted { device, .. } => {
                if let Some(prev) = busy.insert(device.clone(), e.seq) {
                    panic!(
                        "device {device} leased twice: starts at seq {prev} and {}",
                        e.seq
                    );
                }
            }
            EventKind::EvaluationFinished { device, .. }
            | EventKind::EvaluationAborted { device, .. } => {
                busy.remove(device);
            }
            _ => {}
        }
    }
}
