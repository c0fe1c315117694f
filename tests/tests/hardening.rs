//! Defences of the real binaries against their environment: workers that must not outlive
//! the daemon, a spool that cannot be emptied, and clients that hold the socket.

use std::time::{Duration, Instant};

use kerneld::wire::EventKind;
use kerneld_e2e::*;

fn alive(pid: i32) -> bool {
    // A zombie waiting for init to reap it counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next()),
            Some("Z") | Some("X")
        ),
        Err(_) => false,
    }
}

#[test]
fn a_worker_stuck_in_a_candidate_dies_with_its_daemon() {
    let dir = TempDir::new("orphan");
    std::fs::copy(
        repo_root().join("kernels/harness/tests/faults/python_hang.py"),
        dir.path().join("python_hang.py"),
    )
    .unwrap();
    let goal = dir.path().join("hang.toml");
    std::fs::write(
        &goal,
        format!(
            "name = \"hang\"\ntask = \"{}\"\nseed = [\"python_hang.py\"]\n[budget]\niterations = 1\n",
            repo_root().join("kernels/demo").display()
        ),
    )
    .unwrap();
    let d = Daemon::start_with(dir.path(), &["--eval-timeout", "10m"]);
    enqueue(&d, &goal);
    let started = d.wait_until(Duration::from_secs(120), |d| {
        d.events(0)
            .iter()
            .any(|e| matches!(e.kind, EventKind::EvaluationStarted { .. }))
    });
    assert!(started, "the evaluation never started\n{}", d.log_text());
    // Well inside the candidate's endless loop.
    std::thread::sleep(Duration::from_secs(2));
    let workers = d.worker_pids();
    assert!(!workers.is_empty(), "no worker found\n{}", d.log_text());
    let log = d.log.clone();

    let t0 = Instant::now();
    d.kill9();
    while workers.iter().any(|&p| alive(p)) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t0.elapsed();
    let left: Vec<i32> = workers.iter().copied().filter(|&p| alive(p)).collect();
    for &p in &left {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        left.is_empty(),
        "workers {left:?} outlived the daemon\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    assert!(took < Duration::from_secs(2), "workers took {took:?} to go");
    eprintln!("workers gone {took:?} after the daemon's SIGKILL");
}

#[test]
fn a_spool_file_that_cannot_be_moved_is_enqueued_once_per_content() {
    let dir = TempDir::new("spool-stuck");
    let spool = dir.path().join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    // `done` is a file, not a directory: no move can succeed (even for root).
    std::fs::write(spool.join("done"), "in the way\n").unwrap();
    let d = Daemon::start_with(dir.path(), &["--spool", spool.to_str().unwrap()]);
    let goal = demo_goal(dir.path(), "stuck", 1, "");
    std::fs::rename(&goal, spool.join("stuck.toml")).unwrap();

    let goals_named = |d: &Daemon| d.status().iter().filter(|g| g.name == "stuck").count();
    assert!(
        d.wait_until(Duration::from_secs(30), |d| goals_named(d) == 1),
        "not enqueued\n{}",
        d.log_text()
    );
    // Once it completed, `unique` no longer protects it: only the spool's memory does.
    let id = d
        .status()
        .iter()
        .find(|g| g.name == "stuck")
        .unwrap()
        .id
        .clone();
    d.wait_terminal(&id, Duration::from_secs(120));
    for i in 0..3 {
        // Any change in the directory makes the spool rescan it.
        std::fs::write(spool.join(format!("nudge-{i}.txt")), "x").unwrap();
        std::thread::sleep(Duration::from_millis(700));
    }
    assert!(spool.join("stuck.toml").is_file());
    assert_eq!(goals_named(&d), 1, "enqueued again\n{}", d.log_text());
    let log = d.log_text();
    assert_eq!(
        log.matches("cannot move it to done/").count(),
        1,
        "the stuck file is reported once\n{log}"
    );

    // New content at the same path is a new submission.
    let edited = std::fs::read_to_string(spool.join("stuck.toml")).unwrap() + "\n# again\n";
    std::fs::write(spool.join("stuck.toml"), edited).unwrap();
    assert!(
        d.wait_until(Duration::from_secs(30), |d| goals_named(d) == 2),
        "the edited file was not taken\n{}",
        d.log_text()
    );
}
