//! Where an operator command sends its request: the local agent's unix socket, or a member's
//! TLS port with the operator token from the environment; and what a call that failed tells
//! the operator. Kept apart from the commands, which only say what to ask.

use std::path::PathBuf;

use muster_shared::token::{SecretToken, TokenKind};
use serde::de::DeserializeOwned;

use super::{CliError, servers, tcp};
use crate::api::{ApiError, ErrorKind};
use crate::client::{self, CallError};
use crate::config::LEGACY_TOKEN_ENV;
use crate::{config, datadir};

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
