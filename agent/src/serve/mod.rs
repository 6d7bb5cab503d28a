//! The node's servers: the mutual-TLS listener for peers and joiners (`peer.rs`, which also
//! serves the operator API to token holders) and the operator API on the unix socket
//! (`operator.rs`). `http.rs` holds the answer and body helpers both use; `accept.rs` the
//! agent's admission (budget, per-source limit) on the shared accept path of every TCP listener
//! (`muster_shared::serve`: the pause after a failed accept, the header deadline), with
//! `limits.rs` its counting.

pub mod accept;
mod fleetlock;
mod fleetlock_access;
mod fleetlock_decide;
mod http;
pub mod limits;
mod observe;
mod operator;
mod operator_fleetlock;
mod operator_kv;
mod operator_lease;
mod peer;

pub use fleetlock::{FleetLockListener, serve_fleetlock};
pub use observe::{serve_observe, serve_starting};
pub use operator::serve_socket;
pub use peer::serve_peers;
