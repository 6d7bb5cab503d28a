//! The operator API: its routes, and its unix socket in the data dir. Access to the socket is
//! controlled by its file permissions (0600: the agent's user and root), so no token is needed
//! there; the same routes on the node's TLS port need an operator token (see `peer.rs`).

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path as UrlPath, Query, State};
use axum::response::Response;
use axum::routing::{delete, get, post, put};
use serde::Deserialize;

use super::http::{answer, error_response, parse_json};
use crate::agent::Agent;
use crate::api::paths;
use crate::leader::{self, Authority, LeaderOp};

/// Largest operator request body: a key and a value at their limits, every byte of both
/// escaped by JSON as `\u00XX` (six bytes each), with room to spare.
pub const OPERATOR_BODY_LIMIT: usize = 512 * 1024;

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
    /// What it may do (see `state::scope`); `admin` when not given.
    #[serde(default = "crate::state::scope::admin_only")]
    scopes: Vec<crate::state::scope::Scope>,
}

#[derive(Deserialize)]
struct RemoveQuery {
    #[serde(default)]
    force: bool,
}

async fn status(State(agent): State<Arc<Agent>>) -> Response {
    answer(leader::status(agent.here()).await)
}

/// Who is asking: put into every request by the socket's router (`LocalSocket`) or by the TCP
/// port's token check (`OperatorToken`).
type By = Extension<Authority>;

async fn token_create(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    bytes: Bytes,
) -> Response {
    let req: CreateJoinToken =
        match parse_json(&bytes, r#"{"ttl_ms": …, "uses": …, "description": …}"#) {
            Ok(r) => r,
            Err(e) => return error_response(&e),
        };
    let ttl = std::time::Duration::from_millis(req.ttl_ms);
    answer(leader::issue_join_token(agent.here(), &by, ttl, req.uses, req.description).await)
}

async fn token_list(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::ListJoinTokens).await)
}

async fn token_revoke(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(id): UrlPath<String>,
) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::RevokeJoinToken { id }).await)
}

async fn operator_token_create(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    bytes: Bytes,
) -> Response {
    let req: CreateOperatorToken = match parse_json(
        &bytes,
        r#"{"description": …, "scopes": ["admin" | "kv:PREFIX" | "kv:PREFIX:ro" | "lease:NAME" | "fleetlock", …]}"#,
    ) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    answer(leader::issue_operator_token(agent.here(), &by, req.description, req.scopes).await)
}

async fn operator_token_list(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::ListOperatorTokens).await)
}

async fn operator_token_revoke(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(id): UrlPath<String>,
) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::RevokeOperatorToken { id }).await)
}

async fn member_remove(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<RemoveQuery>,
) -> Response {
    let op = LeaderOp::RemoveNode {
        name,
        force: q.force,
    };
    answer(leader::run(agent.here(), &by, op).await)
}

#[derive(Deserialize)]
struct NewAddress {
    address: String,
}

async fn member_set_address(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    let new: NewAddress = match parse_json(&body, "{\"address\": \"HOST:PORT\"}") {
        Ok(n) => n,
        Err(e) => return error_response(&e),
    };
    let op = LeaderOp::SetAddress {
        name,
        addr: new.address,
    };
    answer(leader::run(agent.here(), &by, op).await)
}

#[derive(Deserialize)]
struct TransferTo {
    #[serde(default)]
    to: Option<String>,
}

async fn leader_transfer(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    Query(q): Query<TransferTo>,
) -> Response {
    let op = LeaderOp::TransferLeadership {
        to: q.to.filter(|t| !t.is_empty()),
    };
    answer(leader::run(agent.here(), &by, op).await)
}

async fn ca_status(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::CaStatus).await)
}

#[derive(Deserialize, Default)]
struct CaRotation {
    #[serde(default)]
    finish: bool,
    #[serde(default)]
    force: bool,
}

async fn ca_rotate(State(agent): State<Arc<Agent>>, Extension(by): By, body: Bytes) -> Response {
    let asked: CaRotation = if body.is_empty() {
        CaRotation::default()
    } else {
        match parse_json(&body, "{\"finish\": bool, \"force\": bool}") {
            Ok(a) => a,
            Err(e) => return error_response(&e),
        }
    };
    if !asked.finish {
        return answer(leader::run(agent.here(), &by, LeaderOp::CaRotate).await);
    }
    // A live join secret ends with the old CA; its successor is made here so that the secret
    // leaves this node only in the answer (the leader records its hash).
    let secret = muster_shared::token::JoinSecret::generate();
    let finish = leader::ask::ca_finish(
        asked.force,
        Some(crate::state::SecretReplacement {
            id: secret.id(),
            secret_sha256: secret.secret_hash(),
            verify_key: secret.verify_key(),
        }),
    );
    let finished = leader::ask(agent.here(), &by, finish)
        .await
        .map(|mut status| {
            if status.join_secret.is_some() {
                status.join_secret = Some(secret.reveal());
            }
            status
        });
    answer(finished)
}

