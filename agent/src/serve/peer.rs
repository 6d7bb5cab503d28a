//! The node's HTTPS listener (mutual TLS). Raft RPCs and leader forwarding require a client
//! certificate issued by this cluster's CA to a current member; the join endpoints are open to
//! nodes that have none yet (they pin the CA instead, and prove their key with a CSR); the
//! operator API needs an operator token.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use muster_shared::tls::{PeerIdentity, peer_identity};
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::accept::{Accepted, Gate, serve_http1};
use super::http::{
    answer, error_response, json_response, no_route, parse_json, read_body, wrong_method,
};
use super::operator::OPERATOR_BODY_LIMIT;
use crate::agent::Agent;
use crate::api::join::{JoinRequest, SecretHello, TokenJoinRequest};
use crate::api::types::{MemberCheck, PeerAddress};
use crate::api::{ApiError, ErrorKind, paths};
use crate::leader::{self, Authority, LeaderOp};
use crate::state::{NodeId, member_id};
use muster_shared::ratelimit::RateLimiter;

/// The largest raft message: an AppendEntries batch is at most `REPLICATION_BATCH_BYTES` (1 MiB)
/// plus one entry (about 400 KiB at most), a snapshot chunk 1 MiB of data as JSON (under 4 MiB).
/// Generous on purpose: refusing a raft message stalls replication.
const RAFT_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// A forwarded operation carries at most one operator request, JSON-escaped once more.
const FORWARD_BODY_LIMIT: usize = 4 * OPERATOR_BODY_LIMIT;
/// A join request is a CSR and a few names.
const JOIN_BODY_LIMIT: usize = 64 * 1024;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Members send requests back to back on pooled connections; an idle one is closed after this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The verified identity of the connection's client certificate, if it sent one.
#[derive(Debug, Clone)]
struct Peer(Option<PeerIdentity>);

/// The address a connection came from (per request, for rate limits).
#[derive(Clone, Copy)]
struct Remote(std::net::IpAddr);

/// Joins per second, and burst, each client address may send to the unauthenticated join
/// routes: plenty for machines joining (each from its own address), little for a flood.
const JOIN_RATE: u32 = 5;
const JOIN_BURST: u32 = 20;

fn router(agent: Arc<Agent>) -> Router {
    let limiter = Arc::new(RateLimiter::new(JOIN_RATE, JOIN_BURST));
    let join_routes = Router::new()
        .route(paths::JOIN, post(join))
        .route(paths::TOKEN_JOIN, post(token_join))
        .route(paths::SECRET_HELLO, post(secret_hello))
        .route_layer(axum::middleware::from_fn_with_state(limiter, limit_joins));
    let raft_routes = Router::new()
        .route(paths::RAFT_APPEND, post(raft_rpc))
        .route(paths::RAFT_VOTE, post(raft_rpc))
        .route(paths::RAFT_SNAPSHOT, post(raft_rpc))
        .route(paths::RAFT_PREVOTE, post(raft_rpc))
        .route(paths::FORWARD, post(forwarded))
        .route(paths::MEMBER_CHECK, get(member_check))
        .route(paths::RAFT_PROBE, get(probe))
        .layer(DefaultBodyLimit::max(RAFT_BODY_LIMIT));
    // The operator API, for callers with an operator token (the unix socket needs none).
    let operator_routes = super::operator::routes()
        .route_layer(axum::middleware::from_fn_with_state(
            agent.clone(),
            require_operator,
        ))
        .layer(DefaultBodyLimit::max(OPERATOR_BODY_LIMIT));
    Router::new()
        .merge(raft_routes)
        .merge(operator_routes)
        .merge(join_routes)
        .route(
            paths::HEALTH,
            get(|| async { json_response(&serde_json::json!({"status": "ok"})) }),
        )
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(agent)
}

/// Refuses a client address that sends joins faster than [`JOIN_RATE`] (HTTP 429).
async fn limit_joins(
    State(limiter): State<Arc<RateLimiter>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(Remote(ip)) = req.extensions().get::<Remote>().copied() else {
        return next.run(req).await;
    };
    match limiter.check(ip) {
        Ok(()) => next.run(req).await,
        Err(retry_after) => {
            tracing::debug!(%ip, "join requests over the rate limit");
            error_response(&ApiError::new(
                ErrorKind::RateLimited,
                format!("too many join requests from {ip}; retry in {retry_after} s"),
            ))
        }
    }
}

