//! `best`: the best correct candidate, with its source as the user takes it.

use crate::engine::*;

impl Engine {
    pub(crate) async fn best(&self, goal: &str, uid: u32) -> RpcResult<BestResult> {
        let id = self.resolve(goal, uid)?;
        match self.best_candidate(&id).await.map_err(internal)? {
            Some((summary, rec, source)) => Ok(BestResult {
                goal: id,
                summary,
                source,
                result: rec.result,
            }),
            None => Err(rpc_err(
                code::NO_BEST,
                format!("goal {id} has no correct candidate yet"),
            )),
        }
    }
}
