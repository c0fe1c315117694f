//! The daemon-driven hostile suite (issue #10): the real `kerneld` (CPU mode) evaluates
//! every candidate in kernels/harness/tests/hostile/ (whoever added it), each followed by
//! the honest demo seed in the same daemon. Each hostile file says what it tries and
//! what must come of it (`# expect: class=.. rule=..` or `# expect: no-effect`); after
//! each, the global checks of docs/PROCESS_MODEL.md: no token of the daemon's user (a
//! root-only file, an environment variable, the config file) appears anywhere a user or
//! the log can see, no file appeared outside scratch, the local TCP listener and the
//! unix sockets of "another service" (named stream and datagram, abstract) got nothing,
//! a file in another slot's scratch stayed unread, and the honest seed gets the class it
//! gets in a fresh daemon.
//! Also: a `command` agent's environment, the refusal of code-writing goals while the
//! sandbox is incomplete, and (root, where the runner user can run the harness's
//! Python) that a seed an unprivileged user sends runs as `kerneld-runner`.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kerneld::wire::{self, EventKind, ResultClass};
use kerneld_e2e::*;
use serde_json::{json, Value};

mod hostile_world;
use hostile_world::*;

fn landlock_abi() -> i64 {
    sandbox_probe()["landlock_abi"].as_i64().unwrap_or(0)
}