/// Lets an operator call through only with a valid operator token.
async fn require_operator(
    State(agent): State<Arc<Agent>>,
    mut req: Request,
    next: axum::middleware::Next,
) -> Response {
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let authorized = if agent.hears_no_leader() {
        authorize_with_leader(&agent, bearer).await
    } else {
        leader::authorize_operator(agent.leader(), bearer)
    };
    match authorized {
        Ok(authority) => {
            req.extensions_mut().insert(authority);
            let mut answer = next.run(req).await;
            // The member records (a removed member's goes at once; the raft configuration
            // drops it a moment later).
            let members: Vec<String> = agent
                .raft()
                .read_local(|s| s.nodes.values().map(|n| n.addr.clone()).collect())
                .unwrap_or_default();
            if let Ok(value) = header::HeaderValue::from_str(&members.join(",")) {
                answer
                    .headers_mut()
                    .insert(crate::api::paths::MEMBERS_HEADER, value);
            }
            if let Ok(value) = header::HeaderValue::from_str(agent.cluster_id()) {
                answer
                    .headers_mut()
                    .insert(crate::api::paths::CLUSTER_HEADER, value);
            }
            answer
        }
        Err(e) => {
            tracing::warn!(error = %e, "refused an operator call");
            error_response(&e)
        }
    }
}

/// A node out of replication (a spare) cannot judge a token from its own state, which stopped
/// when it stopped replicating: the leader checks it, on a status call made with it.
async fn authorize_with_leader(agent: &Agent, bearer: Option<&str>) -> Result<Authority, ApiError> {
    let Some(text) = bearer else {
        // The same refusal as a member's.
        return leader::authorize_operator(agent.leader(), None);
    };
    let authority = leader::operator_authority(agent.leader(), text)?;
    leader::run(agent, &authority, LeaderOp::Status).await?;
    Ok(authority)
}

/// True if `id` was removed from the cluster (per this node's applied state).
fn is_tombstoned(agent: &Agent, id: NodeId) -> bool {
    agent
        .raft()
        .read_local(|s| s.removed.contains(&id))
        .unwrap_or(false)
}

/// Refuses callers without a certificate from this cluster, and counts them. The error is the
/// refusal to send back. Raft routes take members of the configuration only.
fn require_member(agent: &Agent, req: &Request) -> Result<PeerIdentity, ApiError> {
    check_member(agent, req, false)
}

/// Like [`require_member`], but a spare (a member with a record, outside the raft
/// configuration) passes too: for check-ins and forwarded operations.
fn require_member_or_spare(agent: &Agent, req: &Request) -> Result<PeerIdentity, ApiError> {
    check_member(agent, req, true)
}

/// True if the last check-in answer (from a member, over mutual TLS) listed `id`. A spare's
/// own state stops when it stops replicating; members that joined since, a new leader among
/// them, are known to it only this way, and such a leader must be able to make it a standby.
fn checked_in_member(agent: &Agent, id: NodeId) -> bool {
    agent.check_in().members.iter().any(|(m, _)| *m == id)
}

fn is_recorded(agent: &Agent, id: NodeId) -> bool {
    agent
        .raft()
        .read_local(|s| s.nodes.contains_key(&id))
        .unwrap_or(false)
}

fn check_member(agent: &Agent, req: &Request, spares: bool) -> Result<PeerIdentity, ApiError> {
    let peer = req.extensions().get::<Peer>().and_then(|p| p.0.clone());
    let view = agent.raft().view();
    // A removed node is told so once it is out of the configuration. Until then it is still
    // served: a removed leader has to keep replicating until its successor takes over.
    if let Some(id) = &peer
        && id.cluster_id == agent.cluster_id()
        && !view.nodes.contains_key(&id.node_id)
        && is_tombstoned(agent, id.node_id)
    {
        agent.counters().count_refused();
        if agent.counters().first_refusal(id.node_id, "removed") {
            tracing::warn!(peer = %member_id(id.node_id), "refused a raft request: the node was removed (answered 410; logged once)");
        }
        return Err(ApiError::new(
            ErrorKind::Removed,
            format!(
                "node {} was removed from this cluster; it must stop (wipe its data dir to join again as a new node)",
                member_id(id.node_id)
            ),
        ));
    }
    match peer {
        // A member, or anyone from this cluster while this node knows no membership yet (a
        // fresh joiner receives its first AppendEntries from a leader it has never heard of).
        Some(id)
            if id.cluster_id == agent.cluster_id()
                && (view.nodes.is_empty()
                    || view.nodes.contains_key(&id.node_id)
                    || (spares && is_recorded(agent, id.node_id))
                    || checked_in_member(agent, id.node_id)) =>
        {
            Ok(id)
        }
        Some(id) if id.cluster_id == agent.cluster_id() => {
            agent.counters().count_refused();
            if agent.counters().first_refusal(id.node_id, "not a member") {
                tracing::warn!(peer = %member_id(id.node_id), "refused a raft request: the node is not a member (logged once)");
            }
            Err(ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "node {} is not a member of this cluster",
                    member_id(id.node_id)
                ),
            ))
        }
        other => {
            agent.counters().count_refused();
            let why = match other {
                Some(id) => format!(
                    "certificate belongs to cluster {}, not this one",
                    id.cluster_id
                ),
                None => "a client certificate issued by this cluster's CA is required".into(),
            };
            tracing::warn!(%why, "refused a raft request");
            Err(ApiError::new(ErrorKind::Unauthenticated, why))
        }
    }
}

