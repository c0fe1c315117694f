//! Unit tests of the store (kept apart so store.rs stays one concern).
use super::*;
use crate::wire::*;
use std::sync::Arc;

fn spec() -> GoalSpec {
    crate::projection::test_spec("x")
}

fn temp_db() -> PathBuf {
    std::env::temp_dir().join(format!(
        "kerneld-store-{}-{}.redb",
        std::process::id(),
        rand::random::<u64>()
    ))
}

/// Memory that can be made to fail writes like a full disk.
#[derive(Debug)]
struct FillableBackend {
    inner: redb::backends::InMemoryBackend,
    full: Arc<std::sync::atomic::AtomicBool>,
}

impl redb::StorageBackend for FillableBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, std::io::Error> {
        self.inner.read(offset, len)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.check()?;
        self.inner.set_len(len)
    }
    fn sync_data(&self, eventual: bool) -> Result<(), std::io::Error> {
        self.check()?;
        self.inner.sync_data(eventual)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.check()?;
        self.inner.write(offset, data)
    }
}

impl FillableBackend {
    fn check(&self) -> Result<(), std::io::Error> {
        if self.full.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(28)); // ENOSPC
        }
        Ok(())
    }
}

#[test]
fn a_failed_write_makes_the_store_refuse_writes_with_a_clear_reason() {
    let full = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let backend = FillableBackend {
        inner: redb::backends::InMemoryBackend::new(),
        full: full.clone(),
    };
    let db = redb::Builder::new().create_with_backend(backend).unwrap();
    let store = Store::init(db, Path::new("/var/lib/kerneld/events.redb")).unwrap();
    let (id, _) = store.enqueue_goal(spec(), 1000).unwrap();
    assert!(store.unwritable().is_none());

    full.store(true, std::sync::atomic::Ordering::SeqCst);
    let state = |to| {
        vec![NewEvent::goal(
            &id,
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to,
                reason: None,
            },
        )]
    };
    assert!(store.append(state(GoalState::Running)).is_err());
    let why = store.unwritable().expect("marked unwritable").to_string();
    assert!(why.contains("/var/lib/kerneld/events.redb"), "{why}");
    assert!(why.contains("free space"), "{why}");

    // Space back: still refused (redb needs a reopen), at once and with the reason.
    full.store(false, std::sync::atomic::Ordering::SeqCst);
    let err = store.append(state(GoalState::Running)).unwrap_err();
    assert!(matches!(err, StoreError::Unwritable { .. }), "{err}");
    // Reads still work: status stays available while the daemon stops.
    assert_eq!(store.goals().unwrap().len(), 1);
}

#[test]
fn sequence_is_dense_and_projection_equals_replay() {
    let path = temp_db();
    let store = Store::open(&path).unwrap();
    let (id, _) = store.enqueue_goal(spec(), 1000).unwrap();
    store
        .append(vec![NewEvent::goal(
            &id,
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                reason: None,
            },
        )])
        .unwrap();
    store
        .append(vec![NewEvent::goal(
            &id,
            EventKind::CandidateProposed {
                iteration: 1,
                candidate: "c1".into(),
                seed: "a.py".into(),
                config: serde_json::json!({"B": 1}),
                agent: "search".into(),
                source: None,
                note: None,
                tokens: None,
            },
        )])
        .unwrap();
    let all = store.events(None, 0, usize::MAX).unwrap();
    let seqs: Vec<u64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    assert_eq!(store.last_seq().unwrap(), 3);

    let mut replay: Option<GoalProjection> = None;
    for ev in store.events(Some(&id), 0, usize::MAX).unwrap() {
        match &ev.kind {
            EventKind::GoalEnqueued { spec, owner_uid } => {
                replay = Some(GoalProjection::new(
                    &id,
                    spec.clone(),
                    *owner_uid,
                    ev.time_ms,
                ))
            }
            _ => replay.as_mut().unwrap().apply(&ev),
        }
    }
    assert_eq!(replay.unwrap(), store.goal(&id).unwrap().unwrap());
    drop(store);
    owner::remove_log(&path);
}

#[test]
fn header_length_matches_what_redb_writes() {
    // The header parsing in `integrity` follows redb's file format; a redb upgrade
    // that changes it fails here, not on a user's log.
    let path = temp_db();
    let store = Store::open(&path).unwrap();
    for _ in 0..200 {
        store.enqueue_goal(spec(), 1000).unwrap();
    }
    drop(store);
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(integrity::expected_len_of(&path), len);
    owner::remove_log(&path);
}

