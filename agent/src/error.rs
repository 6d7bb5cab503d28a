//! How a `muster agent` (or `muster restore`) run ends when it does not end well, and the exit
//! code each class gets. Supervisors act on the class: 2 must not be retried (the systemd
//! recipes set `RestartPreventExitStatus=2`), 64 is a command-line mistake, 1 may be retried.

use crate::client::CallError;
use crate::config::ConfigError;
use crate::datadir::DataDirError;
use crate::discovery::DiscoveryError;
use crate::raft::RaftNodeError;

/// Exit code for command-line mistakes (BSD's EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// Exit code for refusals that starting again with the same settings cannot fix.
pub const EXIT_REFUSED: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Settings that cannot work: fix the command line or config file.
    #[error("{0}")]
    Usage(String),
    /// A refusal that a restart cannot fix: the node would form a second cluster, was removed,
    /// or its join credential was refused.
    #[error("{0}")]
    Refused(String),
    /// Anything else; worth a restart once its cause is fixed.
    #[error("{0}")]
    Failed(String),
}

impl AgentError {
    pub fn exit_code(&self) -> u8 {
        match self {
            AgentError::Usage(_) => EXIT_USAGE,
            AgentError::Refused(_) => EXIT_REFUSED,
            AgentError::Failed(_) => 1,
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        AgentError::Failed(message.into())
    }
}

/// Adds what was being done to an error on its way up: `.context("reading tls/ca.pem")`.
pub trait Context<T> {
    fn context(self, what: &str) -> Result<T, AgentError>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T, AgentError> {
        self.map_err(|e| AgentError::Failed(format!("{what}: {e}")))
    }
}

impl From<ConfigError> for AgentError {
    fn from(e: ConfigError) -> Self {
        AgentError::Usage(e.to_string())
    }
}

impl From<DataDirError> for AgentError {
    fn from(e: DataDirError) -> Self {
        AgentError::Failed(e.to_string())
    }
}

impl From<DiscoveryError> for AgentError {
    fn from(e: DiscoveryError) -> Self {
        AgentError::Failed(e.to_string())
    }
}

impl From<RaftNodeError> for AgentError {
    fn from(e: RaftNodeError) -> Self {
        AgentError::Failed(e.to_string())
    }
}

impl From<CallError> for AgentError {
    fn from(e: CallError) -> Self {
        AgentError::Failed(e.to_string())
    }
}

impl From<muster_shared::tls::TlsError> for AgentError {
    fn from(e: muster_shared::tls::TlsError) -> Self {
        AgentError::Failed(e.to_string())
    }
}
