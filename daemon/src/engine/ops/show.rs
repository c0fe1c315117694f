//! `show`: a goal in full, with its last evaluations.

use crate::engine::*;

/// Evaluation records kept in `show`.
const RECENT: usize = 20;
/// ... and no more bytes of them than this: with the spec (at most
/// `limits::GOAL_STORED_BYTES`) the answer stays well within a line.
const RECENT_BYTES: usize = crate::wire::MAX_LINE / 4;

impl Engine {
    pub(crate) async fn show(&self, goal: &str, uid: u32) -> RpcResult<GoalDetail> {
        let id = self.resolve(goal, uid)?;
        let summary = self.summary(&id)?;
        let (spec, confirmations) = {
            let st = self.state.lock().unwrap();
            let g = &st.goals[&id].proj;
            (g.spec.clone(), g.confirmations.clone())
        };
        let store = self.store.clone();
        let gid = id.clone();
        let mut recent = tokio::task::spawn_blocking(move || store.evaluations(&gid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        recent.drain(..keep_from(&recent, RECENT, RECENT_BYTES));
        Ok(GoalDetail {
            summary,
            spec,
            recent,
            confirmations,
        })
    }
}

/// Where the kept part of `records` starts: the last `max_count` of them, taken newest first
/// while their JSON stays within `max_bytes`, and always the newest one (a single record is
/// bounded by the store's event limit).
fn keep_from<T: serde::Serialize>(records: &[T], max_count: usize, max_bytes: usize) -> usize {
    let mut bytes = 0;
    let oldest_kept = records.len().saturating_sub(max_count);
    for i in (oldest_kept..records.len()).rev() {
        bytes += serde_json::to_vec(&records[i]).map_or(0, |v| v.len());
        if bytes > max_bytes && i + 1 < records.len() {
            return i + 1;
        }
    }
    oldest_kept
}

#[cfg(test)]
mod tests {
    use super::keep_from;

    /// Records whose JSON is `len + 2` bytes (a quoted string).
    fn records(n: usize, len: usize) -> Vec<String> {
        (0..n).map(|i| format!("{i:0len$}")).collect()
    }

    #[test]
    fn the_newest_records_are_kept_up_to_the_count() {
        assert_eq!(keep_from(&records(30, 10), 20, 1 << 20), 10);
        assert_eq!(keep_from(&records(5, 10), 20, 1 << 20), 0);
        assert_eq!(keep_from(&Vec::<String>::new(), 20, 100), 0);
    }

    #[test]
    fn the_newest_records_are_kept_up_to_the_bytes() {
        // 1,002 bytes each: four newest fit in 5,000, a fifth would not.
        assert_eq!(keep_from(&records(30, 1000), 20, 5000), 26);
        // Exactly at the bound is within it.
        assert_eq!(keep_from(&records(30, 1000), 20, 5010), 25);
    }

    #[test]
    fn the_newest_record_is_kept_even_when_it_alone_is_over_the_bytes() {
        assert_eq!(keep_from(&records(3, 1000), 20, 10), 2);
        assert_eq!(keep_from(&records(1, 1000), 20, 10), 0);
    }
}
