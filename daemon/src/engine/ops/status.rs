//! `status`: every goal's summary, or one goal's.

use crate::engine::*;

impl Engine {
    pub(crate) fn status(&self, goal: Option<&str>) -> RpcResult<Vec<GoalSummary>> {
        match goal {
            Some(g) => {
                let id = self.resolve(g)?;
                Ok(vec![self.summary(&id)?])
            }
            None => {
                let st = self.state.lock().unwrap();
                let now = now_ms();
                let mut all: Vec<GoalSummary> = st
                    .goals
                    .values()
                    .map(|g| waiting::summary(&st, g, now))
                    .collect();
                all.sort_by_key(|g| {
                    (
                        g.created_ms,
                        g.id.trim_start_matches('g').parse::<u64>().unwrap_or(0),
                    )
                });
                Ok(all)
            }
        }
    }
}
