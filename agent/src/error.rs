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

/// How a failed run ends, and so what a supervisor should do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitClass {
    /// Settings that cannot work: fix the command line or config file (exit 64).
    Usage,
    /// A refusal that a restart cannot fix (exit 2).
    Refused,
    /// Anything else; worth a restart once its cause is fixed (exit 1).
    Failed,
}

/// Why a `muster agent` or `muster restore` run failed. The layers' own errors are kept whole
/// (their kind and their source chain), so that a caller can match on what went wrong instead
/// of on text; [`AgentError::class`] says how the run ends.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Settings that cannot work, found by the start path itself.
    #[error("{0}")]
    Usage(String),
    /// A refusal that a restart cannot fix: the node would form a second cluster, was removed,
    /// or its join credential was refused.
    #[error("{0}")]
    Refused(String),
    /// A failure the start path found itself, with nothing underneath.
    #[error("{0}")]
    Failed(String),
    /// The command line, environment or config file.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data directory.
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    /// The discovery service.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The raft node.
    #[error(transparent)]
    Raft(#[from] RaftNodeError),
    /// A call to another member.
    #[error(transparent)]
    Call(#[from] CallError),
    /// Certificates and keys.
    #[error(transparent)]
    Tls(#[from] muster_shared::tls::TlsError),
    /// What was being done when an error from elsewhere happened (see [`Context`]).
    #[error("{what}: {source}")]
    While {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl AgentError {
    /// How the run ends: a usage error for settings, a refusal, or a failure worth a restart.
    pub fn class(&self) -> ExitClass {
        match self {
            AgentError::Usage(_) | AgentError::Config(_) => ExitClass::Usage,
            AgentError::Refused(_) => ExitClass::Refused,
            AgentError::Failed(_)
            | AgentError::DataDir(_)
            | AgentError::Discovery(_)
            | AgentError::Raft(_)
            | AgentError::Call(_)
            | AgentError::Tls(_)
            | AgentError::While { .. } => ExitClass::Failed,
        }
    }

    pub fn exit_code(&self) -> u8 {
        match self.class() {
            ExitClass::Usage => EXIT_USAGE,
            ExitClass::Refused => EXIT_REFUSED,
            ExitClass::Failed => 1,
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        AgentError::Failed(message.into())
    }
}

/// Adds what was being done to an error on its way up: `.context("reading tls/ca.pem")`. The
/// error itself stays the source, so nothing about it is lost.
pub trait Context<T> {
    fn context(self, what: &str) -> Result<T, AgentError>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T, AgentError> {
        self.map_err(|e| AgentError::While {
            what: what.to_string(),
            source: Box::new(e),
        })
    }
}
