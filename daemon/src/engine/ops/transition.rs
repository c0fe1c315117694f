//! What `pause`, `resume` and `cancel` share: a checked change of state, and freeing the goal's devices at once when it stops.

use crate::engine::*;

impl Engine {
    pub(super) async fn transition(
        &self,
        goal: &str,
        uid: u32,
        allowed: impl Fn(GoalState) -> bool,
        already: impl Fn(GoalState) -> bool,
        to: GoalState,
        verb: &str,
    ) -> RpcResult<GoalSummary> {
        let id = self.resolve(goal, uid)?;
        let guard = self.commit_lock.lock().await;
        let (from, owner, breaker_holds) = {
            let st = self.state.lock().unwrap();
            let g = &st.goals[&id].proj;
            (g.state, g.owner_uid, g.breaker_retry_at().is_some())
        };
        // A pause of a goal the circuit breaker paused takes it out of its hands: it
        // stays paused until resumed (recorded, so a restart keeps it so too).
        let take_over = to == GoalState::Paused && breaker_holds;
        if !self.may_modify(uid, owner) {
            return Err(rpc_err(
                code::PERMISSION_DENIED,
                format!("goal {id} belongs to uid {owner}; only its owner, root or the admin group may {verb} it"),
            ));
        }
        if already(from) && !take_over {
            // Already there: nothing to do, and nothing for a cron job to special-case.
            drop(guard);
            return self.summary(&id);
        }
        if !allowed(from) && !take_over {
            return Err(rpc_err(
                code::INVALID_STATE,
                format!("cannot {verb} goal {id}: it is {from}"),
            ));
        }
        let reason = match to {
            GoalState::Cancelled => Some(format!("cancelled by uid {uid}")),
            GoalState::Paused if take_over => Some(format!(
                "paused by uid {uid} (the circuit breaker no longer resumes it)"
            )),
            _ => None,
        };
        self.append(
            &guard,
            vec![NewEvent::goal(
                &id,
                EventKind::GoalStateChanged { from, to, reason },
            )],
        )
        .await
        .map_err(internal)?;
        drop(guard);
        if matches!(to, GoalState::Paused | GoalState::Cancelled) {
            // Abort what is in flight: the GPU goes to the next goal at once. The reply
            // waits until the aborts are recorded and the devices free (bounded).
            self.cancel_leases(&id, &format!("goal {to} by uid {uid}"));
            let deadline = Instant::now() + ABORT_GRACE + Duration::from_secs(2);
            while Instant::now() < deadline
                && self
                    .state
                    .lock()
                    .unwrap()
                    .goals
                    .get(&id)
                    .is_some_and(|g| !g.leases.is_empty())
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        self.wake.notify_one();
        self.summary(&id)
    }
}
