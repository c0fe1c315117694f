//! The event log and its projections, in one redb file. Only this module touches redb.
//!
//! Every append is one write transaction with `Durability::Immediate`: the events get
//! dense sequence numbers, and the projections (goal state, best candidate, evaluation
//! records, candidate sources) are updated in that same transaction. When `append`
//! returns, the events are on disk; callers acknowledge or act only after that.
//!
//! redb is synchronous: async callers go through `tokio::task::spawn_blocking`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableTable, TableDefinition};

use crate::candidate::source_hash;
use crate::projection::GoalProjection;
use crate::wire::{EvaluationRecord, Event, EventKind, GoalSpec};

mod check;
#[cfg(test)]
mod fault_tests;
mod goal_index;
mod integrity;
mod log_file;
mod owner;
mod records;
mod space;
pub use check::CheckReport;
pub(crate) use integrity::{inaccessible, unreadable};
pub use space::Space;

/// seq → event JSON.
const EVENTS: TableDefinition<u64, &[u8]> = TableDefinition::new("events");
/// (goal id, seq) → (): the per-goal index of the log.
const GOAL_EVENTS: TableDefinition<(&str, u64), ()> = TableDefinition::new("goal_events");
/// goal id → GoalProjection JSON.
const GOALS: TableDefinition<&str, &[u8]> = TableDefinition::new("goals");
/// (goal id, iteration) → EvaluationRecord JSON.
const EVALS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("evaluations");
/// source hash → candidate source text (non-seed candidates).
const SOURCES: TableDefinition<&str, &str> = TableDefinition::new("sources");
/// Slurm job id → SlurmJobRecord JSON: the jobs the log says kerneld holds (submitted
/// and not ended). A restart reattaches to these or cancels them.
const SLURM_JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("slurm_jobs");
/// counters: "next_seq", "next_goal"; and "format": the layout version (`FORMAT`).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// The key of the layout version in `META`.
const FORMAT_KEY: &str = "format";

/// The version of the log's layout (tables, keys, the JSON of events and projections)
/// this build writes. A log without one was written before versions (format 0, the same
/// layout as 1). Format 2 adds the active/finished goal index (`goal_index`), which an
/// older build would not keep up to date: a log of format 0 or 1 gets it when opened.
/// Format 3 adds the `breaker_tripped` event (and the projection's `breaker`), which an
/// older build could not read: a log of an older format is stamped 3 when opened. A newer
/// one is refused: an older build could misread what it does not know. Bump on a change
/// old builds cannot read, and keep reading every older format (tests/fixtures holds logs
/// of older builds).
pub const FORMAT: u64 = 3;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The log's lock (`owner`) is held by a live process: never by a dead daemon's
    /// leftover children, whose copies of the log's fd do not carry it (issue #18).
    #[error("another kerneld{} is already running with state directory {} (it holds the event log's lock); stop it first, or start this one with another --state-dir", pid.map(|p| format!(" (pid {p})")).unwrap_or_default(), dir.display())]
    AlreadyOpen { dir: PathBuf, pid: Option<i32> },
    #[error("event log {path}: {source}")]
    Db {
        path: PathBuf,
        source: Box<redb::Error>,
    },
    /// The file where a log was expected is empty, truncated or not a log.
    #[error("event log {path} {what}; {todo}")]
    Damaged {
        path: PathBuf,
        what: String,
        todo: String,
    },
    #[error("no event log at {0}: nothing to check (is --state-dir the daemon's?)")]
    Missing(PathBuf),
    #[error("event log: corrupt record: {0}")]
    Corrupt(String),
    #[error("no goal {0}")]
    NoGoal(String),
    #[error("event log {path} has format {found}, newer than the {supported} this kerneld reads; it was written by a newer kerneld: run that version (or newer) again, or start this one with another --state-dir")]
    NewerFormat {
        path: PathBuf,
        found: u64,
        supported: u64,
    },
    /// A write failed (disk full, I/O error). redb refuses every later write until the
    /// database is reopened, so the store says so at once instead of failing each time.
    #[error("event log {path} can no longer be written since: {first}; kerneld stops so that it never acknowledges what is not durable; free space in that directory and start it again (systemd restarts it)")]
    Unwritable { path: PathBuf, first: String },
    /// An event larger than `wire::MAX_EVENT_BYTES`: refused before the commit (nothing is
    /// written and the log stays writable), so every stored event fits in a reply.
    #[error("a {kind} event of {bytes} bytes is larger than the {max} bytes an event may have; nothing was recorded")]
    EventTooLarge {
        kind: &'static str,
        bytes: usize,
        max: usize,
    },
}

