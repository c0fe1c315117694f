//! `context`: exactly what the goal's agent gets on its next iteration.

use crate::engine::*;

impl Engine {
    pub(crate) async fn context(&self, goal: &str, uid: u32) -> RpcResult<ContextResult> {
        let id = self.resolve(goal, uid)?;
        let proj = self.state.lock().unwrap().goals[&id].proj.clone();
        let store = self.store.clone();
        let gid = id.clone();
        let history = tokio::task::spawn_blocking(move || store.evaluations(&gid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        // The same best source the agent gets (see `take_work`).
        let best_source = self.best_source(&id).await;
        Ok(crate::agent::context_view(
            &proj,
            &history,
            best_source.as_deref(),
        ))
    }
}
