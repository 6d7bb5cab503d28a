//! The operator commands: where they send their request (the local unix socket, or a member's
//! TLS port with an operator token) and what they print (`output.rs`).

mod apply;
mod args;
mod cert;
mod failure;
mod fleetlock;
mod kv;
mod lease;
mod lease_run;
pub mod output;
mod run;
mod servers;
mod tcp;

pub use args::Cli;
pub use failure::Failure;
pub use run::run;

use std::path::{Path, PathBuf};
use std::time::Duration;

use muster_shared::duration::{format_duration, parse_duration};
use muster_shared::form::urlencode;
use muster_shared::token::{SecretToken, TokenKind};
use serde::de::DeserializeOwned;

use crate::api::types::{
    AddressChange, JOIN_TOKEN_MAX_TTL, JOIN_TOKEN_MAX_USES, JOIN_TOKEN_MIN_TTL, JoinTokenInfo,
    NodeRemoved, OperatorTokenInfo, Status, TokenCreated,
};
use crate::api::{ApiError, ErrorKind, paths};
use crate::backup_file::BackupSnapshot;
use crate::client::{self, CallError};
use crate::config::LEGACY_TOKEN_ENV;
use crate::{config, datadir, outln};

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

/// The environment variable operator commands read their operator token from (never a flag,
/// so that it does not show in `ps`).
pub const OPERATOR_TOKEN_ENV: &str = "MUSTER_OPERATOR_TOKEN";

/// The operator token for `--server`: `MUSTER_OPERATOR_TOKEN`, else the old shared name
/// `MUSTER_TOKEN` (read for one more release, with a warning) when it holds an operator token.
fn operator_token(
    server: &str,
    current: Option<String>,
    legacy: Option<String>,
) -> Result<SecretToken, CliError> {
    let (source, text) = match (current, legacy) {
        (Some(text), _) => (OPERATOR_TOKEN_ENV, text),
        (None, Some(text)) if text.trim_start().starts_with("OP1.") => {
            eprintln!(
                "muster: warning: reading the operator token from {LEGACY_TOKEN_ENV}, which is \
                 read for one more release; rename it {OPERATOR_TOKEN_ENV}"
            );
            (LEGACY_TOKEN_ENV, text)
        }
        (None, legacy) => {
            let join_token_note = if legacy.is_some() {
                format!(" ({LEGACY_TOKEN_ENV} is set, but holds no operator token)")
            } else {
                String::new()
            };
            return Err(CliError::Failed(format!(
                "--server {server} needs an operator token in {OPERATOR_TOKEN_ENV}{join_token_note}: \
                 it is printed at formation, or `muster operator-token create` on a member makes \
                 one. It is read from the environment so that it never shows in `ps`"
            )));
        }
    };
    SecretToken::parse(TokenKind::Operator, &text)
        .map_err(|e| CliError::Failed(format!("{source}: {e}")))
}

/// Where an operator command sends its request.
pub enum Target {
    /// `<data-dir>/muster.sock`: the socket's permissions are the access control.
    Socket(PathBuf),
    /// `--server HOST:PORT[,HOST:PORT…]`: any member's TLS port, with the operator token from
    /// MUSTER_OPERATOR_TOKEN. The server must present the CA the token pins, and every answer
    /// must come from one cluster (`tcp.rs`).
    Tcp(tcp::Cluster),
}

impl Target {
    /// `--data-dir` wins, then `--server`, then `MUSTER_SERVER`, then `MUSTER_DATA_DIR`, then
    /// the default data dir.
    pub fn resolve(data_dir: Option<PathBuf>, server: Option<String>) -> Result<Self, CliError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if let Some(dir) = data_dir {
            return Ok(Target::Socket(datadir::socket_path(&dir)));
        }
        if let Some(server) = server.or_else(|| env("MUSTER_SERVER")) {
            let token = operator_token(&server, env(OPERATOR_TOKEN_ENV), env(LEGACY_TOKEN_ENV))?;
            let servers = servers::parse_list(&server);
            if servers.is_empty() {
                return Err(CliError::Usage(
                    "--server: give HOST:PORT of a member, or several separated by commas".into(),
                ));
            }
            return Ok(Target::Tcp(tcp::Cluster::new(servers, token)));
        }
        let dir = env("MUSTER_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR));
        Ok(Target::Socket(datadir::socket_path(&dir)))
    }

