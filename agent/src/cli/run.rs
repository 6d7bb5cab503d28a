//! Carries out a parsed `muster` command, and says how it failed: the exit code and, for
//! `--json`, the stable `kind` of the error.

use std::collections::HashMap;

use super::apply::ApplyArgs;
use super::args::{
    BackupCommand, CaCommand, CertCommand, Command, ConfigCommand, FleetlockCommand,
    FleetlockGroupCommand, KvCommand, LeaseCommand, NodeCommand, OperatorTokenCommand,
    SecretCommand, TokenCommand,
};
use super::{CliError, output};
use crate::api::ErrorKind;
use crate::config;
use crate::error::{AgentError, EXIT_USAGE, ExitClass};
use crate::outln;

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

/// The first `muster agent` flag given to `muster restore` that restore does not read (how to
/// form or join a cluster, and address changes of a restart); `restore --help` hides them.
fn unread_by_restore(flags: &config::AgentFlags) -> Option<&'static str> {
    [
        (flags.discovery.is_some(), "--discovery"),
        (flags.join.is_some(), "--join"),
        (flags.token.is_some(), "--token"),
        (flags.init, "--init"),
        (flags.initial_cluster.is_some(), "--initial-cluster"),
        (flags.join_secret_file.is_some(), "--join-secret-file"),
        (flags.join_secret_ttl.is_some(), "--join-secret-ttl"),
        (flags.ca_pin.is_some(), "--ca-pin"),
        (flags.allow_address_change, "--allow-address-change"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag))
}

/// Carries out one parsed command.
pub async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Agent(flags) => {
            crate::logging::init_agent();
            let env: HashMap<String, String> = std::env::vars().collect();
            let config = config::resolve(&flags, &env)?;
            Ok(crate::start::run(config, None).await?)
        }
        Command::Restore {
            file,
            allow_retired_ca,
            flags,
        } => {
            if let Some(flag) = unread_by_restore(&flags) {
                return Err(CliError::Usage(format!(
                    "muster restore does not read {flag}: it starts a new one-node cluster from \
                     the backup, and other machines join it afterwards (`muster token create`)"
                ))
                .into());
            }
            crate::logging::init_agent();
            let env: HashMap<String, String> = std::env::vars().collect();
            let config = config::resolve(&flags, &env)?;
            let asked = crate::start::RestoreAsked {
                file,
                allow_retired_ca,
            };
            Ok(crate::start::run(config, Some(asked)).await?)
        }
        Command::Status(op) => {
            let status = super::status(&op.target()?).await?;
            if op.json {
                outln!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                output::print_status(&status);
            }
            Ok(())
        }
        Command::Members(op) => {
            let status = super::status(&op.target()?).await?;
            if op.json {
                outln!("{}", serde_json::to_string_pretty(&status.members)?);
            } else {
                output::print_members(&status);
            }
            Ok(())
        }
        Command::Token { command } => match command {
            TokenCommand::Create {
                ttl,
                uses,
                description,
                op,
            } => {
                let ttl = super::join_token_ttl(&ttl)?;
                super::check_join_token_uses(uses)?;
                Ok(super::token_create(&op.target()?, ttl, uses, description, op.json).await?)
            }
            TokenCommand::List(op) => Ok(super::token_list(&op.target()?, op.json).await?),
            TokenCommand::Revoke { id, op } => {
                Ok(super::token_revoke(&op.target()?, &id, op.json).await?)
            }
        },
        Command::OperatorToken { command } => match command {
            OperatorTokenCommand::Create {
                description,
                scopes,
                op,
            } => Ok(
                super::operator_token_create(&op.target()?, description, scopes, op.json).await?,
            ),
            OperatorTokenCommand::List(op) => {
                Ok(super::operator_token_list(&op.target()?, op.json).await?)
            }
            OperatorTokenCommand::Revoke { id, op } => {
                Ok(super::operator_token_revoke(&op.target()?, &id, op.json).await?)
            }
        },
        Command::Node {
            command: NodeCommand::Remove { name, force, op },
        } => Ok(super::node_remove(&op.target()?, &name, force, op.json).await?),
        Command::Node {
            command: NodeCommand::SetAddress { name, address, op },
        } => Ok(super::node_set_address(&op.target()?, &name, &address, op.json).await?),
        Command::Backup {
            command:
                Some(BackupCommand::List {
                    snapshot_dir,
                    data_dir,
                    json,
                }),
            ..
        } => Ok(super::backup_list(snapshot_dir, data_dir, json)?),
        Command::Backup {
            file: Some(file),
            op,
            ..
        } => Ok(super::backup(&op.target()?, &file, op.json).await?),
        Command::Backup { .. } => Err(CliError::Usage(
            "give the FILE to write the backup to, or `muster backup list` to list scheduled \
             snapshots"
                .into(),
        )
        .into()),
        Command::Kv { command } => run_kv(command).await,
        Command::Cert {
            command: CertCommand::Status(op),
        } => Ok(super::cert::status(&op.target()?, op.json).await?),
        Command::Ca {
            command: CaCommand::Rotate { finish, force, op },
        } => Ok(super::cert::ca_rotate(&op.target()?, finish, force, op.json).await?),
        Command::Ca {
            command: CaCommand::Status(op),
        } => Ok(super::cert::ca_status(&op.target()?, op.json).await?),
        Command::Config {
            command: ConfigCommand::Export(op),
        } => Ok(super::apply::export(&op.target()?, op.json).await?),
        Command::Plan { apply, exit_code } => {
            let args = ApplyArgs {
                file: &apply.file,
                backups: apply.backups.as_deref(),
                json: apply.op.json,
            };
            Ok(super::apply::plan_command(&apply.op.target()?, &args, exit_code).await?)
        }
        Command::Apply {
            apply,
            yes,
            tokens_out,
        } => {
            let args = ApplyArgs {
                file: &apply.file,
                backups: apply.backups.as_deref(),
                json: apply.op.json,
            };
            Ok(
                super::apply::apply_command(&apply.op.target()?, &args, yes, tokens_out.as_deref())
                    .await?,
            )
        }
        Command::Lease { command } => run_lease(command).await,
        Command::Fleetlock { command } => match command {
            FleetlockCommand::Status(op) => {
                Ok(super::fleetlock::status(&op.target()?, op.json).await?)
            }
            FleetlockCommand::History { group, op } => {
                Ok(super::fleetlock::history(&op.target()?, group.as_deref(), op.json).await?)
            }
            FleetlockCommand::Release { group, id, op } => {
                Ok(super::fleetlock::release(&op.target()?, &group, &id, op.json).await?)
            }
            FleetlockCommand::Group { command } => match command {
                FleetlockGroupCommand::Set { name, slots, op } => {
                    Ok(super::fleetlock::set_group(&op.target()?, &name, slots, op.json).await?)
                }
                FleetlockGroupCommand::List(op) => {
                    Ok(super::fleetlock::status(&op.target()?, op.json).await?)
                }
                FleetlockGroupCommand::Del { name, op } => {
                    Ok(super::fleetlock::delete_group(&op.target()?, &name, op.json).await?)
                }
            },
            FleetlockCommand::UnknownGroups { mode, op } => {
                Ok(super::fleetlock::unknown_groups(&op.target()?, &mode, op.json).await?)
            }
        },
        Command::Secret {
            command: SecretCommand::Generate,
        } => {
            outln!("{}", muster_shared::token::JoinSecret::generate().reveal());
            eprintln!(
                "a new join secret, shown only this once: store it in a secret store and in a \
                 file (mode 0600) on every machine, and start each with --join-secret-file FILE \
                 (together with --discovery URL, --initial-cluster, or --join HOST:PORT)"
            );
            Ok(())
        }
        Command::Demo { nodes, exit } => Ok(crate::demo::run(nodes, exit).await?),
    }
}

