//! The operating system as the boundary around candidate code (issue #10).
//!
//! - `options`: the command line of `kerneld-sandbox`, parsed and written in one place;
//! - `apply`: what the binary does with it (rlimits, uid, no_new_privs, Landlock, exec);
//! - `seccomp`: its seccomp filters (what sockets may reach, ptrace, io_uring);
//! - `probe`: what the kernel can enforce (`kerneld-sandbox --probe`);
//! - `widen`: the GPU ladder: which layers CUDA cannot live with, widened only as needed;
//! - `trial`: the start-up trials (the harness's Python; CUDA in a judge and its runner);
//! - `scratch`: a slot's directories and its worker's environment;
//! - `policy`: the daemon's side: which paths, devices and variables the judge and the
//!   runners get, as `kerneld-sandbox` arguments.
//!
//! The trust boundaries are drawn in ARCHITECTURE.md ("Processes and trust boundaries").

pub mod apply;
pub mod inbox;
pub mod options;
pub mod policy;
pub mod probe;
pub mod runtime;
pub mod scratch;
pub mod seccomp;
pub mod trial;
pub mod widen;

pub use options::Options;
pub use probe::Probe;
pub use runtime::{Runtime, WorkerSandbox};