    /// One request, answered with `T` or the agent's error.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<T, CliError> {
        let answer = match self {
            Target::Socket(sock) => {
                let (status, bytes) =
                    client::socket_call(sock, method, path, body, tcp::CALL_TIMEOUT)
                        .await
                        .map_err(|e| {
                            CliError::Unreachable(format!(
                                "cannot reach the agent at {} ({e}): is `muster agent` running with this \
                                 --data-dir? are you its user or root? from another machine use --server \
                                 HOST:PORT with MUSTER_OPERATOR_TOKEN",
                                sock.display()
                            ))
                        })?;
                client::decode_answer(status, &bytes)
            }
            Target::Tcp(cluster) => {
                return cluster.call(method, path, body).await.map_err(tcp_failure);
            }
        };
        answer.map_err(call_failure)
    }
}

/// What a call over TCP that failed tells the operator.
fn tcp_failure(e: tcp::TcpError) -> CliError {
    match e {
        tcp::TcpError::Call(e) => call_failure(e),
        e @ tcp::TcpError::OtherCa { .. } => {
            CliError::Api(ApiError::new(ErrorKind::CaPinMismatch, e.to_string()))
        }
        e @ tcp::TcpError::OtherCluster { .. } => CliError::WrongCluster(e.to_string()),
        e @ tcp::TcpError::NoneAnswered { .. } => CliError::Unreachable(e.to_string()),
    }
}

/// What a call that got no usable answer tells the operator.
fn call_failure(e: CallError) -> CliError {
    match e {
        CallError::Api(e) => CliError::Api(e),
        CallError::PinMismatch { addr, .. } => CliError::Api(ApiError::new(
            ErrorKind::CaPinMismatch,
            format!(
                "{addr} does not present the CA of the operator token's cluster; refusing to send it the token"
            ),
        )),
        CallError::Unreachable { addr, reason, .. } => CliError::Unreachable(format!(
            "cannot reach the agent at {addr}: {reason} (is it running, and is the port open from here?)"
        )),
        CallError::Setup(m) => CliError::Failed(m),
    }
}

fn print_json(v: &impl serde::Serialize) -> Result<(), CliError> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub async fn status(target: &Target) -> Result<Status, CliError> {
    target.call("GET", paths::STATUS, None).await
}

/// `--ttl` of `muster token create`, checked here so a mistake is named before any call.
pub fn join_token_ttl(text: &str) -> Result<Duration, CliError> {
    let ttl = parse_duration(text).map_err(|e| CliError::Usage(format!("--ttl: {e}")))?;
    if !(JOIN_TOKEN_MIN_TTL..=JOIN_TOKEN_MAX_TTL).contains(&ttl) {
        return Err(CliError::Usage(format!(
            "--ttl {text}: a join token lives between {} and {}",
            format_duration(JOIN_TOKEN_MIN_TTL),
            format_duration(JOIN_TOKEN_MAX_TTL)
        )));
    }
    Ok(ttl)
}

/// `--uses` of `muster token create`.
pub fn check_join_token_uses(uses: u32) -> Result<(), CliError> {
    if !(1..=JOIN_TOKEN_MAX_USES).contains(&uses) {
        return Err(CliError::Usage(format!(
            "--uses {uses}: a join token admits between 1 and {JOIN_TOKEN_MAX_USES} nodes"
        )));
    }
    Ok(())
}

