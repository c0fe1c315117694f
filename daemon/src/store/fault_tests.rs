//! Storage faults under the store, through a redb `StorageBackend` as redb's own crash
//! tests do: a write that fails (I/O error, a full disk) at any operation, and a crash that
//! keeps what was synced and any subset of what was not (the page cache lost, some writes
//! already on disk). After each: every append that returned Ok is in the reopened log,
//! and `Store::check` finds the projections equal to the replay of the log.

use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::wire::GoalState;

/// What a disk holds: the bytes as written, the bytes last synced, and the writes since.
#[derive(Debug, Default)]
struct Disk {
    current: Vec<u8>,
    synced: Vec<u8>,
    unsynced: Vec<Op>,
    /// Operations left before the fault; None: no fault planned.
    ops_left: Option<u64>,
    /// The fault: ENOSPC (a full disk: growing fails) or EIO (every write fails).
    full_disk: bool,
    failed: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(offset, data) => {
            let end = *offset as usize + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset as usize..end].copy_from_slice(data);
        }
        Op::SetLen(len) => image.resize(*len as usize, 0),
    }
}

#[derive(Debug, Clone)]
struct FaultyBackend(Arc<Mutex<Disk>>);

impl FaultyBackend {
    fn with_image(image: Vec<u8>) -> FaultyBackend {
        FaultyBackend(Arc::new(Mutex::new(Disk {
            current: image.clone(),
            synced: image,
            ..Disk::default()
        })))
    }

