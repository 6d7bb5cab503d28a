//! The FleetLock endpoint (Zincati's reboot coordination), on its own plain-HTTP listener
//! (`--fleetlock-listen`, by default 127.0.0.1:7902, so each machine's Zincati talks to its own
//! agent), and Prometheus metrics on the same listener.
//!
//! Requests are taken exactly as Zincati sends them: `POST {base}/v1/pre-reboot` (lock) or
//! `{base}/v1/steady-state` (unlock), the header `fleet-lock-protocol: true`, a JSON body
//! `{"client_params":{"id","group"}}` with no `Content-Type` (curl's form type is fine too). Any
//! base path is accepted, and doubled slashes; nothing is ever redirected. Every decision is
//! made on the leader (a write only when it changes a slot); an answer comes within
//! `fleetlock_decide::DECISION_TIMEOUT`, 200 when the caller holds (or no longer holds) a slot, else JSON
//! `{kind, value}` with a 4xx/5xx status. Before that, `fleetlock_access` decides who may ask:
//! a per-source rate limit, and the ids a client certificate binds.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use muster_shared::serve::serve_http1;
use tokio::net::TcpListener;

use super::accept;
use super::fleetlock_access::{self, Caller, Limiter};
use super::fleetlock_decide::{Endpoint, answer, decide, refused};
use super::limits::ConnectionLimits;
use crate::agent::Agent;
use crate::api::paths;
use crate::clock::now_ms;

/// A TLS client that has not finished its handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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
    let gate = accept::gate(&port.listener, &limits, "FleetLock", &state.agent.counters);
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
    let (kind, response) = decide(state.agent.here(), endpoint, &caller, req).await;
    state.counters.count(endpoint.name(), &kind);
    response
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
        .group
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
