//! `cancel`: a goal ends for good; what is in flight is aborted.

use crate::engine::*;

impl Engine {
    pub(crate) async fn cancel(&self, goal: &str, uid: u32) -> RpcResult<GoalSummary> {
        self.transition(
            goal,
            uid,
            |s| !s.is_terminal(),
            |s| s == GoalState::Cancelled,
            GoalState::Cancelled,
            "cancel",
        )
        .await
    }
}
