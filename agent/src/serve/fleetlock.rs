//! The FleetLock endpoint (Zincati's reboot coordination), on its own plain-HTTP listener
//! (`--fleetlock-listen`, by default 127.0.0.1:7902, so each machine's Zincati talks to its own
//! agent), and Prometheus metrics on the same listener.
//!
//! Requests are taken exactly as Zincati sends them: `POST {base}/v1/pre-reboot` (lock) or
//! `{base}/v1/steady-state` (unlock), the header `fleet-lock-protocol: true`, a JSON body
//! `{"client_params":{"id","group"}}` with no `Content-Type` (curl's form type is fine too). Any
//! base path is accepted, and doubled slashes; nothing is ever redirected. Every decision is
//! made on the leader (a write only when it changes a slot); an answer comes within
//! [`DECISION_TIMEOUT`], 200 when the caller holds (or no longer holds) a slot, else JSON
//! `{kind, value}` with a 4xx/5xx status. Before that, `fleetlock_access` decides who may ask:
//! a per-source rate limit, and the ids a client certificate binds.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;

use super::accept::{self, Gate, serve_http1};
use super::fleetlock_access::{self, Caller, Limiter, Refused, may_act_for};
use super::limits::ConnectionLimits;
use crate::agent::Agent;
use crate::api::fleetlock::{ProtocolAnswer, ProtocolRequest};
use crate::api::{ErrorKind, paths};
use crate::clock::now_ms;
use crate::leader::{self, Authority, LeaderOp};
use crate::observe::health::{ReadyInput, readiness};
use crate::state::fleetlock::{Command, Outcome, valid_group, valid_id};

/// The longest a lock or unlock may take before Zincati gets a 503 (its own retry, five
/// minutes later, takes over): never hold a request for Zincati's 30-minute timeout.
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(2);
/// A TLS client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bodies are a few dozen bytes.
const BODY_LIMIT: usize = 64 * 1024;
/// Connections at once: an eighth of the process's descriptors, at most 256, so that idle
/// connections to this unauthenticated port can never take the descriptors the node port and
/// the raft log need; 16 from one source (one Zincati asks one request at a time).
const MAX_CONNECTIONS: usize = 256;
const DESCRIPTOR_SHARE: usize = 8;
const MAX_CONNECTIONS_PER_SOURCE: usize = 16;
/// A client must send its request headers within this (an idle connection is closed).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Requests by endpoint and answer kind since the agent started.
#[derive(Default)]
struct Counters(Mutex<BTreeMap<(&'static str, String), u64>>);

impl Counters {
    fn count(&self, endpoint: &'static str, kind: &str) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry((endpoint, kind.to_string())).or_default() += 1;
        }
    }
}

#[derive(Clone)]
struct FleetLockState {
    agent: Arc<Agent>,
    counters: Arc<Counters>,
    limiter: Arc<Limiter>,
}

/// FleetLock's bound port, and the operator's TLS certificate if it is served over TLS.
pub struct FleetLockListener {
    pub listener: TcpListener,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The TLS config verifies client certificates from the operator's client CA, and a
    /// client acts only for the ids its certificate names.
    pub bind_ids: bool,
    /// Requests per second per source (0: no limit).
    pub rate_limit: u32,
}

/// Serves FleetLock and `/metrics` until `stop` flips.
pub async fn serve_fleetlock(
    agent: Arc<Agent>,
    port: FleetLockListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let state = FleetLockState {
        agent,
        counters: Arc::default(),
        limiter: Arc::new(Limiter::new(port.rate_limit)),
    };
    let bind_ids = port.bind_ids;
    let app = Router::new().fallback(handle).with_state(state.clone());
    let acceptor = port.tls.map(tokio_rustls::TlsAcceptor::from);
    let limits = ConnectionLimits::new(
        accept::budget(MAX_CONNECTIONS, DESCRIPTOR_SHARE),
        MAX_CONNECTIONS_PER_SOURCE,
    );
    let gate = Gate {
        listener: &port.listener,
        limits: &limits,
        name: "FleetLock",
        agent: &state.agent,
    };
    loop {
        let accepted = tokio::select! {
            accepted = gate.next() => accepted,
            _ = stop.changed() => return,
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let _admitted = accepted.admitted;
            let service = |caller: Caller| {
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let mut req = req.map(Body::new);
                    req.extensions_mut().insert(caller.clone());
                    tower::ServiceExt::oneshot(app.clone(), req)
                })
            };
            let Some(acceptor) = acceptor else {
                let caller = fleetlock_access::caller(accepted.remote, None);
                return serve_http1(accepted.stream, service(caller), HEADER_TIMEOUT).await;
            };
            if let Ok(Ok(stream)) =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(accepted.stream)).await
            {
                let chain = stream.get_ref().1.peer_certificates().unwrap_or_default();
                let caller = fleetlock_access::caller(accepted.remote, bind_ids.then_some(chain));
                serve_http1(stream, service(caller), HEADER_TIMEOUT).await;
            }
        });
    }
}

