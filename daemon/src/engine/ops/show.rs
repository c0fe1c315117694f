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
        let mut cut = recent.len().saturating_sub(RECENT);
        let mut bytes = 0;
        // The newest first, while they fit (at least the newest one).
        for (i, r) in recent.iter().enumerate().skip(cut).rev() {
            bytes += serde_json::to_vec(r).map_or(0, |v| v.len());
            if bytes > RECENT_BYTES && i + 1 < recent.len() {
                cut = i + 1;
                break;
            }
        }
        recent.drain(..cut);
        Ok(GoalDetail {
            summary,
            spec,
            recent,
            confirmations,
        })
    }
}
