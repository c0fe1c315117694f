//! `kernelctl digest`: the morning's summary, from the real log of a real night (a short
//! one: a demo goal, a daemon restart).

use std::time::Duration;

use kerneld::wire::GoalState;
use kerneld_e2e::*;

#[test]
fn the_digest_tells_the_night() {
    let dir = TempDir::new("digest");
    let d = Daemon::start(dir.path());
    let id = enqueue(&d, &demo_goal(dir.path(), "night", 3, ""));
    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert!(d.stop().success());
    std::thread::sleep(Duration::from_millis(1500));
    let d = Daemon::start(dir.path());

    let json = kernelctl(&d.socket, &["--json", "digest", "--since", "1h"]);
    assert!(json.status.success(), "{json:?}");
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["finished"][0]["goal"], id.as_str());
    assert_eq!(v["finished"][0]["name"], "night");
    assert_eq!(v["finished"][0]["state"], "completed");
    assert_eq!(v["finished"][0]["reason"], "budget_iterations");
    let evals: u64 = v["evaluations"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(evals, 3, "{v}");
    assert!(!v["new_bests"].as_array().unwrap().is_empty(), "{v}");
    assert!(v["gpu_hours"].as_f64().unwrap() > 0.0);
    assert_eq!(v["restarts"], 1);
    assert!(v["downtime_s"].as_f64().unwrap() >= 1.0, "{v}");

    let plain = kernelctl(&d.socket, &["digest", "--since", "1h"]);
    let text = String::from_utf8_lossy(&plain.stdout).into_owned();
    println!("{text}");
    assert!(
        text.contains("last 1h: 1 goal finished (1 completed)")
            && text.contains("1 restart (down")
            && text.contains("night  completed: budget_iterations"),
        "{text}"
    );
    // Nothing happened in the last second but the restart's own start.
    let bad = kernelctl(&d.socket, &["digest", "--since", "soon"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad duration `soon`"));
}