#[test]
fn an_empty_or_truncated_file_is_reported_and_left_alone() {
    let path = temp_db();
    std::fs::write(&path, b"").unwrap();
    let err = Store::open(&path).err().expect("empty file refused");
    assert!(matches!(err, StoreError::Damaged { .. }), "{err}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);

    std::fs::remove_file(&path).unwrap();
    let store = Store::open(&path).unwrap();
    store.enqueue_goal(spec(), 1000).unwrap();
    drop(store);
    let len = std::fs::metadata(&path).unwrap().len();
    for keep in [len - 1, len / 2, 4096, 300, 9] {
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(keep).unwrap();
        let err = Store::open(&path).err().expect("truncated file refused");
        assert!(err.to_string().contains("truncated"), "{keep}: {err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), keep);
    }
    owner::remove_log(&path);
}

#[test]
fn check_finds_a_sound_log_sound_and_a_doctored_projection() {
    let path = temp_db();
    let store = Store::open(&path).unwrap();
    let (id, _) = store.enqueue_goal(spec(), 1000).unwrap();
    store
        .append(vec![NewEvent::goal(
            &id,
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Running,
                reason: None,
            },
        )])
        .unwrap();
    drop(store);
    let mut store = Store::open_for_check(&path).unwrap();
    let report = store.check().unwrap();
    assert!(report.is_sound(), "{}", report.render(&path));
    assert_eq!((report.events, report.goals), (2, 1));

    // A projection that says something its events do not.
    let tx = store.db.begin_write().unwrap();
    {
        let mut goals = tx.open_table(GOALS).unwrap();
        let mut p: GoalProjection =
            serde_json::from_slice(goals.get(id.as_str()).unwrap().unwrap().value()).unwrap();
        p.iteration = 99;
        goals
            .insert(id.as_str(), serde_json::to_vec(&p).unwrap().as_slice())
            .unwrap();
        tx.open_table(META).unwrap().insert("next_seq", 7).unwrap();
    }
    tx.commit().unwrap();
    let report = store.check().unwrap();
    let text = report.render(&path);
    assert_eq!(report.problems.len(), 2, "{text}");
    assert!(
        text.contains("differs from the replay") && text.contains("next_seq"),
        "{text}"
    );
    drop(store);
    owner::remove_log(&path);
}

#[test]
fn a_log_of_a_newer_format_is_refused_and_an_unversioned_one_is_stamped() {
    let path = temp_db();
    drop(Store::open(&path).unwrap());
    let format = |path: &Path| {
        let db = Database::create(path).unwrap();
        let tx = db.begin_read().unwrap();
        let meta = tx.open_table(META).unwrap();
        let v = meta.get(FORMAT_KEY).unwrap().map(|v| v.value());
        v
    };
    assert_eq!(format(&path), Some(FORMAT));
    let set = |path: &Path, v: Option<u64>| {
        let db = Database::create(path).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut meta = tx.open_table(META).unwrap();
            match v {
                Some(v) => meta.insert(FORMAT_KEY, v).unwrap(),
                None => meta.remove(FORMAT_KEY).unwrap(),
            };
        }
        tx.commit().unwrap();
    };
    set(&path, None);
    drop(Store::open(&path).unwrap());
    assert_eq!(format(&path), Some(FORMAT));
    set(&path, Some(FORMAT + 1));
    let e = Store::open(&path).err().expect("a newer format is refused");
    assert!(matches!(e, StoreError::NewerFormat { found, .. } if found == FORMAT + 1));
    assert!(e.to_string().contains("newer kerneld"), "{e}");
    owner::remove_log(&path);
}

#[test]
fn second_open_is_refused() {
    let path = temp_db();
    let _a = Store::open(&path).unwrap();
    match Store::open(&path) {
        Err(StoreError::AlreadyOpen { .. }) => {}
        other => panic!("expected AlreadyOpen, got {:?}", other.err()),
    }
    owner::remove_log(&path);
}

