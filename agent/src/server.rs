//! The node's HTTPS listener (mutual TLS). Raft RPCs and leader forwarding require a client
//! certificate issued by this cluster's CA; the join endpoint is open to nodes that have none
//! yet (they pin the CA instead, and prove their registered key with a CSR).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use muster_shared::tls::{PeerIdentity, peer_identity};
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::admission::{JoinRequest, TokenJoinRequest};
use crate::api::types::{ApiError, kind};
use crate::raft::network::{APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::raft::types::Request as Command;
use crate::service::{Agent, ForwardedOp, OpError};

pub const FORWARD_PATH: &str = "/raft/client";
/// A member asks a peer whether it is still a member (answered `410 removed` if not).
pub const MEMBER_PATH: &str = "/raft/member";
pub const JOIN_PATH: &str = "/v1/join";
pub const TOKEN_JOIN_PATH: &str = "/v1/join/token";

/// Snapshot chunks are the largest raft messages (3 MiB by default).
const RAFT_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// Operator requests are small: a key and a value of at most 64 KiB.
const OPERATOR_BODY_LIMIT: usize = 256 * 1024;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The verified identity of the connection's client certificate, if it sent one.
#[derive(Debug, Clone)]
struct Peer(Option<PeerIdentity>);

pub fn error_response(e: &OpError) -> Response {
    let body = serde_json::to_string(&ApiError {
        kind: e.kind.to_string(),
        message: e.message.clone(),
    })
    .unwrap_or_default();
    (
        StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

fn json_response(value: &impl serde::Serialize) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(value).unwrap_or_default(),
    )
        .into_response()
}

fn router(agent: Arc<Agent>) -> Router {
    let raft_routes = Router::new()
        .route(APPEND_PATH, post(raft_rpc))
        .route(VOTE_PATH, post(raft_rpc))
        .route(SNAPSHOT_PATH, post(raft_rpc))
        .route(FORWARD_PATH, post(forwarded))
        .route(MEMBER_PATH, get(member_check))
        .layer(DefaultBodyLimit::max(RAFT_BODY_LIMIT));
    // The operator API, for callers with an operator token (the unix socket needs none).
    let operator_routes = crate::operator::routes()
        .route_layer(axum::middleware::from_fn_with_state(
            agent.clone(),
            require_operator,
        ))
        .layer(DefaultBodyLimit::max(OPERATOR_BODY_LIMIT));
    Router::new()
        .merge(raft_routes)
        .merge(operator_routes)
        .route(JOIN_PATH, post(join))
        .route(TOKEN_JOIN_PATH, post(token_join))
        .route(
            "/v1/health",
            get(|| async { json_response(&serde_json::json!({"status": "ok"})) }),
        )
        .with_state(agent)
}

/// Lets an operator call through only with a valid operator token.
async fn require_operator(
    State(agent): State<Arc<Agent>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match agent.authorize_operator(bearer) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::warn!(error = %e, "refused an operator call");
            error_response(&e)
        }
    }
}

/// True if `id` was removed from the cluster (per this node's applied state).
fn is_tombstoned(agent: &Agent, id: crate::raft::types::NodeId) -> bool {
    agent
        .raft
        .read_local(|s| s.removed.contains(&id))
        .unwrap_or(false)
}

/// Refuses callers without a certificate from this cluster, and counts them. The error is the
/// refusal to send back.
fn require_member(agent: &Agent, req: &Request) -> Result<PeerIdentity, OpError> {
    let peer = req.extensions().get::<Peer>().and_then(|p| p.0.clone());
    // A removed node is told so once it is out of the configuration. Until then it is still
    // served: a removed leader has to keep replicating until its successor takes over.
    if let Some(id) = &peer
        && id.cluster_id == agent.cluster_id
        && !agent.raft.view().nodes.contains_key(&id.node_id)
        && is_tombstoned(agent, id.node_id)
    {
        agent.refused_rpcs.fetch_add(1, Ordering::Relaxed);
        return Err(OpError::of_kind(
            kind::REMOVED,
            format!(
                "node {:x} was removed from this cluster; it must stop (wipe its data dir to join again as a new node)",
                id.node_id
            ),
        ));
    }
    match peer {
        // A member, or anyone from this cluster while this node knows no membership yet (a
        // fresh joiner receives its first AppendEntries from a leader it has never heard of).
        Some(id)
            if id.cluster_id == agent.cluster_id
                && (agent.raft.view().nodes.is_empty()
                    || agent.raft.view().nodes.contains_key(&id.node_id)) =>
        {
            Ok(id)
        }
        Some(id) if id.cluster_id == agent.cluster_id => {
            agent.refused_rpcs.fetch_add(1, Ordering::Relaxed);
            Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                format!("node {:x} is not a member of this cluster", id.node_id),
            ))
        }
        other => {
            agent.refused_rpcs.fetch_add(1, Ordering::Relaxed);
            let why = match other {
                Some(id) => format!(
                    "certificate belongs to cluster {}, not this one",
                    id.cluster_id
                ),
                None => "a client certificate issued by this cluster's CA is required".into(),
            };
            tracing::warn!(%why, "refused a raft request");
            Err(OpError::new(kind::UNAUTHORIZED, 401, why))
        }
    }
}

