//! `pause`: a queued or running goal stops being scheduled; what is in flight is aborted.

use crate::engine::*;

impl Engine {
    pub(crate) async fn pause(&self, goal: &str, uid: u32) -> RpcResult<GoalSummary> {
        self.transition(
            goal,
            uid,
            |s| matches!(s, GoalState::Queued | GoalState::Running),
            |s| s == GoalState::Paused,
            GoalState::Paused,
            "pause",
        )
        .await
    }
}
