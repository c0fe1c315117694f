//! Stop rules and budgets: when a goal ends, and ending it (its other leases are
//! cancelled, their evaluations aborted and recorded).

use super::{CommitGuard, Engine};
use crate::store::{now_ms, NewEvent};
use crate::wire::*;

impl Engine {
    /// The stop rule or budget that ends the goal now, if any (iterations and an
    /// exhausted space are decided when taking work).
    pub(super) fn stop_rule(&self, goal: &str) -> Option<(GoalState, String)> {
        let st = self.state.lock().unwrap();
        let g = &st.goals.get(goal)?.proj;
        if g.state.is_terminal() {
            return None;
        }
        if let (Some(t), Some(b)) = (g.spec.stop.target_speedup, &g.best) {
            if b.speedup >= t {
                return Some((GoalState::Completed, "target_reached".into()));
            }
        }
        if let Some(p) = g.spec.stop.plateau {
            if g.evaluations > 0
                && g.iteration.saturating_sub(g.last_improvement) >= p
                && g.pending.is_empty()
                && g.confirming.is_empty()
            {
                return Some((GoalState::Completed, "plateau".into()));
            }
        }
        if let Some(h) = g.spec.budget.gpu_hours {
            if g.gpu_ms as f64 / 3.6e6 >= h {
                return Some((GoalState::Completed, "budget_gpu_hours".into()));
            }
        }
        if let Some(w) = g.spec.budget.wall_s {
            if g.wall_ms_at(now_ms()) >= w * 1000 {
                return Some((GoalState::Completed, "budget_wall".into()));
            }
        }
        token_budget(g)
    }

    /// Moves a goal to a terminal (or paused) state and stops its other leases.
    pub(super) async fn finish_goal(
        &self,
        guard: &CommitGuard<'_>,
        goal: &str,
        to: GoalState,
        reason: String,
    ) -> anyhow::Result<()> {
        let from = match self.state.lock().unwrap().goals.get(goal) {
            Some(rt) if !rt.proj.state.is_terminal() => rt.proj.state,
            _ => return Ok(()),
        };
        let why = format!("goal {to}: {reason}");
        self.append(
            guard,
            vec![NewEvent::goal(
                goal,
                EventKind::GoalStateChanged {
                    from,
                    to,
                    reason: Some(reason),
                },
            )],
        )
        .await?;
        self.cancel_leases(goal, &why);
        Ok(())
    }

    pub(super) fn cancel_leases(&self, goal: &str, why: &str) {
        let st = self.state.lock().unwrap();
        if let Some(rt) = st.goals.get(goal) {
            for l in &rt.leases {
                *l.why.lock().unwrap() = Some(why.to_string());
                l.cancel.cancel();
            }
        }
        drop(st);
        self.wake.notify_one();
    }

    pub(super) async fn check_wall_budgets(&self) {
        let over: Vec<String> = {
            let st = self.state.lock().unwrap();
            let now = now_ms();
            st.goals
                .values()
                .filter(|g| g.proj.state == GoalState::Running)
                .filter(|g| {
                    g.proj
                        .spec
                        .budget
                        .wall_s
                        .is_some_and(|w| g.proj.wall_ms_at(now) >= w * 1000)
                })
                .map(|g| g.proj.id.clone())
                .collect()
        };
        for goal in over {
            let guard = self.commit_lock.lock().await;
            if let Err(e) = self
                .finish_goal(&guard, &goal, GoalState::Completed, "budget_wall".into())
                .await
            {
                tracing::error!(%goal, "recording the wall budget's end: {e:#}");
            }
        }
    }
}

/// The tokens and cost budgets, from the endpoint's `usage` figures (checked with the
/// other rules after each result).
fn token_budget(g: &crate::projection::GoalProjection) -> Option<(GoalState, String)> {
    let b = &g.spec.budget;
    if b.tokens.is_some_and(|t| g.tokens >= t) {
        return Some((GoalState::Completed, "budget_tokens".into()));
    }
    if let (Some(cost), Some(price)) = (b.cost, b.price_per_1k_tokens) {
        if g.tokens as f64 / 1000.0 * price >= cost {
            return Some((GoalState::Completed, "budget_cost".into()));
        }
    }
    None
}
