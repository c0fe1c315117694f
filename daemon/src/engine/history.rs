//! Finished goals as summaries: what start-up loads of the history (`store::goal_index`).
//!
//! The engine's `goals` map holds the goals it schedules (active at start, enqueued
//! since) in full. Goals that were finished when the daemon started are only summaries
//! here, in creation order, so that start-up decodes a few hundred bytes per old goal
//! instead of its whole projection, and scheduler passes and `status` never walk them.
//! An operation that names one (show, best, context, retime, …) loads its projection
//! from the log once (`hydrate`); from then on it lives in `goals` like any other.

use std::collections::{BTreeMap, HashMap};

use crate::engine::*;
use crate::status_view::order_key;

/// Summaries of goals finished before start-up, by creation order.
#[derive(Default)]
pub(super) struct History {
    by_order: BTreeMap<(u64, u64), GoalSummary>,
    order_of: HashMap<String, (u64, u64)>,
}

impl History {
    pub(super) fn new(finished: Vec<GoalSummary>) -> History {
        let mut h = History::default();
        for s in finished {
            let key = order_key(&s.id, s.created_ms);
            h.order_of.insert(s.id.clone(), key);
            h.by_order.insert(key, s);
        }
        h
    }

    pub(super) fn get(&self, id: &str) -> Option<&GoalSummary> {
        self.by_order.get(self.order_of.get(id)?)
    }

    fn remove(&mut self, id: &str) -> Option<GoalSummary> {
        let key = self.order_of.remove(id)?;
        self.by_order.remove(&key)
    }

    /// Every summary, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &GoalSummary> {
        self.by_order.values()
    }

    /// The `n` newest, newest first.
    pub(super) fn newest(&self, n: usize) -> impl Iterator<Item = &GoalSummary> {
        self.by_order.values().rev().take(n)
    }
}

impl Engine {
    /// Makes a finished goal of the history a full member of `goals` (its projection read
    /// from the log), so every operation finds it there. Nothing to do for other ids.
    pub(super) fn hydrate(&self, id: &str) -> RpcResult<()> {
        {
            let st = self.state.lock().unwrap();
            if st.goals.contains_key(id) || st.history.get(id).is_none() {
                return Ok(());
            }
        }
        // One row read outside the state lock; no event of this goal can be committed
        // meanwhile (the engine commits only for goals in `goals`, operations hydrate
        // first), and whoever inserts first wins.
        let proj = self.store.goal(id).map_err(internal)?.ok_or_else(|| {
            internal(format!(
                "goal {id} is in the goal index but has no projection"
            ))
        })?;
        let mut st = self.state.lock().unwrap();
        if !st.goals.contains_key(id) {
            st.goals.insert(id.to_string(), GoalRt::new(proj));
        }
        st.history.remove(id);
        Ok(())
    }
}
