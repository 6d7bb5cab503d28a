//! Client for a discovery URL: the etcd-style registration plus Muster's hidden bootstrap keys
//! (see docs/discovery.md, "Muster's bootstrap record"), and [`retrying`], the one retry policy
//! for talking to a discovery service.

use std::time::Duration;

use muster_shared::bootstrap::{BootstrapRecord, NODES_DIR, RECORD_KEY, RegistrantMeta};
use muster_shared::form::urlencode;
use serde::Deserialize;

use muster_shared::retry::RetryPolicy;

/// etcd's discovery client gives every plain request 5 s; so do we.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Watches are held by the service (30 s by default); give them a little longer.
const WATCH_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Network trouble or a 5xx: worth retrying.
    #[error("discovery service unreachable: {0}")]
    Unavailable(String),
    /// The token is unknown or expired.
    #[error(
        "discovery URL {0} is unknown or expired: mint a new one with `curl <service>/new?size=N`"
    )]
    UnknownToken(String),
    /// The key exists already (etcd errorCode 105).
    #[error("{0} already exists")]
    Exists(String),
    /// A compare-and-swap or initiator check failed (etcd errorCode 101).
    #[error("compare failed: {0}")]
    CompareFailed(String),
    /// Any other refusal, with the service's own words.
    #[error("discovery service refused: {0}")]
    Refused(String),
    #[error("discovery service answered something unexpected: {0}")]
    Protocol(String),
}

/// A discovery URL as messages and logs may show it: the service and the first characters of
/// the token, never the whole token. The URL is a credential until the cluster has formed, and
/// logs end up in places (journals, CI output, support tickets) that credentials must not.
pub fn redact(url: &str) -> String {
    match url.rsplit_once('/') {
        Some((service, token)) if service.contains("://") && !token.is_empty() => {
            let prefix: String = token.chars().take(4).collect();
            format!("{service}/{prefix}…")
        }
        _ => url.split('?').next().unwrap_or(url).to_string(),
    }
}

impl DiscoveryError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, DiscoveryError::Unavailable(_))
    }
}

/// How long transient discovery failures are retried before they count.
const RETRY_FOR: Duration = Duration::from_secs(120);

/// Runs `f` until it succeeds, fails for good, or transient failures have lasted two minutes.
pub async fn retrying<T, F, Fut>(what: &str, mut f: F) -> Result<T, DiscoveryError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DiscoveryError>>,
{
    let mut backoff = RetryPolicy::exponential(Duration::from_millis(250), Duration::from_secs(8))
        .within(RETRY_FOR)
        .start();
    loop {
        match f().await {
            Err(e) if e.is_retryable() && !backoff.expired() => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    "{what}: {e}; retrying in {}",
                    crate::net_error::rounded(delay)
                );
                tokio::time::sleep(delay).await;
            }
            other => return other,
        }
    }
}

/// One member registration, in the token's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub id: String,
    pub name: String,
    /// The first peer URL's `host:port`.
    pub addr: String,
    pub created_index: u64,
}

/// The token's size and registrations.
#[derive(Debug, Clone)]
pub struct Listing {
    pub size: usize,
    pub members: Vec<Registration>,
    pub index: u64,
}

impl Listing {
    /// The first `size` registrations: the members of the cluster this token forms.
    pub fn cohort(&self) -> &[Registration] {
        &self.members[..self.members.len().min(self.size)]
    }
}

#[derive(Deserialize)]
struct V2Response {
    node: V2Node,
}

#[derive(Deserialize)]
struct V2Node {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    nodes: Vec<V2Node>,
    #[serde(rename = "createdIndex", default)]
    created_index: u64,
    #[serde(rename = "modifiedIndex", default)]
    modified_index: u64,
}

#[derive(Deserialize)]
struct V2Error {
    #[serde(rename = "errorCode")]
    error_code: u32,
    message: String,
    #[serde(default)]
    cause: String,
}

pub struct DiscoveryClient {
    http: reqwest::Client,
    url: String,
}

