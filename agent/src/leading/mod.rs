//! What a leader action is given, apart from its arguments: the raft group behind the small
//! [`Replica`] trait (write, linearizable read, applied state, view, wall clock) and this node's
//! leader-side state ([`LeaderLocal`]: settings, the clocks of its term, the membership lock and
//! log, the FleetLock health gates it runs: `gates`), together as a [`Leader`]. The actions themselves are in `leader/`; this module sits
//! below the agent so that they need neither the agent nor a raft (`fake` is the in-memory
//! replica their unit tests run against).

mod context;
#[cfg(test)]
pub mod fake;
pub mod gates;
mod local;
mod replica;

pub use context::Leader;
pub use local::{LeaderLocal, LeaderSettings};
pub use replica::Replica;
