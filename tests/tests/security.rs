//! The socket is open to every local user: what an unprivileged user may make a root
//! daemon read or run. The daemon runs as root (as these tests do) and `kernelctl` as
//! uid 65534 through `setpriv`; each test is skipped, saying why, where that is not
//! possible.

use std::os::unix::fs::PermissionsExt;
use std::process::Output;
use std::time::Duration;

use kerneld::wire::{self, EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::json;

#[test]
fn an_absolute_seed_naming_a_root_only_file_is_never_read_by_the_daemon() {
    let Some(dir) = nobody_dir("sec-seed") else {
        return;
    };
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET-LINE\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let goal = dir.path().join("steal.toml");
    let goal_text = format!(
        "name = \"steal\"\ntask = \"demo\"\nseed = \"{}\"\n",
        secret.display()
    );
    write_public(&goal, &goal_text);
    let d = Daemon::start(dir.path());

    let out = kernelctl_as_nobody(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    let all = output_text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("not in the task's directory") && all.contains("kernelctl sent no readable"),
        "{all}"
    );
    assert!(!all.contains("TOPSECRET"), "{all}");

    // Even a request that sends nothing, from root, does not make the daemon read it.
    let reply = try_call(
        &d.socket,
        wire::method::ENQUEUE,
        json!({"path": goal, "source": goal_text}),
    )
    .unwrap();
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not found"), "{reply}");
    assert!(d.status().is_empty());
}

#[test]
fn a_seed_next_to_the_goal_file_is_sent_by_the_client() {
    let Some(dir) = nobody_dir("sec-local") else {
        return;
    };
    let seed = std::fs::read_to_string(repo_root().join("kernels/demo/seeds/tiled.py")).unwrap();
    write_public(
        &dir.path().join("mine.py"),
        &format!("# my variant\n{seed}"),
    );
    let goal = dir.path().join("local.toml");
    write_public(
        &goal,
        "name = \"local\"\ntask = \"demo\"\nseed = \"mine.py\"\n[budget]\niterations = 1\n",
    );
    let d = Daemon::start(dir.path());
    let out = kernelctl_as_nobody(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let detail = d.call(wire::method::SHOW, json!({"goal": id}));
    let seeds = &detail["spec"]["seeds"];
    assert_eq!(seeds[0]["name"], "mine.py", "{detail}");
    assert!(
        seeds[0]["source"]
            .as_str()
            .unwrap()
            .starts_with("# my variant"),
        "{detail}"
    );
    let owner = d.events(0).into_iter().find_map(|e| match e.kind {
        EventKind::GoalEnqueued { owner_uid, .. } => Some(owner_uid),
        _ => None,
    });
    assert_eq!(owner, Some(65534));
    d.call(wire::method::CANCEL, json!({"goal": id}));
}

#[test]
fn a_task_path_from_an_unprivileged_user_is_refused() {
    let Some(dir) = nobody_dir("sec-task") else {
        return;
    };
    let goal = dir.path().join("mytask.toml");
    let task = repo_root().join("kernels/demo");
    write_public(
        &goal,
        &format!("name = \"mytask\"\ntask = \"{}\"\n", task.display()),
    );
    let d = Daemon::start(dir.path());
    let out = kernelctl_as_nobody(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    let all = output_text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains(&format!("task `{}` refused", task.display()))
            && all.contains("installed under the kernels directory")
            && all.contains("ask an administrator"),
        "{all}"
    );
    assert!(d.status().is_empty());
    // Root may.
    let out = kernelctl(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
}

#[test]
fn a_command_agent_from_an_unprivileged_user_runs_as_that_user() {
    let Some(dir) = nobody_dir("sec-cmd") else {
        return;
    };
    let script = dir.path().join("agent.sh");
    write_public(
        &script,
        "set -e\ncp seeds/tiled.py candidate.py\necho \"uid=$(id -u) gid=$(id -g) groups=$(id -G)\" > NOTE.md\n",
    );
    let goal = dir.path().join("cmd.toml");
    write_public(
        &goal,
        &format!(
            "name = \"cmd\"\ntask = \"demo\"\n[budget]\niterations = 1\n\
             [agent]\nkind = \"command\"\ncommand = [\"sh\", \"{}\"]\ntimeout = \"2m\"\n",
            script.display()
        ),
    );
    let d = Daemon::start(dir.path());
    let out = kernelctl_as_nobody(&d.socket, &["enqueue", goal.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let proposed_note = || {
        d.events(0).into_iter().find_map(|e| match e.kind {
            EventKind::CandidateProposed { note, .. } if e.goal.as_deref() == Some(&id) => {
                Some(note)
            }
            _ => None,
        })
    };
    assert!(
        d.wait_until(Duration::from_secs(120), |_| proposed_note().is_some()
            || d.goal(&id).state.is_terminal()),
        "no proposal; log:\n{}",
        d.log_text()
    );
    let g = d.goal(&id);
    assert_ne!(g.state, GoalState::Failed, "{g:?}\n{}", d.log_text());
    let note = proposed_note().flatten().unwrap_or_default();
    assert_eq!(
        note,
        format!("uid={NOBODY} gid={NOBODY} groups={NOBODY}"),
        "{}",
        d.log_text()
    );
    d.call(wire::method::CANCEL, json!({"goal": id}));
}

#[test]
fn unique_matches_only_the_callers_own_goals() {
    let Some(dir) = nobody_dir("sec-uniq") else {
        return;
    };
    let goal = demo_goal(dir.path(), "nightly", 1000, "");
    std::fs::set_permissions(&goal, std::fs::Permissions::from_mode(0o644)).unwrap();
    let d = Daemon::start(dir.path());
    let enqueue_unique = |out: Output| {
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let path = goal.to_str().unwrap();
    let roots = enqueue_unique(kernelctl(&d.socket, &["enqueue", "--unique", path]));
    let nobodys = enqueue_unique(kernelctl_as_nobody(
        &d.socket,
        &["enqueue", "--unique", path],
    ));
    assert_ne!(
        roots, nobodys,
        "another user's goal of the same name was returned"
    );
    let again = enqueue_unique(kernelctl_as_nobody(
        &d.socket,
        &["enqueue", "--unique", path],
    ));
    assert_eq!(again, nobodys);
    for id in [roots, nobodys] {
        d.call(wire::method::CANCEL, json!({"goal": id}));
    }
}
