//! The daemon's own figures (not a timed test; run it, read the table, commit the JSON):
//!
//!   cargo build --release --workspace
//!   cargo run --release -p kerneld-e2e --example daemon_bench [GOALS [EVENTS]]
//!
//! Builds an event log of GOALS goals (default 10,000; all but 1 % finished) and EVENTS
//! events (default 1,000,000) through the store API in bulk, then starts the release
//! `kerneld` on it and measures: start-up (spawn to the first `status` answer; and to the
//! first `version` answer, which waits for the sandbox trial), `status` latency
//! over one connection (p50/p99), the daemon's RSS, the log's bytes per event; and the
//! idle RSS of a daemon with an empty log; and `status` with 2,048 active goals, the default
//! cap on them (`at_the_cap`). The worker is the stub
//! (`tests/fixtures/stub_worker.py`), so no torch import competes with the measurement.
//! Writes results/daemon/bench-<date>.json.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use kerneld::tools::{NewEvent, Store};
use kerneld::wire::{self, BestSummary, EvalResult, EventKind, GoalState, ResultClass};
use kerneld_e2e::*;
use serde_json::{json, Value};

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The commit the figures belong to ("-dirty" when tracked files differ from it), as
/// scripts/soak.sh records it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(head)
            if git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| s.is_empty()) =>
        {
            head
        }
        Some(head) => format!("{head}-dirty"),
        None => "unknown".into(),
    }
}

/// An evaluation result the size of a CPU-mode one from the demo task.
fn result(it: u64) -> EvalResult {
    let mut r = EvalResult::failure(ResultClass::Ok, "", 1.2);
    r.message = None;
    r.correct = true;
    r.interpreted = true;
    r.speedup = Some(1.0 + (it % 17) as f64 / 10.0);
    r.spread_pct = Some(0.8);
    r.shapes = vec![wire::ShapeTiming {
        spread_pct: 0.8,
        baseline_spread_pct: 0.6,
        gbps: Some(3.1),
        ..wire::ShapeTiming::new("m64", 812.0, 990.0)
    }];
    r.checks = json!([{"shape": "m64", "seed": 11, "output": "c", "rel_rmse": 2e-7, "max_err": 1e-6, "passed": true}]);
    r.device = json!({"uuid": "cpu", "name": "cpu"});
    r.config = Some(json!({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}));
    r
}

/// One goal's life in events: enqueued, a seed described, running, `iterations`
/// proposals with their evaluations, a new best, and (unless `active`) completion.
fn goal_events(id: &str, iterations: u64, active: Option<GoalState>) -> Vec<NewEvent> {
    let ev = |kind| NewEvent::goal(id, kind);
    let mut out = vec![
        ev(EventKind::SeedDescribed {
            seed: "tiled.py".into(),
            space: json!({"BLOCK_M": [16, 32, 64], "BLOCK_N": [16, 32, 64], "BLOCK_K": [8, 16, 32]}),
            default: json!({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}),
            rejected: None,
        }),
        ev(EventKind::GoalStateChanged {
            from: GoalState::Queued,
            to: GoalState::Running,
            reason: None,
        }),
    ];
    for it in 1..=iterations {
        let candidate = format!("{:016x}", it * 0x9e37_79b9);
        let config = json!({"BLOCK_M": 16 << (it % 3), "BLOCK_N": 32, "BLOCK_K": 8 << (it % 3)});
        out.push(ev(EventKind::CandidateProposed {
            iteration: it,
            candidate: candidate.clone(),
            seed: "tiled.py".into(),
            config: config.clone(),
            agent: "search".into(),
            source: None,
            note: None,
            tokens: None,
        }));
        out.push(ev(EventKind::EvaluationStarted {
            iteration: it,
            candidate: candidate.clone(),
            device: "cpu".into(),
            attempt: 1,
        }));
        out.push(ev(EventKind::EvaluationFinished {
            iteration: it,
            candidate: candidate.clone(),
            device: "cpu".into(),
            result: result(it),
        }));
        if it == 1 {
            out.push(ev(EventKind::NewBest {
                best: BestSummary {
                    candidate,
                    seed: "tiled.py".into(),
                    config,
                    speedup: 1.1,
                    spread_pct: 0.8,
                    iteration: it,
                    interpreted: true,
                    environment: None,
                    measurements: None,
                    timing: None,
                },
                previous: None,
            }));
        }
    }
    match active {
        None => out.push(ev(EventKind::GoalStateChanged {
            from: GoalState::Running,
            to: GoalState::Completed,
            reason: Some("iteration budget reached".into()),
        })),
        Some(GoalState::Paused) => out.push(ev(EventKind::GoalStateChanged {
            from: GoalState::Running,
            to: GoalState::Paused,
            reason: None,
        })),
        Some(_) => {}
    }
    out
}

