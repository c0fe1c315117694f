//! `show`: a goal in full, with its last evaluations.

use crate::engine::*;

/// Evaluation records kept in `show`.
const RECENT: usize = 20;

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
        let cut = recent.len().saturating_sub(RECENT);
        recent.drain(..cut);
        Ok(GoalDetail {
            summary,
            spec,
            recent,
            confirmations,
        })
    }
}