/// `muster token create`: the token alone on stdout (so `$(muster token create)` captures just
/// it), what it is on stderr.
pub async fn token_create(
    target: &Target,
    ttl: Duration,
    uses: u32,
    description: String,
    json: bool,
) -> Result<(), CliError> {
    let body = serde_json::json!({
        "ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        "uses": uses,
        "description": description,
    });
    let Some(created) = create_token(target, paths::TOKENS, body, json).await? else {
        return Ok(());
    };
    eprintln!(
        "join token {}: admits {} node(s), expires in {}. It is shown only this once. \
         Use it as: muster agent --join <member> --token <TOKEN> …",
        created.id,
        created.uses.unwrap_or(1),
        format_duration(ttl)
    );
    Ok(())
}

/// Creates a token and prints it: the token alone on stdout (or everything as JSON). Returns
/// what was created when the caller should add its note on stderr.
async fn create_token(
    target: &Target,
    path: &str,
    body: serde_json::Value,
    json: bool,
) -> Result<Option<TokenCreated>, CliError> {
    let created: TokenCreated = target.call("POST", path, Some(body.to_string())).await?;
    if json {
        print_json(&created)?;
        return Ok(None);
    }
    outln!("{}", created.token);
    Ok(Some(created))
}

pub async fn token_list(target: &Target, json: bool) -> Result<(), CliError> {
    let list: Vec<JoinTokenInfo> = target.call("GET", paths::TOKENS, None).await?;
    if json {
        return print_json(&list);
    }
    output::print_join_tokens(&list);
    Ok(())
}

pub async fn token_revoke(target: &Target, id: &str, json: bool) -> Result<(), CliError> {
    let path = format!("{}/{}", paths::TOKENS, urlencode(id));
    let info: JoinTokenInfo = target.call("DELETE", &path, None).await?;
    if json {
        return print_json(&info);
    }
    outln!("join token {} revoked", info.id);
    Ok(())
}

pub async fn operator_token_create(
    target: &Target,
    description: String,
    scopes: Vec<String>,
    json: bool,
) -> Result<(), CliError> {
    let scopes = if scopes.is_empty() {
        vec!["admin".to_string()]
    } else {
        scopes
    };
    for scope in &scopes {
        scope
            .parse::<crate::state::scope::Scope>()
            .map_err(|e| CliError::Usage(format!("--scope: {e}")))?;
    }
    let power = scopes.join(",");
    let body = serde_json::json!({ "description": description, "scopes": scopes });
    let Some(created) = create_token(target, paths::OPERATOR_TOKENS, body, json).await? else {
        return Ok(());
    };
    eprintln!(
        "operator token {} (scopes {power}). It is shown only this once. \
         Use it as: MUSTER_OPERATOR_TOKEN=<TOKEN> muster status --server <member>:<port>",
        created.id
    );
    Ok(())
}

pub async fn operator_token_list(target: &Target, json: bool) -> Result<(), CliError> {
    let list: Vec<OperatorTokenInfo> = target.call("GET", paths::OPERATOR_TOKENS, None).await?;
    if json {
        return print_json(&list);
    }
    output::print_operator_tokens(&list);
    Ok(())
}

pub async fn operator_token_revoke(target: &Target, id: &str, json: bool) -> Result<(), CliError> {
    let path = format!("{}/{}", paths::OPERATOR_TOKENS, urlencode(id));
    let info: OperatorTokenInfo = target.call("DELETE", &path, None).await?;
    if json {
        return print_json(&info);
    }
    outln!("operator token {} revoked", info.id);
    Ok(())
}

pub async fn node_remove(
    target: &Target,
    name: &str,
    force: bool,
    json: bool,
) -> Result<(), CliError> {
    let path = format!("{}/{}?force={force}", paths::MEMBERS, urlencode(name));
    let removed: NodeRemoved = target.call("DELETE", &path, None).await?;
    if json {
        return print_json(&removed);
    }
    outln!("{}", removed.message);
    Ok(())
}

