//! Restart safety under SIGKILL: the real daemon is killed at many moments of a
//! running goal — at random times, and right after it records a proposal, the start
//! of an evaluation, or a result — then restarted on the same state directory.
//!
//! After each restart: every event a client had been given is still there, unchanged;
//! sequence numbers have no gap; the goal is running again and its iteration count
//! never went backwards; and at the end every interrupted evaluation was re-run.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use kerneld::wire::{self, Event, EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::json;

/// Kills the test makes (the issue asks for at least 20).
const KILLS: usize = 24;

/// Reads `events --follow` notifications as they come; everything read is "acknowledged".
struct Follower {
    reader: BufReader<UnixStream>,
}

impl Follower {
    fn open(d: &Daemon, after: u64) -> (Follower, Vec<Event>) {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        let req = wire::Request::new(
            1,
            wire::method::EVENTS,
            json!({"after": after, "follow": true}),
        );
        s.write_all(format!("{}\n", serde_json::to_string(&req).unwrap()).as_bytes())
            .unwrap();
        let mut reader = BufReader::new(s);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let resp: wire::Response = serde_json::from_str(&line).unwrap();
        let backlog: Vec<Event> = serde_json::from_value(resp.result.unwrap()).unwrap();
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        (Follower { reader }, backlog)
    }

    /// The next event, if one arrives within the read timeout.
    fn next(&mut self) -> Option<Event> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(n) if n > 0 => {
                let n: wire::Notification = serde_json::from_str(&line).unwrap();
                Some(serde_json::from_value(n.params).unwrap())
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Moment {
    /// A random time after start (often mid-evaluation, sometimes during worker start).
    Random,
    /// Right after a proposal is recorded (proposing → before the evaluation starts).
    AfterProposal,
    /// Shortly after an evaluation started (evaluating).
    Evaluating,
    /// Right after a result is recorded (recording → before the next proposal).
    AfterResult,
}

#[test]
fn sigkill_at_many_moments_loses_nothing() {
    let dir = TempDir::new("torture");
    let mut d = Daemon::start(dir.path());
    let id = enqueue(&d, &demo_goal(dir.path(), "torture", 100_000, ""));

    let mut acknowledged: BTreeMap<u64, Event> = BTreeMap::new();
    let mut last_iteration = 0u64;
    let mut moments: HashMap<Moment, usize> = HashMap::new();
    let mut rng = 0x9e3779b97f4a7c15u64;
    let moments_cycle = [
        Moment::Random,
        Moment::AfterProposal,
        Moment::Evaluating,
        Moment::AfterResult,
    ];

    for kill in 0..KILLS {
        let moment = moments_cycle[kill % moments_cycle.len()];
        let after = acknowledged.keys().last().copied().unwrap_or(0);
        let (mut follower, backlog) = Follower::open(&d, after);
        for ev in backlog {
            acknowledged.insert(ev.seq, ev);
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let random_delay = Duration::from_millis(50 + rng % 2500);
        let eval_delay = Duration::from_millis(rng % 400);

        let t0 = Instant::now();
        let mut armed_at: Option<Instant> = None;
        loop {
            let ev = follower.next();
            if let Some(ev) = &ev {
                acknowledged.insert(ev.seq, ev.clone());
            }
            let fire = match (moment, ev.as_ref().map(|e| &e.kind)) {
                (Moment::Random, _) => t0.elapsed() >= random_delay,
                (Moment::AfterProposal, Some(EventKind::CandidateProposed { .. })) => true,
                (Moment::AfterResult, Some(EventKind::EvaluationFinished { .. })) => true,
                (Moment::Evaluating, Some(EventKind::EvaluationStarted { .. })) => {
                    armed_at = Some(Instant::now());
                    false
                }
                (Moment::Evaluating, _) => armed_at.is_some_and(|t| t.elapsed() >= eval_delay),
                _ => false,
            };
            if fire {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "kill {kill}: waited too long for {moment:?}\n{}",
                d.log_text()
            );
        }
        *moments.entry(moment).or_default() += 1;
        let before = d.goal(&id);
        assert!(before.iteration >= last_iteration);
        last_iteration = before.iteration;
        d.kill9();

        d = Daemon::start(dir.path());
        let all = d.events(0);
        assert_dense(&all);
        for (seq, ev) in &acknowledged {
            let now = &all[(*seq - 1) as usize];
            assert_eq!(
                now, ev,
                "kill {kill} ({moment:?}): acknowledged event {seq} changed or vanished"
            );
        }
        let g = d.goal(&id);
        if before.state == GoalState::Running {
            assert_eq!(
                g.state,
                GoalState::Running,
                "kill {kill}: goal not running after restart: {g:?}"
            );
        } else {
            assert!(
                is_active(g.state),
                "kill {kill}: goal left the queue: {g:?}"
            );
        }
        assert!(
            g.iteration >= last_iteration,
            "kill {kill}: iteration went back {} → {}",
            last_iteration,
            g.iteration
        );
        last_iteration = g.iteration;
    }

    // Let the restarted daemon run the interrupted evaluations, then stop it cleanly.
    let target = last_iteration;
    assert!(
        d.wait_until(Duration::from_secs(120), |d| d.goal(&id).evaluations
            >= target),
        "the interrupted evaluations were not re-run\n{}",
        d.log_text()
    );
    assert!(d.stop().success());

    let d = Daemon::start(dir.path());
    let all = d.events(0);
    assert_dense(&all);
    // Every proposal got at most one result; all up to `target` got one.
    let mut results: BTreeMap<u64, usize> = BTreeMap::new();
    let mut starts: BTreeMap<u64, u32> = BTreeMap::new();
    for ev in &all {
        match &ev.kind {
            EventKind::EvaluationFinished { iteration, .. } => {
                *results.entry(*iteration).or_default() += 1
            }
            EventKind::EvaluationStarted {
                iteration, attempt, ..
            } => {
                let a = starts.entry(*iteration).or_default();
                assert_eq!(
                    *attempt,
                    *a + 1,
                    "attempts of iteration {iteration} must count up"
                );
                *a = *attempt;
            }
            _ => {}
        }
    }
    for it in 1..=target {
        assert_eq!(
            results.get(&it).copied().unwrap_or(0),
            1,
            "iteration {it} should have exactly one result"
        );
    }
    let restarts = all
        .iter()
        .filter(|e| matches!(e.kind, EventKind::DaemonStarted { .. }))
        .count();
    assert!(restarts > KILLS, "{restarts} starts recorded");
    eprintln!(
        "kills by moment: {moments:?}; iterations reached {target}; events {}",
        all.len()
    );
    for m in moments_cycle {
        assert!(
            moments.get(&m).copied().unwrap_or(0) >= 5,
            "{m:?} hit too rarely: {moments:?}"
        );
    }
}