#[test]
fn every_hostile_candidate_is_refused_or_has_no_effect() {
    if landlock_abi() < 6 {
        // Without Landlock the OS cannot be the boundary; the daemon says so (see
        // code_writing_goals_are_refused_while_the_sandbox_is_incomplete).
        eprintln!("skipped: this kernel has no Landlock ABI >= 6");
        return;
    }
    let hostiles = hostile_files();
    assert!(
        hostiles.len() >= 6,
        "the OS classes are missing from the hostile directory"
    );
    // As the daemon runs: the static rules, then the OS.
    let all: Vec<(&Hostile, &Expect)> = hostiles.iter().map(|h| (h, &h.expect)).collect();
    let mut failures = suite("iso", &[], &all);
    // The static rules skipped where a file asks for it (`# expect-sandboxed:`): the
    // attack really runs, and only the operating system stands in its way.
    let behind: Vec<(&Hostile, &Expect)> = hostiles
        .iter()
        .filter_map(|h| h.sandboxed.as_ref().map(|e| (h, e)))
        .collect();
    failures.extend(
        suite(
            "iso-os",
            &[("KERNELD_UNSAFE_SKIP_STATIC_CHECKS", "1")],
            &behind,
        )
        .into_iter()
        .map(|f| format!("(static rules skipped) {f}")),
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One daemon over `hostiles`, each followed by the honest seed; the failures, with the log.
fn suite(tag: &str, env: &[(&str, &str)], hostiles: &[(&Hostile, &Expect)]) -> Vec<String> {
    let mut world = World::new(tag);
    let d = world.start_env(env);
    world.plant_other_slot(&d);
    let version = d.call(wire::method::VERSION, json!({}));
    let restricts = version["sandbox"]["restricts"].to_string();
    assert!(
        restricts.contains("filesystem (Landlock"),
        "the judge is not sandboxed: {version}"
    );

    // The honest seed in a fresh daemon: the class every later honest evaluation must get.
    let fresh = enqueue(&d, &world.goal("fresh", &[("tiled.py", honest_seed())]));
    d.wait_terminal(&fresh, Duration::from_secs(300));
    let baseline = verdicts(&d.events(0), &fresh)["tiled.py"].clone();
    assert_eq!(baseline.0, "ok", "{baseline:?}\n{}", d.log_text());

    let state_before = tree(&d.state_dir);
    let mut failures = Vec::new();
    for (h, expect) in hostiles {
        let stem = h.name.trim_end_matches(".py").replace('_', "-");
        let text = world.substitute(&h.text, &d);
        let id = enqueue(
            &d,
            &world.goal(
                &format!("h-{stem}"),
                &[(&h.name, text), ("tiled.py", honest_seed())],
            ),
        );
        d.wait_terminal(&id, Duration::from_secs(300));
        let v = verdicts(&d.events(0), &id);
        let mut fail = |why: String| failures.push(format!("{} ({}): {why}", h.name, h.what));
        match (*expect, v.get(&h.name)) {
            (_, None) => fail(format!("no verdict; verdicts {v:?}")),
            (Expect::Verdict { class, rule }, Some((c, r, m))) if (c, r) != (class, rule) => fail(
                format!("expected class={class} rule={rule}, got class={c} rule={r}: {m}"),
            ),
            _ => {}
        }
        match v.get("tiled.py") {
            Some((c, _, m)) if *c != baseline.0 => fail(format!(
                "the honest seed after it got {c} (fresh daemon: {}): {m}",
                baseline.0
            )),
            None => fail("the honest seed after it got no verdict".into()),
            _ => {}
        }
        let seen = visible(&d, &id);
        for t in &world.tokens {
            if seen.contains(t.as_str()) {
                fail(format!("token {t} is visible"));
            }
        }
        if let Some(at) = seen.find(SUCCESS_MARK) {
            let end = (at + 300).min(seen.len());
            fail(format!("an attack worked: {}", &seen[at..end]));
        }
        let marker: Vec<String> = tree(&world.marker).into_iter().collect();
        if marker != ["keep"] {
            fail(format!("the marker directory changed: {marker:?}"));
        }
        let planted: Vec<String> = tree(&d.state_dir)
            .difference(&state_before)
            // cache/judge: the judges' own compile caches (issue #12; runners never get it).
            .filter(|p| {
                !p.starts_with("sources/")
                    && !p.starts_with("kerneld.redb")
                    && !p.starts_with("cache")
            })
            .cloned()
            .collect();
        if !planted.is_empty() {
            fail(format!("new files in the state directory: {planted:?}"));
        }
        for p in OUTSIDE {
            if Path::new(p).exists() {
                let _ = std::fs::remove_file(p);
                fail(format!("{p} was written"));
            }
        }
        if world.listener.accept().is_ok() {
            fail("the 127.0.0.1 listener accepted a connection".into());
        }
        for what in world.unix_reached() {
            fail(what.into());
        }
        for pid in survivors() {
            fail(format!(
                "a process it started outlived its runner (pid {pid})"
            ));
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    if !failures.is_empty() {
        failures.push(format!("log of the {tag} daemon:\n{}", d.log_text()));
    }
    failures
}

#[test]
fn a_command_agent_sees_only_the_allow_listed_environment() {
    let world = World::new("iso-cmd");
    let d = world.start();
    let script = world.dir.path().join("agent.sh");
    // The whole environment goes into the candidate's docstring, which `show`/`best` print.
    std::fs::write(
        &script,
        "set -e\n{ echo '\"\"\"environment:'; env | sort; echo '\"\"\"'; cat seeds/tiled.py; } > candidate.py\n",
    )
    .unwrap();
    let goal = world.dir.path().join("cmd.toml");
    std::fs::write(
        &goal,
        format!(
            "name = \"cmd\"\ntask = \"demo\"\n[budget]\niterations = 2\n\
             [agent]\nkind = \"command\"\ncommand = [\"sh\", \"{}\"]\ntimeout = \"2m\"\n",
            script.display()
        ),
    )
    .unwrap();
    let id = enqueue(&d, &goal);
    d.wait_terminal(&id, Duration::from_secs(300));
    let proposed: Vec<String> = d
        .events(0)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::CandidateProposed { seed, .. } if e.goal.as_deref() == Some(&id) => {
                Some(seed)
            }
            _ => None,
        })
        .collect();
    assert!(
        proposed.iter().any(|s| s == "command"),
        "the agent proposed nothing: {proposed:?}\n{}",
        d.log_text()
    );
    let shown = String::from_utf8_lossy(&kernelctl(&d.socket, &["best", &id]).stdout).into_owned();
    let dump: Vec<&str> = shown
        .split("environment:")
        .nth(1)
        .and_then(|s| s.split("\"\"\"").next())
        .unwrap_or_else(|| panic!("no environment dump in the best candidate:\n{shown}"))
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    let names: BTreeSet<&str> = dump
        .iter()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    let allowed: BTreeSet<&str> = [
        "PATH",
        "HOME",
        "LANG",
        "KERNELD_GOAL",
        "KERNELD_GOAL_NAME",
        "KERNELD_ITERATION",
        "KERNELD_TASK_DIR",
        "USER",
        "LOGNAME",
        "PWD",
        "SHLVL",
        "_",
        "OLDPWD",
    ]
    .into();
    let extra: Vec<&&str> = names.difference(&allowed).collect();
    assert!(
        extra.is_empty(),
        "the command agent got {extra:?}:\n{}",
        dump.join("\n")
    );
    assert!(
        names.contains("PATH") && names.contains("KERNELD_GOAL"),
        "{dump:?}"
    );
    let seen = visible(&d, &id);
    for t in &world.tokens {
        assert!(!seen.contains(t.as_str()), "token {t} visible");
    }
}

#[test]
fn code_writing_goals_are_refused_while_the_sandbox_is_incomplete() {
    let world = World::new("iso-refuse");
    // A runner user that does not exist (root) or no kerneld-sandbox binary (anyone).
    std::fs::write(
        &world.config,
        "runner_user = \"kerneld-no-such-user\"\nsandbox_binary = \"/nonexistent/kerneld-sandbox\"\n",
    )
    .unwrap();
    // Not through Daemon::start: the test library allows unsandboxed goals by default.
    let socket = world.dir.path().join("sock");
    let state = world.dir.path().join("state");
    let log = std::fs::File::create(world.dir.path().join("strict.log")).unwrap();
    let mut child = Command::new(binary("kerneld"))
        .args([
            "--state-dir",
            state.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
        ])
        .arg("--kernels")
        .arg(repo_root().join("kernels"))
        .arg("--python")
        .arg(python())
        .args(["--cpu", "--config", world.config.to_str().unwrap()])
        .stderr(log.try_clone().unwrap())
        .stdout(log)
        .spawn()
        .unwrap();
    let ready = (0..300).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        try_call(&socket, wire::method::VERSION, json!({})).is_ok()
    });
    assert!(ready, "kerneld did not start");
    let check = || -> Result<(), String> {
        let v = kernelctl(&socket, &["version", "--json"]);
        let v: Value = serde_json::from_slice(&v.stdout).map_err(|e| e.to_string())?;
        let sb = &v["daemon"]["sandbox"];
        if sb["complete"] != false || !sb["problems"].to_string().contains("kerneld-sandbox") {
            return Err(format!(
                "version does not say the sandbox is incomplete: {v}"
            ));
        }
        let text = String::from_utf8_lossy(&kernelctl(&socket, &["gpus"]).stdout).into_owned();
        if !text.contains("sandbox: INCOMPLETE") || !text.contains("missing:") {
            return Err(format!("gpus does not say so: {text}"));
        }
        let goal = world.goal("sent", &[("mine.py", honest_seed())]);
        let out = kernelctl(&socket, &["enqueue", goal.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success()
            || !err.contains("seeds sent with the goal")
            || !err.contains("allow_unsandboxed")
        {
            return Err(format!(
                "a goal with sent seeds was not refused as it should: {err}"
            ));
        }
        // The installed task's own seeds with the search agent are trusted code: they run.
        let trusted = demo_goal(world.dir.path(), "trusted", 1, "");
        let out = kernelctl(&socket, &["enqueue", trusted.to_str().unwrap()]);
        if !out.status.success() {
            return Err(format!(
                "the installed task was refused: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    };
    let result = check();
    let _ = child.kill();
    let _ = child.wait();
    result.unwrap();
}

/// The runner user, created when missing (root only); None with the reason printed.
fn runner_user_ready() -> Option<u32> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs a root daemon");
        return None;
    }
    if nix::unistd::User::from_name("kerneld-runner")
        .ok()
        .flatten()
        .is_none()
    {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                "kerneld-runner",
            ])
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: no kerneld-runner user and useradd failed");
            return None;
        }
    }
    let user = nix::unistd::User::from_name("kerneld-runner")
        .ok()
        .flatten()?;
    Some(user.uid.as_raw())
}

#[test]
fn a_seed_sent_by_an_unprivileged_user_runs_as_the_runner_user_not_root() {
    let Some(runner_uid) = runner_user_ready() else {
        return;
    };
    let world = World::new("iso-uid");
    let d = world.start();
    let v = d.call(wire::method::VERSION, json!({}));
    let problems = v["sandbox"]["problems"].to_string();
    if problems.contains("cannot run as kerneld-runner") {
        // The daemon's own trial run found it (e.g. a Python under a 0700 home directory).
        eprintln!("skipped: {problems}");
        return;
    }
    assert_eq!(v["sandbox"]["complete"], true, "{v}");
    assert_eq!(v["sandbox"]["runner_uid"], runner_uid, "{v}");
    let goal = world.goal("mine", &[("mine.py", honest_seed())]);
    for p in [
        goal.as_path(),
        goal.parent().unwrap(),
        &goal.parent().unwrap().join("mine.py"),
    ] {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = kernelctl_under(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &d.socket,
        &["enqueue", goal.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    // While the goal runs, every process below the daemon is the runner user's.
    let mut seen = BTreeSet::new();
    let done = d.wait_until(Duration::from_secs(300), |d| {
        for pid in d.worker_pids() {
            if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                if let Some(uids) = status.lines().find_map(|l| l.strip_prefix("Uid:")) {
                    seen.insert(
                        uids.split_whitespace()
                            .map(String::from)
                            .collect::<Vec<_>>(),
                    );
                }
            }
        }
        d.goal(&id).state.is_terminal()
    });
    assert!(done, "{}", d.log_text());
    let want = vec![runner_uid.to_string(); 4];
    assert!(!seen.is_empty(), "no worker seen");
    assert!(
        seen.iter().all(|u| *u == want),
        "worker uids (real, effective, saved, fs): {seen:?}"
    );
    let v = verdicts(&d.events(0), &id);
    assert_eq!(v["mine.py"].0, ResultClass::Ok.as_str(), "{v:?}");
}
