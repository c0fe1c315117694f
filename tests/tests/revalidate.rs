//! Winners that still win: every result records its environment; after a restart under
//! another one (a torch upgrade, scripted) `status` says the best was measured elsewhere;
//! `kernelctl revalidate` re-measures the best few and records whether each still holds.
//! The scripted worker (tests/fixtures/scripted) plays the versions and the timings.

use std::path::Path;
use std::time::Duration;

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::json;

fn script(kernels: &Path, torch: &str, retime: f64) {
    let s = json!({
        "first": 2.0,
        "retime": retime,
        "ready": {"torch": torch, "triton": "3.6.0", "cuda": "12.8", "driver": "570.86"},
    });
    std::fs::write(kernels.join("harness/script.json"), s.to_string()).unwrap();
}

fn verdicts(d: &Daemon, goal: &str) -> Vec<(u64, bool)> {
    d.events(0)
        .into_iter()
        .filter(|e| e.goal.as_deref() == Some(goal))
        .filter_map(|e| match e.kind {
            EventKind::Revalidated {
                iteration, held, ..
            } => Some((iteration, held)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_upgrade_is_noticed_at_start_up_and_revalidate_says_which_wins_hold() {
    let dir = TempDir::new("revalidate");
    let kernels = scripted_kernels(dir.path());
    script(&kernels, "2.11.0", 2.0);
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    let id = enqueue(&d, &demo_goal(dir.path(), "trunk", 2, ""));
    let g = d.wait_terminal(&id, Duration::from_secs(60));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    let env = g.best.as_ref().and_then(|b| b.environment.clone());
    let env = env.expect("the best records its environment");
    assert_eq!(
        (
            env.torch.as_deref(),
            env.cuda.as_deref(),
            env.driver.as_deref()
        ),
        (Some("2.11.0"), Some("12.8"), Some("570.86"))
    );
    assert_eq!(env.kerneld, env!("CARGO_PKG_VERSION"));
    assert!(g.environment_changed.is_none(), "{g:?}");
    d.stop();

    // torch upgraded, and the candidates now run slower.
    script(&kernels, "2.12.0", 1.0);
    let d = Daemon::start_kernels(dir.path(), &kernels, &[], &[]);
    let mut said = String::new();
    let noticed = d.wait_until(Duration::from_secs(20), |d| {
        said = d.goal(&id).environment_changed.unwrap_or_default();
        !said.is_empty()
    });
    assert!(
        noticed,
        "status never said the environment changed\n{}",
        d.log_text()
    );
    assert!(said.contains("torch 2.11.0 -> 2.12.0"), "{said}");
    let status = kernelctl(&d.socket, &["status"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.contains(&format!("kernelctl revalidate {id}")),
        "{status}"
    );

    let out = kernelctl(&d.socket, &["revalidate", "trunk", "--top", "2"]);
    let text = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "a lost win exits 1\n{text}");
    assert!(
        text.contains("LOST") && text.contains("lost its win"),
        "{text}"
    );
    let v = verdicts(&d, &id);
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().all(|(_, held)| !held), "{v:?}");

    // Timed as before: the wins hold.
    script(&kernels, "2.12.0", 2.0);
    let out = kernelctl(&d.socket, &["revalidate", "trunk", "--top", "1"]);
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("holds its win"), "{text}");
    assert_eq!(verdicts(&d, &id).last().map(|v| v.1), Some(true));
}
