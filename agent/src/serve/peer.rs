//! The node's HTTPS listener (mutual TLS). Raft RPCs and leader forwarding require a client
//! certificate issued by this cluster's CA to a current member; the join endpoints are open to
//! nodes that have none yet (they pin the CA instead, and prove their key with a CSR); the
//! operator API needs an operator token.
//!
//! This file routes and serves; who counts as a member is `peer/members.rs`, the join routes
//! are `peer/join.rs`, and the operator token check is `peer/operator_token.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use muster_shared::serve::serve_http1;
use muster_shared::tls::{PeerIdentity, peer_identity};
use tokio::net::TcpListener;
use tower::ServiceExt;

mod join;
mod members;
mod operator_token;

use super::accept::{self, Accepted};
use super::http::{
    answer, error_response, json_response, no_route, parse_json, read_body, wrong_method,
};
use super::operator::OPERATOR_BODY_LIMIT;
use crate::agent::Agent;
use crate::api::types::{MemberCheck, PeerAddress};
use crate::api::{ApiError, ErrorKind, paths};
use crate::leader;
use crate::state::{NodeId, member_id};
use join::{JOIN_BURST, JOIN_RATE, join, limit_joins, secret_hello, token_join};
use members::{is_tombstoned, require_member, require_member_or_spare};
use muster_shared::ratelimit::RateLimiter;
use operator_token::require_operator;

/// The largest raft message: an AppendEntries batch is at most `REPLICATION_BATCH_BYTES` (1 MiB)
/// plus one entry (about 400 KiB at most), a snapshot chunk 1 MiB of data as JSON (under 4 MiB).
/// Generous on purpose: refusing a raft message stalls replication.
const RAFT_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// A forwarded operation carries at most one operator request, JSON-escaped once more.
const FORWARD_BODY_LIMIT: usize = 4 * OPERATOR_BODY_LIMIT;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Members send requests back to back on pooled connections; an idle one is closed after this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// The verified identity of the connection's client certificate, if it sent one.
#[derive(Debug, Clone)]
struct Peer(Option<PeerIdentity>);

/// The address a connection came from (per request, for rate limits).
#[derive(Clone, Copy)]
struct Remote(std::net::IpAddr);

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
        .route(paths::RAFT_CAMPAIGN, post(campaign))
        .route(paths::RAFT_HOLD, post(hold))
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

async fn raft_rpc(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    if let Err(refused) = require_member(agent.here(), &req) {
        return error_response(&refused);
    }
    let path = req.uri().path().to_string();
    if path == paths::RAFT_APPEND {
        agent.group.removal().heard_from_leader();
    }
    let body = match read_body(req.into_body(), RAFT_BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    match agent.group.raft().handle_rpc(&path, &body).await {
        Ok(out) => (
            [(header::CONTENT_TYPE, "application/json")],
            Bytes::from(out),
        )
            .into_response(),
        Err(e) => error_response(&ApiError::from(e)),
    }
}

/// The leader hands over to this voter: call an election now. Only the leader this node
/// follows may ask (its identity is its certificate's).
async fn campaign(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let caller = match require_member(agent.here(), &req) {
        Ok(caller) => caller,
        Err(refused) => return error_response(&refused),
    };
    match agent.group.raft().campaign_for(caller.node_id).await {
        Ok(answer) => json_response(&answer),
        Err(e) => error_response(&ApiError::from(e)),
    }
}

/// The leader this node follows hands over to another voter: this one does not campaign for
/// an election timeout.
async fn hold(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let caller = match require_member(agent.here(), &req) {
        Ok(caller) => caller,
        Err(refused) => return error_response(&refused),
    };
    json_response(&agent.group.raft().hold_for(caller.node_id))
}

/// A member's report of itself, for the member gathering `muster plan`'s probes.
async fn probe(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    if let Err(refused) = require_member_or_spare(agent.here(), &req) {
        return error_response(&refused);
    }
    json_response(&crate::leader::probe::local(agent.here()).await)
}

/// A member checks in: it learns that it is still a member, who leads and where everyone is.
/// On the leader the check-in counts as hearing from it (a spare is heard from no other way).
async fn member_check(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let caller = match require_member_or_spare(agent.here(), &req) {
        Ok(caller) => caller,
        Err(refused) => return error_response(&refused),
    };
    let view = agent.group.raft().view();
    // Only a spare's check-in counts as hearing from it: a member of the configuration is
    // judged by its answers to replication, which a one-way cut stops even while it can still
    // call in.
    if view.is_leader && !view.nodes.contains_key(&caller.node_id) {
        agent.group.raft().liveness().checked_in(caller.node_id);
    }
    let address = |id: NodeId, name: &str, addr: &str| PeerAddress {
        id: member_id(id),
        name: name.to_string(),
        addr: addr.to_string(),
    };
    // A spare's own state stopped when it left the configuration (or never began): it passes
    // on the members the leader last told it of instead.
    let members = if view.nodes.contains_key(&agent.me.node_id) {
        // Removed members keep their record for a while; they are no one to check in with.
        agent
            .group
            .raft()
            .read_local(|s| {
                s.nodes
                    .iter()
                    .filter(|(id, _)| !s.removed.contains(id))
                    .map(|(id, n)| address(*id, &n.name, &n.addr))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        agent
            .group
            .check_in()
            .members
            .iter()
            .map(|(id, n)| address(*id, &n.name, &n.addr))
            .collect()
    };
    // Name a leader only when this node knows one first-hand: its raft leader while it hears
    // from it, or (a spare) the leader that answered its own latest check-in, if that was
    // lately. A spare's raft view stands still; passing it on would send others to a leader
    // that is gone.
    // (A node that has heard no leader since it started knows none first-hand: its raft may
    // remember one from before.)
    let hears_leader = view.is_leader
        || (agent.group.removal().heard_since_start()
            && agent.group.removal().silence() < crate::agent::CHECK_IN_AFTER_SILENCE);
    let leader = if hears_leader {
        view.leader
            .and_then(|id| view.nodes.get(&id).map(|n| address(id, &n.name, &n.addr)))
    } else {
        agent
            .group
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
    let caller = match require_member_or_spare(agent.here(), &req) {
        Err(refused) => return error_response(&refused),
        // A removed node still in the configuration (a voter being demoted) keeps replicating,
        // but it no longer acts for operators.
        Ok(caller) if is_tombstoned(agent.here(), caller.node_id) => {
            agent.counters.count_refused();
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
    if !agent.group.raft().view().is_leader {
        return error_response(&ApiError::new(
            ErrorKind::NoLeader,
            "this node is no longer the leader; retry",
        ));
    }
    if let Err(e) = leader::check_forwarded(agent.here().leader(), caller.node_id, &forwarded).await
    {
        tracing::warn!(caller = %member_id(caller.node_id), error = %e, "refused a forwarded operation");
        return error_response(&e);
    }
    answer(leader::execute(agent.here(), forwarded.op).await)
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
    let gate = accept::gate(&listener, &limits, "node port", &agent.counters);
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
                    agent.counters.count_refused();
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
                && id.cluster_id != agent.me.cluster_id.as_str()
            {
                tracing::warn!(%remote, peer_cluster = %id.cluster_id, "peer from another cluster");
            }
            // A second line behind the handshake's check: a certificate revoked since.
            if let Some(id) = &identity
                && id.cluster_id == agent.me.cluster_id.as_str()
                && agent.trust.revoked.contains(id.node_id)
            {
                agent.counters.count_refused();
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
