//! The HTTP surface: `/new`, the etcd-compatible token paths, the human pages, `/health` and
//! `/metrics`. Routing is axum; the token paths are matched by hand because etcd's key paths are
//! arbitrary-depth.

mod pages;
mod token;
mod v3view;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use muster_shared::error::{ErrorBody, ErrorKind};
use tokio::sync::watch;

use crate::limits::{ClientKey, LimitKind, Limited, PerClient};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::v2::V2Error;
use muster_shared::ratelimit::RateLimiter;

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY: usize = 64 * 1024;

/// The peer address of the connection, inserted by the server loop.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// The client a request counts against (IPv6 per /64); loopback when the server loop did not
/// say (in-process tests).
fn client_of(req: &Request) -> ClientKey {
    client_in(req.extensions())
}

/// The client named in a request's extensions (loopback when the server loop did not say):
/// for HTTP requests and gRPC calls alike.
pub fn client_in(extensions: &axum::http::Extensions) -> ClientKey {
    let ip = extensions
        .get::<ClientAddr>()
        .map(|c| c.0.ip())
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    ClientKey::of(ip)
}

/// Route label for metrics, attached to each response by its handler.
#[derive(Debug, Clone, Copy)]
struct RouteLabel(&'static str);

/// Settings the handlers need.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub public_url: Option<String>,
    pub scheme: &'static str,
    pub local_addr: SocketAddr,
    pub max_size: u32,
    pub token_ttl: Duration,
    pub hold: Duration,
    pub max_watches: usize,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    /// The etcd v3 API's user (`--v3-user`): every gRPC call needs its auth token.
    pub v3_auth: Option<crate::v3::auth::Credentials>,
}

pub struct App<S> {
    pub store: S,
    pub config: HttpConfig,
    pub metrics: Metrics,
    /// `/new` per client.
    pub limiter: RateLimiter,
    /// Token writes per client.
    pub write_limiter: RateLimiter,
    /// Held watches per client.
    pub watches_per_client: PerClient,
    /// Flips to true on SIGTERM: held watches end at once with an empty 200.
    pub shutdown: watch::Sender<bool>,
}

pub fn router<S: Store>(app: Arc<App<S>>) -> Router {
    Router::new()
        .route("/", get(pages::index::<S>))
        .route("/new", any(pages::new_token::<S>))
        .route("/health", get(pages::health::<S>))
        .route("/metrics", get(pages::metrics::<S>))
        .route("/robots.txt", get(pages::robots))
        .fallback(token::handle::<S>)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), observe::<S>))
        .with_state(app)
}

async fn method_not_allowed(req: Request) -> Response {
    labelled(
        kind_error(
            ErrorKind::MethodNotAllowed,
            format!(
                "{} is not supported on {}; use GET",
                req.method(),
                req.uri().path()
            ),
        ),
        "other",
    )
}

/// Records latency by route and status for every request.
async fn observe<S: Store>(State(app): State<Arc<App<S>>>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let response = next.run(req).await;
    let route = response
        .extensions()
        .get::<RouteLabel>()
        .map(|r| r.0)
        .unwrap_or("other");
    let status = response.status().as_u16();
    app.metrics.observe(route, status, started.elapsed());
    tracing::debug!(%method, route, status, elapsed_ms = started.elapsed().as_millis() as u64, "request");
    response
}

fn labelled(mut response: Response, route: &'static str) -> Response {
    response.extensions_mut().insert(RouteLabel(route));
    response
}

/// An etcd keys-API JSON answer with its `X-Etcd-Index`.
fn etcd_json(status: u16, body: bytes::Bytes, index: u64) -> Response {
    let mut response = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    response
        .headers_mut()
        .insert("x-etcd-index", HeaderValue::from(index));
    response
}

fn etcd_error(e: &V2Error) -> Response {
    etcd_json(e.status, bytes::Bytes::from(e.to_json()), e.index)
}

/// A limit's `{kind, message}` answer on the non-etcd routes (counted in `/metrics`).
fn limit_error<S: Store>(app: &App<S>, l: &Limited) -> Response {
    app.metrics.limited(l.kind);
    let status = StatusCode::from_u16(l.kind.status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        crate::limits::kind_json(l.kind.as_str(), &l.message),
    )
        .into_response()
}