async fn raft_rpc(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    if let Err(refused) = require_member(&agent, &req) {
        return error_response(&refused);
    }
    let path = req.uri().path().to_string();
    if path == paths::RAFT_APPEND {
        agent.removal().heard_from_leader();
    }
    let body = match read_body(req.into_body(), RAFT_BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    match agent.raft().handle_rpc(&path, &body).await {
        Ok(out) => (
            [(header::CONTENT_TYPE, "application/json")],
            Bytes::from(out),
        )
            .into_response(),
        Err(e) => error_response(&ApiError::from(e)),
    }
}

/// A member checks in: it learns that it is still a member, who leads and where everyone is.
/// On the leader the check-in counts as hearing from it (a spare is heard from no other way).
/// A member's report of itself, for the member gathering `muster plan`'s probes.
async fn probe(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    if let Err(refused) = require_member_or_spare(&agent, &req) {
        return error_response(&refused);
    }
    json_response(&crate::leader::probe::local(&agent).await)
}

async fn member_check(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let caller = match require_member_or_spare(&agent, &req) {
        Ok(caller) => caller,
        Err(refused) => return error_response(&refused),
    };
    let view = agent.raft().view();
    // Only a spare's check-in counts as hearing from it: a member of the configuration is
    // judged by its answers to replication, which a one-way cut stops even while it can still
    // call in.
    if view.is_leader && !view.nodes.contains_key(&caller.node_id) {
        agent.raft().liveness().checked_in(caller.node_id);
    }
    let address = |id: NodeId, name: &str, addr: &str| PeerAddress {
        id: member_id(id),
        name: name.to_string(),
        addr: addr.to_string(),
    };
    let members = agent
        .raft()
        .read_local(|s| {
            s.nodes
                .iter()
                .map(|(id, n)| address(*id, &n.name, &n.addr))
                .collect()
        })
        .unwrap_or_default();
    // Name a leader only when this node knows one first-hand: its raft leader while it hears
    // from it, or (a spare) the leader that answered its own latest check-in, if that was
    // lately. A spare's raft view stands still; passing it on would send others to a leader
    // that is gone.
    let hears_leader =
        view.is_leader || agent.removal().silence() < crate::agent::CHECK_IN_AFTER_SILENCE;
    let leader = if hears_leader {
        view.leader
            .and_then(|id| view.nodes.get(&id).map(|n| address(id, &n.name, &n.addr)))
    } else {
        agent
            .check_in()
            .confirmed_leader()
            .map(|(id, n)| address(id, &n.name, &n.addr))
    };
    json_response(&MemberCheck {
        member: true,
        leader,
        members,
    })
}

async fn forwarded(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let caller = match require_member_or_spare(&agent, &req) {
        Err(refused) => return error_response(&refused),
        // A removed node still in the configuration (a voter being demoted) keeps replicating,
        // but it no longer acts for operators.
        Ok(caller) if is_tombstoned(&agent, caller.node_id) => {
            agent.counters().count_refused();
            return error_response(&ApiError::new(
                ErrorKind::Unauthorized,
                format!(
                    "node {} was removed from this cluster and may not act for operators",
                    member_id(caller.node_id)
                ),
            ));
        }
        Ok(caller) => caller,
    };
    let forwarded: leader::Forwarded = match read_body(req.into_body(), FORWARD_BODY_LIMIT)
        .await
        .and_then(|body| parse_json(&body, "a forwarded operation"))
    {
        Ok(f) => f,
        Err(e) => return error_response(&e),
    };
    if !forwarded.op.may_be_forwarded() {
        return error_response(&ApiError::new(
            ErrorKind::Unauthorized,
            "only key-value writes can be forwarded",
        ));
    }
    if !agent.raft().view().is_leader {
        return error_response(&ApiError::new(
            ErrorKind::NoLeader,
            "this node is no longer the leader; retry",
        ));
    }
    if let Err(e) = leader::check_forwarded(agent.leader(), caller.node_id, &forwarded).await {
        tracing::warn!(caller = %member_id(caller.node_id), error = %e, "refused a forwarded operation");
        return error_response(&e);
    }
    answer(leader::execute(&agent, forwarded.op).await)
}

async fn join(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let join: JoinRequest = match read_body(req.into_body(), JOIN_BODY_LIMIT)
        .await
        .and_then(|body| parse_json(&body, "a join request"))
    {
        Ok(j) => j,
        Err(e) => return error_response(&e),
    };
    // Any member answers; the admission runs on the leader (the formation is replicated, so
    // whichever node leads admits the cohort).
    let (name, member) = (join.name.clone(), join.member_id.clone());
    let result = leader::run(&agent, &Authority::Node, LeaderOp::RegistrantJoin { join }).await;
    if let Err(e) = &result {
        tracing::warn!(node = %name, member = %member, kind = %e.kind, error = %e, "join refused");
    }
    answer(result)
}

/// A node joining with a token. Any member answers: the secret is hashed here and the join
/// runs on the leader.
async fn token_join(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let request: TokenJoinRequest = match read_body(req.into_body(), JOIN_BODY_LIMIT)
        .await
        .and_then(|body| parse_json(&body, "a token join request"))
    {
        Ok(j) => j,
        Err(e) => return error_response(&e),
    };
    let (name, token_id) = (request.name.clone(), request.token_id.clone());
    let join: leader::TokenJoin = request.into();
    // A signed secret join has no hash to compare here; the leader checks its signature.
    let checked = match join.secret_signature {
        Some(_) => Ok(()),
        None => leader::precheck_token(agent.leader(), &join.token_id, &join.secret_sha256),
    };
    if let Err(e) = checked {
        tracing::warn!(node = %name, token = %token_id, kind = %e.kind, "token join refused here");
        return error_response(&e);
    }
    let join = LeaderOp::TokenJoin { join };
    let result = leader::run(&agent, &Authority::Node, join).await;
    if let Err(e) = &result {
        tracing::warn!(node = %name, token = %token_id, kind = %e.kind, error = %e, "token join refused");
    }
    answer(result)
}

/// A machine with the join secret asks this member to prove it knows the secret.
async fn secret_hello(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let hello: SecretHello = match read_body(req.into_body(), JOIN_BODY_LIMIT)
        .await
        .and_then(|body| parse_json(&body, "a join-secret hello"))
    {
        Ok(h) => h,
        Err(e) => return error_response(&e),
    };
    answer(leader::prove_secret(agent.leader(), &hello))
}

/// Serves the peer API until `stop` resolves.
pub async fn serve_peers(
    agent: Arc<Agent>,
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    limits: Arc<super::limits::ConnectionLimits>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let app = router(agent.clone());
    let gate = Gate {
        listener: &listener,
        limits: &limits,
        name: "node port",
        agent: &agent,
    };
    loop {
        let Accepted {
            stream,
            remote,
            admitted,
        } = tokio::select! {
            accepted = gate.next() => accepted,
            _ = stop.changed() => return,
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            let _admitted = admitted;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    // Most often a client certificate from another CA: refused and counted.
                    agent.counters().count_refused();
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
                && id.cluster_id != agent.cluster_id()
            {
                tracing::warn!(%remote, peer_cluster = %id.cluster_id, "peer from another cluster");
            }
            // A second line behind the handshake's check: a certificate revoked since.
            if let Some(id) = &identity
                && id.cluster_id == agent.cluster_id()
                && agent.revoked().contains(id.node_id)
            {
                agent.counters().count_refused();
                return;
            }
            let peer = Peer(identity);
            let from = Remote(remote.ip());
            let service = hyper::service::service_fn(
                move |mut req: hyper::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(peer.clone());
                    req.extensions_mut().insert(from);
                    app.clone().oneshot(req.map(axum::body::Body::new))
                },
            );
            serve_http1(tls, service, HEADER_TIMEOUT).await;
        });
    }
}