async fn raft_rpc(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    if let Err(refused) = require_member(&agent, &req) {
        return error_response(&refused);
    }
    let path = req.uri().path().to_string();
    if path == APPEND_PATH {
        agent.removal.heard_from_leader();
    }
    let body = match axum::body::to_bytes(req.into_body(), RAFT_BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 400, e.to_string())),
    };
    match agent.raft.handle_rpc(&path, &body).await {
        Ok(out) => (
            [(header::CONTENT_TYPE, "application/json")],
            Bytes::from(out),
        )
            .into_response(),
        Err(e) => error_response(&OpError::new(kind::INVALID_ARGUMENT, 400, e)),
    }
}

async fn member_check(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    match require_member(&agent, &req) {
        Ok(_) => json_response(&serde_json::json!({"member": true})),
        Err(refused) => error_response(&refused),
    }
}

async fn forwarded(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    match require_member(&agent, &req) {
        Err(refused) => return error_response(&refused),
        // A removed node still in the configuration (a voter being demoted) keeps replicating,
        // but it no longer acts for operators.
        Ok(caller) if is_tombstoned(&agent, caller.node_id) => {
            agent.refused_rpcs.fetch_add(1, Ordering::Relaxed);
            return error_response(&OpError::new(
                kind::UNAUTHORIZED,
                403,
                format!(
                    "node {:x} was removed from this cluster and may not act for operators",
                    caller.node_id
                ),
            ));
        }
        Ok(_) => {}
    }
    let body = match axum::body::to_bytes(req.into_body(), 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 400, e.to_string())),
    };
    let op: ForwardedOp = match serde_json::from_slice(&body) {
        Ok(op) => op,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 400, e.to_string())),
    };
    // Members forward operator writes only; cluster bookkeeping (nodes, the CA) is written by
    // the leader's own code paths, never on a peer's say-so.
    if let ForwardedOp::Write { request } = &op
        && !matches!(request, Command::KvPut { .. } | Command::KvDel { .. })
    {
        return error_response(&OpError::new(
            kind::UNAUTHORIZED,
            403,
            "only key-value writes can be forwarded",
        ));
    }
    if !agent.raft.view().is_leader {
        return error_response(&OpError::new(
            kind::NO_LEADER,
            503,
            "this node is no longer the leader; retry",
        ));
    }
    match agent.execute(op).await {
        Ok(v) => json_response(&v),
        Err(e) => error_response(&e),
    }
}

async fn join(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let body = match axum::body::to_bytes(req.into_body(), 64 * 1024).await {
        Ok(b) => b,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 413, e.to_string())),
    };
    let join: JoinRequest = match serde_json::from_slice(&body) {
        Ok(j) => j,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 400, e.to_string())),
    };
    match agent.admit(join).await {
        Ok(resp) => json_response(&resp),
        Err(e) => {
            tracing::warn!(error = %e, "join refused");
            error_response(&e)
        }
    }
}

/// A node joining with a token. Any member answers: the secret is hashed here and the join
/// runs on the leader.
async fn token_join(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let body = match axum::body::to_bytes(req.into_body(), 64 * 1024).await {
        Ok(b) => b,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 413, e.to_string())),
    };
    let request: TokenJoinRequest = match serde_json::from_slice(&body) {
        Ok(j) => j,
        Err(e) => return error_response(&OpError::new(kind::INVALID_ARGUMENT, 400, e.to_string())),
    };
    let (name, token_id) = (request.name.clone(), request.token_id.clone());
    let join = ForwardedOp::TokenJoin {
        join: request.into(),
    };
    match agent.on_leader(join).await {
        Ok(v) => json_response(&v),
        Err(e) => {
            tracing::warn!(node = %name, token = %token_id, kind = e.kind, error = %e, "token join refused");
            error_response(&e)
        }
    }
}

/// Serves the peer API until `stop` resolves.
pub async fn serve(
    agent: Arc<Agent>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = router(agent.clone());
    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let app = app.clone();
        let cluster_id = agent.cluster_id.clone();
        let agent_for_count = agent.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    // Most often a client certificate from another CA: refused and counted.
                    agent_for_count.refused_rpcs.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            // The verifier accepted the chain (or there was none); read who it is.
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| peer_identity(leaf.as_ref()).ok());
            if let Some(id) = &identity
                && id.cluster_id != cluster_id
            {
                tracing::warn!(%remote, peer_cluster = %id.cluster_id, "peer from another cluster");
            }
            let peer = Peer(identity);
            let service = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer.clone());
                    app.clone().oneshot(req.map(axum::body::Body::new))
                },
            );
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(30));
            let _ = builder.serve_connection(TokioIo::new(tls), service).await;
        });
    }
}