pub async fn node_set_address(
    target: &Target,
    name: &str,
    address: &str,
    json: bool,
) -> Result<(), CliError> {
    let path = format!("{}/{}/address", paths::MEMBERS, urlencode(name));
    let body = serde_json::json!({ "address": address });
    let change: AddressChange = target.call("PUT", &path, Some(body.to_string())).await?;
    if json {
        return print_json(&change);
    }
    if change.changed {
        outln!(
            "{} ({}) moved from {} to {}: peers dial it there now, and it renews its certificate \
             for the new host. Restart it later with --advertise {}",
            change.name,
            change.id,
            change.from,
            change.to,
            change.to
        );
    } else {
        outln!(
            "{} is already at {}; nothing changed",
            change.name,
            change.to
        );
    }
    Ok(())
}

/// `muster backup FILE`: the committed state, checksummed, written atomically with mode 0600
/// (it holds the CA's private key).
pub async fn backup(target: &Target, file: &Path, json: bool) -> Result<(), CliError> {
    let snapshot: BackupSnapshot = target.call("GET", paths::BACKUP, None).await?;
    let bytes = crate::backup_file::encode(&snapshot, crate::clock::now_ms())
        .map_err(|e| CliError::Failed(e.to_string()))?;
    datadir::write_private(file, &bytes)
        .map_err(|e| CliError::Failed(format!("writing {}: {e}", file.display())))?;
    let summary = serde_json::json!({
        "file": file.display().to_string(),
        "cluster_id": snapshot.cluster_id,
        "applied_index": snapshot.applied_index,
        "members": snapshot.state.nodes.len(),
        "keys": snapshot.state.kv.len(),
        "bytes": bytes.len(),
    });
    if json {
        return print_json(&summary);
    }
    outln!(
        "backup of cluster {} (index {}, {} members, {} keys) written to {} ({} bytes, mode 0600: it holds the CA key)",
        snapshot.cluster_id,
        snapshot.applied_index,
        snapshot.state.nodes.len(),
        snapshot.state.kv.len(),
        file.display(),
        bytes.len()
    );
    Ok(())
}

/// `muster backup list`: the scheduled snapshots in `--snapshot-dir` (or `<data-dir>/snapshots`),
/// oldest first, each read and checked in full.
pub fn backup_list(
    snapshot_dir: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    json: bool,
) -> Result<(), CliError> {
    // As the agent resolves it: the flag, then MUSTER_SNAPSHOT_DIR, then <data-dir>/snapshots.
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let dir = snapshot_dir
        .or_else(|| env("MUSTER_SNAPSHOT_DIR").map(PathBuf::from))
        .unwrap_or_else(|| {
            data_dir
                .or_else(|| env("MUSTER_DATA_DIR").map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR))
                .join("snapshots")
        });
    let listed = crate::snapshots::list(&dir).map_err(|e| {
        CliError::Failed(format!(
            "cannot read the snapshot dir {} ({e}): is `muster agent` running with \
             --snapshot-every, and is this its --snapshot-dir (or --data-dir)?",
            dir.display()
        ))
    })?;
    if json {
        return print_json(&listed);
    }
    if listed.is_empty() {
        outln!("no scheduled snapshots in {} yet", dir.display());
        return Ok(());
    }
    let mut rows = Vec::new();
    for l in &listed {
        let file = Path::new(&l.file)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| l.file.clone());
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        rows.push(vec![
            file,
            opt(l.created_ms.map(|ms| {
                humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
                    .to_string()
            })),
            opt(l.applied_index.map(|i| i.to_string())),
            opt(l.members.map(|m| m.to_string())),
            opt(l.keys.map(|k| k.to_string())),
            l.bytes.to_string(),
            match &l.problem {
                None => "ok".into(),
                Some(why) => format!("CORRUPT: {why}"),
            },
        ]);
    }
    output::print_table(
        &[
            "FILE",
            "CREATED (UTC)",
            "INDEX",
            "MEMBERS",
            "KEYS",
            "BYTES",
            "CHECK",
        ],
        rows,
        &[2, 3, 4, 5],
    );
    outln!(
        "{} snapshots in {}; restore one with `muster restore FILE --name … --advertise … --data-dir …`",
        listed.len(),
        dir.display()
    );
    Ok(())
}
