//! Why a goal that should run does not: `status` and `show` say it in words a user can
//! act on, instead of a bare `queued` (the agent's endpoint backing off, no slot that can
//! start a worker, every slot busy with other goals).

use std::time::Instant;

use super::{GoalRt, State};
use crate::wire::*;

/// A goal's summary with `waiting` filled in from the engine's runtime state.
pub(super) fn summary(st: &State, rt: &GoalRt, now_ms: u64) -> GoalSummary {
    let mut s = rt.proj.summary(now_ms, rt.leases.len() as u32);
    s.waiting = why(st, rt);
    s.environment_changed = environment_changed(st, rt);
    s
}

/// The best was measured under another environment than today's: what changed, and what
/// to do. Compared with kerneld's own version from start-up on, with the rest once a
/// worker has reported (workers start with the daemon).
fn environment_changed(st: &State, rt: &GoalRt) -> Option<String> {
    let then = rt.proj.best.as_ref()?.environment.as_ref()?;
    let now = st.environment.clone().unwrap_or_else(|| Environment {
        kerneld: super::KERNELD_VERSION.to_string(),
        ..Environment::default()
    });
    let changes = then.changes(&now);
    (!changes.is_empty()).then(|| {
        format!(
            "the best was measured under another environment ({}): `kernelctl revalidate {}`              re-measures the best candidates now",
            changes.join(", "),
            rt.proj.id
        )
    })
}

fn why(st: &State, rt: &GoalRt) -> Option<String> {
    if let (GoalState::Paused, Some(at)) = (rt.proj.state, rt.proj.breaker_retry_at()) {
        let secs = at.saturating_sub(crate::store::now_ms()).div_ceil(1000);
        return Some(format!(
            "paused by the circuit breaker; tried again in {secs} s (`kernelctl resume {}` \
             tries now)",
            rt.proj.id
        ));
    }
    if !matches!(rt.proj.state, GoalState::Queued | GoalState::Running) || !rt.leases.is_empty() {
        return None;
    }
    if let Some(w) = super::ops::chain_waits(st, rt) {
        return Some(w);
    }
    let now = Instant::now();
    if let (Some(t), Some(w)) = (rt.not_before, &rt.waiting) {
        if t > now {
            return Some(format!("{w} in {:.0} s", (t - now).as_secs_f64().ceil()));
        }
    }
    if rt.exhausted {
        return None; // it waits for its own evaluations' results
    }
    // Each slot that cannot take the goal now, and why.
    let mut blocked = Vec::new();
    let mut busy = 0;
    for s in &st.slots {
        let uuid = &s.info.uuid;
        if s.health != Health::Healthy {
            let why = s.health_reason.as_deref().unwrap_or("no reason given");
            blocked.push(format!("{uuid} is drained: {why}"));
        } else if s.not_before.is_some_and(|t| t > now) {
            let secs = s.not_before.map_or(0.0, |t| (t - now).as_secs_f64().ceil());
            match &s.health_reason {
                Some(r) => blocked.push(format!("{uuid}: {r} (next try in {secs:.0} s)")),
                None => blocked.push(format!("{uuid} cools down for {secs:.0} s")),
            }
        } else if s.lease.is_some() || s.warming {
            busy += 1;
        } else {
            return None; // a free slot: the next dispatch takes it
        }
    }
    if st.slots.is_empty() {
        return Some("no devices: the daemon found no GPU and no CPU slot".into());
    }
    if blocked.is_empty() {
        return Some(format!(
            "every slot is busy ({busy} with other goals or a starting worker)"
        ));
    }
    let mut text = format!("no slot can start a worker: {}", blocked.join("; "));
    if busy > 0 {
        text.push_str(&format!(" ({busy} other slots busy)"));
    }
    Some(text)
}
