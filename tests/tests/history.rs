//! Goals finished before a restart are loaded as summaries only (daemon/src/engine/
//! history.rs, store/goal_index.rs): through the real daemon, they are still listed,
//! resolved by name and id, shown, and refused changes like any finished goal.

use std::time::Duration;

use kerneld::wire::{self, GoalState, GoalSummary};
use kerneld_e2e::*;
use serde_json::json;

#[test]
fn goals_finished_before_a_restart_are_listed_resolved_and_shown() {
    let dir = TempDir::new("history");
    let kernels = stub_kernels(dir.path());
    let args = daemon_args_with(dir.path(), &kernels);
    let d = Daemon::spawn(dir.path(), &args, &[]);
    d.wait_ready(Duration::from_secs(30));
    let old = enqueue(&d, &demo_goal(dir.path(), "old", 3, ""));
    d.call(wire::method::CANCEL, json!({"goal": old}));
    let before = d.goal(&old);
    assert_eq!(before.state, GoalState::Cancelled);
    assert!(d.stop().success());

    let d = Daemon::spawn(dir.path(), &args, &[]);
    d.wait_ready(Duration::from_secs(30));
    // Listed by a plain status (among the newest finished) and by a page of --all, unchanged.
    let listed = d.status();
    assert_eq!(listed.iter().find(|g| g.id == old), Some(&before));
    let page: Vec<GoalSummary> =
        serde_json::from_value(d.call(wire::method::STATUS, json!({"all": true}))).unwrap();
    assert_eq!(page.iter().find(|g| g.id == old), Some(&before));
    // Resolved by name, shown in full, and a change refused as for any finished goal.
    assert_eq!(d.goal("old"), before);
    let shown = d.call(wire::method::SHOW, json!({"goal": "old"}));
    assert_eq!(shown["summary"]["id"], json!(old), "{shown}");
    let resumed = try_call(&d.socket, wire::method::RESUME, json!({"goal": old})).unwrap();
    assert!(
        resumed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cancelled")),
        "{resumed}"
    );
    // A new goal of the same name is the one the name means now.
    let new = enqueue(&d, &demo_goal(dir.path(), "old", 3, ""));
    assert_eq!(d.goal("old").id, new);
    assert!(d.stop().success());
}
