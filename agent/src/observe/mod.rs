//! What an operator's monitoring sees of a node: Prometheus metrics (`metrics.rs`), liveness
//! and readiness (`health.rs`, also what systemd is told; `starting.rs` before the node runs),
//! and the status page (`page.rs`).
//! Each gathers a plain snapshot from the agent, then a pure function renders or decides.

pub mod counters;
pub mod health;
pub mod metrics;
pub mod page;
pub mod starting;
