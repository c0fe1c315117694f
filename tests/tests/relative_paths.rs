//! Issue #30: paths given relative to the directory kerneld starts in. The workers run
//! in their scratch directories and the sandbox grants absolute paths only, so kerneld
//! makes every path absolute at start: relative `--state-dir`, `--socket`, `--kernels`
//! and `--config` work (a demo goal evaluates correctly in CPU mode); a relative path
//! inside kerneld.toml is refused, naming it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use kerneld::wire::{self, GoalState};
use kerneld_e2e::*;
use serde_json::json;

/// `to` as a path relative to `from` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let up = from.components().count() - 1;
    let mut p: PathBuf = std::iter::repeat_n("..", up).collect();
    p.push(to.strip_prefix("/").unwrap());
    p
}

/// Starts kerneld in `cwd` with these arguments (relative paths meant from there).
fn spawn_in(cwd: &Path, args: &[&str]) -> Daemon {
    let log = cwd.join("kerneld.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(binary("kerneld"))
        .current_dir(cwd)
        .args(args)
        .env("KERNELD_LOG", "info")
        .env_remove("KERNELD_CONFIG")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    Daemon {
        child,
        socket: cwd.join("k.sock"),
        state_dir: cwd.join("st"),
        log,
    }
}

#[test]
fn relative_state_dir_socket_kernels_and_config_work_and_a_goal_evaluates() {
    let dir = TempDir::new("rel");
    let cwd = dir.path();
    let kernels = relative(cwd, &repo_root().join("kernels"));
    std::fs::write(cwd.join("k.toml"), "eval_timeout = \"10m\"\n").unwrap();
    let python = python();
    let d = spawn_in(
        cwd,
        &[
            "--config",
            "k.toml",
            "--state-dir",
            "st",
            "--socket",
            "k.sock",
            "--kernels",
            kernels.to_str().unwrap(),
            "--python",
            python.to_str().unwrap(),
            "--cpu",
            "--allow-unsandboxed",
        ],
    );
    d.wait_ready(Duration::from_secs(60));
    assert!(d.state_dir.join("kerneld.redb").is_file());

    // The sandbox's paths are absolute: no "must be absolute" among its problems.
    let version = d.call(wire::method::VERSION, json!({}));
    assert!(
        !version.to_string().contains("must be absolute"),
        "{version}"
    );
    let goal = demo_goal(cwd, "rel", 2, "");
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(300));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!(g.evaluations, 2, "{g:?}");
    let best = g.best.expect("a correct candidate");
    assert!(best.speedup > 0.0, "{best:?}");
    // The daemon says where it keeps things, absolute.
    let log = d.log_text();
    let abs_state = std::fs::canonicalize(&d.state_dir).unwrap();
    assert!(log.contains(abs_state.to_str().unwrap()), "{log}");
}

#[test]
fn a_relative_path_in_kerneld_toml_is_refused_naming_the_key() {
    let dir = TempDir::new("relcfg");
    std::fs::write(dir.path().join("k.toml"), "kernels_dir = \"kernels\"\n").unwrap();
    let (status, text) = run_bounded(
        Command::new(binary("kerneld"))
            .current_dir(dir.path())
            .args(["--config", "k.toml", "--state-dir", "st", "--cpu"]),
        Duration::from_secs(30),
    );
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{text}");
    assert!(
        text.contains("k.toml")
            && text.contains("`kernels_dir` = \"kernels\" is a relative path")
            && text.contains("write it absolute"),
        "{text}"
    );
}
