//! The hook runner's own rules: which hooks an event runs, `notify` checks, a full queue.

use std::time::Instant;

use super::*;
use crate::wire::GoalState;

fn hook(name: &str, on: &[HookOn], command: &[&str]) -> HookConfig {
    HookConfig {
        name: name.into(),
        on: on.to_vec(),
        command: command.iter().map(|s| s.to_string()).collect(),
        timeout: Duration::from_secs(10),
        goals: Vec::new(),
        owners: Vec::new(),
        per_goal: false,
        env: Default::default(),
    }
}

fn info(name: &str, notify: &[&str]) -> GoalInfo {
    GoalInfo {
        id: "g1".into(),
        name: name.into(),
        owner_uid: 1000,
        owner: Some("alice".into()),
        task: "demo".into(),
        state: GoalState::Completed,
        iteration: 3,
        best_speedup: None,
        best_iteration: None,
        notify: notify.iter().map(|s| s.to_string()).collect(),
    }
}

fn event(on: HookOn, goal: Option<&str>) -> HookEvent {
    HookEvent {
        event: on,
        seq: Some(9),
        time_ms: 1,
        goal: goal.map(str::to_string),
        state: None,
        reason: None,
        iteration: None,
        candidate: None,
        speedup: None,
        previous_speedup: None,
        interpreted: None,
        device: Some("GPU-1".into()),
        log_event: None,
    }
}

#[test]
fn filters_pick_the_goals_a_hook_runs_for() {
    let done = event(HookOn::GoalFinished, Some("g1"));
    let mut h = hook("h", &[HookOn::GoalFinished], &["/bin/true"]);
    assert!(matches(&h, &done, Some(&info("mla-decode", &[]))));
    assert!(!matches(
        &h,
        &event(HookOn::NewBest, Some("g1")),
        Some(&info("x", &[]))
    ));
    h.goals = vec![glob::Pattern::new("mla-*").unwrap()];
    assert!(matches(&h, &done, Some(&info("mla-decode", &[]))));
    assert!(!matches(&h, &done, Some(&info("kda", &[]))));
    assert!(
        !matches(&h, &done, None),
        "a filtered hook needs the goal known"
    );
    h.goals.clear();
    h.owners = vec![Owner::Name("bob".into()), Owner::Uid(7)];
    assert!(!matches(&h, &done, Some(&info("kda", &[]))));
    h.owners.push(Owner::Name("alice".into()));
    assert!(matches(&h, &done, Some(&info("kda", &[]))));
    // per_goal: only goals that name it.
    let mut mail = hook("mail", &[HookOn::GoalFinished], &["/bin/true"]);
    mail.per_goal = true;
    assert!(!matches(&mail, &done, Some(&info("kda", &[]))));
    assert!(matches(&mail, &done, Some(&info("kda", &["mail"]))));
    // A device's event is not filtered by goals.
    let mut gpu = hook("gpu", &[HookOn::GpuUnhealthy], &["/bin/true"]);
    gpu.goals = vec![glob::Pattern::new("mla-*").unwrap()];
    assert!(matches(&gpu, &event(HookOn::GpuUnhealthy, None), None));
}

#[test]
fn notify_names_only_hooks_offered_to_goals() {
    let mut mail = hook("mail", &[HookOn::GoalFinished], &["/bin/true"]);
    let ops = hook("ops", &[HookOn::GoalFinished], &["/bin/true"]);
    let e = check_notify(&[mail.clone(), ops.clone()], &["mail".into()]).unwrap_err();
    assert!(
        e.contains("offers goals no hooks") && e.contains("per_goal = true"),
        "{e}"
    );
    mail.per_goal = true;
    let hooks = [mail, ops];
    assert!(check_notify(&hooks, &["mail".into()]).is_ok());
    let e = check_notify(&hooks, &["ops".into()]).unwrap_err();
    assert_eq!(
        e,
        "`notify` names hook `ops`, which this kerneld does not offer; goals may name: mail"
    );
}

fn context(lookup: GoalLookup) -> Context {
    Context {
        host: "h1".into(),
        socket: "/run/kerneld.sock".into(),
        lookup,
    }
}

#[tokio::test]
async fn a_goals_hook_runs_with_its_event_and_the_others_do_not() {
    let dir = std::env::temp_dir().join(format!("kd-hooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("mail.out");
    let script = format!(
        "echo \"$KERNELD_EVENT $KERNELD_GOAL_NAME $KERNELD_OWNER $MAILTO\" > {0}.tmp; cat >> {0}.tmp; mv {0}.tmp {0}",
        out.display()
    );
    let mut mail = hook("mail", &[HookOn::GoalFinished], &["/bin/sh", "-c", &script]);
    mail.per_goal = true;
    mail.env.insert("MAILTO".into(), "ops@lab".into());
    let other_out = dir.join("other.out");
    let mut other = hook(
        "other",
        &[HookOn::GoalFinished],
        &["/bin/sh", "-c", &format!("touch {}", other_out.display())],
    );
    other.per_goal = true;
    let hooks = Hooks::start(
        vec![mail, other],
        context(Arc::new(|id: &str| {
            (id == "g1").then(|| info("demo-night", &["mail"]))
        })),
    );
    hooks.fire(event(HookOn::GoalFinished, Some("g1")));
    let t0 = Instant::now();
    while !out.exists() && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("goal_finished demo-night alice ops@lab"));
    let json: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(json["goal_info"]["name"], "demo-night");
    assert!(json["summary"]
        .as_str()
        .unwrap()
        .contains("demo-night (g1) completed"));
    hooks.close(Duration::from_secs(5)).await;
    assert!(
        !other_out.exists(),
        "a per_goal hook the goal did not name ran"
    );
    assert_eq!(
        hooks.stats().runs,
        vec![(
            "mail".to_string(),
            HookCounts {
                ok: 1,
                ..Default::default()
            }
        )]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_full_queue_drops_at_once_and_counts() {
    let slow = hook("slow", &[HookOn::GpuUnhealthy], &["/bin/sleep", "5"]);
    let hooks = Hooks::start(vec![slow], context(Arc::new(|_: &str| None)));
    let t0 = Instant::now();
    for _ in 0..(QUEUE + PARALLEL + 40) {
        hooks.fire(event(HookOn::GpuUnhealthy, None));
    }
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "fire blocked: {:?}",
        t0.elapsed()
    );
    let dropped = hooks.stats().dropped;
    // The runner may have taken one event per run slot, and one waiting for a slot.
    assert!((39..=44).contains(&dropped), "{dropped}");
    // Nothing queued for an event no hook runs on.
    hooks.fire(event(HookOn::NewBest, Some("g1")));
    assert_eq!(hooks.stats().dropped, dropped);
}
