//! Slurm: evaluation slots on GPUs that a Slurm cluster allocates (SPEC §8a).
//!
//! - `cluster`: the only code that runs Slurm's commands (salloc, srun, squeue, scancel).
//! - `slots`: the jobs behind the engine's Slurm slots: asked for when a lease needs a
//!   worker, recorded in the log, reattached or cancelled after a restart, given back
//!   when idle, and noticed when Slurm takes them (time limit, preemption, node failure).

mod cluster;
mod slots;

pub use cluster::*;
pub(crate) use slots::*;
