//! The `command` agent through the real daemon: an external program reads the files the
//! daemon prepares and writes the next candidate; a failing program fails the goal after a
//! few tries, with its output in the reason.

use std::time::Duration;

use kerneld::wire::{EventKind, GoalState, ResultClass};
use kerneld_e2e::*;

fn goal_with_command(
    dir: &std::path::Path,
    name: &str,
    command: &str,
    iterations: u64,
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\ntask = \"demo\"\n[budget]\niterations = {iterations}\n\
             [agent]\nkind = \"command\"\ncommand = {command}\ntimeout = \"2m\"\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn an_external_program_proposes_candidates() {
    let dir = TempDir::new("agent");
    let script = dir.path().join("agent.sh");
    std::fs::write(
        &script,
        r#"set -e
grep -q 'matmul(inputs' GOAL.md
grep -q '# Goal' CONTEXT.md
cp seeds/tiled.py candidate.py
case "$KERNELD_ITERATION" in
  1) echo '{"BLOCK_M": 16}' > config.json ;;
  *) test -f best.py && test -f last_report.json; echo '{"BLOCK_M": 64}' > config.json ;;
esac
echo "BLOCK_M for iteration $KERNELD_ITERATION" > NOTE.md
"#,
    )
    .unwrap();
    let d = Daemon::start(dir.path());
    let goal = goal_with_command(
        dir.path(),
        "ext",
        &format!("[\"sh\", \"{}\"]", script.display()),
        2,
    );
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(180));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!(g.reason.as_deref(), Some("budget_iterations"));

    let events = d.events(0);
    let proposals: Vec<(String, serde_json::Value, Option<String>)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::CandidateProposed {
                agent,
                config,
                note,
                source,
                ..
            } => {
                assert!(source.as_deref().is_some_and(|s| s.contains("def matmul")));
                Some((agent.clone(), config.clone(), note.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(proposals.len(), 2);
    assert_eq!(proposals[0].0, "command");
    assert_eq!(proposals[0].1, serde_json::json!({"BLOCK_M": 16}));
    assert_eq!(proposals[1].2.as_deref(), Some("BLOCK_M for iteration 2"));
    let ok = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::EvaluationFinished { result, .. } if result.class == ResultClass::Ok))
        .count();
    assert_eq!(ok, 2);

    // The winner comes back through `best`, source and all.
    let file = dir.path().join("best.py");
    let out = kernelctl(&d.socket, &["best", &id, "-o", file.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("def matmul"));
}

#[test]
fn a_failing_program_fails_the_goal_with_its_output() {
    let dir = TempDir::new("agentfail");
    let d = Daemon::start(dir.path());
    let goal = goal_with_command(
        dir.path(),
        "broken",
        r#"["sh", "-c", "echo model unreachable >&2; exit 3"]"#,
        5,
    );
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(120));
    assert_eq!(g.state, GoalState::Failed);
    let reason = g.reason.unwrap_or_default();
    assert!(
        reason.contains("3 times in a row") && reason.contains("model unreachable"),
        "{reason}"
    );
    assert_eq!(g.evaluations, 0);
}
