//! The metrics listener (`--metrics-listen`, 127.0.0.1:7903 by default, plain HTTP, no
//! authentication): `/metrics`, `/healthz`, `/readyz`, and the status page at `/` with the
//! `status.json` it draws. The operator API serves `/metrics` too, behind its token. No
//! authentication here, so connections are few (64, 16 per source) and must send their headers
//! within 10 s. Before the node runs, [`serve_starting`] answers on the same port.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use muster_shared::serve::serve_http1;
use tokio::net::TcpListener;
use tower::ServiceExt;

use super::accept;
use super::http::{error_response, json_response};
use super::limits::ConnectionLimits;
use crate::agent::Agent;
use crate::api::paths;
use crate::observe::health::{ReadyInput, readiness};
use crate::observe::{metrics, page};

/// Prometheus text of this node.
pub async fn metrics_text(State(agent): State<Arc<Agent>>) -> Response {
    let text = metrics::render(&metrics::gather(agent.here()).await);
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// 200 while the node serves and its raft runs (a stopped raft ends the agent anyway).
async fn healthz(State(agent): State<Arc<Agent>>) -> Response {
    let view = agent.group.raft().view();
    json_response(&serde_json::json!({ "healthy": true, "term": view.term }))
}

/// 200 once the node has the log and sees a leader with a quorum, else 503 with the reason.
async fn readyz(State(agent): State<Arc<Agent>>) -> Response {
    match readiness(&ReadyInput::of(&agent.group, agent.me.node_id)) {
        Ok(status) => json_response(&serde_json::json!({ "ready": true, "status": status })),
        Err(not_ready) => error_response(&not_ready),
    }
}

async fn status_page() -> Response {
    let mut response = page::HTML.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// The page's data is gathered at most once per [`PAGE_FRESH_FOR`] however many browsers ask
/// (it probes every member), one gathering at a time.
const PAGE_FRESH_FOR: Duration = Duration::from_secs(2);

#[derive(Default)]
struct PageCache(tokio::sync::Mutex<Option<(std::time::Instant, page::PageData)>>);

async fn status_json(
    State(agent): State<Arc<Agent>>,
    Extension(cache): Extension<Arc<PageCache>>,
) -> Response {
    let mut cached = cache.0.lock().await;
    if let Some((at, data)) = cached.as_ref()
        && at.elapsed() < PAGE_FRESH_FOR
    {
        return json_response(data);
    }
    match page::data(agent.here()).await {
        Ok(data) => {
            let response = json_response(&data);
            *cached = Some((std::time::Instant::now(), data));
            response
        }
        Err(e) => error_response(&e),
    }
}

/// The metrics listener has no authentication: a few scrapers and browsers use it, so a small
/// connection budget and a header deadline keep one client from holding it.
const MAX_CONNECTIONS: usize = 64;
const MAX_CONNECTIONS_PER_SOURCE: usize = 16;
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the metrics listener before the node runs (while it joins or waits for its peers):
/// `/healthz` answers 200 (the process is alive and starting), everything else 503
/// `cluster_uninitialized` with the start's step. Returns the listener when `stop` fires, and
/// closes the connections it served, so that a client's keep-alive connection reaches the
/// node's own server next instead of this one.
pub async fn serve_starting(
    listener: TcpListener,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> TcpListener {
    let app = Router::new()
        .route(
            paths::HEALTHZ,
            get(|| async {
                json_response(&serde_json::json!({ "healthy": true, "starting": true }))
            }),
        )
        .fallback(|| async { error_response(&crate::observe::starting::not_ready()) });
    let limits = ConnectionLimits::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_SOURCE);
    // Dropped on return: every connection served so far is closed.
    let mut connections = tokio::task::JoinSet::new();
    let gate = accept::quiet_gate(&listener, &limits, "metrics");
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            accepted = gate.next() => accepted,
        };
        while connections.try_join_next().is_some() {}
        let app = app.clone();
        connections.spawn(async move {
            let _admitted = accepted.admitted;
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    app.clone().oneshot(req.map(axum::body::Body::new))
                });
            serve_http1(accepted.stream, service, HEADER_TIMEOUT).await;
        });
    }
    listener
}

/// Serves the metrics listener until `stop` flips.
pub async fn serve_observe(
    agent: Arc<Agent>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let app = Router::new()
        .route("/", get(status_page))
        .route("/status.json", get(status_json))
        .route(paths::METRICS, get(metrics_text))
        .route(paths::HEALTHZ, get(healthz))
        .route(paths::READYZ, get(readyz))
        .fallback(super::http::no_route)
        .layer(Extension(Arc::new(PageCache::default())))
        .with_state(agent.clone());
    let limits = ConnectionLimits::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_SOURCE);
    let gate = accept::gate(&listener, &limits, "metrics", &agent.counters);
    loop {
        let accepted = tokio::select! {
            accepted = gate.next() => accepted,
            _ = stop.changed() => return,
        };
        let app = app.clone();
        tokio::spawn(async move {
            let _admitted = accepted.admitted;
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    app.clone().oneshot(req.map(axum::body::Body::new))
                });
            serve_http1(accepted.stream, service, HEADER_TIMEOUT).await;
        });
    }
}
