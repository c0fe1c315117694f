//! `resume`: a paused goal runs again (from the queue when it never ran).

use crate::engine::*;

impl Engine {
    pub(crate) async fn resume(&self, goal: &str, uid: u32) -> RpcResult<GoalSummary> {
        let id = self.resolve(goal, uid)?;
        // A goal that never ran goes back to the queue; one that ran continues running.
        let ran = self
            .state
            .lock()
            .unwrap()
            .goals
            .get(&id)
            .is_some_and(|g| g.proj.wall_ms > 0 || g.proj.iteration > 0);
        let to = if ran {
            GoalState::Running
        } else {
            GoalState::Queued
        };
        self.transition(
            &id,
            uid,
            |s| s == GoalState::Paused,
            |s| matches!(s, GoalState::Queued | GoalState::Running),
            to,
            "resume",
        )
        .await
    }
}
