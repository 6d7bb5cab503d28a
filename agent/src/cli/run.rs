//! Carries out a parsed `muster` command: one short match that hands each command family to
//! its own function, which turns the parsed flags into a call of the module that does the work.
//! How a command failed (exit code, `--json` kind) is `failure.rs`.

use std::collections::HashMap;

use super::apply::ApplyArgs;
use super::args::{
    ApplyFlags, BackupCommand, CaCommand, CertCommand, Command, ConfigCommand, FleetlockCommand,
    FleetlockGroupCommand, KvCommand, LeaderCommand, LeaseCommand, NodeCommand, OperatorArgs,
    OperatorTokenCommand, SecretCommand, TokenCommand,
};
use super::failure::Failure;
use super::{CliError, output};
use crate::config;
use crate::outln;

/// Carries out one parsed command.
pub async fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Agent(flags) => run_agent(flags).await,
        Command::Restore {
            file,
            allow_retired_ca,
            flags,
        } => run_restore(file, allow_retired_ca, flags).await,
        Command::Status(op) => run_status(op).await,
        Command::Members(op) => run_members(op).await,
        Command::Token { command } => run_token(command).await,
        Command::OperatorToken { command } => run_operator_token(command).await,
        Command::Node { command } => run_node(command).await,
        Command::Leader {
            command: LeaderCommand::Transfer { name, op },
        } => Ok(super::node::leader_transfer(&op.target()?, name.as_deref(), op.json).await?),
        Command::Backup { command, file, op } => run_backup(command, file, op).await,
        Command::Kv { command } => run_kv(command).await,
        Command::Cert { command } => run_cert(command).await,
        Command::Ca { command } => run_ca(command).await,
        Command::Config { command } => run_config(command).await,
        Command::Plan { apply, exit_code } => run_plan(apply, exit_code).await,
        Command::Apply {
            apply,
            yes,
            tokens_out,
        } => run_apply(apply, yes, tokens_out).await,
        Command::Lease { command } => run_lease(command).await,
        Command::Fleetlock { command } => run_fleetlock(command).await,
        Command::Secret { command } => run_secret(command),
        Command::Recover {
            lost,
            data_dir,
            yes,
            force,
            json,
        } => {
            let data_dir = data_dir
                .or_else(|| std::env::var_os("MUSTER_DATA_DIR").map(Into::into))
                .unwrap_or_else(|| config::DEFAULT_DATA_DIR.into());
            let args = crate::recover::RecoverArgs {
                data_dir,
                lost,
                yes,
                force,
                json,
            };
            Ok(crate::recover::run(args).await?)
        }
        Command::Demo { nodes, exit } => Ok(crate::demo::run(nodes, exit).await?),
    }
}

