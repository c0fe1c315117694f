//! Which goals start-up loads in full, kept in the same write transactions as the log.
//!
//! A daemon with a long history holds thousands of finished goals, each a projection of
//! several kB (the spec carries the seeds' sources). Start-up and every scheduler pass
//! need only the active ones (queued, running, paused); of a finished goal `status` and
//! name resolution need its summary. So two tables, derived from `goals` like every other
//! projection and written in the transaction that changes a goal's state:
//! - `active_goals`: the ids of goals the engine still works on (start-up loads these
//!   whole): not finished, or completed with a re-time still owed (engine/retime.rs);
//! - `finished_goals`: every other goal's `GoalSummary` (a few hundred bytes; its wall
//!   clock is stopped, so it changes only with a later event of the goal, which rewrites it).
//!
//! Logs of format 1 have neither table: `rebuild` derives both from `goals` once, when
//! such a log is first opened by this build (the format is then stamped 2).

use std::collections::BTreeMap;

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use super::{db_err, Store, StoreError, GOALS};
use crate::projection::GoalProjection;
use crate::wire::GoalSummary;

/// goal id → (): goals not finished.
pub(super) const ACTIVE: TableDefinition<&str, ()> = TableDefinition::new("active_goals");
/// goal id → GoalSummary JSON of a finished goal.
pub(super) const FINISHED: TableDefinition<&str, &[u8]> = TableDefinition::new("finished_goals");

fn corrupt(e: serde_json::Error) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// Whether the engine still works on a goal: it is loaded whole at start-up.
pub(super) fn is_active(proj: &GoalProjection) -> bool {
    !proj.state.is_terminal() || proj.retime_work().next().is_some()
}

/// The summary a finished goal keeps (no lease is in flight for a finished goal; its
/// wall clock stopped when it left `running`, so the time given does not matter).
pub(super) fn finished_summary(proj: &GoalProjection) -> GoalSummary {
    proj.summary(proj.updated_ms, 0)
}

/// Files one goal's projection as active or finished (inside a write transaction).
pub(super) fn file(
    tx: &redb::WriteTransaction,
    path: &std::path::Path,
    proj: &GoalProjection,
) -> Result<(), StoreError> {
    let err = |e: redb::Error| db_err(path, e);
    let mut active = tx.open_table(ACTIVE).map_err(|e| err(e.into()))?;
    let mut finished = tx.open_table(FINISHED).map_err(|e| err(e.into()))?;
    let id = proj.id.as_str();
    if !is_active(proj) {
        let bytes = serde_json::to_vec(&finished_summary(proj)).map_err(corrupt)?;
        finished
            .insert(id, bytes.as_slice())
            .map_err(|e| err(e.into()))?;
        active.remove(id).map_err(|e| err(e.into()))?;
    } else {
        active.insert(id, ()).map_err(|e| err(e.into()))?;
        finished.remove(id).map_err(|e| err(e.into()))?;
    }
    Ok(())
}

/// Derives both tables from `goals` (a log of format 1 opened for the first time).
pub(super) fn rebuild(
    tx: &redb::WriteTransaction,
    path: &std::path::Path,
) -> Result<(), StoreError> {
    let projs: Vec<GoalProjection> = {
        let goals = tx.open_table(GOALS).map_err(|e| db_err(path, e))?;
        let mut out = Vec::new();
        for row in goals.iter().map_err(|e| db_err(path, e))? {
            let (_, v) = row.map_err(|e| db_err(path, e))?;
            out.push(serde_json::from_slice(v.value()).map_err(corrupt)?);
        }
        out
    };
    for proj in &projs {
        file(tx, path, proj)?;
    }
    if !projs.is_empty() {
        tracing::info!(
            goals = projs.len(),
            "event log of format 1: indexed its goals as active or finished (format 2)"
        );
    }
    Ok(())
}

impl Store {
    /// The projections of the goals that are not finished (what the engine runs).
    pub fn active_goals(&self) -> Result<Vec<GoalProjection>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let active = tx.open_table(ACTIVE).map_err(|e| self.err(e))?;
        let goals = tx.open_table(GOALS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in active.iter().map_err(|e| self.err(e))? {
            let (k, _) = row.map_err(|e| self.err(e))?;
            let raw = goals.get(k.value()).map_err(|e| self.err(e))?;
            let raw = raw.ok_or_else(|| StoreError::NoGoal(k.value().to_string()))?;
            out.push(serde_json::from_slice(raw.value()).map_err(corrupt)?);
        }
        Ok(out)
    }

    /// The summaries of the finished goals.
    pub fn finished_goals(&self) -> Result<Vec<GoalSummary>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(FINISHED).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in t.iter().map_err(|e| self.err(e))? {
            let (_, v) = row.map_err(|e| self.err(e))?;
            out.push(serde_json::from_slice(v.value()).map_err(corrupt)?);
        }
        Ok(out)
    }
}

/// `kerneld check`'s part: both tables agree with the replayed projections.
pub(super) fn check(
    tx: &redb::ReadTransaction,
    folded: &BTreeMap<String, GoalProjection>,
    problem: &mut dyn FnMut(String),
) {
    let (Ok(active), Ok(finished)) = (tx.open_table(ACTIVE), tx.open_table(FINISHED)) else {
        problem("the active/finished goal index is missing (a format-1 log: start kerneld once to build it)".into());
        return;
    };
    for (id, proj) in folded {
        let listed = active.get(id.as_str()).ok().flatten().is_some();
        let summary = finished
            .get(id.as_str())
            .ok()
            .flatten()
            .map(|v| serde_json::from_slice::<GoalSummary>(v.value()));
        match (!is_active(proj), listed, summary) {
            (false, true, None) => {}
            (true, false, Some(Ok(s))) if s == finished_summary(proj) => {}
            (true, false, Some(Ok(_))) => problem(format!(
                "goal {id}: its finished summary differs from the replay of its events"
            )),
            (_, _, Some(Err(e))) => problem(format!("goal {id}: finished summary unreadable: {e}")),
            (_, listed, s) => problem(format!(
                "goal {id} is {} but the goal index has it {}",
                proj.state,
                match (listed, s.is_some()) {
                    (true, true) => "both active and finished",
                    (true, false) => "active",
                    (false, true) => "finished",
                    (false, false) => "nowhere",
                }
            )),
        }
    }
    let count = |n: Result<u64, redb::StorageError>| n.unwrap_or(0);
    let indexed = count(active.len()) + count(finished.len());
    if indexed != folded.len() as u64 {
        problem(format!(
            "the goal index lists {indexed} goals, the log has {}",
            folded.len()
        ));
    }
}
