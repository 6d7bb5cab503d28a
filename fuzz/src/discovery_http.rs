//! The discovery service's HTTP surface end to end: the real axum router
//! (`muster_discovery::http::router`) with its path parsing, query strings (`?wait=…&recursive=…`,
//! `?prevExist=…&prevIndex=…`), `application/x-www-form-urlencoded` bodies, `/new`, the human
//! page and the plan/apply path, over an in-memory `Store` that does what the fjall store does
//! minus the disk (plan, then apply).
//!
//! Input: one request per line, `<M><target>[ <body>]`. `M` picks the method and headers
//! (`G` GET, `W` GET with `Accept: text/html`, `P` PUT form, `p` PUT without a content type,
//! `j` PUT JSON, `N` POST form, `D` DELETE, `H` HEAD); a target starting with `~` stands for
//! `/<token>`, the token every input starts with (size = first byte % 5 + 1).
//!
//! Invariants: nothing panics and nothing answers 5xx; every keys-API answer is JSON with the
//! etcd shape (`errorCode` on errors) and its `X-Etcd-Index` is the token's index; a 2xx write
//! is what a read of its key returns; the agent's encoder (`muster_shared::form::urlencode`)
//! round-trips every stored value (sending it again is an identical retry or "exists"); the
//! human page escapes every member name and peer URL (one row of six cells per member).
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::explain;
use axum::body::Body;
use axum::http::{Method, Request, header};
use http_body_util::BodyExt;

use muster_discovery::http::{App, HttpConfig, router};
use muster_discovery::keys::parse_token_path;
use muster_discovery::limits::{ClientKey, PerClient};
use muster_discovery::metrics::Metrics;
use muster_discovery::model::{PutPlan, PutRequest, TokenMeta, TokenState};
use muster_discovery::store::{Store, StoreError, StoreStats, WatchOutcome};
use muster_discovery::v2::Response;
use muster_shared::form::urlencode;
use muster_shared::ratelimit::RateLimiter;
use tower::ServiceExt;

const TOKEN: &str = "6c007a14875d53d9bf0ef5a6fc0257c8";
/// The harness clock: fixed, so that an input always does the same thing.
const NOW_MS: u64 = 1_000_000;

/// Token state in memory: `plan_put`, then `apply` (the fjall store persists in between).
#[derive(Default)]
struct MemStore {
    tokens: Mutex<BTreeMap<String, TokenState>>,
    minted: AtomicU64,
}

impl MemStore {
    fn insert(&self, token: &str, size: u32) {
        let meta = TokenMeta {
            size,
            created_ms: NOW_MS,
            expires_ms: u64::MAX,
            client: None,
        };
        self.tokens
            .lock()
            .expect("lock")
            .insert(token.to_string(), TokenState::new(token.to_string(), meta));
    }

    /// The token's state now (the harness's own look, outside the trait).
    fn peek<R>(&self, token: &str, f: impl FnOnce(&TokenState) -> R) -> Result<R, StoreError> {
        let tokens = self.tokens.lock().expect("lock");
        tokens.get(token).map(f).ok_or(StoreError::TokenNotFound)
    }
}

impl Store for MemStore {
    async fn create_token(
        &self,
        size: u32,
        _ttl: Duration,
        _client: ClientKey,
    ) -> Result<String, StoreError> {
        let token = format!("{:032x}", self.minted.fetch_add(1, Ordering::Relaxed) + 1);
        self.insert(&token, size);
        Ok(token)
    }

    async fn read<R, F>(&self, token: &str, f: F) -> Result<R, StoreError>
    where
        F: FnOnce(&TokenState) -> R + Send,
        R: Send,
    {
        self.peek(token, f)
    }

    async fn put(&self, token: &str, req: PutRequest) -> Result<(Response, u16, u64), StoreError> {
        let mut tokens = self.tokens.lock().expect("lock");
        let state = tokens.get_mut(token).ok_or(StoreError::TokenNotFound)?;
        match state.plan_put(&req, NOW_MS)? {
            PutPlan::AlreadyDone(response) => Ok((response, 200, state.index)),
            PutPlan::Commit(event) => {
                let status = if event.action == muster_discovery::model::Action::Create {
                    201
                } else {
                    200
                };
                let response = state.apply(event);
                Ok((response, status, state.index))
            }
        }
    }

