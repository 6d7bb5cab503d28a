//! The join routes: open to machines that have no certificate yet (they pin the CA instead,
//! and prove their key with a CSR), so they are rate limited per client address and kept apart
//! from the routes that require membership. Admission itself runs on the leader.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::response::Response;
use muster_shared::ratelimit::RateLimiter;

use super::Remote;
use crate::agent::Agent;
use crate::api::join::{JoinRequest, SecretHello, TokenJoinRequest};
use crate::api::{ApiError, ErrorKind};
use crate::leader::{self, Authority, LeaderOp};
use crate::serve::http::{answer, error_response, parse_json, read_body};

/// A join request is a CSR and a few names.
const JOIN_BODY_LIMIT: usize = 64 * 1024;

/// Joins per second, and burst, each client address may send to the unauthenticated join
/// routes: plenty for machines joining (each from its own address), little for a flood.
pub(super) const JOIN_RATE: u32 = 5;
pub(super) const JOIN_BURST: u32 = 20;

/// Refuses a client address that sends joins faster than [`JOIN_RATE`] (HTTP 429).
pub(super) async fn limit_joins(
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

pub(super) async fn join(State(agent): State<Arc<Agent>>, req: Request) -> Response {
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
    let result = leader::run(
        agent.here(),
        &Authority::Node,
        LeaderOp::RegistrantJoin { join },
    )
    .await;
    if let Err(e) = &result {
        tracing::warn!(node = %name, member = %member, kind = %e.kind, error = %e, "join refused");
    }
    answer(result)
}

/// A node joining with a token. Any member answers: the secret is hashed here and the join
/// runs on the leader.
pub(super) async fn token_join(State(agent): State<Arc<Agent>>, req: Request) -> Response {
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
        None => leader::precheck_token(agent.here().leader(), &join.token_id, &join.secret_sha256),
    };
    if let Err(e) = checked {
        tracing::warn!(node = %name, token = %token_id, kind = %e.kind, "token join refused here");
        return error_response(&e);
    }
    let join = LeaderOp::TokenJoin { join };
    let result = leader::run(agent.here(), &Authority::Node, join).await;
    if let Err(e) = &result {
        tracing::warn!(node = %name, token = %token_id, kind = %e.kind, error = %e, "token join refused");
    }
    answer(result)
}

/// A machine with the join secret asks this member to prove it knows the secret.
pub(super) async fn secret_hello(State(agent): State<Arc<Agent>>, req: Request) -> Response {
    let hello: SecretHello = match read_body(req.into_body(), JOIN_BODY_LIMIT)
        .await
        .and_then(|body| parse_json(&body, "a join-secret hello"))
    {
        Ok(h) => h,
        Err(e) => return error_response(&e),
    };
    answer(leader::prove_secret(agent.here().leader(), &hello))
}
