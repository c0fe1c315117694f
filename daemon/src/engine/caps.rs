//! How many goals may be active (queued, running, paused) at once: per uid, and all users
//! together with the part kept for root and kerneld's own user (`crate::shares`, the rule
//! the socket's connections follow too). Every plain `status` lists each active goal, so
//! without a cap one user's enqueue loop would grow that reply for everyone past a line
//! (issue #18).
//!
//! Checked under the commit lock by everything that creates a goal (enqueue, the spool
//! through enqueue, fork), so concurrent requests cannot both take the last place.

use super::{Engine, State};
use crate::shares;
use crate::wire::{code, RpcError};

impl Engine {
    /// Ok when `uid` may add one more active goal now; else the error that says which
    /// cap is reached and what to do.
    pub(super) fn admit_goal(&self, st: &State, uid: u32) -> Result<(), RpcError> {
        let (max, per_user) = {
            let cfg = self.config();
            (cfg.max_active_goals, cfg.max_active_goals_per_user)
        };
        let active = st.goals.values().filter(|g| !g.proj.state.is_terminal());
        let (mut total, mut own) = (0usize, 0usize);
        for g in active {
            total += 1;
            own += usize::from(g.proj.owner_uid == uid);
        }
        if own >= per_user {
            return Err(RpcError::new(
                code::TOO_MANY_GOALS,
                format!(
                    "uid {uid} already has {own} active goals, the most one user may have \
                     (max_active_goals_per_user = {per_user} in kerneld.toml); cancel or wait \
                     for some (`kernelctl status`), then enqueue again"
                ),
            ));
        }
        let privileged = shares::privileged().contains(&uid);
        if total >= shares::room(max, privileged) {
            return Err(RpcError::new(
                code::TOO_MANY_GOALS,
                format!(
                    "kerneld already has {total} active goals, the most it keeps for all users \
                     together (max_active_goals = {max} in kerneld.toml{}); enqueue again once \
                     some have finished",
                    if privileged {
                        String::new()
                    } else {
                        format!(
                            ", of which the last {} are kept for root",
                            shares::kept(max)
                        )
                    }
                ),
            ));
        }
        Ok(())
    }
}