#[test]
fn goal_index_follows_state_and_is_rebuilt_for_a_format_1_log() {
    let path = temp_db();
    let store = Store::open(&path).unwrap();
    let (a, _) = store.enqueue_goal(spec(), 7).unwrap();
    let (b, _) = store.enqueue_goal(spec(), 7).unwrap();
    store
        .append(vec![NewEvent::goal(
            &b,
            EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Cancelled,
                reason: Some("test".into()),
            },
        )])
        .unwrap();
    let ids = |s: &Store| {
        let active: Vec<String> = s
            .active_goals()
            .unwrap()
            .into_iter()
            .map(|p| p.id)
            .collect();
        let finished: Vec<String> = s
            .finished_goals()
            .unwrap()
            .into_iter()
            .map(|g| g.id)
            .collect();
        (active, finished)
    };
    assert_eq!(ids(&store), (vec![a.clone()], vec![b.clone()]));
    let summary = store.finished_goals().unwrap().remove(0);
    assert_eq!(summary, store.goal(&b).unwrap().unwrap().summary(0, 0));

    // A log of format 1: no index, format 1. Opening it builds the index and stamps FORMAT.
    {
        let tx = store.db.begin_write().unwrap();
        tx.delete_table(goal_index::ACTIVE).unwrap();
        tx.delete_table(goal_index::FINISHED).unwrap();
        tx.open_table(META).unwrap().insert(FORMAT_KEY, 1).unwrap();
        tx.commit().unwrap();
    }
    drop(store);
    let store = Store::open(&path).unwrap();
    assert_eq!(ids(&store), (vec![a], vec![b]));
    assert_eq!(store.last_seq().unwrap(), 3);
    let mut store = store;
    let report = store.check().unwrap();
    assert!(report.is_sound(), "{:?}", report.problems);
    drop(store);
    owner::remove_log(&path);
}

#[test]
fn the_lock_is_the_processs_and_goes_with_the_store() {
    let path = temp_db();
    let a = Store::open(&path).unwrap();
    // Within this process: refused before a second fd is opened (closing one would drop the
    // record lock), naming this process.
    match Store::open_for_check(&path) {
        Err(e @ StoreError::AlreadyOpen { pid: Some(p), .. }) => {
            assert_eq!(p, std::process::id() as i32);
            assert!(e.to_string().contains("already running"), "{e}");
        }
        other => panic!("expected AlreadyOpen, got {:?}", other.err()),
    }
    // The refused open did not release the first one's lock.
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::AlreadyOpen { .. })
    ));
    drop(a);
    let b = Store::open(&path).expect("free once the first store is gone");
    drop(b);
    owner::remove_log(&path);
}

