//! Unit tests of context compaction (kept apart so mod.rs stays one concern).
use super::*;
use crate::wire::{EvalResult, ResultClass, ShapeTiming};
use serde_json::json;

fn rec(iteration: u64, speedup: Option<f64>, class: ResultClass) -> EvaluationRecord {
    let mut result = EvalResult::failure(class, format!("failure of iteration {iteration}"), 1.0);
    if let Some(x) = speedup {
        result = EvalResult {
            class: ResultClass::Ok,
            message: None,
            correct: true,
            speedup: Some(x),
            spread_pct: Some(1.0),
            shapes: vec![ShapeTiming {
                spread_pct: 1.0,
                baseline_spread_pct: 1.0,
                gbps: Some(100.0),
                pct_roofline: Some(5.0),
                ..ShapeTiming::new("s", 10.0 / x, 10.0)
            }],
            ..result
        };
    }
    EvaluationRecord {
        iteration,
        candidate: format!("c{iteration}"),
        seed: "a.py".into(),
        config: json!({"B": iteration % 4, "W": 4}),
        source_hash: None,
        device: None,
        result,
    }
}

fn history(n: u64) -> Vec<EvaluationRecord> {
    (1..=n)
        .map(|i| match i % 5 {
            0 => rec(i, None, ResultClass::WrongResult),
            1 => rec(i, None, ResultClass::CompileError),
            _ => rec(i, Some(1.0 + (i % 7) as f64 / 10.0), ResultClass::Ok),
        })
        .collect()
}

#[test]
fn restates_the_goal_keeps_the_best_and_groups_failures() {
    let goal = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
    let text = compact(&goal, &history(40), DEFAULT_BYTES);
    assert!(text.starts_with("# Goal `g`"));
    assert!(text.contains("→ 1.600×"), "{text}");
    assert!(text.contains("wrong_result ×8"), "{text}");
    assert!(text.contains("compile_error ×8"), "{text}");
    assert!(text.contains("100 GB/s"));
    assert_eq!(
        text,
        compact(&goal, &history(40), DEFAULT_BYTES),
        "deterministic"
    );
}

#[test]
fn stays_within_its_budget_however_long_the_history() {
    let goal = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
    for budget in [1024, 4096, DEFAULT_BYTES] {
        let text = compact(&goal, &history(5000), budget);
        assert!(text.len() <= budget, "{} > {budget}", text.len());
        assert!(
            text.starts_with("# Goal `g`"),
            "the goal always comes first"
        );
    }
}

fn rejected(iteration: u64, rule: Option<&str>, message: &str) -> EvaluationRecord {
    let mut r = rec(iteration, None, ResultClass::Rejected);
    r.result.rule = rule.map(String::from);
    r.result.message = Some(message.into());
    r
}

