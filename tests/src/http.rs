//! Plain HTTP for tests: one bounded client that never uses a proxy, the answer reduced to what
//! tests look at, and the requests etcd's v2 client makes.

use std::time::Duration;

use anyhow::{Context, Result};

/// An HTTP answer reduced to what the tests look at.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// `X-Etcd-Index`, if present.
    pub index: Option<u64>,
    pub content_type: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    async fn from(resp: reqwest::Response) -> Result<Self> {
        let status = resp.status().as_u16();
        let index = resp
            .headers()
            .get("x-etcd-index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let content_type = header_text(&resp, "content-type");
        let body = resp.text().await?;
        Ok(Self {
            status,
            index,
            content_type,
            body,
        })
    }
}

/// A header of `resp` as text; empty if it is missing or not text.
pub fn header_text(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The longest one harness HTTP request may take, connection and body included: a wedged
/// service fails the test instead of hanging it.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest a watch (`wait=true`) may take: longer than the longest hold a test gives the
/// service (60 s), so a hold timeout still ends it first.
pub const WATCH_TIMEOUT: Duration = Duration::from_secs(75);
/// The longest a TCP connect may take (on loopback a connect is answered at once).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A plain HTTP client whose every request is bounded by [`HTTP_TIMEOUT`] (set a longer one per
/// request for watches; the helpers below do) and never goes through a proxy from the
/// environment. reqwest is built without a bundled crypto provider (the workspace uses ring
/// everywhere), so install ring as the process default first.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(HTTP_TIMEOUT)
        .connect_timeout(CONNECT_TIMEOUT)
        .no_proxy()
        .build()
        .expect("an HTTP client with timeouts")
}

/// The bound for one request to `url`: [`WATCH_TIMEOUT`] for a watch, else [`HTTP_TIMEOUT`].
fn timeout_for(url: &str) -> Duration {
    if url.contains("wait=true") {
        WATCH_TIMEOUT
    } else {
        HTTP_TIMEOUT
    }
}

/// Sends `req` to `url` within [`timeout_for`] it.
async fn send(url: &str, req: reqwest::RequestBuilder) -> Result<Reply> {
    let timeout = timeout_for(url);
    let resp = req
        .timeout(timeout)
        .send()
        .await
        .with_context(|| format!("{url}: no answer within {timeout:?}"))?;
    Reply::from(resp).await
}

/// `GET url`.
pub async fn get(url: &str) -> Result<Reply> {
    send(url, http_client().get(url)).await
}

/// `GET url` with extra headers.
pub async fn get_with(url: &str, headers: &[(&str, &str)]) -> Result<Reply> {
    let mut req = http_client().get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(url, req).await
}

/// `PUT url` with a form body, the way etcd's client registers.
pub async fn put_form(url: &str, form: &[(&str, &str)]) -> Result<Reply> {
    let body: String = form
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let req = http_client()
        .put(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body);
    send(url, req).await
}

/// Any method, any body, any headers (for hostile-input tests).
pub async fn raw(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Reply> {
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut req = http_client().request(method, url).body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(url, req).await
}

pub use muster_shared::form::urlencode;

/// Registers member `id` with `value` under the discovery URL, as etcd does.
pub async fn register(url: &str, id: &str, value: &str) -> Result<Reply> {
    put_form(&format!("{url}/{id}?prevExist=false"), &[("value", value)]).await
}
