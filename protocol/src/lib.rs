//! kerneld-protocol: the one definition of everything that crosses a process boundary
//! between `kerneld`, `kernelctl` and the harness worker, and nothing else.
//!
//! It is small on purpose: `kernelctl` depends on this crate alone, so the client builds
//! none of the daemon's dependencies (redb, NVML, notify, ...).

pub mod limits;
pub mod lines;
pub mod paths;
pub mod seeds;
pub mod userfile;
pub mod wire;
pub mod worker;
