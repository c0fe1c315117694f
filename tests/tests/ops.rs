//! Issue #29 through the real binaries: hooks (a goal's events reach the commands an
//! administrator configured; hooks that hang, fail, flood or do not exist end in a log
//! line and lose nothing; the mail recipe with a fake sendmail; a restart after a crash),
//! the metrics endpoint (scraped, parsed by Prometheus's Python client), `kernelctl
//! diff` and the report's lineage, chains refused at enqueue.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::*;

/// A kerneld.toml in `dir` with `body`; the path for `--config`.
fn config(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("kerneld.toml");
    std::fs::write(&path, body).unwrap();
    path
}

/// Waits until the daemon's log has a line containing `text`; that line.
fn log_line(d: &Daemon, text: &str, limit: Duration) -> String {
    let t0 = Instant::now();
    loop {
        if let Some(l) = d.log_text().lines().find(|l| l.contains(text)) {
            return l.to_string();
        }
        assert!(
            t0.elapsed() < limit,
            "no log line with {text:?} after {limit:?}; log:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The peak resident memory of a process (VmHWM), in kB.
fn peak_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Whether any process's command line is exactly `cmdline`.
fn running(cmdline: &str) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .any(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmdline)
}

/// The hooks test's kerneld.toml: a recording hook, hooks that hang, fail, flood or do not
/// exist, and the mail recipe with a fake sendmail.
fn hooks_toml(dir: &Path, record: &Path, mail_log: &Path, sleeper: &str) -> PathBuf {
    config(
        dir,
        &format!(
            r#"
[[hooks]]
name = "record"
on = ["goal_started", "goal_finished", "new_best", "daemon_restarted"]
command = ["/bin/sh", "-c", "cat >> {record}"]

[[hooks]]
name = "hang"
on = ["goal_finished"]
command = ["/bin/sh", "-c", "{sleeper} & {sleeper}"]
timeout = "2s"

[[hooks]]
name = "fail"
on = ["goal_finished"]
command = ["/bin/sh", "-c", "echo 'cannot reach the mail server' >&2; exit 7"]

[[hooks]]
name = "flood"
on = ["goal_finished"]
command = ["/bin/sh", "-c", "head -c 50000000 /dev/zero | tr '\\0' x; exit 1"]

[[hooks]]
name = "missing"
on = ["goal_finished"]
command = ["/nonexistent/kerneld-hook"]

[[hooks]]
name = "mail"
per_goal = true
on = ["goal_finished", "goal_failed", "goal_cancelled"]
command = ["{mail}", "ops@example.org"]
env = {{ SENDMAIL = "{sendmail}", FAKE_MAIL_LOG = "{mail_log}" }}
"#,
            record = record.display(),
            mail = repo_root().join("config/hooks/mail.sh").display(),
            sendmail = repo_root().join("tests/fixtures/fake_sendmail").display(),
            mail_log = mail_log.display(),
        ),
    )
}

/// The hung, failing, flooding and missing hooks each ended in a log line, and the
/// flood did not move kerneld's memory.
fn bad_hooks_ended_in_log_lines(d: &Daemon, sleeper: &str, before_kb: u64) {
    // The hung hook: killed with its process group at its timeout, and said so.
    let hang = log_line(
        d,
        "hook `hang` for goal_finished of ",
        Duration::from_secs(20),
    );
    assert!(
        hang.contains("was killed at its timeout of 2s (with its whole process group)"),
        "{hang}"
    );
    let secs: f64 = hang
        .split("process group) after ")
        .nth(1)
        .and_then(|r| r.split('s').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{hang}"));
    assert!((2.0..4.0).contains(&secs), "killed after {secs}s: {hang}");
    eprintln!("the hanging hook was killed after {secs:.2} s (timeout 2 s)");
    assert!(!running(sleeper), "the hung hook's child outlived it");
    // The failing one: its exit status and what it said.
    let fail = log_line(
        d,
        "hook `fail` failed for goal_finished of ",
        Duration::from_secs(10),
    );
    assert!(
        fail.contains("exit status 7") && fail.contains("cannot reach the mail server"),
        "{fail}"
    );
    // The flood: 50 MB of output, a bounded tail in the log, the daemon's memory unmoved.
    let flood = log_line(
        d,
        "hook `flood` failed for goal_finished of ",
        Duration::from_secs(30),
    );
    assert!(
        flood.contains("exit status 1") && flood.contains("(50000000 bytes, the end shown)"),
        "{flood}"
    );
    assert!(
        flood.len() < 6000,
        "the log line holds the whole flood: {} bytes",
        flood.len()
    );
    let grew_kb = peak_kb(d.child.id()).saturating_sub(before_kb);
    eprintln!("after the flooding hook's runs (50 MB of output each), kerneld's peak memory had grown by {grew_kb} kB");
    assert!(
        grew_kb < 20_000,
        "kerneld's peak memory grew by {grew_kb} kB"
    );
    let missing = log_line(
        d,
        "hook `missing` did not run for goal_finished of ",
        Duration::from_secs(10),
    );
    assert!(
        missing.contains("cannot start /nonexistent/kerneld-hook: No such file or directory"),
        "{missing}"
    );
}

#[test]
fn hooks_run_on_a_goals_events_and_bad_hooks_end_in_a_log_line() {
    let dir = TempDir::new("hooks");
    let kernels = stub_kernels(dir.path());
    let record = dir.path().join("record.jsonl");
    let mail_log = dir.path().join("mail.log");
    let sleeper = format!("sleep 36{}", std::process::id() % 100 + 10);
    let cfg = hooks_toml(dir.path(), &record, &mail_log, &sleeper);
    let cfg_arg = cfg.to_string_lossy().into_owned();
    let d = Daemon::start_kernels(dir.path(), &kernels, &["--config", &cfg_arg], &[]);
    let before_kb = peak_kb(d.child.id());
    let id = enqueue(
        &d,
        &demo_goal(dir.path(), "night", 3, "notify = [\"mail\"]"),
    );
    let quiet = enqueue(&d, &demo_goal(dir.path(), "quiet", 2, ""));
    assert_eq!(
        d.wait_terminal(&id, Duration::from_secs(60)).state,
        GoalState::Completed
    );
    assert_eq!(
        d.wait_terminal(&quiet, Duration::from_secs(60)).state,
        GoalState::Completed
    );

    bad_hooks_ended_in_log_lines(&d, &sleeper, before_kb);

    // Nothing lost: every event a hook listens to reached the recording hook once.
    let wanted: Vec<(u64, &str)> = d
        .events(0)
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                ..
            } => Some((e.seq, "goal_started")),
            EventKind::GoalStateChanged {
                to: GoalState::Completed,
                ..
            } => Some((e.seq, "goal_finished")),
            EventKind::NewBest { .. } => Some((e.seq, "new_best")),
            _ => None,
        })
        .collect();
    assert!(
        wanted.iter().any(|(_, k)| *k == "new_best"),
        "no new best to test with"
    );
    let t0 = Instant::now();
    let got = loop {
        let mut got: Vec<(u64, String)> = std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|v| {
                (
                    v["seq"].as_u64().unwrap(),
                    v["event"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        got.sort();
        if got.len() >= wanted.len() || t0.elapsed() > Duration::from_secs(20) {
            break got;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let want: Vec<(u64, String)> = wanted.iter().map(|(s, k)| (*s, k.to_string())).collect();
    assert_eq!(got, want);

    // The mail recipe: one mail, for the goal that asked (`notify`), through sendmail -t.
    let mail = std::fs::read_to_string(&mail_log).unwrap();
    assert_eq!(mail.matches("=====").count(), 1, "{mail}");
    assert!(
        mail.starts_with("ARGS: -t -i\nTo: ops@example.org\n"),
        "{mail}"
    );
    assert!(mail.contains("X-Kerneld-Event: goal_finished"), "{mail}");
    assert!(
        mail.contains(&format!("night ({id}) completed: budget_iterations; best ")),
        "{mail}"
    );
    assert!(
        mail.contains(&format!("More: kernelctl show {id}")),
        "{mail}"
    );
    assert!(
        !mail.contains("quiet"),
        "a goal that asked for no mail got one: {mail}"
    );

    // The daemon is unharmed: it still takes and runs goals.
    let after = enqueue(&d, &demo_goal(dir.path(), "after", 1, ""));
    assert_eq!(
        d.wait_terminal(&after, Duration::from_secs(60)).state,
        GoalState::Completed
    );

    // A crash: the next start runs `daemon_restarted`; a clean stop and start does not.
    d.kill9();
    let d = Daemon::start_kernels(dir.path(), &kernels, &["--config", &cfg_arg], &[]);
    log_line(
        &d,
        "hook `record` ran for daemon_restarted",
        Duration::from_secs(10),
    );
    let restarted: Vec<serde_json::Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["event"] == "daemon_restarted")
        .collect();
    assert_eq!(restarted.len(), 1);
    let why = restarted[0]["reason"].as_str().unwrap();
    assert!(why.contains("stopped without recording its stop"), "{why}");
    assert!(
        restarted[0]["summary"]
            .as_str()
            .unwrap()
            .starts_with("kerneld@"),
        "{}",
        restarted[0]
    );
    assert!(d.stop().success());
    let d = Daemon::start_kernels(dir.path(), &kernels, &["--config", &cfg_arg], &[]);
    std::thread::sleep(Duration::from_millis(500));
    assert!(d.stop().success());
    let count = std::fs::read_to_string(&record)
        .unwrap()
        .matches("\"event\":\"daemon_restarted\"")
        .count();
    assert_eq!(count, 1, "a clean restart ran daemon_restarted");
}

#[test]
fn a_bad_hook_configuration_stops_the_start_naming_its_place() {
    let dir = TempDir::new("hookcfg");
    let cfg = config(
        dir.path(),
        "[[hooks]]\nname = \"mail\"\non = [\"goal_done\"]\ncommand = [\"/bin/true\"]\n",
    );
    let mut args = daemon_args(dir.path());
    args.extend(["--config".into(), cfg.clone().into()]);
    let mut d = Daemon::spawn(dir.path(), &args, &[]);
    let status = d.child.wait().unwrap();
    assert!(!status.success());
    let log = d.log_text();
    assert!(
        log.contains(&format!("{}:3", cfg.display()))
            && log.contains("unknown variant `goal_done`"),
        "{log}"
    );
    std::fs::write(
        &cfg,
        "[[hooks]]\nname = \"mail\"\non = [\"new_best\"]\ncommand = [\"/bin/true\"]\ntimeout = \"2 h\"\n",
    )
    .unwrap();
    let mut d = Daemon::spawn(dir.path(), &args, &[]);
    assert!(!d.child.wait().unwrap().success());
    let log = d.log_text();
    assert!(
        log.contains(&format!(
            "{}:5:11: [[hooks]] `mail`: `timeout` = \"2 h\"",
            cfg.display()
        )),
        "{log}"
    );
}

/// The daemon in-process over fake GPUs (`ScriptedLayer`), as tests/tests/scheduling.rs
/// runs it: the real socket, log, engine and hooks; the devices' readings the test's.
struct InProcess {
    rt: tokio::runtime::Runtime,
    stop: tokio_util::sync::CancellationToken,
    socket: PathBuf,
}

impl InProcess {
    fn start(
        dir: &Path,
        devices: std::sync::Arc<dyn kerneld::gpu::DeviceLayer>,
        edit: impl FnOnce(&mut kerneld::Config),
    ) -> InProcess {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let socket = dir.join("sock");
        let mut cfg = kerneld::Config::new(dir.join("state"), socket.clone());
        cfg.python = python();
        cfg.kernels_dir = repo_root().join("kernels");
        edit(&mut cfg);
        let stop = tokio_util::sync::CancellationToken::new();
        rt.spawn(kerneld::run_with(
            cfg,
            stop.clone(),
            kerneld::RunOptions {
                devices: Some(devices),
                ..Default::default()
            },
        ));
        let t0 = Instant::now();
        while try_call(&socket, "version", serde_json::json!({})).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "in-process daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        InProcess { rt, stop, socket }
    }

    fn gpus(&self) -> kerneld::wire::GpusResult {
        let v = try_call(&self.socket, "gpus", serde_json::json!({})).unwrap();
        serde_json::from_value(v["result"].clone()).unwrap()
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.cancel();
        std::thread::sleep(Duration::from_millis(300));
        let _ = &self.rt;
    }
}

#[test]
fn a_gpu_with_a_new_fault_is_drained_and_the_hooks_say_why() {
    use kerneld::gpu::ScriptedLayer;
    use kerneld::hooks::{HookConfig, HookOn};
    use kerneld::wire::{EccCounts, GpuReadings, Health, RemappedRows, XidLog};
    let dir = TempDir::new("sickgpu");
    let record = dir.path().join("gpu.jsonl");
    let layer = std::sync::Arc::new(ScriptedLayer::new(3));
    // A history at start (corrected errors, a row remapped long ago): not a fault.
    let start = GpuReadings {
        xid: Some(XidLog::default()),
        ecc: Some(EccCounts {
            aggregate_corrected: 9,
            ..Default::default()
        }),
        remapped_rows: Some(RemappedRows {
            correctable: 1,
            ..Default::default()
        }),
        pages_pending_retirement: Some(false),
        ..Default::default()
    };
    for i in 0..3 {
        layer.set_readings(&format!("GPU-test-{i}"), start.clone());
    }
    let hook = HookConfig {
        name: "pager".into(),
        on: vec![HookOn::GpuUnhealthy],
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("cat >> {}", record.display()),
        ],
        timeout: Duration::from_secs(10),
        goals: Vec::new(),
        owners: Vec::new(),
        per_goal: false,
        env: Default::default(),
    };
    let d = InProcess::start(dir.path(), layer.clone(), |c| c.hooks = vec![hook]);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        d.gpus().devices.iter().all(|g| g.health == Health::Healthy),
        "unchanged readings are healthy"
    );

    // Device 1: a new remapped row. Device 2: an uncorrected ECC error and an Xid.
    let mut row = start.clone();
    row.remapped_rows.as_mut().unwrap().uncorrectable = 1;
    layer.set_readings("GPU-test-1", row);
    let mut ecc = start.clone();
    ecc.ecc.as_mut().unwrap().volatile_uncorrected = 2;
    ecc.xid = Some(XidLog {
        count: 1,
        recent: vec![kerneld::wire::XidRecord {
            xid: 48,
            time_ms: 1,
        }],
    });
    layer.set_readings("GPU-test-2", ecc);
    let t0 = Instant::now();
    let gpus = loop {
        let g = d.gpus();
        if g.devices[1].health == Health::Drained && g.devices[2].health == Health::Drained {
            break g;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not drained: {:?}",
            g.devices
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(gpus.devices[0].health, Health::Healthy);
    let why1 = gpus.devices[1].health_reason.clone().unwrap();
    assert!(
        why1.contains("new hardware fault since kerneld started: 1 memory row remapped"),
        "{why1}"
    );
    let why2 = gpus.devices[2].health_reason.clone().unwrap();
    assert!(
        why2.contains("Xid 48 (double-bit ECC error)")
            && why2.contains("uncorrected ECC errors (volatile) 0 → 2"),
        "{why2}"
    );
    // `kernelctl gpus` says why.
    let out = kernelctl(&d.socket, &["gpus"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 memory row remapped"),
        "{}",
        output_text(&out)
    );
    // The hook heard both, with the reason.
    let t0 = Instant::now();
    let heard = loop {
        let heard: Vec<serde_json::Value> = std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if heard.len() >= 2 || t0.elapsed() > Duration::from_secs(10) {
            break heard;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut devices: Vec<&str> = heard
        .iter()
        .map(|h| h["device"].as_str().unwrap())
        .collect();
    devices.sort();
    assert_eq!(devices, ["GPU-test-1", "GPU-test-2"]);
    assert!(heard.iter().all(|h| h["event"] == "gpu_unhealthy"
        && h["summary"]
            .as_str()
            .unwrap()
            .contains("drained: new hardware fault")));
    // Still drained later: a fault stays until an administrator restarts kerneld.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(d.gpus().devices[1].health, Health::Drained);
}

#[test]
fn diff_shows_the_lineage_of_the_best_and_the_report_shows_it_too() {
    let dir = TempDir::new("lineage");
    let kernels = stub_kernels(dir.path());
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    let id = enqueue(&d, &demo_goal(dir.path(), "tree", 6, ""));
    let end = d.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(end.state, GoalState::Completed);
    let best = end.best.unwrap().candidate;
    let out = kernelctl(&d.socket, &["diff", &id]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        text.starts_with(&format!("lineage of {best} in {id}: ")),
        "{text}"
    );
    assert!(text.contains("seed "), "the line starts at a seed: {text}");
    // Two candidates: what changed from the first proposed to the best.
    let out = kernelctl(&d.socket, &["--json", "diff", &id]);
    let steps: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(steps.last().unwrap()["candidate"], best.as_str());
    let first = d
        .events(0)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::CandidateProposed { candidate, .. } => Some(candidate),
            _ => None,
        })
        .unwrap();
    let out = kernelctl(&d.socket, &["diff", &id, &first[..10], "best"]);
    assert!(out.status.success(), "{}", output_text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .starts_with(&format!("{id}: from {first} to {best}\n")),
        "{}",
        output_text(&out)
    );
    let out = kernelctl(&d.socket, &["diff", &id, "ffffffff"]);
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("no candidate ffffffff in this goal"),
        "{}",
        output_text(&out)
    );
    // The report's page has the lineage.
    let html = dir.path().join("report.html");
    let out = kernelctl(&d.socket, &["report", &id, "-o", html.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h2>Lineage of the best</h2>"), "{page}");
    assert!(page.contains(&best[..12]), "{page}");
    assert!(d.stop().success());
}

/// The events of the in-process daemon's log.
fn events_of(socket: &Path) -> Vec<kerneld::wire::Event> {
    let mut all: Vec<kerneld::wire::Event> = Vec::new();
    loop {
        let from = all.last().map_or(0, |e| e.seq);
        let v = try_call(socket, "events", serde_json::json!({"after": from})).unwrap();
        let page: Vec<kerneld::wire::Event> = serde_json::from_value(v["result"].clone()).unwrap();
        if page.is_empty() {
            return all;
        }
        all.extend(page);
    }
}

#[test]
fn an_evaluation_on_a_gpu_that_faults_is_aborted_marked_and_run_again_on_a_healthy_one() {
    use kerneld::gpu::ScriptedLayer;
    use kerneld::wire::{EccCounts, GpuReadings, RemappedRows, XidLog};
    let dir = TempDir::new("faultrerun");
    let kernels = scripted_kernels(dir.path());
    let script = kernels.join("harness/script.json");
    std::fs::write(&script, r#"{"first": 2.0, "hang_first": true}"#).unwrap();
    let layer = std::sync::Arc::new(ScriptedLayer::new(2));
    let start = GpuReadings {
        xid: Some(XidLog::default()),
        ecc: Some(EccCounts::default()),
        remapped_rows: Some(RemappedRows::default()),
        ..Default::default()
    };
    for i in 0..2 {
        layer.set_readings(&format!("GPU-test-{i}"), start.clone());
    }
    let k = kernels.clone();
    let d = InProcess::start(dir.path(), layer.clone(), move |c| c.kernels_dir = k);
    let goal = demo_goal(dir.path(), "faulted", 1, "");
    let source = std::fs::read_to_string(&goal).unwrap();
    let v = try_call(
        &d.socket,
        "enqueue",
        serde_json::json!({"path": goal, "source": source, "unique": false}),
    )
    .unwrap();
    let id = v["result"]["id"].as_str().unwrap().to_string();
    let wait = |what: &str, f: &dyn Fn(&kerneld::wire::Event) -> bool| {
        let t0 = Instant::now();
        loop {
            if let Some(e) = events_of(&d.socket).into_iter().find(|e| f(e)) {
                return e;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no {what}: {:?}",
                events_of(&d.socket)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let started = wait("evaluation_started", &|e| {
        matches!(e.kind, EventKind::EvaluationStarted { .. })
    });
    let EventKind::EvaluationStarted {
        device: sick,
        iteration,
        ..
    } = started.kind
    else {
        unreachable!()
    };
    // The GPU under the evaluation reports an uncorrected ECC error.
    let mut faulty = start.clone();
    faulty.ecc.as_mut().unwrap().volatile_uncorrected = 1;
    layer.set_readings(&sick, faulty);
    let aborted = wait("evaluation_aborted", &|e| {
        matches!(e.kind, EventKind::EvaluationAborted { .. })
    });
    let EventKind::EvaluationAborted { device, reason, .. } = aborted.kind else {
        unreachable!()
    };
    assert_eq!(device, sick);
    assert!(
        reason.starts_with(&format!("measured across a hardware fault on {sick} (uncorrected ECC errors (volatile) 0 → 1): not recorded"))
            && reason.contains("runs again on a healthy GPU"),
        "{reason}"
    );
    std::fs::write(&script, r#"{"first": 2.0}"#).unwrap();
    let finished = wait(
        "evaluation_finished",
        &|e| matches!(&e.kind, EventKind::EvaluationFinished { iteration: it, .. } if *it == iteration),
    );
    let EventKind::EvaluationFinished { device, .. } = finished.kind else {
        unreachable!()
    };
    assert_ne!(device, sick, "the evaluation ran again on the sick GPU");
    let g = try_call(&d.socket, "status", serde_json::json!({"goal": id})).unwrap();
    assert!(g["result"][0]["evaluations"].as_u64().unwrap() >= 1, "{g}");
    assert_eq!(
        d.gpus()
            .devices
            .iter()
            .find(|g| g.uuid == sick)
            .unwrap()
            .health,
        kerneld::wire::Health::Drained
    );
}
