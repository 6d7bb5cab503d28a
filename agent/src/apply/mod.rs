//! `muster plan` / `muster apply`: the desired cluster in `cluster.toml` (`manifest.rs`), and
//! the pure plan that turns the probed cluster into it in a quorum-safe order (`plan.rs`).
//! Gathering the probes and carrying the plan out is `cli/apply.rs`'s job.

pub mod manifest;
pub mod plan;
#[cfg(test)]
mod tests;

pub use manifest::{DesiredFleetLock, DesiredMember, DesiredSettings, Manifest};
pub use plan::{Action, FoundBackup, Observed, ObservedMember, Plan, Step, plan, recovery_steps};
