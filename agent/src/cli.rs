//! The operator commands: where they send their request (the local unix socket, or a member's
//! TLS port with an operator token) and what they print.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use muster_shared::form::urlencode;
use muster_shared::token::{SecretToken, TokenKind};

use crate::api::types::{
    ApiError, JoinTokenInfo, NodeRemoved, OperatorTokenInfo, Status, TokenCreated,
};
use crate::backup::BackupSnapshot;
use crate::{cli_output, config, operator, outln};

/// Where an operator command sends its request.
pub enum Target {
    /// `<data-dir>/muster.sock`: the socket's permissions are the access control.
    Socket(PathBuf),
    /// `--server HOST:PORT`: any member's TLS port, with the operator token from MUSTER_TOKEN.
    /// The server must present the CA the token pins.
    Tcp { server: String, token: SecretToken },
}

impl Target {
    /// `--data-dir` wins, then `--server`, then `MUSTER_SERVER`, then `MUSTER_DATA_DIR`, then
    /// the default data dir.
    pub fn resolve(data_dir: Option<PathBuf>, server: Option<String>) -> Result<Self> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if let Some(dir) = data_dir {
            return Ok(Target::Socket(operator::socket_path(&dir)));
        }
        if let Some(server) = server.or_else(|| env("MUSTER_SERVER")) {
            let text = env("MUSTER_TOKEN").with_context(|| {
                format!(
                    "--server {server} needs an operator token in MUSTER_TOKEN (printed at formation, \
                     or `muster operator-token create` on a member); it is read from the environment \
                     so that it never shows in `ps`"
                )
            })?;
            let token = SecretToken::parse(TokenKind::Operator, &text).context("MUSTER_TOKEN")?;
            return Ok(Target::Tcp { server, token });
        }
        let dir = env("MUSTER_DATA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(config::DEFAULT_DATA_DIR));
        Ok(Target::Socket(operator::socket_path(&dir)))
    }

    /// One request; API errors become messages with their kind.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<serde_json::Value> {
        let (status, text) = match self {
            Target::Socket(sock) => operator::call(sock, method, path, body)
                .await
                .with_context(|| {
                    format!(
                        "cannot reach the agent at {} (is `muster agent` running with this --data-dir? are you its user or root? \
                         from another machine use --server HOST:PORT with MUSTER_TOKEN)",
                        sock.display()
                    )
                })?,
            Target::Tcp { server, token } => tcp_call(server, token, method, path, body).await?,
        };
        if status >= 400 {
            let err: ApiError = serde_json::from_str(&text).unwrap_or(ApiError {
                kind: "internal".into(),
                message: text,
            });
            bail!("{} ({})", err.message, err.kind);
        }
        serde_json::from_str(&text).context("the agent answered something that is not JSON")
    }
}

async fn tcp_call(
    server: &str,
    token: &SecretToken,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Result<(u16, String)> {
    let http = crate::join::pinned_http(token.ca_pin())?;
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut req = http
        .request(method, format!("https://{server}{path}"))
        .bearer_auth(token.reveal())
        .timeout(Duration::from_secs(30));
    if let Some(body) = body {
        req = req.header("content-type", "application/json").body(body);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) if muster_shared::tls::is_ca_pin_mismatch(&e) => bail!(
            "{server} does not present the CA of the operator token's cluster; refusing to send it the token (ca_pin_mismatch)"
        ),
        Err(e) => bail!(
            "cannot reach the agent at {server}: {e} (is it running, and is the port open from here?)"
        ),
    };
    let status = resp.status().as_u16();
    Ok((status, resp.text().await?))
}

fn decode<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).context("the agent answered in an unexpected shape")
}

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    outln!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub async fn status(target: &Target) -> Result<Status> {
    decode(target.call("GET", "/v1/status", None).await?)
}

pub async fn kv_get(target: &Target, key: &str, json: bool) -> Result<()> {
    let v = target
        .call("GET", &format!("/v1/kv?key={}", urlencode(key)), None)
        .await?;
    if json {
        outln!("{v}");
    } else {
        outln!("{}", v["value"].as_str().unwrap_or_default());
    }
    Ok(())
}

pub async fn kv_put(target: &Target, key: &str, value: &str, json: bool) -> Result<()> {
    let body = serde_json::json!({ "value": value }).to_string();
    let v = target
        .call("PUT", &format!("/v1/kv?key={}", urlencode(key)), Some(body))
        .await?;
    if json {
        outln!("{v}");
    }
    Ok(())
}