    /// Counts one mutating operation; Err once the planned fault is reached.
    fn step(&self, grows: bool) -> Result<(), std::io::Error> {
        let mut d = self.0.lock().unwrap();
        if let Some(n) = d.ops_left.as_mut() {
            if *n == 0 {
                d.failed = true;
            } else {
                *n -= 1;
            }
        }
        if d.failed && (!d.full_disk || grows) {
            let errno = if d.full_disk { libc::ENOSPC } else { libc::EIO };
            return Err(std::io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// The disk after a power cut: what was synced, plus each later write kept or lost
    /// at random (in order, as a disk may have written some of them).
    fn crash_image(&self, rng: &mut StdRng) -> Vec<u8> {
        let d = self.0.lock().unwrap();
        let mut image = d.synced.clone();
        for op in &d.unsynced {
            if rng.gen_bool(0.5) {
                apply(&mut image, op);
            }
        }
        image
    }
}

impl redb::StorageBackend for FaultyBackend {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.0.lock().unwrap().current.len() as u64)
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, std::io::Error> {
        let d = self.0.lock().unwrap();
        let start = (offset as usize).min(d.current.len());
        let end = (offset as usize + len).min(d.current.len());
        let mut out = d.current[start..end].to_vec();
        out.resize(len, 0);
        Ok(out)
    }
    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let grows = len > self.0.lock().unwrap().current.len() as u64;
        self.step(grows)?;
        let mut d = self.0.lock().unwrap();
        apply(&mut d.current, &Op::SetLen(len));
        d.unsynced.push(Op::SetLen(len));
        Ok(())
    }
    fn sync_data(&self, _eventual: bool) -> Result<(), std::io::Error> {
        self.step(false)?;
        // What was written is on disk now (applied, not copied: the file is megabytes).
        let mut d = self.0.lock().unwrap();
        let ops = std::mem::take(&mut d.unsynced);
        for op in &ops {
            apply(&mut d.synced, op);
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let grows = offset + data.len() as u64 > self.0.lock().unwrap().current.len() as u64;
        self.step(grows)?;
        let mut d = self.0.lock().unwrap();
        let op = Op::Write(offset, data.to_vec());
        apply(&mut d.current, &op);
        d.unsynced.push(op);
        Ok(())
    }
}

fn open(backend: FaultyBackend) -> Result<Store, StoreError> {
    let path = Path::new("/faulty/kerneld.redb");
    let db = redb::Builder::new()
        .create_with_backend(backend)
        .map_err(|e| db_err(path, e))?;
    Store::init(db, path)
}

/// A random change of a random goal (or a new goal).
fn random_change(
    store: &Store,
    rng: &mut StdRng,
    goals: &mut Vec<String>,
) -> Result<(), StoreError> {
    if goals.is_empty() || rng.gen_bool(0.1) {
        let (id, _) = store.enqueue_goal(crate::projection::test_spec("f"), 1000)?;
        goals.push(id);
        return Ok(());
    }
    let goal = goals[rng.gen_range(0..goals.len())].clone();
    let it = rng.gen_range(1..50u64);
    let kind = match rng.gen_range(0..3) {
        0 => EventKind::GoalStateChanged {
            from: GoalState::Queued,
            to: GoalState::Running,
            reason: None,
        },
        1 => EventKind::CandidateProposed {
            iteration: it,
            candidate: format!("c{it}"),
            seed: "a.py".into(),
            config: serde_json::json!({"B": it}),
            agent: "search".into(),
            // A source large enough that some commits grow the file.
            source: Some(format!(
                "# {it}\n{}",
                "x = 1\n".repeat(rng.gen_range(1..400))
            )),
            note: None,
            tokens: None,
        },
        _ => EventKind::EvaluationFinished {
            iteration: it,
            candidate: format!("c{it}"),
            device: "cpu".into(),
            result: crate::wire::EvalResult::failure(crate::wire::ResultClass::Crashed, "x", 0.1),
        },
    };
    store.append(vec![NewEvent::goal(&goal, kind)]).map(drop)
}

/// Appends until the planned fault, crashes, reopens, and checks.
fn fault_then_reopen(seed: u64, full_disk: bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let backend = FaultyBackend::with_image(Vec::new());
    let store = open(backend.clone()).unwrap();
    let mut goals = Vec::new();
    for _ in 0..rng.gen_range(0..30) {
        random_change(&store, &mut rng, &mut goals).unwrap();
    }
    {
        let mut d = backend.0.lock().unwrap();
        d.ops_left = Some(rng.gen_range(0..60));
        d.full_disk = full_disk;
    }
    let mut acked = store.last_seq().unwrap();
    let mut refused = false;
    for _ in 0..40 {
        match random_change(&store, &mut rng, &mut goals) {
            Ok(()) => {
                assert!(!refused, "seed {seed}: a write succeeded after one failed");
                acked = store.last_seq().unwrap();
            }
            Err(e) => {
                refused = true;
                assert!(store.unwritable().is_some(), "seed {seed}: {e}");
            }
        }
    }
    drop(store);

    // A power cut (unsynced writes kept or lost at random), or, for the full disk, the
    // same file with space freed.
    let image = if full_disk {
        backend.0.lock().unwrap().current.clone()
    } else {
        backend.crash_image(&mut rng)
    };
    let reopened = FaultyBackend::with_image(image);
    let mut store = open(reopened).unwrap_or_else(|e| panic!("seed {seed}: reopening failed: {e}"));
    let last = store.last_seq().unwrap();
    assert!(
        last >= acked,
        "seed {seed}: {acked} events were acknowledged, {last} survived"
    );
    assert!(
        last <= acked + 1,
        "seed {seed}: more events than were written"
    );
    let report = store.check().unwrap();
    assert!(
        report.is_sound(),
        "seed {seed}: {}",
        report.render(Path::new("faulty"))
    );
    // The log goes on where it stopped.
    random_change(&store, &mut rng, &mut goals).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    assert_eq!(store.last_seq().unwrap(), last + 1);
}

#[test]
fn every_acknowledged_append_survives_a_failed_write_and_a_crash() {
    for seed in 0..40 {
        fault_then_reopen(seed, false);
    }
}

#[test]
fn a_full_disk_refuses_the_write_and_loses_nothing_acknowledged() {
    for seed in 1000..1020 {
        fault_then_reopen(seed, true);
    }
}