#[test]
fn failures_are_grouped_by_class_and_rule_with_an_example_each() {
    let goal = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
    let history = vec![
        rejected(
            1,
            Some("syntax"),
            "rejected [syntax] line 3: syntax error: bad",
        ),
        rejected(
            2,
            Some("torch-heavy-math"),
            "rejected [torch-heavy-math] line 9: torch.matmul",
        ),
        rejected(
            3,
            Some("torch-heavy-math"),
            "rejected [torch-heavy-math] line 7: torch.bmm",
        ),
        // Logged before results carried `rule`: read from the message's tag.
        rejected(
            4,
            None,
            "rejected [banned-import] line 1: imports flash_attn",
        ),
        {
            let mut r = rec(5, None, ResultClass::WrongResult);
            r.result.rule = Some("tolerance".into());
            r
        },
        rec(6, None, ResultClass::WrongResult),
    ];
    let text = compact(&goal, &history, DEFAULT_BYTES);
    for line in [
        "- rejected [syntax] ×1; e.g. iteration 1",
        "- rejected [torch-heavy-math] ×2; e.g. iteration 3",
        "- rejected [banned-import] ×1; e.g. iteration 4",
        "- wrong_result [tolerance] ×1; e.g. iteration 5",
        "- wrong_result ×1; e.g. iteration 6",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    assert!(
        text.contains("syntax error: bad"),
        "the syntax example is kept"
    );
    assert!(
        text.contains("→ wrong_result\n"),
        "the last evaluation: {text}"
    );
}

#[test]
fn every_timing_says_which_figure_it_is() {
    let mut spec = crate::projection::test_spec("x");
    spec.timing = Some(TimingMethod::Gpu);
    let mut goal = GoalProjection::new("g1", spec, 0, 0);
    let mut best = rec(3, Some(2.0), ResultClass::Ok);
    best.result.timing = Some("gpu".into());
    let t = &mut best.result.shapes[0];
    t.timing = Some("gpu".into());
    t.as_called_us = Some(24.4);
    t.baseline_as_called_us = Some(34.1);
    let mut fallback = rec(4, Some(1.5), ResultClass::Ok);
    fallback.result.timing = Some("as_called".into());
    fallback.result.shapes[0].timing = Some("as_called".into());
    fallback.result.shapes[0].timing_note =
        Some("the candidate cannot be captured in a CUDA graph (sync): timed as called".into());
    goal.best = Some(crate::wire::BestSummary {
        candidate: "c3".into(),
        seed: "a.py".into(),
        config: json!({}),
        speedup: 1.953,
        spread_pct: 0.8,
        iteration: 3,
        interpreted: false,
        environment: None,
        measurements: Some(10),
        timing: Some("gpu".into()),
    });
    let text = compact(&goal, &[best, fallback], DEFAULT_BYTES);
    for want in [
        "Timing: the GPU time of each call's work",
        "Current best: iteration 3, 1.953× ±0.8% (GPU time, pooled over 10 measurements).",
        "→ 2.000× (GPU time, spread 1.0%)",
        "s: 5.00 µs vs 10.00 µs (2.00×, GPU time); as called 24.40 µs vs 34.10 µs",
        "→ 1.500× (as called, spread 1.0%)",
        "(1.50×, as called), 100 GB/s, 5% of roofline [the candidate cannot be captured",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
}

#[test]
fn interpreter_timings_are_marked_as_such() {
    let goal = GoalProjection::new("g1", crate::projection::test_spec("x"), 0, 0);
    let gpu = history(12);
    let text = compact(&goal, &gpu, DEFAULT_BYTES);
    assert!(!text.contains("interpreter"), "{text}");

    let cpu: Vec<EvaluationRecord> = history(12)
        .into_iter()
        .map(|mut r| {
            r.result.interpreted = true;
            r
        })
        .collect();
    let text = compact(&goal, &cpu, DEFAULT_BYTES);
    let best = text.find("## Best candidates\n").unwrap();
    assert!(
        text[best..].starts_with(&format!("## Best candidates\n{INTERPRETED_NOTE}")),
        "the note comes before any timing: {text}"
    );
    assert!(
        text.contains("× (spread 1.0%, CPU interpreter: not a speed)"),
        "{text}"
    );
    assert!(
        !text.contains("GB/s"),
        "no throughput under the interpreter"
    );
    // A budget that cuts the best section still keeps the note above the timings.
    let short = compact(&goal, &cpu, 1024);
    assert!(short.contains(INTERPRETED_NOTE), "{short}");
}

fn module(body_lines: usize) -> String {
    let mut s = String::from("\"\"\"The kernel.\"\"\"\nimport triton\n");
    for i in 0..body_lines {
        s.push_str(&format!(
            "# helper line {i} of the kernel body, long enough to count\n"
        ));
    }
    s.push_str(
        "SPACE = {\n    \"B\": [16, 32],\n    \"W\": [4, 8],\n}\nDEFAULT = {\"B\": 16, \"W\": 4}\n",
    );
    for i in 0..body_lines {
        s.push_str(&format!(
            "# launcher line {i} of the module, long enough to count\n"
        ));
    }
    s.push_str("def entry(inputs, out, config):\n    pass\n");
    s
}

#[test]
fn a_long_source_keeps_its_head_parameters_and_tail() {
    let source = module(400);
    assert_eq!(clip_source(&source, source.len()), source, "fits: whole");
    for room in [600, 2000, 8000] {
        let clipped = clip_source(&source, room);
        assert!(clipped.len() <= room, "{} > {room}", clipped.len());
        assert!(clipped.starts_with("\"\"\"The kernel.\"\"\"\nimport triton\n"));
        assert!(
            clipped.contains("SPACE = {\n    \"B\": [16, 32],\n    \"W\": [4, 8],\n}\n"),
            "{clipped}"
        );
        assert!(clipped.contains("DEFAULT = {\"B\": 16, \"W\": 4}\n"));
        assert!(clipped.ends_with("def entry(inputs, out, config):\n    pass\n"));
        assert!(clipped.contains(" lines omitted to fit the prompt's budget"));
        assert_eq!(clipped, clip_source(&source, room), "deterministic");
    }
    // The gaps add up to what was left out.
    let clipped = clip_source(&source, 2000);
    let omitted: usize = clipped
        .lines()
        .filter_map(|l| l.strip_prefix("# … "))
        .map(|l| l.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    let kept = clipped.lines().filter(|l| !l.starts_with("# … ")).count();
    assert_eq!(omitted + kept, source.lines().count());
    // Whatever the room, never more.
    for room in [0, 10, 100] {
        assert!(clip_source(&source, room).len() <= room);
    }
}
