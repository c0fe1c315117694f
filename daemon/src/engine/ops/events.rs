//! `events`: a page of the log (of one goal or all), bounded in count and bytes.

use crate::engine::*;

/// Most events in one `events` reply.
const EVENTS_PAGE: usize = 2000;

impl Engine {
    pub(crate) async fn events(&self, p: &EventsParams, uid: u32) -> RpcResult<Vec<Event>> {
        let goal = p
            .goal
            .as_deref()
            .map(|g| self.resolve(g, uid))
            .transpose()?;
        let store = self.store.clone();
        // One reply holds at most a page: a day's log does not fit in one line. Clients
        // page forward with `after` (an empty page means caught up).
        let given = p.limit.is_some();
        let (after, limit) = (
            p.after,
            p.limit
                .map_or(EVENTS_PAGE, |l| (l as usize).min(EVENTS_PAGE)),
        );
        let mut evs = tokio::task::spawn_blocking(move || match (after, given) {
            (Some(a), _) => store.events(goal.as_deref(), a, limit),
            (None, true) => store.last_events(goal.as_deref(), limit),
            (None, false) => store.events(goal.as_deref(), 0, limit),
        })
        .await
        .map_err(internal)?
        .map_err(internal)?;
        // ... and at most half a line's bytes, whatever the events' sizes.
        let mut bytes = 0usize;
        if let Some(cut) = evs.iter().position(|e| {
            bytes += serde_json::to_string(e).map_or(0, |t| t.len() + 1);
            bytes > MAX_LINE / 2
        }) {
            evs.truncate(cut.max(1));
        }
        Ok(evs)
    }
}
