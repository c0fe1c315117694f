//! `status`: the active goals and the newest finished ones, a page of all of them, or one
//! goal (`crate::status_view` picks which).

use crate::engine::*;
use crate::status_view::{self, Row};

impl Engine {
    pub(crate) fn status(&self, p: &StatusParams, uid: u32) -> RpcResult<Vec<GoalSummary>> {
        if let Some(g) = &p.goal {
            let id = self.resolve(g, uid)?;
            return Ok(vec![self.summary(&id)?]);
        }
        let st = self.state.lock().unwrap();
        let now = now_ms();
        let rows = st.goals.values().map(|g| Row {
            id: &g.proj.id,
            state: g.proj.state,
            created_ms: g.proj.created_ms,
        });
        // Of the history only what can be listed: all of it for a page of `--all`, else
        // its newest (older ones can never be among the newest finished).
        let old: Box<dyn Iterator<Item = &GoalSummary>> = if p.all {
            Box::new(st.history.iter())
        } else {
            Box::new(st.history.newest(status_view::RECENT_FINISHED))
        };
        let old = old.map(|g| Row {
            id: &g.id,
            state: g.state,
            created_ms: g.created_ms,
        });
        let ids = status_view::select(
            rows.chain(old),
            p.all,
            p.after.as_deref(),
            p.limit.map(|l| l as usize),
        );
        Ok(ids
            .into_iter()
            .filter_map(|id| match st.goals.get(id) {
                Some(g) => Some(waiting::summary(&st, g, now)),
                None => st.history.get(id).cloned(),
            })
            .collect())
    }
}
