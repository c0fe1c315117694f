//! A goal's evaluation records, kept in memory for the agents (issue #12).
//!
//! Every iteration the agent sees the goal's whole history (search, hybrid, context
//! compaction), and compile-ahead asks for it again. Reading it from the log means
//! decoding every record (a few tens of kB each on the H200: checks, shapes, profile),
//! so the daemon's share per evaluation grew with the history: 41 ms over the first 20
//! evaluations of the shipped MLA goal, 87 ms by the 120th (H200, 2026-12-01), heading
//! for a second over a night. The records are written once (EvaluationFinished) and
//! never changed, so the engine keeps them per goal and reads only the new ones: the
//! projection's `evaluations` count says how many there should be, and a mismatch reads
//! the rows not yet held (`Store::evaluations_besides`).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Engine;
use crate::wire::EvaluationRecord;

/// A goal's records, in iteration order.
pub(super) type Records = Arc<Vec<EvaluationRecord>>;

impl Engine {
    /// The goal's evaluation records, as the log holds them.
    pub(super) async fn evaluations(&self, goal: &str) -> anyhow::Result<Records> {
        let held = {
            let mut st = self.state.lock().unwrap();
            let rt = st
                .goals
                .get_mut(goal)
                .ok_or_else(|| anyhow::anyhow!("no goal {goal}"))?;
            match &rt.records {
                Some(r) if r.len() as u64 == rt.proj.evaluations => return Ok(r.clone()),
                // Taken, so that no reference is left here and extending it below does
                // not copy every record (unless an agent still holds the old list).
                _ => rt.records.take().unwrap_or_default(),
            }
        };
        let have: BTreeSet<u64> = held.iter().map(|r| r.iteration).collect();
        let store = self.store.clone();
        let id = goal.to_string();
        let new =
            tokio::task::spawn_blocking(move || store.evaluations_besides(&id, &have)).await??;
        let mut all: Vec<EvaluationRecord> = Arc::unwrap_or_clone(held);
        all.extend(new);
        all.sort_by_key(|r| r.iteration);
        let all = Arc::new(all);
        if let Some(rt) = self.state.lock().unwrap().goals.get_mut(goal) {
            // Another caller may have read newer ones meanwhile: keep the longer.
            if rt.records.as_ref().is_none_or(|r| r.len() <= all.len()) {
                rt.records = Some(all.clone());
            }
        }
        Ok(all)
    }
}
