//! Reading a goal's evaluation records incrementally (engine/records.rs keeps them).

use std::collections::BTreeSet;

use super::{Store, StoreError, EVALS};
use crate::wire::{EvalResult, EvaluationRecord};

impl Store {
    /// The goal's records whose iteration is not in `have`, in iteration order. Only
    /// those are decoded: the keys of the others are all that is read of them.
    pub fn evaluations_besides(
        &self,
        goal: &str,
        have: &BTreeSet<u64>,
    ) -> Result<Vec<EvaluationRecord>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(EVALS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in t
            .range((goal, 0)..=(goal, u64::MAX))
            .map_err(|e| self.err(e))?
        {
            let (k, v) = row.map_err(|e| self.err(e))?;
            if have.contains(&k.value().1) {
                continue;
            }
            out.push(
                serde_json::from_slice(v.value())
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
        }
        Ok(out)
    }

    /// The goal's last `n` evaluation results, newest first (the circuit breaker's streak
    /// at start: engine/breaker.rs). Only those are read.
    pub fn last_results(&self, goal: &str, n: usize) -> Result<Vec<EvalResult>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = tx.open_table(EVALS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        let rows = t
            .range((goal, 0)..=(goal, u64::MAX))
            .map_err(|e| self.err(e))?;
        for row in rows.rev().take(n) {
            let (_, v) = row.map_err(|e| self.err(e))?;
            let record: EvaluationRecord = serde_json::from_slice(v.value())
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            out.push(record.result);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewEvent;
    use crate::wire::{EvalResult, EventKind, ResultClass};

    #[test]
    fn only_the_records_not_held_are_read_and_in_iteration_order() {
        let path = std::env::temp_dir().join(format!(
            "kerneld-records-{}-{}.redb",
            std::process::id(),
            rand::random::<u64>()
        ));
        let store = Store::open(&path).unwrap();
        let (id, _) = store
            .enqueue_goal(crate::projection::test_spec("r"), 1000)
            .unwrap();
        // finished out of order, as two slots may finish them
        for it in [2u64, 1, 4, 3] {
            let kind = EventKind::EvaluationFinished {
                iteration: it,
                candidate: format!("c{it}"),
                device: "cpu".into(),
                result: EvalResult::failure(ResultClass::Crashed, "x", 0.1),
            };
            store.append(vec![NewEvent::goal(&id, kind)]).unwrap();
        }
        let all = store.evaluations_besides(&id, &BTreeSet::new()).unwrap();
        let full: Vec<u64> = store
            .evaluations(&id)
            .unwrap()
            .iter()
            .map(|r| r.iteration)
            .collect();
        assert_eq!(full, vec![1, 2, 3, 4]);
        let its: Vec<u64> = all.iter().map(|r| r.iteration).collect();
        assert_eq!(its, vec![1, 2, 3, 4]);
        let rest = store
            .evaluations_besides(&id, &BTreeSet::from([1, 3]))
            .unwrap();
        let its: Vec<u64> = rest.iter().map(|r| r.iteration).collect();
        assert_eq!(its, vec![2, 4]);
        assert!(store
            .evaluations_besides("g404", &BTreeSet::new())
            .unwrap()
            .is_empty());
        drop(store);
        let _ = std::fs::remove_file(path);
    }
}
