//! Chains (issue #29): a goal that runs only after another ends, as Slurm's
//! `--dependency=afterok:JOB` / `afterany:JOB` (`kernelctl enqueue --after
//! GOAL[:completed|:any]`, or `after = "..."` in the goal file).
//!
//! Owner: the engine keeps the goals; this module only judges. API boundary: `verdict`
//! (what a chained goal may do, given the state of the goal it waits for), called by the
//! engine at enqueue (engine/ops/chain.rs: a chain that can never run is refused there),
//! at dispatch (a waiting goal is not runnable) and in `follow` (a chain whose goal ended
//! the wrong way is cancelled, with the reason). Invariant: a stored chain names its goal
//! by id (resolved at enqueue), so a later goal of the same name is never mistaken for it.

use std::sync::Arc;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::wire::{Chain, ChainRequire, Event, EventKind, GoalState};

/// What a chained goal may do now.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The goal it waits for has not ended: the words for `status`' WAITING.
    Wait(String),
    Run,
    /// It can never run: the reason it is cancelled (or refused at enqueue) with.
    Never(String),
}

/// `chain`'s verdict, given the state of the goal it names (None: no such goal).
pub fn verdict(chain: &Chain, target: Option<GoalState>) -> Verdict {
    let goal = &chain.goal;
    match (target, chain.require) {
        (None, _) => Verdict::Never(format!(
            "the goal it runs after, {goal}, does not exist (after {chain})"
        )),
        (Some(s), _) if !s.is_terminal() => Verdict::Wait(format!(
            "waits for {goal} ({s}) to {} (after {chain})",
            match chain.require {
                ChainRequire::Completed => "complete",
                ChainRequire::Any => "end",
            }
        )),
        (Some(GoalState::Completed), _) | (Some(_), ChainRequire::Any) => Verdict::Run,
        (Some(s), ChainRequire::Completed) => Verdict::Never(format!(
            "the goal it runs after, {goal}, {s} instead of completing (after {chain}; \
             `--after {goal}:any` runs after any end)"
        )),
    }
}

/// Cancels the chained goals that can never run whenever a goal ends (and once at start),
/// until `stop`. The engine's `cancel_stranded_chains` does the work.
pub async fn follow(
    engine: Arc<crate::engine::Engine>,
    mut rx: broadcast::Receiver<Event>,
    stop: CancellationToken,
) {
    engine.cancel_stranded_chains().await;
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = stop.cancelled() => return,
        };
        let ended = match ev {
            Ok(Event {
                kind: EventKind::GoalStateChanged { to, .. },
                ..
            }) => to.is_terminal(),
            Ok(_) => false,
            // Missed events: look anyway.
            Err(broadcast::error::RecvError::Lagged(_)) => true,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if ended {
            engine.cancel_stranded_chains().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_waits_runs_or_can_never_run() {
        let ok = Chain::parse("g3").unwrap();
        let any = Chain::parse("g3:any").unwrap();
        for s in [GoalState::Queued, GoalState::Running, GoalState::Paused] {
            assert!(
                matches!(verdict(&ok, Some(s)), Verdict::Wait(w) if w.contains(&format!("waits for g3 ({s}) to complete")))
            );
            assert!(
                matches!(verdict(&any, Some(s)), Verdict::Wait(w) if w.contains("to end (after g3:any)"))
            );
        }
        assert_eq!(verdict(&ok, Some(GoalState::Completed)), Verdict::Run);
        for s in [
            GoalState::Completed,
            GoalState::Failed,
            GoalState::Cancelled,
        ] {
            assert_eq!(verdict(&any, Some(s)), Verdict::Run);
        }
        let Verdict::Never(why) = verdict(&ok, Some(GoalState::Cancelled)) else {
            panic!()
        };
        assert!(
            why.contains("g3, cancelled instead of completing") && why.contains("g3:any"),
            "{why}"
        );
        let Verdict::Never(why) = verdict(&any, None) else {
            panic!()
        };
        assert!(why.contains("g3, does not exist"), "{why}");
    }
}