impl DiscoveryClient {
    pub fn new(url: &str) -> Result<Self, DiscoveryError> {
        let http = crate::client::discovery(url, REQUEST_TIMEOUT)
            .map_err(|e| DiscoveryError::Protocol(e.to_string()))?;
        Ok(Self {
            http,
            url: url.trim_end_matches('/').to_string(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL as messages and logs show it ([`redact`]).
    pub fn shown(&self) -> String {
        redact(&self.url)
    }

    /// A failed request, said with the service's address and the cause
    /// ([`crate::net_error::describe`]); never the URL's token.
    fn unavailable(&self, e: &reqwest::Error) -> DiscoveryError {
        let service = self
            .url
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or(rest))
            .unwrap_or(&self.url);
        DiscoveryError::Unavailable(crate::net_error::describe(service, e))
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<(u16, String), DiscoveryError> {
        let resp = req.send().await.map_err(|e| self.unavailable(&e))?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| self.unavailable(&e))?;
        if status >= 500 {
            return Err(DiscoveryError::Unavailable(format!("HTTP {status}")));
        }
        if !(200..300).contains(&status) {
            return Err(match serde_json::from_str::<V2Error>(&body) {
                Ok(e)
                    if e.error_code == 100
                        && status == 404
                        && e.cause.trim_start_matches('/').len() == 32 =>
                {
                    DiscoveryError::UnknownToken(redact(&self.url))
                }
                Ok(e) if e.error_code == 105 => DiscoveryError::Exists(e.cause),
                Ok(e) if e.error_code == 101 => DiscoveryError::CompareFailed(e.cause),
                Ok(e) if e.error_code == 100 => {
                    DiscoveryError::Refused(format!("not found: {}", e.cause))
                }
                Ok(e) => DiscoveryError::Refused(format!(
                    "{}: {} ({})",
                    e.error_code, e.message, e.cause
                )),
                Err(_) => DiscoveryError::Protocol(format!(
                    "HTTP {status}: {}",
                    body.chars().take(200).collect::<String>()
                )),
            });
        }
        Ok((status, body))
    }

    async fn get_node(&self, path: &str) -> Result<Option<V2Node>, DiscoveryError> {
        let req = self
            .http
            .get(format!("{}{path}", self.url))
            .timeout(REQUEST_TIMEOUT);
        match self.send(req).await {
            Ok((_, body)) => Ok(Some(parse_node(&body)?)),
            Err(DiscoveryError::Refused(why)) if why.starts_with("not found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn put(&self, path_and_query: &str, value: &str) -> Result<V2Node, DiscoveryError> {
        let body = format!("value={}", urlencode(value));
        let req = self
            .http
            .put(format!("{}{path_and_query}", self.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .timeout(REQUEST_TIMEOUT);
        let (_, body) = self.send(req).await?;
        parse_node(&body)
    }

    /// Size and registrations, in index order.
    pub async fn listing(&self) -> Result<Listing, DiscoveryError> {
        let size_node = self
            .get_node("/_config/size")
            .await?
            .ok_or_else(|| DiscoveryError::UnknownToken(redact(&self.url)))?;
        let size = size_node
            .value
            .as_deref()
            .and_then(|v| v.parse::<usize>().ok())
            .ok_or_else(|| DiscoveryError::Protocol("size key is not a number".into()))?;
        let req = self.http.get(self.url.clone()).timeout(REQUEST_TIMEOUT);
        let resp = req.send().await.map_err(|e| self.unavailable(&e))?;
        let index = resp
            .headers()
            .get("x-etcd-index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(|e| self.unavailable(&e))?;
        if status != 200 {
            return Err(DiscoveryError::Unavailable(format!(
                "directory read answered HTTP {status}"
            )));
        }
        let dir = parse_node(&body)?;
        let mut members: Vec<Registration> = dir
            .nodes
            .iter()
            .filter_map(|n| {
                let id = n.key.rsplit('/').next()?.to_string();
                let value = n.value.as_deref()?;
                let (name, url) = value.split(',').next()?.split_once('=')?;
                let addr = url.split("://").nth(1)?.trim_end_matches('/').to_string();
                Some(Registration {
                    id,
                    name: name.to_string(),
                    addr,
                    created_index: n.created_index,
                })
            })
            .collect();
        members.sort_by_key(|m| m.created_index);
        Ok(Listing {
            size,
            members,
            index,
        })
    }

    /// Registers `id` as etcd does (`name=https://addr`). Returns its index. An identical retry
    /// before the token is full succeeds; anything else already there is [`DiscoveryError::Exists`].
    pub async fn register(&self, id: &str, name: &str, addr: &str) -> Result<u64, DiscoveryError> {
        let node = self
            .put(
                &format!("/{id}?prevExist=false"),
                &format!("{name}=https://{addr}"),
            )
            .await?;
        Ok(node.created_index)
    }

    pub async fn put_meta(&self, id: &str, meta: &RegistrantMeta) -> Result<(), DiscoveryError> {
        let json =
            serde_json::to_string(meta).map_err(|e| DiscoveryError::Protocol(e.to_string()))?;
        self.put(&format!("/{NODES_DIR}/{id}?prevExist=false"), &json)
            .await?;
        Ok(())
    }

    pub async fn meta(&self, id: &str) -> Result<Option<RegistrantMeta>, DiscoveryError> {
        match self.get_node(&format!("/{NODES_DIR}/{id}")).await? {
            Some(node) => {
                let value = node.value.unwrap_or_default();
                RegistrantMeta::parse(&value)
                    .map(Some)
                    .map_err(|e| DiscoveryError::Protocol(e.to_string()))
            }
            None => Ok(None),
        }
    }

    /// The bootstrap record and its modified index, if published.
    pub async fn record(&self) -> Result<Option<(BootstrapRecord, u64)>, DiscoveryError> {
        match self.get_node(&format!("/{RECORD_KEY}")).await? {
            Some(node) => {
                let record = BootstrapRecord::parse(node.value.as_deref().unwrap_or_default())
                    .map_err(|e| DiscoveryError::Protocol(e.to_string()))?;
                Ok(Some((record, node.modified_index)))
            }
            None => Ok(None),
        }
    }

    /// Publishes the record; fails with `Exists` or `CompareFailed` if someone else won.
    pub async fn create_record(&self, record: &BootstrapRecord) -> Result<u64, DiscoveryError> {
        let json =
            serde_json::to_string(record).map_err(|e| DiscoveryError::Protocol(e.to_string()))?;
        Ok(self
            .put(&format!("/{RECORD_KEY}?prevExist=false"), &json)
            .await?
            .modified_index)
    }

    /// Replaces the record by compare-and-swap on `prev_index`.
    pub async fn update_record(
        &self,
        record: &BootstrapRecord,
        prev_index: u64,
    ) -> Result<u64, DiscoveryError> {
        let json =
            serde_json::to_string(record).map_err(|e| DiscoveryError::Protocol(e.to_string()))?;
        Ok(self
            .put(&format!("/{RECORD_KEY}?prevIndex={prev_index}"), &json)
            .await?
            .modified_index)
    }

    /// Waits for a change under the token (any key, hidden ones included when `key` names them)
    /// with index ≥ `from`. `Ok(None)` means the service's hold timeout ended the wait.
    pub async fn wait(
        &self,
        key: &str,
        recursive: bool,
        from: u64,
    ) -> Result<Option<u64>, DiscoveryError> {
        let path = if key.is_empty() {
            String::new()
        } else {
            format!("/{key}")
        };
        let req = self
            .http
            .get(format!(
                "{}{path}?recursive={recursive}&wait=true&waitIndex={from}",
                self.url
            ))
            .timeout(WATCH_TIMEOUT);
        let (_, body) = self.send(req).await?;
        if body.is_empty() {
            return Ok(None);
        }
        Ok(Some(parse_node(&body)?.modified_index))
    }
}

fn parse_node(body: &str) -> Result<V2Node, DiscoveryError> {
    serde_json::from_str::<V2Response>(body)
        .map(|r| r.node)
        .map_err(|e| {
            DiscoveryError::Protocol(format!(
                "{e}: {}",
                body.chars().take(200).collect::<String>()
            ))
        })
}

#[cfg(test)]
mod tests;
