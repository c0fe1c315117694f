//! Authorization: who may name a task by path, run a command agent, change a goal.

use super::Engine;

impl Engine {
    /// May name task directories outside the installed tasks at enqueue: root, kerneld's
    /// own user, or the admin group.
    pub(super) fn is_trusted(&self, uid: u32) -> bool {
        uid == nix::unistd::geteuid().as_raw() || self.is_admin(uid)
    }

    /// Root, or a member of the configured admin group.
    pub(super) fn is_admin(&self, uid: u32) -> bool {
        if uid == 0 {
            return true;
        }
        let Some(group) = &self.config().admin_group else {
            return false;
        };
        let Ok(Some(g)) = nix::unistd::Group::from_name(group) else {
            return false;
        };
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(u)) => u.gid == g.gid || g.mem.contains(&u.name),
            _ => false,
        }
    }

    /// A goal's owner, root or the admin group. Not "anyone with the daemon's uid": the
    /// programs the daemon runs for goals (agents, candidates) would pass that test.
    pub(super) fn may_modify(&self, uid: u32, owner: u32) -> bool {
        uid == owner || self.is_admin(uid)
    }
}
