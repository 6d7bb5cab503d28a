//! The operator commands: where they send their request (the local unix socket, or a member's
//! TLS port with an operator token: `target.rs`) and what they print (`output.rs`). One file
//! per command family; `run.rs` hands each parsed command to its family.

mod apply;
mod args;
mod backup;
mod cert;
mod failure;
mod fleetlock;
mod kv;
mod lease;
mod lease_run;
mod node;
pub mod output;
mod run;
mod servers;
mod target;
mod tcp;
mod tokens;

pub use args::Cli;
pub use failure::Failure;
pub use run::run;
pub use target::{OPERATOR_TOKEN_ENV, Target};

use crate::api::types::Status;
use crate::api::{ApiError, paths};
use crate::outln;

/// Why an operator command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A command-line mistake.
    #[error("{0}")]
    Usage(String),
    /// An answer came from another cluster than the one the command acts on.
    #[error("{0}")]
    WrongCluster(String),
    /// The agent answered with an error.
    #[error("{} ({})", .0.message, .0.kind)]
    Api(ApiError),
    /// The agent could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// Something local failed.
    #[error("{0}")]
    Failed(String),
    /// `lease run`: the lease could not be renewed in time, so the command was stopped.
    #[error("{0}")]
    LeaseLost(String),
    /// `lease run`: the command's own exit status, passed on (nothing to print).
    #[error("the command exited with status {0}")]
    CommandExit(u8),
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Failed(e.to_string())
    }
}

impl From<serde_json::Error> for CliError {
    fn from(e: serde_json::Error) -> Self {
        CliError::Failed(format!("cannot encode JSON: {e}"))
    }
}

fn print_json(v: &impl serde::Serialize) -> Result<(), CliError> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub async fn status(target: &Target) -> Result<Status, CliError> {
    target.call("GET", paths::STATUS, None).await
}