#[derive(Clone, Copy)]
enum Endpoint {
    PreReboot,
    SteadyState,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::PreReboot => "pre-reboot",
            Endpoint::SteadyState => "steady-state",
        }
    }
}

/// The answer to a request refused before it was decided; a rate-limited one says when to
/// come back.
fn refused(refusal: &Refused, id: &str) -> Response {
    let mut response = answer(refusal.status(), refusal.kind(), refusal.value(id));
    if let Refused::RateLimited { retry_after_secs } = refusal {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    response
}

fn answer(status: StatusCode, kind: &str, value: impl Into<String>) -> Response {
    let body = serde_json::to_vec(&ProtocolAnswer {
        kind: kind.into(),
        value: value.into(),
    })
    .unwrap_or_default();
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `/a//b/` → `/a/b`: doubled slashes (fleetlockctl with a base URL ending in `/`) and a
/// trailing one are tolerated.
fn normalized(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    format!("/{}", segments.join("/"))
}

async fn handle(State(state): State<FleetLockState>, req: Request) -> Response {
    let path = normalized(req.uri().path());
    if path == paths::METRICS {
        return metrics(&state);
    }
    let endpoint = if path.ends_with(paths::PRE_REBOOT) {
        Endpoint::PreReboot
    } else if path.ends_with(paths::STEADY_STATE) {
        Endpoint::SteadyState
    } else {
        return answer(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "no FleetLock endpoint {path}; use {{base}}/v1/pre-reboot or {{base}}/v1/steady-state"
            ),
        );
    };
    // Set by the accept loop on every connection; a request without it cannot come in.
    let Some(caller) = req.extensions().get::<Caller>().cloned() else {
        return answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "a request without its connection",
        );
    };
    if let Err(limited) = state.limiter.check(&caller) {
        state.counters.count(endpoint.name(), limited.kind());
        return refused(&limited, "");
    }
    let (kind, response) = decide(&state.agent, endpoint, &caller, req).await;
    state.counters.count(endpoint.name(), &kind);
    response
}

