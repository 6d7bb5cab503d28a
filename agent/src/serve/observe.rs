//! The metrics listener (`--metrics-listen`, 127.0.0.1:7003 by default, plain HTTP, no
//! authentication): `/metrics`, `/healthz`, `/readyz`, and the status page at `/` with the
//! `status.json` it draws. The operator API serves `/metrics` too, behind its token.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::http::{answer, error_response, json_response};
use crate::agent::Agent;
use crate::api::paths;
use crate::observe::health::{ReadyInput, readiness};
use crate::observe::{metrics, page};

/// Prometheus text of this node.
pub async fn metrics_text(State(agent): State<Arc<Agent>>) -> Response {
    let text = metrics::render(&metrics::gather(&agent).await);
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// 200 while the node serves and its raft runs (a stopped raft ends the agent anyway).
async fn healthz(State(agent): State<Arc<Agent>>) -> Response {
    let view = agent.raft().view();
    json_response(&serde_json::json!({ "healthy": true, "term": view.term }))
}

/// 200 once the node has the log and sees a leader with a quorum, else 503 with the reason.
async fn readyz(State(agent): State<Arc<Agent>>) -> Response {
    match readiness(&ReadyInput::of(&agent)) {
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

async fn status_json(State(agent): State<Arc<Agent>>) -> Response {
    answer(page::data(&agent).await)
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
        .with_state(agent);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.changed().await;
        })
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "the metrics listener failed");
    }
}