/// `muster agent`: the daemon, configured from its flags and the environment.
async fn run_agent(flags: config::AgentFlags) -> Result<(), Failure> {
    crate::logging::init_agent();
    let env: HashMap<String, String> = std::env::vars().collect();
    let config = config::resolve(&flags, &env)?;
    Ok(crate::start::run(config, None).await?)
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

/// `muster restore`: the agent started from a backup; refuses the flags restore does not read
/// before anything starts.
async fn run_restore(
    file: std::path::PathBuf,
    allow_retired_ca: bool,
    flags: config::AgentFlags,
) -> Result<(), Failure> {
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

async fn run_status(op: OperatorArgs) -> Result<(), Failure> {
    let status = super::status(&op.target()?).await?;
    if op.json {
        outln!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        output::print_status(&status);
    }
    Ok(())
}

async fn run_members(op: OperatorArgs) -> Result<(), Failure> {
    let status = super::status(&op.target()?).await?;
    if op.json {
        outln!("{}", serde_json::to_string_pretty(&status.members)?);
    } else {
        output::print_members(&status);
    }
    Ok(())
}

async fn run_token(command: TokenCommand) -> Result<(), Failure> {
    match command {
        TokenCommand::Create {
            ttl,
            uses,
            description,
            op,
        } => {
            let ttl = super::tokens::join_token_ttl(&ttl)?;
            super::tokens::check_join_token_uses(uses)?;
            Ok(super::tokens::token_create(&op.target()?, ttl, uses, description, op.json).await?)
        }
        TokenCommand::List(op) => Ok(super::tokens::token_list(&op.target()?, op.json).await?),
        TokenCommand::Revoke { id, op } => {
            Ok(super::tokens::token_revoke(&op.target()?, &id, op.json).await?)
        }
    }
}

async fn run_operator_token(command: OperatorTokenCommand) -> Result<(), Failure> {
    match command {
        OperatorTokenCommand::Create {
            description,
            scopes,
            op,
        } => Ok(
            super::tokens::operator_token_create(&op.target()?, description, scopes, op.json)
                .await?,
        ),
        OperatorTokenCommand::List(op) => {
            Ok(super::tokens::operator_token_list(&op.target()?, op.json).await?)
        }
        OperatorTokenCommand::Revoke { id, op } => {
            Ok(super::tokens::operator_token_revoke(&op.target()?, &id, op.json).await?)
        }
    }
}

async fn run_node(command: NodeCommand) -> Result<(), Failure> {
    match command {
        NodeCommand::Remove { name, force, op } => {
            Ok(super::node::node_remove(&op.target()?, &name, force, op.json).await?)
        }
        NodeCommand::SetAddress { name, address, op } => {
            Ok(super::node::node_set_address(&op.target()?, &name, &address, op.json).await?)
        }
    }
}

/// `muster backup FILE` or `muster backup list`: clap makes them exclusive, yet requires
/// neither, so a bare `muster backup` is refused here.
async fn run_backup(
    command: Option<BackupCommand>,
    file: Option<std::path::PathBuf>,
    op: OperatorArgs,
) -> Result<(), Failure> {
    match (command, file) {
        (
            Some(BackupCommand::List {
                snapshot_dir,
                data_dir,
                json,
            }),
            _,
        ) => Ok(super::backup::backup_list(snapshot_dir, data_dir, json)?),
        (None, Some(file)) => Ok(super::backup::backup(&op.target()?, &file, op.json).await?),
        (None, None) => Err(CliError::Usage(
            "give the FILE to write the backup to, or `muster backup list` to list scheduled \
             snapshots"
                .into(),
        )
        .into()),
    }
}

async fn run_cert(command: CertCommand) -> Result<(), Failure> {
    match command {
        CertCommand::Status(op) => Ok(super::cert::status(&op.target()?, op.json).await?),
    }
}

async fn run_ca(command: CaCommand) -> Result<(), Failure> {
    match command {
        CaCommand::Rotate { finish, force, op } => {
            Ok(super::cert::ca_rotate(&op.target()?, finish, force, op.json).await?)
        }
        CaCommand::Status(op) => Ok(super::cert::ca_status(&op.target()?, op.json).await?),
    }
}

async fn run_config(command: ConfigCommand) -> Result<(), Failure> {
    match command {
        ConfigCommand::Export(op) => Ok(super::apply::export(&op.target()?, op.json).await?),
    }
}

/// What `plan` and `apply` read from their shared flags.
fn apply_args(apply: &ApplyFlags) -> ApplyArgs<'_> {
    ApplyArgs {
        file: &apply.file,
        backups: apply.backups.as_deref(),
        json: apply.op.json,
    }
}

async fn run_plan(apply: ApplyFlags, exit_code: bool) -> Result<(), Failure> {
    let target = apply.op.target()?;
    Ok(super::apply::plan_command(&target, &apply_args(&apply), exit_code).await?)
}

async fn run_apply(
    apply: ApplyFlags,
    yes: bool,
    tokens_out: Option<std::path::PathBuf>,
) -> Result<(), Failure> {
    let target = apply.op.target()?;
    let args = apply_args(&apply);
    Ok(super::apply::apply_command(&target, &args, yes, tokens_out.as_deref()).await?)
}

async fn run_fleetlock(command: FleetlockCommand) -> Result<(), Failure> {
    use super::fleetlock;
    match command {
        FleetlockCommand::Status(op) => Ok(fleetlock::status(&op.target()?, op.json).await?),
        FleetlockCommand::History { group, op } => {
            Ok(fleetlock::history(&op.target()?, group.as_deref(), op.json).await?)
        }
        FleetlockCommand::Release { group, id, op } => {
            Ok(fleetlock::release(&op.target()?, &group, &id, op.json).await?)
        }
        FleetlockCommand::Group { command } => run_fleetlock_group(command).await,
        FleetlockCommand::UnknownGroups { mode, op } => {
            Ok(fleetlock::unknown_groups(&op.target()?, &mode, op.json).await?)
        }
    }
}

async fn run_fleetlock_group(command: FleetlockGroupCommand) -> Result<(), Failure> {
    use super::fleetlock;
    match command {
        FleetlockGroupCommand::Set {
            name,
            slots,
            windows,
            gates,
            op,
        } => {
            let group = fleetlock::GroupSetting {
                name: &name,
                slots,
                windows: &windows,
                gates: &gates,
            };
            Ok(fleetlock::set_group(&op.target()?, &group, op.json).await?)
        }
        FleetlockGroupCommand::List(op) => Ok(fleetlock::status(&op.target()?, op.json).await?),
        FleetlockGroupCommand::Del { name, op } => {
            Ok(fleetlock::delete_group(&op.target()?, &name, op.json).await?)
        }
    }
}

/// `muster secret generate`: the secret alone on stdout, so that it can be captured.
fn run_secret(command: SecretCommand) -> Result<(), Failure> {
    match command {
        SecretCommand::Generate => {
            outln!("{}", muster_shared::token::JoinSecret::generate().reveal());
            eprintln!(
                "a new join secret, shown only this once: store it in a secret store and in a \
                 file (mode 0600) on every machine, and start each with --join-secret-file FILE \
                 (together with --discovery URL, --initial-cluster, or --join HOST:PORT)"
            );
            Ok(())
        }
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