fn db_err(path: &Path, e: impl Into<redb::Error>) -> StoreError {
    StoreError::Db {
        path: path.to_path_buf(),
        source: Box::new(e.into()),
    }
}

/// Opens an existing, header-checked log file (the caller holds its `owner::Owner`).
fn open_db(path: &Path) -> Result<Database, StoreError> {
    match integrity::open_caught(path) {
        Ok(db) => Ok(db),
        Err(e @ redb::DatabaseError::Storage(redb::StorageError::Corrupted(_))) => {
            Err(integrity::damaged(path, format!("is damaged: {e}")))
        }
        Err(e) => Err(db_err(path, e)),
    }
}

/// An event before it is committed: the store gives it its sequence number and time.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub goal: Option<String>,
    pub kind: EventKind,
}

impl NewEvent {
    pub fn goal(goal: &str, kind: EventKind) -> Self {
        NewEvent {
            goal: Some(goal.to_string()),
            kind,
        }
    }
    pub fn daemon(kind: EventKind) -> Self {
        NewEvent { goal: None, kind }
    }
}

/// A Slurm job the log says kerneld holds (projection of the slurm_job_* events).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SlurmJobRecord {
    pub slot: String,
    pub job: u64,
    pub name: String,
    pub node: Option<String>,
}

pub struct Store {
    db: Database,
    path: PathBuf,
    /// The first failed write, once one failed: every later write is refused.
    broken: std::sync::Mutex<Option<String>>,
    /// The log's lock, held as long as the store (None: a store over another backend, in
    /// tests, or a new log's temporary file, whose caller holds the lock). Declared after
    /// `db`, so it is released only once redb has closed the file.
    owner: Option<owner::Owner>,
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Store {
    /// Opens (or creates) the log. While another process has it open (a second daemon,
    /// `kerneld check`), the start is refused with `AlreadyOpen`. An existing file is
    /// checked first and never re-initialized (`integrity`): an empty or truncated log
    /// stops the start with what to do.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        // First: everything below (the check, the creation, the open) is the owner's alone.
        let owner = owner::Owner::acquire(path)?;
        if !integrity::check_existing(path)? {
            integrity::create_atomically(path, |tmp| {
                let db = integrity::create(tmp).map_err(|e| db_err(tmp, e))?;
                Store::init(db, tmp).map(drop)
            })?;
        }
        // Opened as an existing log: redb never initializes an existing file as a new one.
        let mut store = Store::init(open_db(path)?, path)?;
        store.owner = Some(owner);
        Ok(store)
    }

    /// Opens an existing log for `kerneld check`, as it is: a missing file is an error,
    /// and nothing is created.
    pub fn open_for_check(path: &Path) -> Result<Store, StoreError> {
        // Looked for before the lock, so a wrong --state-dir gets no lock file.
        if !integrity::check_existing(path)? {
            return Err(StoreError::Missing(path.to_path_buf()));
        }
        let owner = owner::Owner::acquire(path)?;
        Ok(Store {
            db: open_db(path)?,
            path: path.to_path_buf(),
            broken: std::sync::Mutex::new(None),
            owner: Some(owner),
        })
    }