/// Checks the request in the protocol's order (method, header, body, group, id), then decides
/// on the leader. Returns the answer's kind (for the counters) and the answer.
async fn decide(
    agent: &Agent,
    endpoint: Endpoint,
    caller: &Caller,
    req: Request,
) -> (String, Response) {
    let refuse =
        |status, kind: &str, value: String| (kind.to_string(), answer(status, kind, value));
    if req.method() != Method::POST {
        return refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "FleetLock requests are POST".into(),
        );
    }
    let header_ok = req
        .headers()
        .get("fleet-lock-protocol")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !header_ok {
        return refuse(
            StatusCode::BAD_REQUEST,
            "missing_header",
            "missing required header fleet-lock-protocol: true".into(),
        );
    }
    let body = match axum::body::to_bytes(req.into_body(), BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("the body could not be read: {e}"),
            );
        }
    };
    // Whatever the Content-Type: Zincati sends none, curl -d a form type.
    let parsed: ProtocolRequest = match serde_json::from_slice(&body) {
        Ok(p) => p,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!(
                    "expected {{\"client_params\":{{\"id\":…,\"group\":…}}}}: {}",
                    e.to_string().chars().take(200).collect::<String>()
                ),
            );
        }
    };
    let (id, group) = (parsed.client_params.id, parsed.client_params.group);
    if !valid_group(&group) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_group",
            "group must be 1 to 253 characters of [a-zA-Z0-9.-]".into(),
        );
    }
    if !valid_id(&id) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "invalid_id",
            "id must be 1 to 253 printable characters".into(),
        );
    }
    if let Err(refusal) = may_act_for(&caller.binding, &id) {
        return (refusal.kind().to_string(), refused(&refusal, &id));
    }
    let command = match endpoint {
        Endpoint::PreReboot => Command::Lock {
            group: group.clone(),
            id: id.clone(),
            via: agent.node_id(),
            now_ms: now_ms(),
        },
        Endpoint::SteadyState => Command::Unlock {
            group: group.clone(),
            id: id.clone(),
            via: agent.node_id(),
            now_ms: now_ms(),
            forced: false,
        },
    };
    let op = LeaderOp::FleetLock { command };
    let decided = tokio::time::timeout(
        DECISION_TIMEOUT,
        leader::run(agent, &Authority::FleetLock, op),
    )
    .await;
    let value = match decided {
        Err(_) => {
            // No decision in time. Which of the two it is, is this member's own judgement, the
            // one its /readyz gives: it hears from no leader at all (`no_leader`: the leader
            // is gone and no election has succeeded), or it leads without a majority, or its
            // leader did not decide in time (`no_quorum`). Without asking here, `no_leader`
            // could never be answered: `leader::run` waits for an election (up to 5 s) before
            // it gives up with `no_leader`, longer than this timeout.
            let kind = match readiness(&ReadyInput::of(agent)) {
                Err(e) if e.kind == ErrorKind::NoLeader => "no_leader",
                _ => "no_quorum",
            };
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                kind,
                format!(
                    "no decision within {DECISION_TIMEOUT:?}: the cluster has no leader or no quorum; retry later"
                ),
            );
        }
        Ok(Err(e)) => {
            let (status, kind) = match e.kind {
                ErrorKind::SemaphoreFull => (StatusCode::CONFLICT, e.kind.as_str()),
                ErrorKind::UnknownGroup => (StatusCode::BAD_REQUEST, e.kind.as_str()),
                ErrorKind::TooManyGroups => (StatusCode::SERVICE_UNAVAILABLE, e.kind.as_str()),
                ErrorKind::NoLeader => (StatusCode::SERVICE_UNAVAILABLE, "no_leader"),
                ErrorKind::QuorumLost => (StatusCode::SERVICE_UNAVAILABLE, "no_quorum"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            };
            return refuse(status, kind, e.message);
        }
        Ok(Ok(value)) => value,
    };
    let outcome: Outcome = match leader::decode(value) {
        Ok(o) => o,
        Err(e) => {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                e.message,
            );
        }
    };
    let (kind, text) = match outcome {
        Outcome::Locked => (
            "lock_acquired",
            format!("{id} holds a reboot slot of group {group}"),
        ),
        Outcome::AlreadyHeld => (
            "lock_already_held",
            format!("{id} already holds a reboot slot of group {group}"),
        ),
        Outcome::Unlocked => (
            "unlocked",
            format!("{id} released its slot of group {group}"),
        ),
        Outcome::NotHeld | Outcome::Done => (
            "not_held",
            format!("{id} holds no slot of group {group}; nothing to release"),
        ),
    };
    if matches!(outcome, Outcome::Locked | Outcome::Unlocked) {
        tracing::info!(%group, %id, kind, "FleetLock");
    }
    (kind.to_string(), answer(StatusCode::OK, kind, text))
}

/// Prometheus text: requests by endpoint and kind, and per group its slots, holders and the
/// age of its oldest holder (from this node's applied state).
fn metrics(state: &FleetLockState) -> Response {
    use std::fmt::Write;
    let mut out = String::new();
    out.push_str(
        "# HELP muster_fleetlock_requests_total FleetLock requests by endpoint and answer kind.\n",
    );
    out.push_str("# TYPE muster_fleetlock_requests_total counter\n");
    if let Ok(counters) = state.counters.0.lock() {
        for ((endpoint, kind), n) in counters.iter() {
            let _ = writeln!(
                out,
                "muster_fleetlock_requests_total{{endpoint=\"{endpoint}\",kind=\"{kind}\"}} {n}"
            );
        }
    }
    let fleetlock = state
        .agent
        .raft()
        .read_local(|s| s.fleetlock.clone())
        .unwrap_or_default();
    crate::observe::metrics::fleetlock_gauges(&mut out, &fleetlock, now_ms());
    let mut response = Response::new(Body::from(out));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalized_as_clients_build_them() {
        for (raw, want) in [
            ("/v1/pre-reboot", "/v1/pre-reboot"),
            ("//v1/pre-reboot", "/v1/pre-reboot"),
            (
                "/fleet_lock/v1/steady-state/",
                "/fleet_lock/v1/steady-state",
            ),
            ("/", "/"),
        ] {
            assert_eq!(normalized(raw), want, "{raw}");
        }
    }
}
