//! Issue #29's metrics endpoint through the real binaries: `metrics_listen` in
//! kerneld.toml, scraped over TCP and a unix socket while a goal runs and after it,
//! each scrape parsed by Prometheus's own Python client (`prometheus_client.parser`); a
//! port in use and a bad address stop the start with a clear error and lose nothing.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kerneld::wire::GoalState;
use kerneld_e2e::*;
use serde_json::Value;

fn config(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("kerneld.toml");
    std::fs::write(&path, body).unwrap();
    path
}

/// A port free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP request over `stream`; the status line and the body.
fn http(mut stream: impl Read + Write, request: &str) -> (String, String) {
    stream.write_all(request.as_bytes()).unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn get(port: u16, path: &str) -> (String, String) {
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    http(s, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"))
}

/// The exposition as Prometheus's Python client parses it: every sample as
/// {"name", "labels", "value"}, and each family's type.
fn parse(text: &str) -> (Vec<Value>, Value) {
    let dir = TempDir::new("promparse");
    let file = dir.path().join("metrics.txt");
    std::fs::write(&file, text).unwrap();
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
samples, types = [], {}
for fam in text_string_to_metric_families(open(sys.argv[1]).read()):
    types[fam.name] = fam.type
    for s in fam.samples:
        samples.append({"name": s.name, "labels": s.labels, "value": s.value})
print(json.dumps({"samples": samples, "types": types}))
"#;
    let out = std::process::Command::new(python())
        .args(["-c", script])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus_client could not parse the scrape (scripts/python-env.sh installs it): {}\n{text}",
        output_text(&out)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    (v["samples"].as_array().unwrap().clone(), v["types"].clone())
}

/// The value of the sample named `name` whose labels include `labels`.
fn value(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .map(|s| s["value"].as_f64().unwrap())
}

#[test]
fn metrics_are_scraped_during_and_after_a_goal_and_parse_with_prometheus_client() {
    let dir = TempDir::new("metrics");
    let kernels = stub_kernels(dir.path());
    let port = free_port();
    let unix = dir.path().join("metrics.sock");
    let cfg = config(
        dir.path(),
        &format!("metrics_listen = \"127.0.0.1:{port}\"\n"),
    );
    let cfg_arg = cfg.to_string_lossy().into_owned();
    let d = Daemon::start_kernels(dir.path(), &kernels, &["--config", &cfg_arg], &[]);
    let id = enqueue(&d, &demo_goal(dir.path(), "watched", 4, ""));
    // During the goal: its state and the slot are there.
    let (status, during) = get(port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (samples, types) = parse(&during);
    assert_eq!(types["kerneld_goal_state"], "gauge");
    assert_eq!(types["kerneld_evaluations"], "counter", "{types}");
    assert!(
        value(&samples, "kerneld_goal_state", &[("goal", &id)]).is_some(),
        "{during}"
    );
    assert_eq!(
        value(&samples, "kerneld_gpu_healthy", &[("gpu", "cpu")]),
        Some(1.0),
        "{during}"
    );
    let end = d.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(end.state, GoalState::Completed);
    let (_, after) = get(port, "/metrics");
    let (samples, _) = parse(&after);
    let goal = [("goal", id.as_str()), ("name", "watched"), ("task", "demo")];
    assert_eq!(
        value(
            &samples,
            "kerneld_goal_state",
            &[("goal", &id), ("state", "completed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&samples, "kerneld_goal_evaluations_total", &goal),
        Some(end.evaluations as f64),
        "{after}"
    );
    let best = end.best.as_ref().unwrap().speedup;
    let shown = value(&samples, "kerneld_goal_best_speedup_ratio", &goal).unwrap();
    assert!((shown - best).abs() < 1e-9, "{shown} vs {best}");
    let ok = value(&samples, "kerneld_evaluations_total", &[("class", "ok")]).unwrap();
    assert!(ok >= 1.0, "{after}");
    assert!(value(
        &samples,
        "kerneld_goal_phase_seconds",
        &[("goal", &id), ("phase", "timing")]
    )
    .is_some());
    assert_eq!(
        value(&samples, "kerneld_goals", &[("state", "completed")]),
        Some(1.0)
    );
    // Read-only: anything but GET /metrics is refused.
    assert_eq!(get(port, "/nope").0, "HTTP/1.1 404 Not Found");
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (status, _) = http(s, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(d.stop().success());

    // A unix socket instead; and the goal is still there.
    std::fs::write(&cfg, format!("metrics_listen = \"{}\"\n", unix.display())).unwrap();
    let d = Daemon::start_kernels(dir.path(), &kernels, &["--config", &cfg_arg], &[]);
    let s = std::os::unix::net::UnixStream::connect(&unix).unwrap();
    let (status, text) = http(s, "GET /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let (samples, _) = parse(&text);
    assert_eq!(
        value(&samples, "kerneld_goal_evaluations_total", &goal),
        Some(end.evaluations as f64)
    );
    assert!(d.stop().success());
    assert!(!unix.exists(), "the socket is removed at the stop");
}

#[test]
fn a_metrics_port_in_use_or_a_bad_address_stops_the_start_and_loses_nothing() {
    let dir = TempDir::new("metricsbad");
    let kernels = stub_kernels(dir.path());
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    let id = enqueue(&d, &demo_goal(dir.path(), "kept", 2, ""));
    assert_eq!(
        d.wait_terminal(&id, Duration::from_secs(60)).state,
        GoalState::Completed
    );
    assert!(d.stop().success());

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let cfg = config(
        dir.path(),
        &format!("metrics_listen = \"127.0.0.1:{port}\"\n"),
    );
    let mut args = daemon_args_with(dir.path(), &kernels);
    args.extend(["--config".into(), cfg.clone().into()]);
    let mut d = Daemon::spawn(dir.path(), &args, &[]);
    assert!(!d.child.wait().unwrap().success());
    let log = d.log_text();
    assert!(
        log.contains(&format!("metrics endpoint 127.0.0.1:{port}: "))
            && log.contains("choose another `metrics_listen`"),
        "{log}"
    );
    std::fs::write(&cfg, "metrics_listen = \"localhost:9464\"\n").unwrap();
    let mut d = Daemon::spawn(dir.path(), &args, &[]);
    assert!(!d.child.wait().unwrap().success());
    let log = d.log_text();
    assert!(
        log.contains(&format!(
            "{}: `metrics_listen = \"localhost:9464\"` is neither",
            cfg.display()
        )),
        "{log}"
    );
    // Nothing lost: the log has the goal, as it was.
    drop(taken);
    std::fs::write(&cfg, "").unwrap();
    let d = Daemon::start_kernels(
        dir.path(),
        &kernels,
        &["--config", &cfg.to_string_lossy()],
        &[],
    );
    assert_eq!(d.goal(&id).state, GoalState::Completed);
    assert!(d.stop().success());
    let check = std::process::Command::new(binary("kerneld"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("check")
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", output_text(&check));
}
