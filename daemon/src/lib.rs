//! kerneld: the daemon that runs GPU-kernel optimization goals overnight.
//!
//! See ARCHITECTURE.md for the map of modules and their invariants.

pub mod goal;
pub mod paths;
pub mod projection;
pub mod store;
pub mod task;
pub mod wire;
