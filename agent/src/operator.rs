//! The operator API: routes, and its unix socket in the data dir. Access to the socket is
//! controlled by its file permissions (0600: the agent's user and root), so no token is needed
//! there; the same routes on the node's TLS port need an operator token.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use http_body_util::BodyExt;
use serde::Deserialize;

use crate::api::types::{KvPut, kind};
use crate::raft::types::Request;
use crate::server::error_response;
use crate::service::{Agent, ForwardedOp, OpError};

pub const SOCKET_NAME: &str = "muster.sock";

pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET_NAME)
}

#[derive(Deserialize)]
struct KeyQuery {
    key: String,
}

#[derive(Deserialize)]
struct PrefixQuery {
    #[serde(default)]
    prefix: String,
}

fn ok_json(value: &impl serde::Serialize) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(value).unwrap_or_default(),
    )
        .into_response()
}

fn result(r: Result<serde_json::Value, OpError>) -> Response {
    match r {
        Ok(v) => ok_json(&v),
        Err(e) => error_response(&e),
    }
}

fn check_key(key: &str) -> Result<(), OpError> {
    if key.is_empty() || key.len() > 1024 {
        return Err(OpError::new(
            kind::INVALID_ARGUMENT,
            400,
            "keys are 1..=1024 bytes",
        ));
    }
    Ok(())
}

async fn status(State(agent): State<Arc<Agent>>) -> Response {
    match agent.status().await {
        Ok(s) => ok_json(&s),
        Err(e) => error_response(&e),
    }
}

async fn kv_get(State(agent): State<Arc<Agent>>, Query(q): Query<KeyQuery>) -> Response {
    if let Err(e) = check_key(&q.key) {
        return error_response(&e);
    }
    result(agent.on_leader(ForwardedOp::KvGet { key: q.key }).await)
}

async fn kv_put(
    State(agent): State<Arc<Agent>>,
    Query(q): Query<KeyQuery>,
    body: axum::body::Bytes,
) -> Response {
    if let Err(e) = check_key(&q.key) {
        return error_response(&e);
    }
    let put: KvPut = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            return error_response(&OpError::new(
                kind::INVALID_ARGUMENT,
                400,
                format!("expected {{\"value\": …}}: {e}"),
            ));
        }
    };
    if put.value.len() > 64 * 1024 {
        return error_response(&OpError::new(
            kind::INVALID_ARGUMENT,
            400,
            "values are at most 64 KiB",
        ));
    }
    let request = Request::KvPut {
        key: q.key,
        value: put.value,
    };
    result(agent.on_leader(ForwardedOp::Write { request }).await)
}

async fn kv_del(State(agent): State<Arc<Agent>>, Query(q): Query<KeyQuery>) -> Response {
    if let Err(e) = check_key(&q.key) {
        return error_response(&e);
    }
    result(
        agent
            .on_leader(ForwardedOp::Write {
                request: Request::KvDel { key: q.key },
            })
            .await,
    )
}

async fn kv_list(State(agent): State<Arc<Agent>>, Query(q): Query<PrefixQuery>) -> Response {
    result(
        agent
            .on_leader(ForwardedOp::KvList { prefix: q.prefix })
            .await,
    )
}

/// Parses a JSON body, answering `invalid_argument` with what was expected.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8], expected: &str) -> Result<T, OpError> {
    serde_json::from_slice(bytes).map_err(|e| {
        OpError::new(
            kind::INVALID_ARGUMENT,
            400,
            format!("expected {expected}: {e}"),
        )
    })
}

fn answer<T: serde::Serialize>(r: Result<T, OpError>) -> Response {
    match r {
        Ok(v) => ok_json(&v),
        Err(e) => error_response(&e),
    }
}

/// `POST /v1/tokens`.
#[derive(Deserialize)]
struct CreateJoinToken {
    ttl_ms: u64,
    #[serde(default = "one")]
    uses: u32,
    #[serde(default)]
    description: String,
}

fn one() -> u32 {
    1
}

/// `POST /v1/operator-tokens`.
#[derive(Deserialize)]
struct CreateOperatorToken {
    #[serde(default)]
    description: String,
}

#[derive(Deserialize)]
struct RemoveQuery {
    #[serde(default)]
    force: bool,
}

async fn token_create(State(agent): State<Arc<Agent>>, bytes: axum::body::Bytes) -> Response {
    let req: CreateJoinToken = match body(&bytes, r#"{"ttl_ms": …, "uses": …, "description": …}"#)
    {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    answer(
        agent
            .issue_join_token(
                std::time::Duration::from_millis(req.ttl_ms),
                req.uses,
                req.description,
            )
            .await,
    )
}

async fn token_list(State(agent): State<Arc<Agent>>) -> Response {
    result(agent.on_leader(ForwardedOp::ListJoinTokens).await)
}

async fn token_revoke(State(agent): State<Arc<Agent>>, UrlPath(id): UrlPath<String>) -> Response {
    result(agent.on_leader(ForwardedOp::RevokeJoinToken { id }).await)
}

async fn operator_token_create(
    State(agent): State<Arc<Agent>>,
    bytes: axum::body::Bytes,
) -> Response {
    let req: CreateOperatorToken = match body(&bytes, r#"{"description": …}"#) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    answer(agent.issue_operator_token(req.description).await)
}

async fn operator_token_list(State(agent): State<Arc<Agent>>) -> Response {
    result(agent.on_leader(ForwardedOp::ListOperatorTokens).await)
}

async fn operator_token_revoke(
    State(agent): State<Arc<Agent>>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    result(
        agent
            .on_leader(ForwardedOp::RevokeOperatorToken { id })
            .await,
    )
}

async fn member_remove(
    State(agent): State<Arc<Agent>>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<RemoveQuery>,
) -> Response {
    result(
        agent
            .on_leader(ForwardedOp::RemoveNode {
                name,
                force: q.force,
            })
            .await,
    )
}

async fn backup(State(agent): State<Arc<Agent>>) -> Response {
    result(agent.on_leader(ForwardedOp::Backup).await)
}

/// The operator API. The unix socket serves it as is; the node's TLS port serves it behind an
/// operator-token check (see `server.rs`).
pub fn routes() -> Router<Arc<Agent>> {
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/kv", get(kv_get).put(kv_put).delete(kv_del))
        .route("/v1/kv/list", get(kv_list))
        .route("/v1/tokens", get(token_list).post(token_create))
        .route("/v1/tokens/{id}", delete(token_revoke))
        .route(
            "/v1/operator-tokens",
            get(operator_token_list).post(operator_token_create),
        )
        .route("/v1/operator-tokens/{id}", delete(operator_token_revoke))
        .route("/v1/members/{name}", delete(member_remove))
        .route("/v1/backup", get(backup))
}

/// Serves the operator API on `<data-dir>/muster.sock` until `stop` flips.
pub async fn serve(
    agent: Arc<Agent>,
    data_dir: &Path,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = socket_path(data_dir);
    // A socket left by a previous run (we hold the data dir's lock, so it is not in use).
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    let app = routes().with_state(agent);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await
}

/// CLI side: one HTTP request over the unix socket. Returns status and body.
pub async fn call(
    socket: &Path,
    method: &str,
    path_and_query: &str,
    body: Option<String>,
) -> std::io::Result<(u16, String)> {
    let stream = tokio::net::UnixStream::connect(socket).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(header::HOST, "muster")
        .header(header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.unwrap_or_default(),
        )))
        .map_err(std::io::Error::other)?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(std::io::Error::other)?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