#[test]
fn an_event_larger_than_half_a_line_is_refused_and_the_log_stays_writable() {
    let path = temp_db();
    let store = Store::open(&path).unwrap();
    let (id, _) = store.enqueue_goal(spec(), 1000).unwrap();
    let before = store.last_seq().unwrap();
    let huge = NewEvent::goal(
        &id,
        EventKind::AgentFailed {
            agent: "command".into(),
            message: "x".repeat(crate::wire::MAX_EVENT_BYTES),
            failures: 1,
        },
    );
    let small = NewEvent::goal(
        &id,
        EventKind::AgentFailed {
            agent: "command".into(),
            message: "short".into(),
            failures: 2,
        },
    );
    // The batch is refused whole: nothing of it is recorded.
    let err = store.append(vec![small.clone(), huge]).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::EventTooLarge {
                kind: "agent_failed",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(store.last_seq().unwrap(), before);
    assert!(store.unwritable().is_none());
    store.append(vec![small]).unwrap();
    assert_eq!(store.last_seq().unwrap(), before + 1);
    let _ = std::fs::remove_file(&path);
}

/// Issue #23's pooled measurements ride on events (absent in older logs): a log of an
/// older build, whose stored projections lack `measured` and `noise`, checks sound, and
/// so does one this build extends with pooled re-times and wins.
#[test]
fn pooled_measurements_check_sound_in_old_and_new_logs() {
    use crate::noise::{pool, tests::timed};
    let path = temp_db();
    let store = Store::open(&path).unwrap();
    let (id, _) = store.enqueue_goal(spec(), 1000).unwrap();
    let run = |kinds: Vec<EventKind>| {
        store
            .append(kinds.into_iter().map(|k| NewEvent::goal(&id, k)).collect())
            .unwrap();
    };
    let proposed = |it: u64| EventKind::CandidateProposed {
        iteration: it,
        candidate: format!("c{it}"),
        seed: "a.py".into(),
        config: serde_json::json!({}),
        agent: "search".into(),
        source: None,
        note: None,
        tokens: None,
    };
    let result = |s: f64| timed(&[("s", 10.0 / s, 10.0)], Some(0.5));
    let best = |it: u64, s: f64, n: Option<u32>| BestSummary {
        candidate: format!("c{it}"),
        seed: "a.py".into(),
        config: serde_json::json!({}),
        speedup: s,
        spread_pct: 1.0,
        iteration: it,
        interpreted: false,
        environment: None,
        measurements: n,
        timing: None,
    };
    let finished =
        |it: u64, r: EvalResult, request: Option<u64>, pooled| EventKind::RetimeFinished {
            iteration: it,
            candidate: format!("c{it}"),
            device: "cpu".into(),
            result: r,
            request,
            pooled,
        };
    let checked = |it: u64, s: f64| EventKind::WinChecked {
        iteration: it,
        candidate: format!("c{it}"),
        confirmed: true,
        first_speedup: s,
        retimed_speedup: Some(s),
        speedup: Some(s),
        spread_pct: 1.0,
        reason: "held".into(),
        rule: None,
    };
    // 1. A win as an older build logged it: no pooled figures anywhere.
    run(vec![
        proposed(1),
        EventKind::EvaluationFinished {
            iteration: 1,
            candidate: "c1".into(),
            device: "cpu".into(),
            result: result(2.0),
        },
        EventKind::WinPending {
            best: best(1, 2.0, None),
            source_hash: None,
            pooled: None,
        },
        finished(1, result(1.9), None, None),
        checked(1, 1.9),
        EventKind::NewBest {
            best: best(1, 1.9, None),
            previous: None,
        },
    ]);
    // ... and its projection as that build stored it: without this build's fields.
    {
        let tx = store.db.begin_write().unwrap();
        {
            let mut goals = tx.open_table(GOALS).unwrap();
            let mut v: serde_json::Value =
                serde_json::from_slice(goals.get(id.as_str()).unwrap().unwrap().value()).unwrap();
            let o = v.as_object_mut().unwrap();
            assert!(o.remove("measured").is_some() && o.remove("noise").is_some());
            goals
                .insert(id.as_str(), serde_json::to_vec(&v).unwrap().as_slice())
                .unwrap();
        }
        tx.commit().unwrap();
    }
    // 2. This build re-times that best on request: pooled from its first evaluation.
    let first = pool(None, &result(2.0)).unwrap();
    let two = pool(Some(&first), &result(2.1)).unwrap();
    let request = store.last_seq().unwrap() + 1;
    run(vec![
        EventKind::RetimeRequested {
            iteration: 1,
            candidate: "c1".into(),
            seed: "a.py".into(),
            config: serde_json::json!({}),
            source_hash: None,
            times: 1,
            by_uid: 0,
            revalidate: None,
            for_best: false,
        },
        finished(1, result(2.1), Some(request), Some(two.clone())),
    ]);
    let g = store.goal(&id).unwrap().unwrap();
    let b = g.best.clone().unwrap();
    assert_eq!(b.measurements, Some(2));
    assert!((b.speedup - two.speedup().unwrap()).abs() < 1e-12);
    assert_eq!(g.noise.shapes["s"].df, 1);
    // 3. A pooled win over it, and kerneld's re-times of the new best.
    let p1 = pool(None, &result(3.0)).unwrap();
    let p2 = pool(Some(&p1), &result(2.9)).unwrap();
    run(vec![
        proposed(2),
        EventKind::EvaluationFinished {
            iteration: 2,
            candidate: "c2".into(),
            device: "cpu".into(),
            result: result(3.0),
        },
        EventKind::WinPending {
            best: best(2, 3.0, None),
            source_hash: None,
            pooled: Some(p1),
        },
        finished(2, result(2.9), None, Some(p2.clone())),
        checked(2, p2.speedup().unwrap()),
        EventKind::NewBest {
            best: best(2, p2.speedup().unwrap(), Some(2)),
            previous: Some(b.speedup),
        },
        EventKind::RetimeRequested {
            iteration: 2,
            candidate: "c2".into(),
            seed: "a.py".into(),
            config: serde_json::json!({}),
            source_hash: None,
            times: 8,
            by_uid: 0,
            revalidate: None,
            for_best: true,
        },
    ]);
    let g = store.goal(&id).unwrap().unwrap();
    // The old best's measurements are let go (the prior keeps what they taught).
    assert_eq!(g.measured.keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(g.noise.shapes["s"].df, 2);
    assert!(g.retimes.values().any(|w| w.for_best && w.times == 8));
    // Owed only while the goal runs (this one never left the queue).
    assert!(g.retime_work().next().is_none());
    drop(store);
    let mut store = Store::open_for_check(&path).unwrap();
    let report = store.check().unwrap();
    assert!(report.is_sound(), "{}", report.render(&path));
    drop(store);
    owner::remove_log(&path);
}