    /// Creates the tables on a freshly opened database.
    fn init(db: Database, path: &Path) -> Result<Store, StoreError> {
        let store = Store {
            db,
            path: path.to_path_buf(),
            broken: std::sync::Mutex::new(None),
            owner: None,
        };
        // Create every table once so readers never meet a missing one.
        let tx = store.db.begin_write().map_err(|e| db_err(path, e))?;
        {
            tx.open_table(EVENTS).map_err(|e| db_err(path, e))?;
            tx.open_table(GOAL_EVENTS).map_err(|e| db_err(path, e))?;
            tx.open_table(GOALS).map_err(|e| db_err(path, e))?;
            tx.open_table(EVALS).map_err(|e| db_err(path, e))?;
            tx.open_table(SOURCES).map_err(|e| db_err(path, e))?;
            tx.open_table(SLURM_JOBS).map_err(|e| db_err(path, e))?;
            tx.open_table(goal_index::ACTIVE)
                .map_err(|e| db_err(path, e))?;
            tx.open_table(goal_index::FINISHED)
                .map_err(|e| db_err(path, e))?;
            let mut meta = tx.open_table(META).map_err(|e| db_err(path, e))?;
            let found = meta
                .get(FORMAT_KEY)
                .map_err(|e| db_err(path, e))?
                .map(|v| v.value());
            match found {
                Some(found) if found > FORMAT => {
                    return Err(StoreError::NewerFormat {
                        path: path.to_path_buf(),
                        found,
                        supported: FORMAT,
                    })
                }
                Some(found) if found == FORMAT => {}
                // New, or of an older format (0 is 1's layout; 1 lacks the goal index;
                // 2 lacks only what 3 may write).
                found => {
                    if found.is_none_or(|f| f < 2) {
                        goal_index::rebuild(&tx, path)?;
                    }
                    meta.insert(FORMAT_KEY, FORMAT)
                        .map_err(|e| db_err(path, e))?;
                }
            }
        }
        tx.commit().map_err(|e| db_err(path, e))?;
        Ok(store)
    }

    fn err(&self, e: impl Into<redb::Error>) -> StoreError {
        db_err(&self.path, e)
    }

    /// Why writes are refused, if a write has failed since the store was opened.
    pub fn unwritable(&self) -> Option<StoreError> {
        let first = self.broken.lock().unwrap().clone()?;
        Some(StoreError::Unwritable {
            path: self.path.clone(),
            first,
        })
    }