async fn run_kv(command: KvCommand) -> Result<(), Failure> {
    use super::kv::{self, Condition};
    match command {
        KvCommand::Get { key, op } => Ok(kv::get(&op.target()?, &key, op.json).await?),
        KvCommand::Put {
            key,
            value,
            if_revision,
            if_absent,
            op,
        } => {
            let condition = match (if_revision, if_absent) {
                (Some(rev), _) => Condition::Revision(rev),
                (None, true) => Condition::Absent,
                (None, false) => Condition::None,
            };
            Ok(kv::put(&op.target()?, &key, &value, condition, op.json).await?)
        }
        KvCommand::Del {
            key,
            if_revision,
            op,
        } => Ok(kv::del(&op.target()?, &key, if_revision, op.json).await?),
        KvCommand::List { prefix, op } => Ok(kv::list(&op.target()?, &prefix, op.json).await?),
        KvCommand::Watch {
            prefix,
            from_revision,
            limit,
            op,
        } => Ok(kv::watch(&op.target()?, &prefix, from_revision, limit, op.json).await?),
    }
}

async fn run_lease(command: LeaseCommand) -> Result<(), Failure> {
    use super::lease;
    match command {
        LeaseCommand::Run {
            name,
            ttl,
            holder,
            grace,
            wait,
            op,
            command,
        } => {
            let ttl = lease::ttl(&ttl)?;
            let grace = match grace {
                Some(grace) => muster_shared::duration::parse_duration(&grace)
                    .map_err(|e| CliError::Usage(format!("--grace: {e}")))?,
                None => super::lease_run::default_grace(ttl),
            };
            let settings = super::lease_run::RunSettings {
                name,
                holder: holder.unwrap_or_else(lease::default_holder),
                ttl,
                grace,
                wait,
                command,
            };
            Ok(super::lease_run::run(op.target()?, settings).await?)
        }
        LeaseCommand::Claim {
            name,
            holder,
            ttl,
            key,
            op,
        } => {
            let ttl = lease::ttl(&ttl)?;
            let key = key.as_deref();
            Ok(lease::claim(&op.target()?, &name, &holder, ttl, key, op.json).await?)
        }
        LeaseCommand::Release {
            name,
            holder,
            key,
            op,
        } => Ok(lease::release(&op.target()?, &name, &holder, &key, op.json).await?),
        LeaseCommand::Get { name, op } => Ok(lease::get(&op.target()?, &name, op.json).await?),
        LeaseCommand::List(op) => Ok(lease::list(&op.target()?, op.json).await?),
    }
}
