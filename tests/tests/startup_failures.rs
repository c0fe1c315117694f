//! Issue #30: every way a damaged event log stops the start names the log and what to do,
//! in one message: a record that no longer decodes (a flipped byte in its JSON), and
//! whatever random byte flips make of the file (redb's errors, its assertions: a panic
//! is caught and reported like the rest, never printed with a backtrace).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kerneld::wire;
use kerneld_e2e::*;
use serde_json::json;

/// A log with one paused goal named "keepsake", written by a daemon that stopped cleanly.
fn log_with_a_goal(dir: &Path) -> std::path::PathBuf {
    let d = Daemon::start(dir);
    let id = enqueue(&d, &demo_goal(dir, "keepsake", 1000, ""));
    d.call(wire::method::PAUSE, json!({"goal": id}));
    let log = d.state_dir.join("kerneld.redb");
    assert!(d.stop().success());
    log
}

/// Starts kerneld on `dir`: Err(exit code, output) when it stops by itself, Ok when it
/// answers (then it is stopped).
fn start(dir: &Path) -> Result<(), (i32, String)> {
    let mut d = Daemon::spawn(dir, &daemon_args(dir), &[]);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        if let Some(status) = d.child.try_wait().unwrap() {
            return Err((status.code().unwrap_or(-1), d.log_text()));
        }
        if try_call(&d.socket, wire::method::VERSION, json!({}))
            .is_ok_and(|v| v.get("result").is_some())
        {
            assert!(d.stop().success());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("kerneld neither started nor stopped:\n{}", d.log_text());
}

/// What a refused start must say: the log's path, what to do, one message (no panic).
fn assert_names_the_log_and_what_to_do(code: i32, text: &str, log: &Path) {
    assert_eq!(code, 1, "{text}");
    assert!(
        !text.contains("panicked") && !text.contains("backtrace"),
        "a panic's text reached the user:\n{text}"
    );
    assert!(
        text.contains(log.to_str().unwrap())
            && (text.contains("kerneld check") || text.contains("backup")),
        "the message must name the log and what to do:\n{text}"
    );
}

#[test]
fn a_record_that_no_longer_decodes_names_the_log_and_what_to_do() {
    let dir = TempDir::new("badrec");
    let log = log_with_a_goal(dir.path());
    let mut bytes = std::fs::read(&log).unwrap();
    // Every stored copy of the goal's name gets a byte that is not UTF-8.
    let name = b"keepsake";
    let mut flipped = 0;
    for i in 0..bytes.len() - name.len() {
        if &bytes[i..i + name.len()] == name {
            bytes[i + 2] = 0xFF;
            flipped += 1;
        }
    }
    assert!(flipped > 0, "the goal's name is not in the log");
    std::fs::write(&log, &bytes).unwrap();
    let (code, text) = start(dir.path()).expect_err("a log that does not decode was opened");
    assert_names_the_log_and_what_to_do(code, &text, &log);
    assert!(text.contains("corrupt record"), "{text}");
    eprintln!("{text}");
}

#[test]
fn random_byte_flips_stop_the_start_with_one_message_naming_the_log() {
    let dir = TempDir::new("flips");
    let log = log_with_a_goal(dir.path());
    let original = std::fs::read(&log).unwrap();
    // Flips land where the log has data (most of the file is space redb has not used).
    let used: Vec<usize> = (512..original.len())
        .filter(|&i| original[i] != 0)
        .collect();
    let mut outcomes = Vec::new();
    // A fixed generator: the same flips on every run.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..16 {
        let mut bytes = original.clone();
        // Past redb's header (checked before redb opens the file: tested elsewhere).
        for _ in 0..(16 << (round % 4)) {
            let at = used[(next() as usize) % used.len()];
            bytes[at] ^= 1 << (next() % 8);
        }
        std::fs::write(&log, &bytes).unwrap();
        match start(dir.path()) {
            Ok(()) => outcomes.push("started".to_string()),
            Err((code, text)) => {
                assert_names_the_log_and_what_to_do(code, &text, &log);
                let line = text
                    .lines()
                    .find(|l| l.contains(log.to_str().unwrap()))
                    .unwrap_or_default();
                outcomes.push(line.chars().take(160).collect());
            }
        }
    }
    eprintln!("outcomes:\n{}", outcomes.join("\n"));
}

#[test]
fn a_log_redb_cannot_open_is_one_message_from_kerneld_check_too() {
    let dir = TempDir::new("flipcheck");
    let log = log_with_a_goal(dir.path());
    let mut bytes = std::fs::read(&log).unwrap();
    for b in bytes.iter_mut().skip(4096).step_by(97) {
        *b ^= 0x5A;
    }
    std::fs::write(&log, &bytes).unwrap();
    let (status, text) = run_bounded(
        Command::new(binary("kerneld"))
            .args(["check", "--state-dir"])
            .arg(dir.path().join("state")),
        Duration::from_secs(60),
    );
    let code = status.and_then(|s| s.code());
    eprintln!("kerneld check: {code:?}\n{text}");
    assert!(matches!(code, Some(1 | 2)), "{code:?}\n{text}");
    assert!(
        !text.contains("panicked") && !text.contains("backtrace"),
        "{text}"
    );
}
