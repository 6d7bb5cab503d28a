//! How a `muster` command failed, as its caller sees it: the exit code, the stable `kind`
//! printed with `--json`, and the message. Kept apart from `run.rs` so that the mapping from
//! errors to exit codes and kinds, which tests and scripts rely on, is read in one place.

use super::CliError;
use crate::api::ErrorKind;
use crate::config;
use crate::error::{AgentError, EXIT_USAGE, ExitClass};

/// `lease run --wait=false` and `lease claim` while someone else holds the lease (EX_TEMPFAIL).
pub const EXIT_LEASE_HELD: u8 = 75;
/// `lease run`: the lease could not be renewed, and CMD was stopped (EX_UNAVAILABLE).
pub const EXIT_LEASE_LOST: u8 = 69;

/// How a command failed: `muster agent` ends with its own exit code; an operator command exits
/// 64 for a command-line mistake and 1 otherwise.
pub enum Failure {
    Agent(AgentError),
    Cli(CliError),
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Agent(e) => e.exit_code(),
            Failure::Cli(CliError::Usage(_)) => EXIT_USAGE,
            Failure::Cli(CliError::CommandExit(code)) => *code,
            Failure::Cli(CliError::LeaseLost(_)) => EXIT_LEASE_LOST,
            Failure::Cli(CliError::Api(e)) if e.kind == ErrorKind::LeaseHeld => EXIT_LEASE_HELD,
            Failure::Cli(_) => 1,
        }
    }

    /// The stable kind printed with `--json`: the agent's own kind for an API error, else one
    /// of `invalid_argument`, `unreachable`, `wrong_cluster`, `refused`, `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Agent(e) => match e.class() {
                ExitClass::Usage => "invalid_argument",
                ExitClass::Refused => "refused",
                ExitClass::Failed => "failed",
            },
            Failure::Cli(CliError::Usage(_)) => "invalid_argument",
            Failure::Cli(CliError::Failed(_)) => "failed",
            Failure::Cli(CliError::Unreachable(_)) => "unreachable",
            Failure::Cli(CliError::WrongCluster(_)) => "wrong_cluster",
            Failure::Cli(CliError::LeaseLost(_)) => "lease_lost",
            Failure::Cli(CliError::CommandExit(_)) => "command_failed",
            Failure::Cli(CliError::Api(e)) => e.kind.as_str(),
        }
    }

    /// The message for a person: an API error's kind follows it in brackets.
    pub fn message(&self) -> String {
        match self {
            Failure::Agent(e) => e.to_string(),
            Failure::Cli(e) => e.to_string(),
        }
    }

    /// The error as one JSON object, the shape of the agent API's errors (the kind is a field
    /// of its own, not repeated in the message).
    pub fn to_json(&self) -> String {
        let message = match self {
            Failure::Cli(CliError::Api(e)) => e.message.clone(),
            other => other.message(),
        };
        serde_json::json!({ "kind": self.kind(), "message": message }).to_string()
    }
}

impl From<AgentError> for Failure {
    fn from(e: AgentError) -> Self {
        Failure::Agent(e)
    }
}

impl From<CliError> for Failure {
    fn from(e: CliError) -> Self {
        Failure::Cli(e)
    }
}

impl From<config::ConfigError> for Failure {
    fn from(e: config::ConfigError) -> Self {
        Failure::Agent(e.into())
    }
}

impl From<serde_json::Error> for Failure {
    fn from(e: serde_json::Error) -> Self {
        Failure::Cli(e.into())
    }
}