    async fn watch(
        &self,
        token: &str,
        key: &str,
        recursive: bool,
        from: u64,
    ) -> Result<WatchOutcome, StoreError> {
        let found = self.peek(token, |s| {
            let from = if from == 0 { s.index + 1 } else { from };
            s.first_event_from(from, key, recursive)
                .map(|r| (r, s.index))
        })?;
        match found {
            Some((response, index)) => Ok(WatchOutcome::Event {
                response: Box::new(response),
                index,
            }),
            // Nothing else writes while an input runs: wait for the hold to end it.
            None => std::future::pending().await,
        }
    }

    async fn collect_garbage(&self) -> Result<usize, StoreError> {
        Ok(0)
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            healthy: true,
            ..Default::default()
        }
    }

    async fn close(&self) {}
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            // A paused clock jumps ahead when idle: a held watch ends at once.
            .start_paused(true)
            .build()
            .expect("runtime")
    })
}

struct Answer {
    status: u16,
    content_type: String,
    etcd_index: Option<u64>,
    body: Vec<u8>,
}

async fn send(router: &axum::Router, req: Request<Body>) -> Answer {
    let response = router.clone().oneshot(req).await.expect("infallible");
    let status = response.status().as_u16();
    let header_str = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header_str(header::CONTENT_TYPE.as_str()).unwrap_or_default();
    let etcd_index = header_str("x-etcd-index").map(|v| v.parse().expect("numeric index"));
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    Answer {
        status,
        content_type,
        etcd_index,
        body,
    }
}

fn is_token_route(path: &str) -> bool {
    !matches!(path, "/" | "/new" | "/health" | "/metrics" | "/robots.txt")
}

fn build(line: &[u8]) -> Option<(Method, String, Request<Body>)> {
    let (&m, rest) = line.split_first()?;
    let (target, body) = match rest.iter().position(|b| *b == b' ') {
        Some(i) => (&rest[..i], rest[i + 1..].to_vec()),
        None => (rest, Vec::new()),
    };
    let target = std::str::from_utf8(target).ok()?;
    let target = match target.strip_prefix('~') {
        Some(r) => format!("/{TOKEN}{r}"),
        None if target.starts_with('/') => target.to_string(),
        None => format!("/{target}"),
    };
    let (method, content_type, accept): (Method, Option<&str>, Option<&str>) = match m {
        b'W' => (Method::GET, None, Some("text/html")),
        b'P' => (Method::PUT, Some("application/x-www-form-urlencoded"), None),
        b'p' => (Method::PUT, None, None),
        b'j' => (Method::PUT, Some("application/json"), None),
        b'N' => (
            Method::POST,
            Some("application/x-www-form-urlencoded"),
            None,
        ),
        b'D' => (Method::DELETE, None, None),
        b'H' => (Method::HEAD, None, None),
        _ => (Method::GET, None, None),
    };
    // What hyper would refuse never reaches the router.
    let uri: axum::http::Uri = target.parse().ok()?;
    let path = uri.path().to_string();
    let mut builder = Request::builder().method(method.clone()).uri(uri);
    if let Some(ct) = content_type {
        builder = builder.header(header::CONTENT_TYPE, ct);
    }
    if let Some(accept) = accept {
        builder = builder.header(header::ACCEPT, accept);
    }
    let req = builder.body(Body::from(body)).ok()?;
    Some((method, path, req))
}

