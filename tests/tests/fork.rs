//! `kernelctl fork GOAL@SEQ`: a new goal from another's candidates, measurements and best
//! as of one of its events, with its own name and budget; it records where it came from,
//! `show` says so, and its search goes on from the carried history (never re-proposing a
//! carried candidate). The scripted worker keeps it fast: the daemon and client are real.

use std::time::Duration;

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::*;

fn proposed(d: &Daemon, goal: &str) -> Vec<(u64, String)> {
    d.events(0)
        .into_iter()
        .filter(|e| e.goal.as_deref() == Some(goal))
        .filter_map(|e| match e.kind {
            EventKind::CandidateProposed {
                iteration,
                candidate,
                ..
            } => Some((iteration, candidate)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_fork_carries_the_origins_state_as_of_seq_and_says_where_it_came_from() {
    let dir = TempDir::new("fork");
    let kernels = scripted_kernels(dir.path());
    std::fs::write(kernels.join("harness/script.json"), r#"{"first": 2.0}"#).unwrap();
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    // Its SPACE has three configurations: two for the origin, one left for the fork.
    let origin = enqueue(&d, &demo_goal(dir.path(), "trunk", 2, ""));
    let g = d.wait_terminal(&origin, Duration::from_secs(60));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());

    // Fork as of the origin's first result.
    let seq = d
        .events(0)
        .into_iter()
        .filter(|e| e.goal.as_deref() == Some(origin.as_str()))
        .find(|e| matches!(e.kind, EventKind::EvaluationFinished { .. }))
        .expect("a result")
        .seq;
    let out = kernelctl(
        &d.socket,
        &[
            "fork",
            &format!("trunk@{seq}"),
            "--name",
            "branch",
            "--budget",
            "iterations=2",
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let fork = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        said.contains(&format!(
            "forked from {origin}@{seq}: 1 evaluation(s) carried over"
        )),
        "{said}"
    );

    let f = d.wait_terminal(&fork, Duration::from_secs(60));
    assert_eq!(
        (f.state, f.reason.as_deref()),
        (GoalState::Completed, Some("budget_iterations")),
        "{f:?}\n{}",
        d.log_text()
    );
    // One carried, two of its own.
    assert_eq!((f.evaluations, f.iteration), (3, 3), "{f:?}");
    let origin_first: Vec<_> = proposed(&d, &origin).into_iter().take(1).collect();
    let fork_all = proposed(&d, &fork);
    assert_eq!(&fork_all[..1], &origin_first[..], "the carried candidate");
    for (_, c) in &fork_all[1..] {
        assert!(
            !origin_first.iter().any(|(_, o)| o == c),
            "the fork re-proposed carried candidate {c}"
        );
    }
    assert!(f.best.is_some(), "the fork has a best (carried or its own)");
    assert_eq!(
        f.forked_from
            .as_ref()
            .map(|o| (o.goal.as_str(), o.seq, o.iterations)),
        Some((origin.as_str(), seq, 1))
    );

    let show = kernelctl(&d.socket, &["show", "branch"]);
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        show.contains("forked from") && show.contains(&format!("{origin}@{seq}")),
        "{show}"
    );

    // What a user gets wrong is said in words.
    let bad = kernelctl(&d.socket, &["fork", "trunk@999999"]);
    let bad = output_text(&bad);
    assert!(bad.contains("events run from"), "{bad}");
    let bad = kernelctl(&d.socket, &["fork", "trunk", "--budget", "laps=3"]);
    let bad = output_text(&bad);
    assert!(bad.contains("laps"), "{bad}");
}

/// A fork re-reads its name, budget and agent as the forker's own goal file, and the
/// stored task is a path: an ordinary user's fork of their own goal of an installed task
/// used to be refused as "a task given by path" (only trusted users may name one).
#[test]
fn an_ordinary_user_forks_their_own_goal() {
    let Some(dir) = nobody_dir("forknobody") else {
        return;
    };
    let d = Daemon::start(dir.path());
    let goal = dir.path().join("mine.toml");
    write_public(
        &goal,
        "name = \"mine\"\ntask = \"demo\"\n[budget]\niterations = 1000\n",
    );
    let out = kernelctl_as_nobody(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let out = kernelctl_as_nobody(
        &d.socket,
        &[
            "fork",
            "mine",
            "--name",
            "mine-b",
            "--budget",
            "iterations=3",
        ],
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let forked = d
        .status()
        .into_iter()
        .find(|g| g.name == "mine-b")
        .expect("the fork is listed");
    assert_eq!(forked.owner_uid, 65534);
    for g in d.status() {
        d.call(
            kerneld::wire::method::CANCEL,
            serde_json::json!({"goal": g.id}),
        );
    }
}
