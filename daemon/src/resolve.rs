//! Which goal a reference means: an id, or a name, resolved for the caller.
//!
//! A name means the caller's own goal first: the one active goal of that name, else the
//! newest finished one. Only when the caller owns none of that name do other users' goals
//! count, by the same rule. Two active goals of one name (in the group that counts) are
//! ambiguous: acting on either silently would surprise, so the error lists them.

use crate::wire::{code, GoalState, RpcError};

/// What resolution needs of a goal.
pub struct Candidate<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub owner_uid: u32,
    pub state: GoalState,
    pub created_ms: u64,
}

/// Most candidates an ambiguity error lists.
const LISTED: usize = 10;

fn id_number(id: &str) -> u64 {
    id.trim_start_matches('g').parse().unwrap_or(0)
}

/// The id `goal_ref` means for `uid`, among `goals`.
pub fn resolve<'a>(
    goals: impl Iterator<Item = Candidate<'a>>,
    goal_ref: &str,
    uid: u32,
) -> Result<String, RpcError> {
    let mut own = Vec::new();
    let mut others = Vec::new();
    for g in goals {
        if g.id == goal_ref {
            return Ok(g.id.to_string());
        }
        if g.name == goal_ref {
            if g.owner_uid == uid {
                own.push(g);
            } else {
                others.push(g);
            }
        }
    }
    let group = if own.is_empty() { others } else { own };
    let mut group = group;
    group.sort_by_key(|g| (g.created_ms, id_number(g.id)));
    let active: Vec<&Candidate> = group.iter().filter(|g| !g.state.is_terminal()).collect();
    if active.len() > 1 {
        let listed: Vec<String> = active
            .iter()
            .take(LISTED)
            .map(|g| format!("{} ({}, uid {})", g.id, g.state, g.owner_uid))
            .collect();
        let more = active.len().saturating_sub(LISTED);
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "`{}` names {} active goals: {}{}; use an id",
                crate::wire::quote(goal_ref),
                active.len(),
                listed.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ),
        ));
    }
    if let Some(g) = active.first() {
        return Ok(g.id.to_string());
    }
    group.last().map(|g| g.id.to_string()).ok_or_else(|| {
        RpcError::new(
            code::GOAL_NOT_FOUND,
            format!(
                "no goal `{}` (by id or name); `kernelctl status` lists them",
                crate::wire::quote(goal_ref)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c<'a>(
        id: &'a str,
        name: &'a str,
        owner_uid: u32,
        state: GoalState,
        t: u64,
    ) -> Candidate<'a> {
        Candidate {
            id,
            name,
            owner_uid,
            state,
            created_ms: t,
        }
    }

    fn goals() -> Vec<Candidate<'static>> {
        vec![
            c("g1", "shared", 0, GoalState::Completed, 1),
            c("g2", "shared", 1000, GoalState::Paused, 2),
            c("g3", "twin", 1000, GoalState::Running, 3),
            c("g4", "twin", 1000, GoalState::Queued, 4),
            c("g5", "old", 1000, GoalState::Completed, 5),
            c("g6", "old", 1000, GoalState::Cancelled, 6),
        ]
    }

    #[test]
    fn the_callers_own_goal_comes_first_even_finished() {
        assert_eq!(resolve(goals().into_iter(), "shared", 0).unwrap(), "g1");
        assert_eq!(resolve(goals().into_iter(), "shared", 1000).unwrap(), "g2");
        // Someone who owns none of that name gets the active one.
        assert_eq!(resolve(goals().into_iter(), "shared", 7).unwrap(), "g2");
        assert_eq!(resolve(goals().into_iter(), "g5", 0).unwrap(), "g5");
        assert_eq!(resolve(goals().into_iter(), "old", 0).unwrap(), "g6");
    }

    #[test]
    fn an_ambiguous_name_lists_the_candidates() {
        let e = resolve(goals().into_iter(), "twin", 0).unwrap_err();
        assert!(
            e.message.contains("g3 (running, uid 1000)") && e.message.contains("g4"),
            "{}",
            e.message
        );
        let e = resolve(goals().into_iter(), "nothing", 0).unwrap_err();
        assert_eq!(e.code, code::GOAL_NOT_FOUND);
    }
}
