//! The operator API's lease routes: claim or renew (`POST /v1/leases/NAME`), release
//! (`DELETE /v1/leases/NAME` with the holder and the grant's key), read one, list all. A
//! presented lease key is hashed here: only its hash travels to the leader. Part of the operator API
//! (`operator.rs` merges them).

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path as UrlPath, State};
use axum::response::Response;
use axum::routing::get;

use super::http::{answer, error_response, parse_json};
use crate::agent::{Agent, Here};
use crate::api::types::{LeaseClaim, LeaseRelease};
use crate::api::{ApiError, ErrorKind, paths};
use crate::leader::lease::LeaseRequest;
use crate::leader::{self, Authority, LeaderOp};

type By = Extension<Authority>;

fn hash(key: &str) -> String {
    muster_shared::token::sha256_hex(key.as_bytes())
}

pub fn routes() -> Router<Arc<Agent>> {
    Router::new().route(paths::LEASES, get(list)).route(
        &format!("{}/{{name}}", paths::LEASES),
        get(read).post(claim).delete(release),
    )
}

async fn change(here: Here<'_>, by: &Authority, request: LeaseRequest) -> Response {
    if let Err(e) = request.check() {
        return error_response(&e);
    }
    answer(leader::run(here, by, LeaderOp::Lease { request }).await)
}

async fn claim(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    let claim: LeaseClaim = match parse_json(
        &body,
        r#"{"holder": "…", "ttl_ms": N} (and "key": "…" to renew a grant)"#,
    ) {
        Ok(c) => c,
        Err(e) => return error_response(&e),
    };
    let request = LeaseRequest::Claim {
        name,
        holder: claim.holder,
        ttl_ms: claim.ttl_ms,
        key_sha256: claim.key.as_deref().map(hash),
    };
    change(agent.here(), &by, request).await
}

async fn release(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    let release: LeaseRelease = match parse_json(&body, r#"{"holder": "…", "key": "…"}"#) {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    let request = LeaseRequest::Release {
        name,
        holder: release.holder,
        key_sha256: hash(&release.key),
    };
    change(agent.here(), &by, request).await
}

async fn read(
    State(agent): State<Arc<Agent>>,
    Extension(by): By,
    UrlPath(name): UrlPath<String>,
) -> Response {
    let found = leader::ask(agent.here(), &by, leader::ask::lease_get(name.clone())).await;
    answer(found.and_then(|found| {
        found.ok_or_else(|| ApiError::new(ErrorKind::NotFound, format!("lease {name} is not held")))
    }))
}

async fn list(State(agent): State<Arc<Agent>>, Extension(by): By) -> Response {
    answer(leader::run(agent.here(), &by, LeaderOp::LeaseList).await)
}
