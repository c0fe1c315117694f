//! Issue #12 through the real binaries (CPU mode): every evaluation record says where
//! its time went (the judge's phases + the daemon's share), `kernelctl show` prints the
//! breakdown, `status --json` carries the goal's means, `report` the rate; the next
//! candidate is prepared (started and imported) while the current one is timed.

use std::time::Duration;

use kerneld::wire::{GoalDetail, GoalState, GoalSummary};
use kerneld_e2e::*;
use serde_json::json;

#[test]
fn phases_are_recorded_shown_and_averaged() {
    let dir = TempDir::new("phases");
    let d = Daemon::start(dir.path());
    let goal = demo_goal(dir.path(), "phases-e2e", 3, "");
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");

    let detail: GoalDetail = serde_json::from_value(d.call("show", json!({"goal": id}))).unwrap();
    assert_eq!(detail.recent.len(), 3);
    for (i, rec) in detail.recent.iter().enumerate() {
        let p = &rec.result.phases;
        // The judge's phases: a CPU evaluation imports (the first on its critical path,
        // the later ones ahead: see below), compiles (first call), checks and times;
        // none of it is negative, and it fits in the evaluation.
        assert!(p.compile > 0.0, "{p:?}");
        if i == 0 {
            assert!(p.import > 0.0, "{p:?}");
        }
        assert!(p.correctness_candidate > 0.0 && p.timing > 0.0, "{p:?}");
        let judged: f64 = p.judge().iter().map(|(_, s)| *s).sum();
        assert!(p.judge().iter().all(|(_, s)| *s >= 0.0), "{p:?}");
        assert!(
            judged - p.runner_start <= rec.result.elapsed_s + 0.5,
            "phases {judged} s exceed the evaluation's {} s: {p:?}",
            rec.result.elapsed_s
        );
        // The daemon's share: reply → commit on every record; the gap from the previous
        // result once the slot has had one (the slot was busy all along).
        let rec_s = p.daemon_record.expect("daemon_record on every result");
        assert!((0.0..5.0).contains(&rec_s), "{p:?}");
        if i > 0 {
            let gap = p.daemon_gap.expect("daemon_gap after the first result");
            assert!((0.0..30.0).contains(&gap), "{p:?}");
        } else {
            assert!(p.daemon_gap.is_none(), "the first result has no gap: {p:?}");
        }
        // Compile-ahead: from the second evaluation on, the search agent's proposal was
        // made during the previous one and its runner started and imported it then (the
        // judge's `ahead` phase); nothing was prepared before the first.
        if i > 0 {
            assert!(
                p.ahead > 0.0,
                "evaluation {} was not prepared ahead: {p:?}",
                i + 1
            );
            assert!(
                p.import < 0.05,
                "imported again on the critical path: {p:?}"
            );
        } else {
            assert_eq!(p.ahead, 0.0, "{p:?}");
        }
    }
    let mut ids: Vec<&str> = detail.recent.iter().map(|r| r.candidate.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        3,
        "a candidate proposed ahead was measured twice"
    );

    // status --json: the goal's means over its evaluations, and the warm rate.
    let out = kernelctl(&d.socket, &["status", "--json"]);
    assert!(out.status.success());
    let all: Vec<GoalSummary> = serde_json::from_slice(&out.stdout).unwrap();
    let me = all.iter().find(|s| s.id == id).unwrap();
    let m = me.phases.as_ref().expect("phases in status --json");
    assert_eq!(m.evaluations, 3);
    let mean_compile = detail
        .recent
        .iter()
        .map(|r| r.result.phases.compile)
        .sum::<f64>()
        / 3.0;
    assert!((m.mean.compile - mean_compile).abs() < 1e-6, "{m:?}");
    assert!(m.mean.daemon_gap.is_some() && m.mean.daemon_record.is_some());
    assert!(m.evaluations_per_hour.is_some_and(|r| r > 0.0), "{m:?}");

    // show: the breakdown table and the means line.
    let out = kernelctl(&d.socket, &["show", &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("where the time went"), "{text}");
    for col in ["COMPILE", "TIMING", "AHEAD", "DAEMON", "GPU-WORK"] {
        assert!(text.contains(col), "{col} missing:\n{text}");
    }
    assert!(text.contains("mean over 3 evaluations"), "{text}");

    // report (terminal): evaluations per hour.
    let out = kernelctl(&d.socket, &["report", &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("evaluations/hour"), "{text}");

    // A restart keeps them (they are in the log and the stored projection).
    assert!(d.stop().success());
    let d = Daemon::start(dir.path());
    let g = d.goal(&id);
    assert_eq!(g.phases.as_ref().map(|m| m.evaluations), Some(3));
    assert!(d.stop().success());
}

/// `compile_ahead_depth`: the daemon keeps that many candidates prepared for its slot
/// (each a distinct proposal, made as if the ones before it were in flight), tells the
/// judge the depth and the goal's shapes, and every evaluation after the first takes one
/// of them. The stub worker accepts `prepare` for a task named `ahead` and reports, per
/// evaluation, how many prepared candidates it held when the evaluation arrived.
#[test]
fn the_daemon_keeps_depth_candidates_prepared() {
    let dir = TempDir::new("depth");
    let kernels = stub_kernels(dir.path());
    std::fs::create_dir_all(kernels.join("ahead/seeds")).unwrap();
    for f in ["task.toml", "task.py", "seeds/tiled.py"] {
        std::fs::copy(kernels.join("demo").join(f), kernels.join("ahead").join(f)).unwrap();
    }
    let conf = dir.path().join("kerneld.toml");
    std::fs::write(&conf, "compile_ahead_depth = 3\n").unwrap();
    let d = Daemon::start_kernels(
        dir.path(),
        &kernels,
        &["--config", conf.to_str().unwrap()],
        &[],
    );
    let goal = dir.path().join("depth.toml");
    std::fs::write(
        &goal,
        "name = \"depth\"\ntask = \"ahead\"\nshapes = [\"m512\"]\n[budget]\niterations = 8\n\
         [agent]\nkind = \"search\"\n",
    )
    .unwrap();
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(120));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    let detail: GoalDetail = serde_json::from_value(d.call("show", json!({"goal": id}))).unwrap();
    let mut recs = detail.recent.clone();
    recs.sort_by_key(|r| r.iteration);
    assert_eq!(recs.len(), 8);
    let held: Vec<f64> = recs.iter().map(|r| r.result.phases.ahead).collect();
    assert_eq!(
        held[0], 0.0,
        "nothing is prepared before the first: {held:?}"
    );
    assert!(
        held[1..].iter().all(|&h| h > 0.0),
        "an evaluation was not prepared ahead: {held:?}"
    );
    // depth 3 kept for the slot, plus the one being evaluated
    assert_eq!(held.iter().cloned().fold(0.0, f64::max), 4.0, "{held:?}");
    let msg = recs[1].result.message.clone().unwrap_or_default();
    assert!(
        msg.contains("ahead=3") && msg.contains("shapes=['m512']"),
        "{msg}"
    );
    let mut ids: Vec<&str> = recs.iter().map(|r| r.candidate.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        8,
        "a candidate proposed ahead was measured twice"
    );
    assert!(d.stop().success());
}

#[test]
fn a_depth_out_of_range_is_refused_with_its_range() {
    let dir = TempDir::new("depth-range");
    let conf = dir.path().join("kerneld.toml");
    std::fs::write(&conf, "compile_ahead_depth = 99\n").unwrap();
    let mut args = daemon_args(dir.path());
    args.extend(["--config".into(), conf.into_os_string()]);
    let out = std::process::Command::new(binary("kerneld"))
        .args(&args)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("compile_ahead_depth") && err.contains("0 to 16"),
        "{err}"
    );
}
