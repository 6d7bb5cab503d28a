//! Carrying out one step of `muster apply` against the cluster: one call of the agent API per
//! action, and for a machine the file adds, the join token and the command (or env file) that
//! starts it. Kept apart from deciding which step to take (`decide.rs`), so that everything
//! here changes the cluster and nothing here chooses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use muster_shared::duration::format_duration;
use muster_shared::form::urlencode;
use serde::Serialize;

use super::describe::settings_text;
use crate::api::paths;
use crate::api::probe::{SettingsInfo, SettingsUpdate};
use crate::api::types::{NodeRemoved, TokenCreated};
use crate::apply::{Action, Manifest, Observed, Step};
use crate::cli::{CliError, Target};
use crate::datadir;

/// How long a join token `apply` issues stays valid: long enough to boot a machine.
const APPLY_TOKEN_TTL: Duration = Duration::from_secs(3600);

/// The command to start a machine the file adds with, as `apply --json` reports it.
#[derive(Serialize)]
pub struct JoinCommand {
    name: String,
    command: String,
    /// Where `--tokens-out` wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<PathBuf>,
}

/// A step carried out: the progress line, and for a new machine how to start it.
pub struct Done {
    pub summary: String,
    pub join: Option<JoinCommand>,
}

impl Done {
    fn said(summary: String) -> Self {
        Done {
            summary,
            join: None,
        }
    }
}

/// A machine the file adds, as `IssueToken` names it.
struct NewMachine<'a> {
    name: &'a str,
    address: &'a str,
    data_dir: &'a str,
}

pub async fn carry_out(
    target: &Target,
    step: &Step,
    observed: &Observed,
    manifest: &Manifest,
    tokens_out: Option<&Path>,
) -> Result<Done, CliError> {
    match &step.action {
        Action::RemoveMember { name, .. } => remove_member(target, step, name).await,
        Action::IssueToken {
            name,
            address,
            data_dir,
        } => {
            let machine = NewMachine {
                name,
                address,
                data_dir,
            };
            let join = join_addresses(observed, manifest);
            issue_token(target, &machine, &join, tokens_out).await
        }
        Action::SetSettings { to, .. } => set_settings(target, to).await,
        Action::SetFleetlockGroup {
            group,
            slots,
            windows,
            gates,
            ..
        } => {
            let path = format!("{}/{}", paths::FLEETLOCK_GROUPS, urlencode(group));
            let body = serde_json::json!({ "slots": slots, "windows": windows, "gates": gates })
                .to_string();
            let _: serde_json::Value = target.call("PUT", &path, Some(body)).await?;
            Ok(Done::said(format!(
                "FleetLock group {group}: {slots} slot(s)"
            )))
        }
        Action::DeleteFleetlockGroup { group } => {
            let path = format!("{}/{}", paths::FLEETLOCK_GROUPS, urlencode(group));
            let _: serde_json::Value = target.call("DELETE", &path, None).await?;
            Ok(Done::said(format!("FleetLock group {group} deleted")))
        }
        Action::SetUnknownGroups { to, .. } => {
            let body = serde_json::json!({ "unknown_groups": to }).to_string();
            let _: serde_json::Value = target
                .call("PUT", paths::FLEETLOCK_SETTINGS, Some(body))
                .await?;
            Ok(Done::said(format!("FleetLock unknown groups: {to}")))
        }
        Action::Upgrade { name, .. } => Ok(Done::said(format!("{name}: upgrade by hand"))),
    }
}

async fn remove_member(target: &Target, step: &Step, name: &str) -> Result<Done, CliError> {
    let path = format!("{}/{}", paths::MEMBERS, urlencode(name));
    let removed: NodeRemoved = target.call("DELETE", &path, None).await?;
    Ok(Done::said(format!(
        "removed {name} ({}; failure tolerance {} → {}): {}",
        step.reason, step.tolerance_before, step.tolerance_after, removed.message
    )))
}

async fn set_settings(target: &Target, to: &SettingsUpdate) -> Result<Done, CliError> {
    let body = serde_json::to_string(to)?;
    let _: SettingsInfo = target.call("PUT", paths::SETTINGS, Some(body)).await?;
    Ok(Done::said(format!("settings: {}", settings_text(to))))
}

/// The `--join` list for a new machine: members that answer and stay (apply may remove the
/// others a step later).
fn join_addresses(observed: &Observed, manifest: &Manifest) -> String {
    let join: Vec<&str> = observed
        .members
        .iter()
        .filter(|m| m.reachable && manifest.members.iter().any(|d| d.name == m.name))
        .map(|m| m.address.as_str())
        .collect();
    join.join(",")
}

/// A single-use join token for `machine`, and how to start it: printed, or written to
/// `--tokens-out DIR/NAME.env`.
async fn issue_token(
    target: &Target,
    machine: &NewMachine<'_>,
    join: &str,
    tokens_out: Option<&Path>,
) -> Result<Done, CliError> {
    let name = machine.name;
    let body = serde_json::json!({
        "ttl_ms": u64::try_from(APPLY_TOKEN_TTL.as_millis()).unwrap_or(u64::MAX),
        "uses": 1,
        "description": format!("muster apply: {name}"),
    });
    let created: TokenCreated = target
        .call("POST", paths::TOKENS, Some(body.to_string()))
        .await?;
    let command = format!(
        "muster agent --name {name} --advertise {} --data-dir {} --join {join} --token {}",
        machine.address, machine.data_dir, created.token
    );
    let Some(dir) = tokens_out else {
        return Ok(Done {
            summary: format!(
                "join token {} for {name} (single use, expires in {}); start \
                 {name} with an empty data dir:\n    {command}",
                created.id,
                format_duration(APPLY_TOKEN_TTL)
            ),
            join: Some(JoinCommand {
                name: name.to_string(),
                command,
                file: None,
            }),
        });
    };
    write_env_file(dir, machine, join, &created, command)
}

/// `--tokens-out`: the token goes to `DIR/NAME.env` (mode 0600) only.
fn write_env_file(
    dir: &Path,
    machine: &NewMachine<'_>,
    join: &str,
    created: &TokenCreated,
    command: String,
) -> Result<Done, CliError> {
    let name = machine.name;
    let file = dir.join(format!("{name}.env"));
    let text = format!(
        "# muster apply: join token {id} for {name}, single use, expires in {expires}.\n\
         # A systemd EnvironmentFile for `muster agent`, or run:\n\
         # {command}\n\
         MUSTER_NAME={name}\nMUSTER_ADVERTISE={address}\nMUSTER_DATA_DIR={data_dir}\n\
         MUSTER_JOIN={join}\nMUSTER_JOIN_TOKEN={token}\n",
        id = created.id,
        token = created.token,
        expires = format_duration(APPLY_TOKEN_TTL),
        address = machine.address,
        data_dir = machine.data_dir,
    );
    datadir::write_private(&file, text.as_bytes())
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", file.display())))?;
    Ok(Done {
        summary: format!(
            "join token {} for {name} written to {} (mode 0600)",
            created.id,
            file.display()
        ),
        // The token is in the file only, never on stdout (not even with --json).
        join: Some(JoinCommand {
            name: name.to_string(),
            command: command.replace(&created.token, "$MUSTER_JOIN_TOKEN"),
            file: Some(file),
        }),
    })
}