async fn settings_get(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::Settings).await)
}

async fn settings_put(State(agent): State<Arc<Agent>>, Extension(by): By, body: Bytes) -> Response {
    let settings = match parse_json(
        &body,
        "{replace_after_ms, cleanup_dead_after_ms, min_voters, standbys}",
    ) {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    answer(leader::run(agent.here(), &by, LeaderOp::SetSettings { settings }).await)
}

/// Gathered by this member (not the leader): it must answer while there is no leader, so that
/// `muster plan` can tell a lost quorum from an election. It makes every member write to its
/// data dir, so a token needs admin scope (judged on this member's applied state, which is
/// all there is without a leader).
async fn probe(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    if let Authority::OperatorToken { id, .. } = &by {
        let scopes = agent
            .group
            .raft()
            .read_local(|s| s.operator_tokens.get(id).map(|t| t.scopes.clone()))
            .ok()
            .flatten()
            .unwrap_or_default();
        if !crate::state::scope::allows(&scopes, crate::state::scope::Access::Admin) {
            return error_response(&crate::api::ApiError::new(
                crate::api::ErrorKind::Unauthorized,
                format!(
                    "operator token {id} may not probe the members (needs admin); use an admin \
                     token or the member's socket"
                ),
            ));
        }
    }
    answer(leader::probe::report(agent.here()).await)
}

async fn backup(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::Backup).await)
}

/// The operator API. The unix socket serves it as is; the node's TLS port serves it behind an
/// operator-token check.
pub fn routes() -> Router<Arc<Agent>> {
    Router::new()
        .route(paths::STATUS, get(status))
        .route(paths::TOKENS, get(token_list).post(token_create))
        .route(&format!("{}/{{id}}", paths::TOKENS), delete(token_revoke))
        .route(
            paths::OPERATOR_TOKENS,
            get(operator_token_list).post(operator_token_create),
        )
        .route(
            &format!("{}/{{id}}", paths::OPERATOR_TOKENS),
            delete(operator_token_revoke),
        )
        .route(
            &format!("{}/{{name}}", paths::MEMBERS),
            delete(member_remove),
        )
        .route(
            &format!("{}/{{name}}/address", paths::MEMBERS),
            put(member_set_address),
        )
        .route(paths::LEADER_TRANSFER, post(leader_transfer))
        .route(paths::BACKUP, get(backup))
        .route(paths::SETTINGS, get(settings_get).put(settings_put))
        .route(paths::PROBE, get(probe))
        .route(paths::CA, get(ca_status))
        .route(paths::CA_ROTATE, post(ca_rotate))
        .route(paths::METRICS, get(super::observe::metrics_text))
        .merge(super::operator_kv::routes())
        .merge(super::operator_lease::routes())
        .merge(super::operator_fleetlock::routes())
        .layer(axum::extract::DefaultBodyLimit::max(OPERATOR_BODY_LIMIT))
}

/// Serves the operator API on the data dir's socket until `stop` flips.
pub async fn serve_socket(
    agent: Arc<Agent>,
    data_dir: &Path,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = crate::datadir::socket_path(data_dir);
    // A socket left by a previous run (we hold the data dir's lock, so it is not in use).
    let _ = std::fs::remove_file(&path);
    // The socket is its own access control, so it must never exist with a wider mode, not even
    // for a moment: it is bound inside a fresh 0700 directory, narrowed to 0600 there, and only
    // then moved into place.
    let staging = data_dir.join(format!(
        ".muster.sock-{}",
        muster_shared::token::random_hex(6)
    ));
    std::fs::create_dir(&staging)?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o700))?;
    let bound = (|| {
        let staged = staging.join("s");
        let listener = tokio::net::UnixListener::bind(&staged)?;
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, &path)?;
        Ok::<_, std::io::Error>(listener)
    })();
    let _ = std::fs::remove_dir_all(&staging);
    let listener = bound?;
    let app = routes()
        .fallback(super::http::no_route)
        .method_not_allowed_fallback(super::http::wrong_method)
        .layer(Extension(Authority::LocalSocket))
        .with_state(agent);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await
}
