//! The objective's timing method end to end (issue #23): the goal file's `timing` reaches
//! the judge in every evaluate request (first evaluations and re-times), and `show`,
//! `status`, `events`, `report`, `context` and `retime` say which figure each number is.
//! The real `kerneld` and `kernelctl`; the scripted worker (tests/fixtures/scripted) plays
//! a GPU judge that names each figure by the mode it was asked for.

use std::path::Path;
use std::time::Duration;

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::json;

fn ctl(d: &Daemon, args: &[&str]) -> String {
    let out = kernelctl(&d.socket, args);
    assert!(
        out.status.success(),
        "kernelctl {args:?}: {}",
        output_text(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn script(kernels: &Path, s: serde_json::Value) {
    std::fs::write(kernels.join("harness/script.json"), s.to_string()).unwrap();
}

/// The `timing` of every correct result of `goal` (first evaluations and re-times).
fn timings(d: &Daemon, goal: &str) -> Vec<Option<String>> {
    d.events(0)
        .into_iter()
        .filter(|e| e.goal.as_deref() == Some(goal))
        .filter_map(|e| match e.kind {
            EventKind::EvaluationFinished { result, .. }
            | EventKind::RetimeFinished { result, .. } => Some(result.timing),
            _ => None,
        })
        .collect()
}

#[test]
fn the_goals_timing_reaches_the_judge_and_every_figure_says_what_it_is() {
    let dir = TempDir::new("timing");
    let kernels = scripted_kernels(dir.path());
    script(&kernels, json!({"first": 2.0, "retime": 2.0, "gpu": true}));
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);

    // The default: GPU time, asked of the judge in every request (it names what it timed).
    // Two iterations: the first's win is measured by kerneld until it has ten readings,
    // since the second may challenge it (an equal reading is not even re-timed).
    let gpu = enqueue(&d, &demo_goal(dir.path(), "graph", 2, ""));
    let g = d.wait_terminal(&gpu, Duration::from_secs(60));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!(g.best.as_ref().and_then(|b| b.measurements), Some(10));
    let t = timings(&d, &gpu);
    assert_eq!(
        t.len(),
        11,
        "two evaluations, a confirmation, 8 re-times of the best: {t:?}"
    );
    assert!(t.iter().all(|t| t.as_deref() == Some("gpu")), "{t:?}");
    let show = ctl(&d, &["show", &gpu]);
    for want in [
        "vs torch_fp32, GPU time (timing = \"gpu\")",
        "(GPU time, pooled over 10 measurements)",
    ] {
        assert!(show.contains(want), "missing {want:?} in\n{show}");
    }
    let row = show.lines().find(|l| l.contains(" tiled.py ")).unwrap();
    assert!(row.contains("GPU time"), "{row}");
    let context = ctl(&d, &["context", &gpu]);
    for want in [
        "Timing: the GPU time of each call's work",
        "(GPU time, pooled over 10 measurements)",
        "(2.00×, GPU time); as called 55.00 µs vs 110.00 µs",
    ] {
        assert!(context.contains(want), "missing {want:?} in\n{context}");
    }
    let report = ctl(&d, &["report", &gpu]);
    assert!(report.contains("best 2.00× (GPU time)"), "{report}");
    let events = ctl(&d, &["events", &gpu]);
    assert!(
        events.contains("(GPU time, pooled over 2 measurements)"),
        "{events}"
    );
    assert!(
        events.contains("re-times asked by kerneld for the new best"),
        "{events}"
    );
    let retime = ctl(&d, &["retime", &gpu, "best", "--times", "2"]);
    for want in ["figures: GPU time", "pooled over all 12 measurements"] {
        assert!(retime.contains(want), "missing {want:?} in\n{retime}");
    }

    // `timing = "as_called"`: the judge is asked for host-inclusive figures.
    let extra = "timing = \"as_called\"";
    let eager = enqueue(&d, &demo_goal(dir.path(), "eager", 1, extra));
    let g = d.wait_terminal(&eager, Duration::from_secs(60));
    assert_eq!(g.state, GoalState::Completed, "{g:?}");
    let t = timings(&d, &eager);
    assert!(t.iter().all(|t| t.as_deref() == Some("as_called")), "{t:?}");
    let show = ctl(&d, &["show", &eager]);
    assert!(
        show.contains("vs torch_fp32, as called (timing = \"as_called\")"),
        "{show}"
    );
    assert!(
        show.contains("(as called, pooled over 2 measurements)"),
        "{show}"
    );
    let context = ctl(&d, &["context", &eager]);
    assert!(
        context.contains("Timing: as called (host-inclusive"),
        "{context}"
    );
    let status = ctl(&d, &["status"]);
    assert!(status.contains("† timed as called"), "{status}");

    // A candidate the judge cannot capture: its note says why it was timed as called.
    script(
        &kernels,
        json!({"first": 2.0, "retime": 2.0, "gpu": true, "capture_fails": true}),
    );
    let eagerly = enqueue(&d, &demo_goal(dir.path(), "uncapturable", 1, ""));
    d.wait_terminal(&eagerly, Duration::from_secs(60));
    let show = ctl(&d, &["show", &eagerly]);
    assert!(
        show.contains("m512: the candidate cannot be captured in a CUDA graph"),
        "{show}"
    );
    let row = show.lines().find(|l| l.contains(" tiled.py ")).unwrap();
    assert!(row.contains("as called"), "{row}");

    // Anything else is refused where it is written.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\ntask = \"demo\"\ntiming = \"wall\"\n").unwrap();
    let out = kernelctl(&d.socket, &["enqueue", bad.to_str().unwrap()]);
    let text = output_text(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("bad.toml:3:10: unknown timing `wall`; expected one of: gpu"),
        "{text}"
    );
}
