//! The control plane's operations, one file per RPC method (as pueue keeps one file per
//! message). Each is an `impl Engine` block: it reads the projections, checks who asks
//! (`auth`), and commits through the engine like the loop does. Nothing in the engine
//! calls an operation; what two need (a goal's best source, a transition) lives in the
//! engine's rooms or in `transition`.

mod best;
mod cancel;
mod chain;
pub(in crate::engine) use chain::chain_waits;
mod context;
mod enqueue;
mod events;
mod fork;
mod gpus;
mod pause;
mod resume;
mod retime;
mod revalidate;
mod show;
mod status;
mod transition;
mod version;
