//! Chains (issue #29, judged in crate::chains): the engine's three calls. At enqueue the
//! chain's goal is resolved to its id (a chain that can never run is refused); at dispatch
//! a chain still waiting keeps its goal from running; a chain whose goal ended the wrong
//! way is cancelled with the reason (`crate::chains::follow` asks after each end).

use crate::chains::{verdict, Verdict};
use crate::engine::*;

/// The state of goal `id`, live or finished before start-up.
fn state_of(st: &State, id: &str) -> Option<GoalState> {
    st.goals
        .get(id)
        .map(|g| g.proj.state)
        .or_else(|| st.history.get(id).map(|g| g.state))
}

/// What `rt`'s chain says now (None: not chained, or free to run).
pub(in crate::engine) fn chain_waits(st: &State, rt: &GoalRt) -> Option<String> {
    let chain = rt.proj.spec.after.as_ref()?;
    match verdict(chain, state_of(st, &chain.goal)) {
        Verdict::Run => None,
        Verdict::Wait(w) => Some(w),
        Verdict::Never(w) => Some(format!("{w}: being cancelled")),
    }
}

impl Engine {
    /// `spec` with its chain (`--after` in place of the file's `after`) naming its goal
    /// by id; an error for a goal that does not exist or can never let it run.
    pub(super) fn chain_at_enqueue(
        &self,
        mut spec: GoalSpec,
        after: Option<String>,
        uid: u32,
    ) -> RpcResult<GoalSpec> {
        if let Some(text) = after {
            let chain = Chain::parse(&text)
                .map_err(|m| rpc_err(code::INVALID_GOAL, format!("--after {text}: {m}")))?;
            spec.after = Some(chain);
        }
        let Some(chain) = spec.after.as_mut() else {
            return Ok(spec);
        };
        let id = self.resolve(&chain.goal, uid).map_err(|e| {
            rpc_err(
                code::INVALID_GOAL,
                format!(
                    "after {chain}: {}; name a goal you can see (`kernelctl status --all`)",
                    e.message
                ),
            )
        })?;
        chain.goal = id;
        let state = state_of(&self.state.lock().unwrap(), &chain.goal);
        if let Verdict::Never(why) = verdict(chain, state) {
            return Err(rpc_err(code::INVALID_GOAL, format!("not enqueued: {why}")));
        }
        Ok(spec)
    }

    /// Cancels every queued goal whose chain can never let it run, with the reason.
    pub(crate) async fn cancel_stranded_chains(&self) {
        let guard = self.commit_lock.lock().await;
        let stranded: Vec<(String, String)> = {
            let st = self.state.lock().unwrap();
            st.goals
                .values()
                .filter(|g| g.proj.state == GoalState::Queued)
                .filter_map(|g| {
                    let chain = g.proj.spec.after.as_ref()?;
                    match verdict(chain, state_of(&st, &chain.goal)) {
                        Verdict::Never(why) => Some((g.proj.id.clone(), why)),
                        _ => None,
                    }
                })
                .collect()
        };
        for (id, why) in stranded {
            tracing::info!(goal = %id, "cancelled: {why}");
            let ev = EventKind::GoalStateChanged {
                from: GoalState::Queued,
                to: GoalState::Cancelled,
                reason: Some(format!("cancelled: {why}")),
            };
            if let Err(e) = self.append(&guard, vec![NewEvent::goal(&id, ev)]).await {
                tracing::warn!(goal = %id, "cannot cancel a stranded chain: {e}");
                return;
            }
        }
        drop(guard);
        self.wake.notify_one();
    }
}