    /// Runs one write transaction; a database error marks the store unwritable.
    fn write<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if let Some(e) = self.unwritable() {
            return Err(e);
        }
        let outcome = (|| {
            let tx = self.db.begin_write().map_err(|e| self.err(e))?;
            let out = f(&tx)?;
            tx.commit().map_err(|e| self.err(e))?;
            Ok(out)
        })();
        if let Err(StoreError::Db { source, .. }) = &outcome {
            self.broken
                .lock()
                .unwrap()
                .get_or_insert_with(|| source.to_string());
        }
        outcome
    }

    /// Creates a goal: allocates its id and commits `GoalEnqueued`, durably.
    pub fn enqueue_goal(
        &self,
        spec: GoalSpec,
        owner_uid: u32,
    ) -> Result<(String, Vec<Event>), StoreError> {
        self.enqueue_goal_with(spec, owner_uid, Vec::new())
    }

    /// `enqueue_goal` with the new goal's first events after its `GoalEnqueued`, in the
    /// same transaction (a fork and what it carries over: all of it or none).
    pub fn enqueue_goal_with(
        &self,
        spec: GoalSpec,
        owner_uid: u32,
        then: Vec<EventKind>,
    ) -> Result<(String, Vec<Event>), StoreError> {
        self.write(|tx| {
            let id = {
                let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
                let n = meta
                    .get("next_goal")
                    .map_err(|e| self.err(e))?
                    .map_or(1, |v| v.value());
                meta.insert("next_goal", n + 1).map_err(|e| self.err(e))?;
                format!("g{n}")
            };
            let mut items = vec![NewEvent::goal(
                &id,
                EventKind::GoalEnqueued { spec, owner_uid },
            )];
            items.extend(then.into_iter().map(|k| NewEvent::goal(&id, k)));
            let events = self.append_in(tx, items)?;
            Ok((id, events))
        })
    }

    /// Appends events and updates the projections in one durable transaction.
    pub fn append(&self, items: Vec<NewEvent>) -> Result<Vec<Event>, StoreError> {
        self.write(|tx| self.append_in(tx, items))
    }

    fn append_in(
        &self,
        tx: &redb::WriteTransaction,
        items: Vec<NewEvent>,
    ) -> Result<Vec<Event>, StoreError> {
        let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
        let mut events_t = tx.open_table(EVENTS).map_err(|e| self.err(e))?;
        let mut index = tx.open_table(GOAL_EVENTS).map_err(|e| self.err(e))?;
        let mut goals = tx.open_table(GOALS).map_err(|e| self.err(e))?;
        let mut evals = tx.open_table(EVALS).map_err(|e| self.err(e))?;
        let mut sources = tx.open_table(SOURCES).map_err(|e| self.err(e))?;

        let mut seq = meta
            .get("next_seq")
            .map_err(|e| self.err(e))?
            .map_or(1, |v| v.value());
        let time_ms = now_ms();
        let mut out = Vec::with_capacity(items.len());
        // Projections this batch changed, written once at its end: a batch of many events
        // of one goal (a log built in bulk) costs one projection write, not one per event.
        let mut touched: BTreeMap<String, GoalProjection> = BTreeMap::new();
        // Whether each was active (`goal_index::is_active`) before the batch (None:
        // enqueued in it): an active goal's index entry is written only when that changes.
        let mut was_active: BTreeMap<String, Option<bool>> = BTreeMap::new();
        for item in items {
            let ev = Event {
                seq,
                time_ms,
                goal: item.goal,
                kind: item.kind,
            };
            let bytes = serde_json::to_vec(&ev).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            if bytes.len() > crate::wire::MAX_EVENT_BYTES {
                return Err(StoreError::EventTooLarge {
                    kind: ev.kind.type_name(),
                    bytes: bytes.len(),
                    max: crate::wire::MAX_EVENT_BYTES,
                });
            }
            events_t
                .insert(seq, bytes.as_slice())
                .map_err(|e| self.err(e))?;

            if let Some(goal) = ev.goal.as_deref() {
                index.insert((goal, seq), ()).map_err(|e| self.err(e))?;
                let mut proj = match &ev.kind {
                    EventKind::GoalEnqueued { spec, owner_uid } => {
                        was_active.insert(goal.to_string(), None);
                        GoalProjection::new(goal, spec.clone(), *owner_uid, time_ms)
                    }
                    _ => match touched.remove(goal) {
                        Some(p) => p,
                        None => {
                            let raw = goals.get(goal).map_err(|e| self.err(e))?;
                            let raw = raw.ok_or_else(|| StoreError::NoGoal(goal.to_string()))?;
                            let p: GoalProjection = serde_json::from_slice(raw.value())
                                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                            was_active
                                .entry(goal.to_string())
                                .or_insert(Some(goal_index::is_active(&p)));
                            p
                        }
                    },
                };
                // Side tables that need the projection as it was before this event.
                match &ev.kind {
                    EventKind::CandidateProposed {
                        source: Some(src), ..
                    } => {
                        sources
                            .insert(source_hash(src).as_str(), src.as_str())
                            .map_err(|e| self.err(e))?;
                    }
                    EventKind::EvaluationFinished {
                        iteration,
                        candidate,
                        device,
                        result,
                    } => {
                        let (seed, config, source_hash) = proj
                            .pending
                            .get(iteration)
                            .map(|p| (p.seed.clone(), p.config.clone(), p.source_hash.clone()))
                            .unwrap_or_default();
                        let rec = EvaluationRecord {
                            iteration: *iteration,
                            candidate: candidate.clone(),
                            seed,
                            config,
                            source_hash,
                            result: result.clone(),
                            device: Some(device.clone()),
                        };
                        let bytes = serde_json::to_vec(&rec)
                            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                        evals
                            .insert((goal, *iteration), bytes.as_slice())
                            .map_err(|e| self.err(e))?;
                    }
                    _ => {}
                }
                proj.apply(&ev);
                touched.insert(goal.to_string(), proj);
            }
            self.project_slurm(tx, &ev.kind)?;
            out.push(ev);
            seq += 1;
        }
        for (goal, proj) in touched {
            let active = goal_index::is_active(&proj);
            if !active || was_active.get(&goal).copied().flatten() != Some(true) {
                goal_index::file(tx, &self.path, &proj)?;
            }
            let bytes =
                serde_json::to_vec(&proj).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            goals
                .insert(goal.as_str(), bytes.as_slice())
                .map_err(|e| self.err(e))?;
        }
        meta.insert("next_seq", seq).map_err(|e| self.err(e))?;
        Ok(out)
    }

    /// Keeps the table of held Slurm jobs in step with the log (same transaction).
    fn project_slurm(
        &self,
        tx: &redb::WriteTransaction,
        kind: &EventKind,
    ) -> Result<(), StoreError> {
        let corrupt = |e: serde_json::Error| StoreError::Corrupt(e.to_string());
        let rec = match kind {
            EventKind::SlurmJobSubmitted {
                slot, job, name, ..
            } => SlurmJobRecord {
                slot: slot.clone(),
                job: *job,
                name: name.clone(),
                node: None,
            },
            EventKind::SlurmJobStarted {
                slot, job, node, ..
            } => {
                let t = tx.open_table(SLURM_JOBS).map_err(|e| self.err(e))?;
                let old = t.get(*job).map_err(|e| self.err(e))?;
                let mut rec = match old {
                    Some(raw) => serde_json::from_slice(raw.value()).map_err(corrupt)?,
                    None => SlurmJobRecord {
                        slot: slot.clone(),
                        job: *job,
                        name: String::new(),
                        node: None,
                    },
                };
                rec.node = Some(node.clone());
                rec
            }
            EventKind::SlurmJobEnded { job, .. } => {
                let mut t = tx.open_table(SLURM_JOBS).map_err(|e| self.err(e))?;
                t.remove(*job).map_err(|e| self.err(e))?;
                return Ok(());
            }
            _ => return Ok(()),
        };
        let bytes = serde_json::to_vec(&rec).map_err(corrupt)?;
        let mut t = tx.open_table(SLURM_JOBS).map_err(|e| self.err(e))?;
        t.insert(rec.job, bytes.as_slice())
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The Slurm jobs the log says kerneld holds, by job id.
    pub fn slurm_jobs(&self) -> Result<Vec<SlurmJobRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(SLURM_JOBS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in t.iter().map_err(|e| self.err(e))? {
            let (_, v) = row.map_err(|e| self.err(e))?;
            out.push(
                serde_json::from_slice(v.value())
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// Every goal's projection, in id order of creation.
    pub fn goals(&self) -> Result<Vec<GoalProjection>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(GOALS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in t.iter().map_err(|e| self.err(e))? {
            let (_, v) = row.map_err(|e| self.err(e))?;
            out.push(
                serde_json::from_slice::<GoalProjection>(v.value())
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        out.sort_by_key(|g| {
            (
                g.created_ms,
                g.id.trim_start_matches('g').parse::<u64>().unwrap_or(0),
            )
        });
        Ok(out)
    }

    pub fn goal(&self, id: &str) -> Result<Option<GoalProjection>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(GOALS).map_err(|e| self.err(e))?;
        let raw = t.get(id).map_err(|e| self.err(e))?;
        raw.map(|v| {
            serde_json::from_slice(v.value()).map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .transpose()
    }

    /// Events after `after` (exclusive), optionally of one goal, at most `limit`.
    pub fn events(
        &self,
        goal: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(EVENTS).map_err(|e| self.err(e))?;
        let decode = |bytes: &[u8]| {
            serde_json::from_slice::<Event>(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
        };
        let mut out = Vec::new();
        match goal {
            None => {
                for row in t
                    .range(after.saturating_add(1)..)
                    .map_err(|e| self.err(e))?
                {
                    if out.len() >= limit {
                        break;
                    }
                    let (_, v) = row.map_err(|e| self.err(e))?;
                    out.push(decode(v.value())?);
                }
            }
            Some(g) => {
                let idx = tx.open_table(GOAL_EVENTS).map_err(|e| self.err(e))?;
                for row in idx
                    .range((g, after.saturating_add(1))..=(g, u64::MAX))
                    .map_err(|e| self.err(e))?
                {
                    if out.len() >= limit {
                        break;
                    }
                    let (k, _) = row.map_err(|e| self.err(e))?;
                    let seq = k.value().1;
                    let v = t.get(seq).map_err(|e| self.err(e))?;
                    let v = v.ok_or_else(|| {
                        StoreError::Corrupt(format!("index names missing event {seq}"))
                    })?;
                    out.push(decode(v.value())?);
                }
            }
        }
        Ok(out)
    }

    /// The newest `limit` events (of one goal, or all).
    pub fn last_events(&self, goal: Option<&str>, limit: usize) -> Result<Vec<Event>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(EVENTS).map_err(|e| self.err(e))?;
        let mut seqs: Vec<u64> = Vec::new();
        match goal {
            None => {
                for row in t.iter().map_err(|e| self.err(e))?.rev().take(limit) {
                    seqs.push(row.map_err(|e| self.err(e))?.0.value());
                }
            }
            Some(g) => {
                let idx = tx.open_table(GOAL_EVENTS).map_err(|e| self.err(e))?;
                for row in idx
                    .range((g, 0)..=(g, u64::MAX))
                    .map_err(|e| self.err(e))?
                    .rev()
                    .take(limit)
                {
                    seqs.push(row.map_err(|e| self.err(e))?.0.value().1);
                }
            }
        }
        seqs.reverse();
        let mut out = Vec::with_capacity(seqs.len());
        for seq in seqs {
            if let Some(v) = t.get(seq).map_err(|e| self.err(e))? {
                out.push(
                    serde_json::from_slice(v.value())
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                );
            }
        }
        Ok(out)
    }

    pub fn last_seq(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let meta = tx.open_table(META).map_err(|e| self.err(e))?;
        let next = meta
            .get("next_seq")
            .map_err(|e| self.err(e))?
            .map_or(1, |v| v.value());
        Ok(next - 1)
    }

    /// A goal's evaluation records, in iteration order.
    pub fn evaluations(&self, goal: &str) -> Result<Vec<EvaluationRecord>, StoreError> {
        self.evaluations_besides(goal, &Default::default())
    }

    pub fn evaluation(
        &self,
        goal: &str,
        iteration: u64,
    ) -> Result<Option<EvaluationRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(EVALS).map_err(|e| self.err(e))?;
        let raw = t.get((goal, iteration)).map_err(|e| self.err(e))?;
        raw.map(|v| {
            serde_json::from_slice(v.value()).map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .transpose()
    }

    /// A non-seed candidate's source by its hash.
    pub fn source(&self, hash: &str) -> Result<Option<String>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(SOURCES).map_err(|e| self.err(e))?;
        let raw = t.get(hash).map_err(|e| self.err(e))?;
        Ok(raw.map(|v| v.value().to_string()))
    }
}

#[cfg(test)]
mod slurm_tests;
#[cfg(test)]
mod tests;