/// A limit's etcd-shaped answer on a token path (counted in `/metrics`).
fn etcd_limit<S: Store>(app: &App<S>, l: &Limited, index: u64) -> Response {
    app.metrics.limited(l.kind);
    etcd_error(&V2Error::limited(l, index))
}

/// A `{kind, message}` JSON error for the non-etcd routes, with the kind's own status.
fn kind_error(kind: ErrorKind, message: impl Into<String>) -> Response {
    let body = serde_json::to_string(&ErrorBody::new(kind, message)).unwrap_or_default();
    let status = StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

enum BodyError {
    TooLarge,
    Read(String),
    Timeout(Limited),
}

/// Reads a request body of at most [`MAX_BODY`] bytes within `timeout`.
async fn read_body(body: Body, timeout: Duration) -> Result<bytes::Bytes, BodyError> {
    use http_body_util::BodyExt;
    let collect = http_body_util::Limited::new(body, MAX_BODY).collect();
    let Ok(collected) = tokio::time::timeout(timeout, collect).await else {
        return Err(BodyError::Timeout(Limited::new(
            LimitKind::RequestTimeout,
            format!("the request body did not arrive within {timeout:?} (--body-timeout)"),
        )));
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(BodyError::TooLarge)
        }
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}

fn declared_too_large(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > MAX_BODY as u64)
}

fn wants_html(req: &Request) -> bool {
    req.headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"))
}

/// A query string or form body that is refused; the text goes back to the client in an etcd
/// `errorCode 209` cause or a JSON error, so quoted names and values are truncated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamError {
    #[error("a parameter name is not valid UTF-8")]
    NameNotUtf8,
    #[error("the value of {0:?} is not valid UTF-8")]
    ValueNotUtf8(String),
    #[error("unknown parameter {name:?} (accepted: {accepted})")]
    Unknown { name: String, accepted: String },
    #[error("parameter {0:?} given more than once")]
    Repeated(String),
    #[error("{name}={value:?} is not a boolean")]
    NotBool { name: String, value: String },
    #[error("stream watches are not supported")]
    StreamWatch,
}

/// Parses `a=b&c=d` into pairs, refusing duplicates (an ambiguous request is an error, not a
/// guess), anything not in `allowed`, and anything that does not decode to UTF-8 (a value is
/// never silently rewritten).
fn parse_params(raw: &[&[u8]], allowed: &[&str]) -> Result<Vec<(String, String)>, ParamError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in raw {
        for pair in part.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
            let (k, v) = match pair.iter().position(|b| *b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &pair[pair.len()..]),
            };
            let k = form_decode(k).ok_or(ParamError::NameNotUtf8)?;
            let v = form_decode(v).ok_or_else(|| ParamError::ValueNotUtf8(truncate(&k)))?;
            if !allowed.contains(&k.as_str()) {
                return Err(ParamError::Unknown {
                    name: truncate(&k),
                    accepted: allowed.join(", "),
                });
            }
            if out.iter().any(|(seen, _)| *seen == k) {
                return Err(ParamError::Repeated(k));
            }
            out.push((k, v));
        }
    }
    Ok(out)
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space, `%XX` a byte; a stray `%` stays
/// as it is, as browsers and Go do) that fails instead of replacing bytes that are not UTF-8.
fn form_decode(raw: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < raw.len() => {
                let hex = std::str::from_utf8(&raw[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Go's `strconv.ParseBool`, which is what etcd's server accepts.
fn parse_bool(name: &str, value: &str) -> Result<bool, ParamError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(ParamError::NotBool {
            name: name.to_string(),
            value: truncate(value),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_must_be_utf8_and_are_never_rewritten() {
        assert_eq!(form_decode(b"n1%3Dhttp+x").as_deref(), Some("n1=http x"));
        assert_eq!(form_decode(b"%zz%4").as_deref(), Some("%zz%4"));
        assert_eq!(form_decode("é".as_bytes()).as_deref(), Some("é"));
        assert_eq!(form_decode(b"%ff%fe"), None);
        assert_eq!(form_decode(&[0xff]), None);
        let pairs = parse_params(&[b"value=a%C3%A9"], &["value"]).expect("utf-8");
        assert_eq!(pairs, vec![("value".to_string(), "a\u{e9}".to_string())]);
        assert_eq!(
            parse_params(&[b"value=%C3"], &["value"]),
            Err(ParamError::ValueNotUtf8("value".into()))
        );
    }
}
