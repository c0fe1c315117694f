//! What all users share (connections to the socket, active goals) and the part of it kept
//! for root and kerneld's own user: other users together never fill the last eighth, so no
//! mix of them can lock the administrator out (issue #18). rpc.rs and engine/caps.rs count;
//! this is the one rule they count by.

/// The uids that may take the part kept back: root and kerneld's own user.
pub fn privileged() -> [u32; 2] {
    [0, nix::unistd::geteuid().as_raw()]
}

/// How many of `total` only the privileged may take.
pub fn kept(total: usize) -> usize {
    total / 8
}

/// How many of `total` the uids of one kind (privileged or not) may fill together.
pub fn room(total: usize, privileged: bool) -> usize {
    if privileged {
        total
    } else {
        total - kept(total)
    }
}
