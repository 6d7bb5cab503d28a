//! The operator API over TCP, as `muster --server` uses it (a keep-alive client that trusts only
//! the cluster's CA), and a background writer for "no write failed while …" checks.

use std::time::Duration;

use anyhow::{Result, anyhow};

use crate::urlencode;

/// What an operator call came back with: the HTTP status and the JSON body (or `Null`).
#[derive(Debug, Clone)]
pub struct ApiReply {
    pub status: u16,
    pub body: serde_json::Value,
}

impl ApiReply {
    /// The error kind of a non-2xx answer.
    pub fn kind(&self) -> Option<&str> {
        self.body["kind"].as_str()
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The operator API of any member over TCP with an operator token, as `muster --server` uses
/// it: one keep-alive client that trusts only the cluster's CA. Much faster than a `muster`
/// process per call, for tests that write a lot. Every call is bounded by `timeout`.
#[derive(Clone)]
pub struct OperatorApi {
    http: reqwest::Client,
    token: String,
}

impl OperatorApi {
    /// A client for the cluster the operator token (`OP1.<pin>.…`) belongs to.
    pub fn new(token: &str, timeout: Duration) -> Result<Self> {
        Self::build(token, timeout, true)
    }

    /// [`OperatorApi::new`] that opens a new connection (a full TLS handshake) for every call:
    /// for tests of what a new client meets while certificates change.
    pub fn unpooled(token: &str, timeout: Duration) -> Result<Self> {
        Self::build(token, timeout, false)
    }

    fn build(token: &str, timeout: Duration, pooled: bool) -> Result<Self> {
        let pin = token
            .split('.')
            .nth(1)
            .ok_or_else(|| anyhow!("not an operator token"))?;
        let tls = muster_shared::tls::pinned_client_config(pin)?;
        let mut builder = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(2))
            .no_proxy();
        if !pooled {
            builder = builder.pool_max_idle_per_host(0);
        }
        let http = builder.build()?;
        Ok(Self {
            http,
            token: token.to_string(),
        })
    }

    /// One call to `addr` (`host:port`); `Err` only when no answer came (timeout, refused).
    pub async fn call(
        &self,
        addr: &str,
        method: &str,
        path_and_query: &str,
        body: Option<serde_json::Value>,
    ) -> Result<ApiReply> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self
            .http
            .request(method, format!("https://{addr}{path_and_query}"))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        Ok(ApiReply { status, body })
    }

    pub async fn put(&self, addr: &str, key: &str, value: &str) -> Result<ApiReply> {
        let path = format!("/v1/kv?key={}", urlencode(key));
        self.call(
            addr,
            "PUT",
            &path,
            Some(serde_json::json!({ "value": value })),
        )
        .await
    }

    pub async fn get(&self, addr: &str, key: &str) -> Result<ApiReply> {
        self.call(addr, "GET", &format!("/v1/kv?key={}", urlencode(key)), None)
            .await
    }

    pub async fn status(&self, addr: &str) -> Result<ApiReply> {
        self.call(addr, "GET", "/v1/status", None).await
    }
}

/// A client that puts `w/<i>` every 20 ms through `addrs` in turn until stopped, and keeps
/// every failure: for "no write failed while …" checks.
pub struct Writer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(u64, Vec<String>)>,
}

impl Writer {
    pub fn start(api: OperatorApi, addrs: Vec<String>) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let (mut ok, mut errors, mut i) = (0u64, Vec::new(), 0usize);
                while !stop.load(Ordering::Relaxed) {
                    let addr = &addrs[i % addrs.len().max(1)];
                    match api.put(addr, &format!("w/{i}"), "v").await {
                        Ok(r) if r.ok() => ok += 1,
                        Ok(r) => errors.push(format!("{addr}: {} {}", r.status, r.body)),
                        Err(e) => errors.push(format!("{addr}: {e:#}")),
                    }
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (ok, errors)
            }
        });
        Self { stop, task }
    }

    /// Stops the writer: how many writes succeeded, and every failure.
    pub async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}