fn put_form(key: &str, query: &str, form: String) -> Request<Body> {
    Request::builder()
        .method(Method::PUT)
        .uri(format!("/{TOKEN}/{key}?{query}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form))
        .expect("request")
}

async fn run_requests(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let store = MemStore::default();
    store.insert(TOKEN, u32::from(first % 5) + 1);
    let (shutdown, _) = tokio::sync::watch::channel(false);
    let app = Arc::new(App {
        store,
        config: HttpConfig {
            public_url: None,
            scheme: "http",
            local_addr: SocketAddr::from(([127, 0, 0, 1], 2379)),
            max_size: 9,
            token_ttl: Duration::from_secs(24 * 3600),
            hold: Duration::from_secs(30),
            max_watches: 4,
            body_timeout: Duration::from_secs(10),
            v3_auth: None,
        },
        metrics: Metrics::default(),
        limiter: RateLimiter::new(0, 1),
        write_limiter: RateLimiter::new(0, 1),
        watches_per_client: PerClient::new(0),
        shutdown,
    });
    let router = router(app.clone());
    for line in rest.split(|b| *b == b'\n').take(24) {
        let Some((method, path, req)) = build(line) else {
            continue;
        };
        let answer = send(&router, req).await;
        assert!(answer.status < 500, "{} on {path}", answer.status);
        if !is_token_route(&path) {
            continue;
        }
        // The token the answer is about, when it is the one this input started with.
        let ours = parse_token_path(&path).is_ok_and(|p| p.token == TOKEN);
        if answer.content_type.starts_with("text/html") {
            if ours && answer.status == 200 {
                check_page(&app, &answer);
            }
            continue;
        }
        let body = String::from_utf8(answer.body.clone()).expect("answers are UTF-8");
        if method == Method::HEAD || (answer.status == 200 && body.is_empty()) {
            continue; // HEAD, or a held watch that ended empty
        }
        assert_eq!(answer.content_type, "application/json", "{path}: {body}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("keys-API JSON");
        if answer.status >= 400 {
            explain::why(&path, &body);
            assert!(json["errorCode"].is_u64(), "{body}");
            assert!(
                json["message"].is_string() && json["cause"].is_string(),
                "{body}"
            );
            continue;
        }
        if !ours {
            continue;
        }
        // A 2xx keys-API answer on the fuzzed token.
        let index = app.store.peek(TOKEN, |s| s.index).expect("token");
        assert_eq!(answer.etcd_index, Some(index), "{path}: {body}");
        if method == Method::PUT {
            check_write(&app, &router, &json).await;
        }
    }
}

/// A 2xx write is stored as answered, and re-sending its value (as an agent encodes it) is an
/// identical retry or refused as existing: never a different value.
async fn check_write(app: &Arc<App<MemStore>>, router: &axum::Router, json: &serde_json::Value) {
    let key = json["node"]["key"].as_str().expect("node.key");
    let value = json["node"]["value"].as_str().expect("node.value");
    let rel = key
        .strip_prefix(&format!("/{TOKEN}/"))
        .expect("key under the token");
    let stored = app
        .store
        .peek(TOKEN, |s| s.leaf(rel).map(|l| l.value.clone()))
        .expect("token");
    assert_eq!(
        stored.as_deref(),
        Some(value),
        "stored value differs from the answer"
    );
    let again = send(
        router,
        put_form(
            rel,
            "prevExist=false",
            format!("value={}", urlencode(value)),
        ),
    )
    .await;
    let body = String::from_utf8_lossy(&again.body);
    let reply: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    match again.status {
        200 => assert_eq!(reply["node"]["value"].as_str(), Some(value), "{body}"),
        412 => assert_eq!(reply["errorCode"], 105, "{body}"),
        403 => assert_eq!(reply["errorCode"], 1001, "{body}"),
        other => panic!("re-sending a stored value answered {other}: {body}"),
    }
}

/// The human page never carries markup from a member's name or peer URLs: every member is one
/// row of six cells, and no cell holds markup beyond the page's own.
fn check_page(app: &Arc<App<MemStore>>, answer: &Answer) {
    let html = String::from_utf8_lossy(&answer.body);
    let members = app.store.peek(TOKEN, |s| s.members().len()).expect("token");
    assert_eq!(html.matches("<td>").count(), 6 * members, "cells in {html}");
    let mut rest = html.as_ref();
    while let Some(start) = rest.find("<td>") {
        let after = &rest[start + 4..];
        let end = after.find("</td>").expect("closed cell");
        let cell = after[..end]
            .replace("<code>", "")
            .replace("</code>", "")
            .replace(" <strong>(initiator)</strong>", "");
        assert!(
            !cell.contains(['<', '>', '"', '\'']),
            "markup in cell {cell:?}"
        );
        rest = &after[end..];
    }
}

/// One input, as the fuzz target `discovery_http` and the corpus replay run it.
pub fn run(data: &[u8]) {
    runtime().block_on(run_requests(data));
}