pub async fn kv_del(target: &Target, key: &str, json: bool) -> Result<()> {
    let v = target
        .call("DELETE", &format!("/v1/kv?key={}", urlencode(key)), None)
        .await?;
    if json {
        outln!("{v}");
    }
    Ok(())
}

pub async fn kv_list(target: &Target, prefix: &str, json: bool) -> Result<()> {
    let v = target
        .call(
            "GET",
            &format!("/v1/kv/list?prefix={}", urlencode(prefix)),
            None,
        )
        .await?;
    if json {
        outln!("{v}");
    } else if let Some(entries) = v.as_array() {
        for e in entries {
            outln!(
                "{}\t{}",
                e["key"].as_str().unwrap_or_default(),
                e["value"].as_str().unwrap_or_default()
            );
        }
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
) -> Result<()> {
    let body = serde_json::json!({
        "ttl_ms": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        "uses": uses,
        "description": description,
    });
    let Some(created) = create_token(target, "/v1/tokens", body, json).await? else {
        return Ok(());
    };
    eprintln!(
        "join token {}: admits {} node(s), expires in {}. It is shown only this once. \
         Use it as: muster agent --join <member> --token <TOKEN> …",
        created.id,
        created.uses.unwrap_or(1),
        muster_shared::duration::format_duration(Duration::from_secs(ttl.as_secs()))
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
) -> Result<Option<TokenCreated>> {
    let created: TokenCreated = decode(target.call("POST", path, Some(body.to_string())).await?)?;
    if json {
        print_json(&created)?;
        return Ok(None);
    }
    outln!("{}", created.token);
    Ok(Some(created))
}

pub async fn token_list(target: &Target, json: bool) -> Result<()> {
    let list: Vec<JoinTokenInfo> = decode(target.call("GET", "/v1/tokens", None).await?)?;
    if json {
        return print_json(&list);
    }
    cli_output::print_join_tokens(&list);
    Ok(())
}

pub async fn token_revoke(target: &Target, id: &str, json: bool) -> Result<()> {
    let info: JoinTokenInfo = decode(
        target
            .call("DELETE", &format!("/v1/tokens/{}", urlencode(id)), None)
            .await?,
    )?;
    if json {
        return print_json(&info);
    }
    outln!("join token {} revoked", info.id);
    Ok(())
}

pub async fn operator_token_create(target: &Target, description: String, json: bool) -> Result<()> {
    let body = serde_json::json!({ "description": description });
    let Some(created) = create_token(target, "/v1/operator-tokens", body, json).await? else {
        return Ok(());
    };
    eprintln!(
        "operator token {}: full operator access over TCP. It is shown only this once. \
         Use it as: MUSTER_TOKEN=<TOKEN> muster status --server <member>:<port>",
        created.id
    );
    Ok(())
}

pub async fn operator_token_list(target: &Target, json: bool) -> Result<()> {
    let list: Vec<OperatorTokenInfo> =
        decode(target.call("GET", "/v1/operator-tokens", None).await?)?;
    if json {
        return print_json(&list);
    }
    cli_output::print_operator_tokens(&list);
    Ok(())
}

pub async fn operator_token_revoke(target: &Target, id: &str, json: bool) -> Result<()> {
    let info: OperatorTokenInfo = decode(
        target
            .call(
                "DELETE",
                &format!("/v1/operator-tokens/{}", urlencode(id)),
                None,
            )
            .await?,
    )?;
    if json {
        return print_json(&info);
    }
    outln!("operator token {} revoked", info.id);
    Ok(())
}

pub async fn node_remove(target: &Target, name: &str, force: bool, json: bool) -> Result<()> {
    let path = format!("/v1/members/{}?force={force}", urlencode(name));
    let removed: NodeRemoved = decode(target.call("DELETE", &path, None).await?)?;
    if json {
        return print_json(&removed);
    }
    outln!("{}", removed.message);
    Ok(())
}

/// `muster backup FILE`: the committed state, checksummed, written atomically with mode 0600
/// (it holds the CA's private key).
pub async fn backup(target: &Target, file: &Path, json: bool) -> Result<()> {
    let snapshot: BackupSnapshot = decode(target.call("GET", "/v1/backup", None).await?)?;
    let bytes = crate::backup::encode(&snapshot, crate::service::now_ms())?;
    crate::identity::write_private(file, &bytes)
        .with_context(|| format!("writing {}", file.display()))?;
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