fn build_log(state: &Path, goals: u64, events: u64) -> (f64, u64, kerneld::tools::Space) {
    std::fs::create_dir_all(state).unwrap();
    let store = Store::open(&state.join("kerneld.redb")).unwrap();
    let goal_text = "name = \"bench\"\ntask = \"demo\"\n[budget]\niterations = 1000\n";
    let spec = kerneld::goal::parse(
        "/bench/goal.toml",
        goal_text,
        &repo_root().join("kernels"),
        &kerneld::goal::Requester::trusted(Default::default()),
    )
    .unwrap();
    // Per goal: enqueued + described + running + 3 per iteration + best + end.
    let iterations = (events / goals).saturating_sub(5).div_ceil(3);
    let t0 = Instant::now();
    for g in 0..goals {
        let active = match g % 100 {
            0 => Some(GoalState::Running),
            50 => Some(GoalState::Paused),
            _ => None,
        };
        let (id, _) = store.enqueue_goal(spec.clone(), 1000).unwrap();
        store.append(goal_events(&id, iterations, active)).unwrap();
    }
    let space = store.space().unwrap();
    (t0.elapsed().as_secs_f64(), store.last_seq().unwrap(), space)
}

/// Starts the daemon: (it, ms from spawn to the first `status` answer — the log open, the
/// goals rebuilt —, ms to the first `version` answer, which waits for the sandbox trial).
fn start(dir: &Path, kernels: &Path) -> (Daemon, f64, f64) {
    let t0 = Instant::now();
    let d = Daemon::spawn(dir, &daemon_args_with(dir, kernels), &[]);
    let mut answered = None;
    for method in [wire::method::STATUS, wire::method::VERSION] {
        loop {
            if try_call(&d.socket, method, json!({})).is_ok_and(|v| v.get("result").is_some()) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "no answer to {method}\n{}",
                d.log_text()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        answered.get_or_insert(t0.elapsed().as_secs_f64() * 1000.0);
    }
    let sandbox_ms = t0.elapsed().as_secs_f64() * 1000.0;
    (d, answered.unwrap(), sandbox_ms)
}

/// `status` n times over one connection: sorted latencies in ms, and the reply's bytes.
fn status_latencies(socket: &Path, n: usize) -> (Vec<f64>, usize) {
    let mut s = UnixStream::connect(socket).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut out = Vec::with_capacity(n);
    let mut bytes = 0;
    for i in 0..n {
        let req = serde_json::to_string(&wire::Request::new(
            i as u64,
            wire::method::STATUS,
            json!({}),
        ))
        .unwrap();
        let t0 = Instant::now();
        s.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        out.push(t0.elapsed().as_secs_f64() * 1000.0);
        bytes = line.len();
        assert!(
            line.contains("\"result\""),
            "{}",
            &line[..line.len().min(300)]
        );
    }
    out.sort_by(f64::total_cmp);
    (out, bytes)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let v = sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    (v * 1000.0).round() / 1000.0
}

/// `status` with as many active goals as the default `max_active_goals` (2,048) allows,
/// enqueued through the socket on an empty log (the per-user cap is raised so that one
/// client can fill it; what `status` costs depends only on how many goals are active):
/// enqueue and `status` latency, the reply's bytes, and the refusal of one more.
fn at_the_cap(dir: &Path, kernels: &Path) -> Value {
    const CAP: usize = 2048;
    std::fs::create_dir_all(dir).unwrap();
    let conf = dir.join("kerneld.toml");
    std::fs::write(
        &conf,
        format!(
            "max_active_goals = {CAP}\nmax_active_goals_per_user = {}\n",
            CAP + 1
        ),
    )
    .unwrap();
    let mut args = daemon_args_with(dir, kernels);
    args.extend(["--config".into(), conf.into_os_string()]);
    let d = Daemon::spawn(dir, &args, &[]);
    d.wait_ready(Duration::from_secs(60));
    let mut s = UnixStream::connect(&d.socket).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut enqueue = |i: usize| -> (f64, Value) {
        let text = format!("name = \"cap{i}\"\ntask = \"demo\"\n[budget]\niterations = 1000\n");
        let req = wire::Request::new(
            i as u64,
            wire::method::ENQUEUE,
            json!({"path": dir.join("g.toml"), "source": text}),
        );
        let t0 = Instant::now();
        s.write_all(format!("{}\n", serde_json::to_string(&req).unwrap()).as_bytes())
            .unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        (
            t0.elapsed().as_secs_f64() * 1000.0,
            serde_json::from_str(&line).unwrap(),
        )
    };
    let mut lat = Vec::with_capacity(CAP);
    for i in 0..CAP {
        let (ms, v) = enqueue(i);
        assert!(v.get("result").is_some(), "enqueue {i}: {v}");
        lat.push(ms);
    }
    let (_, refused) = enqueue(CAP);
    assert_eq!(
        refused["error"]["code"],
        wire::code::TOO_MANY_GOALS,
        "{refused}"
    );
    lat.sort_by(f64::total_cmp);
    let (status, bytes) = status_latencies(&d.socket, 300);
    let rss = rss_kib(d.child.id());
    assert!(d.stop().success());
    json!({
        "active_goals": CAP,
        "enqueue_ms": {"p50": pct(&lat, 0.5), "p99": pct(&lat, 0.99), "max": pct(&lat, 1.0)},
        "status_ms": {"p50": pct(&status, 0.5), "p99": pct(&status, 0.99), "max": pct(&status, 1.0), "calls": status.len()},
        "status_reply_bytes": bytes,
        "one_more_refused": refused["error"]["message"],
        "rss_mib": (rss as f64 / 1024.0 * 10.0).round() / 10.0,
    })
}

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (goals, events) = (arg(1, 10_000), arg(2, 1_000_000));
    let dir = TempDir::new("bench");
    let kernels = stub_kernels(dir.path());

    // Idle, empty log.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (d, empty_start_ms, empty_sandbox_ms) = start(&empty, &kernels);
    std::thread::sleep(Duration::from_secs(3));
    let idle_rss = rss_kib(d.child.id());
    assert!(d.stop().success());

    eprintln!("building a log of {goals} goals and ~{events} events...");
    let (build_s, logged, space) = build_log(&dir.path().join("state"), goals, events);
    let file_bytes = std::fs::metadata(dir.path().join("state/kerneld.redb"))
        .unwrap()
        .len();
    eprintln!("built {logged} events in {build_s:.1} s ({file_bytes} bytes)");

    let mut starts = Vec::new();
    let mut sandbox_ready = Vec::new();
    let mut rss_after_start = 0;
    let mut lat = Vec::new();
    let mut reply_bytes = 0;
    for round in 0..3 {
        let (d, ms, sandbox_ms) = start(dir.path(), &kernels);
        starts.push(ms);
        sandbox_ready.push(sandbox_ms);
        rss_after_start = rss_kib(d.child.id());
        if round == 2 {
            (lat, reply_bytes) = status_latencies(&d.socket, 300);
        }
        let rss_after_status = rss_kib(d.child.id());
        if round == 2 {
            rss_after_start = rss_after_start.max(rss_after_status);
        }
        assert!(d.stop().success());
    }
    // After a crash: SIGKILL while goals run, then the start that has to recover the file.
    let (d, _, _) = start(dir.path(), &kernels);
    std::thread::sleep(Duration::from_millis(500));
    d.kill9();
    let (d, after_kill_ms, _) = start(dir.path(), &kernels);
    assert!(d.stop().success());
    eprintln!("status at the active-goal cap...");
    let cap = at_the_cap(&dir.path().join("cap"), &kernels);
    starts.sort_by(f64::total_cmp);
    sandbox_ready.sort_by(f64::total_cmp);
    let machine = format!(
        "{} cores ({}), {} GiB RAM, {}; log on {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l
                .strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
            .unwrap_or_default(),
        std::fs::read_to_string("/proc/meminfo")
            .unwrap_or_default()
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |k| k / 1024 / 1024),
        String::from_utf8_lossy(
            &std::process::Command::new("uname")
                .arg("-sr")
                .output()
                .unwrap()
                .stdout
        )
        .trim(),
        std::env::temp_dir().display(),
    );
    let figures: Value = json!({
        "commit": commit(),
        "machine": machine,
        // Latency and start-up move with the machine's load (a shared VM): said with them.
        "load_average_1_5_15": std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        "goals": goals,
        "events": logged,
        "log_build_s": (build_s * 10.0).round() / 10.0,
        "log_bytes": file_bytes,
        "bytes_per_event": file_bytes / logged.max(1),
        // The file's length doubles while it is under 4 GiB (store/space.rs): what the
        // events take is the stored and the on-disk figure.
        "disk_bytes_per_event": space.disk_bytes / logged.max(1),
        "stored_bytes_per_event": (space.stored_bytes + space.metadata_bytes) / logged.max(1),
        "space": space,
        // Spawn to the first `status` answer; the sandbox trial (a Python start here) runs
        // beside it, and `version` answers once it is done.
        "startup_ms": {"min": pct(&starts, 0.0), "median": pct(&starts, 0.5), "max": pct(&starts, 1.0)},
        "startup_after_sigkill_ms": (after_kill_ms * 10.0).round() / 10.0,
        "sandbox_ready_ms": {"min": pct(&sandbox_ready, 0.0), "median": pct(&sandbox_ready, 0.5), "max": pct(&sandbox_ready, 1.0)},
        "status_ms": {"p50": pct(&lat, 0.5), "p99": pct(&lat, 0.99), "max": pct(&lat, 1.0), "calls": lat.len()},
        "status_reply_bytes": reply_bytes,
        "rss_mib_loaded": (rss_after_start as f64 / 1024.0 * 10.0).round() / 10.0,
        "idle_rss_mib_empty_log": (idle_rss as f64 / 1024.0 * 10.0).round() / 10.0,
        "empty_log_startup_ms": (empty_start_ms * 10.0).round() / 10.0,
        "empty_log_sandbox_ready_ms": (empty_sandbox_ms * 10.0).round() / 10.0,
        // The most active goals the defaults allow: a plain `status` lists each one.
        "at_active_goal_cap": cap,
    });
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
    let out = repo_root().join("results/daemon");
    std::fs::create_dir_all(&out).unwrap();
    let stamp = String::from_utf8_lossy(
        &std::process::Command::new("date")
            .args(["-u", "+%Y%m%dT%H%MZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    let path = out.join(format!("bench-{stamp}.json"));
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&figures).unwrap() + "\n",
    )
    .unwrap();
    eprintln!("written to {}", path.display());
}
