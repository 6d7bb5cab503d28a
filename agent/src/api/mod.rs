//! The agent's HTTP contract: wire shapes, route paths and the one error type with its stable
//! kinds. Servers (`serve/`), the leader's operations (`leader/`) and the clients (`client`,
//! `cli/`, `start/`) all speak it; it depends on nothing else in the agent.

pub mod error;
pub mod fleetlock;
pub mod join;
pub mod paths;
pub mod probe;
pub mod types;

pub use error::{ApiError, ErrorKind};
