//! The one way the agent and the CLI talk HTTP as a client: how each kind of client is built
//! (pinned to a CA, mutual TLS to a peer, plain or public HTTPS to a discovery service, the
//! local unix socket) and how an answer or an error is read back. How a retry waits is
//! `muster_shared::retry`, the one schedule of both binaries.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt;
use muster_shared::tls;
use serde::de::DeserializeOwned;

use crate::api::ApiError;
use crate::state::NodeId;

/// Why a call got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server answered with an error.
    #[error("{0} ({kind})", kind = .0.kind)]
    Api(ApiError),
    /// The server presented another CA than the one pinned; nothing was sent to it. `offered`:
    /// the pins of the CAs its chain did hold (another cluster's, normally one).
    #[error("{addr} does not present the pinned cluster CA (ca_pin_mismatch)")]
    PinMismatch { addr: String, offered: Vec<String> },
    /// No answer: refused, timed out, cut off. `connect` is true when the request never left
    /// this machine, so sending it again cannot apply it twice.
    #[error("{addr}: {reason}")]
    Unreachable {
        addr: String,
        reason: String,
        connect: bool,
    },
    /// A client could not be set up at all.
    #[error("{0}")]
    Setup(String),
}

impl CallError {
    fn from_reqwest(addr: &str, e: reqwest::Error) -> Self {
        // A peer's URL names it by its internal identity (`node-….muster`): the address says
        // where it is, the URL nothing an operator can use.
        let e = e.without_url();
        if let Some(mismatch) = tls::ca_pin_mismatch(&e) {
            return CallError::PinMismatch {
                addr: addr.to_string(),
                offered: mismatch.offered,
            };
        }
        CallError::Unreachable {
            addr: addr.to_string(),
            connect: e.is_connect(),
            reason: crate::net_error::reason(&e),
        }
    }
}

/// The innermost cause of a failed call ("Connection refused (os error 111)"), which says more
/// than reqwest's "error sending request for url …": [`crate::net_error::innermost`], the one
/// reading of a cause (it also drops members' internal identity names).
pub fn innermost_cause(e: &(dyn std::error::Error + 'static)) -> String {
    crate::net_error::innermost(e)
}

/// Sends `req` and reads a JSON answer of type `T`, or the error the server answered with.
pub async fn send_json<T: DeserializeOwned>(
    addr: &str,
    req: reqwest::RequestBuilder,
) -> Result<T, CallError> {
    let answer = send(addr, req, &[]).await?;
    decode_answer(answer.status, &answer.body)
}

/// What a server answered, not yet decoded ([`decode_answer`]): a caller may have to judge who
/// answered (its headers) before it trusts what the answer says.
pub struct Answer {
    pub status: u16,
    /// The headers asked for, in the order asked; `None` where the answer has none.
    pub headers: Vec<Option<String>>,
    pub body: bytes::Bytes,
}

/// Sends `req` and reads the whole answer, with its headers named in `headers`.
pub async fn send(
    addr: &str,
    req: reqwest::RequestBuilder,
    headers: &[&str],
) -> Result<Answer, CallError> {
    let resp = req
        .send()
        .await
        .map_err(|e| CallError::from_reqwest(addr, e))?;
    let status = resp.status().as_u16();
    let headers = headers
        .iter()
        .map(|name| {
            resp.headers()
                .get(*name)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        })
        .collect();
    let body = resp
        .bytes()
        .await
        .map_err(|e| CallError::from_reqwest(addr, e))?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// Reads an answer's body from `addr` (the peer's address as members know it: the URL's host
/// is its internal identity name), refusing one longer than `max` bytes (a peer is trusted to
/// be a member, not to be small).
pub async fn read_limited(
    addr: &str,
    mut resp: reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, CallError> {
    let mut body = Vec::new();
    loop {
        let chunk = resp
            .chunk()
            .await
            .map_err(|e| CallError::from_reqwest(addr, e))?;
        let Some(chunk) = chunk else {
            return Ok(body);
        };
        if body.len() + chunk.len() > max {
            return Err(CallError::Api(ApiError::internal(format!(
                "the answer is longer than {max} bytes"
            ))));
        }
        body.extend_from_slice(&chunk);
    }
}

/// Reads an answer: `T` from a 2xx body, else the error it carries.
pub fn decode_answer<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, CallError> {
    if !(200..300).contains(&status) {
        return Err(CallError::Api(ApiError::from_response(status, body)));
    }
    serde_json::from_slice(body).map_err(|e| {
        CallError::Api(ApiError::internal(format!(
            "the answer is not what this version expects ({e})"
        )))
    })
}

/// An HTTPS client that talks only to servers whose chain holds the CA with `ca_pin` (from a
/// join or operator token, or a discovery record). No client certificate.
/// How long connecting to a member (TCP and the TLS handshake) may take.
pub const PINNED_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

pub fn pinned(ca_pin: &str, timeout: Duration) -> Result<reqwest::Client, CallError> {
    let config = tls::pinned_client_config(ca_pin).map_err(|e| CallError::Setup(e.to_string()))?;
    reqwest::Client::builder()
        .tls_backend_preconfigured((*config).clone())
        .no_proxy()
        // A member that is off (packets dropped) or frozen (the kernel accepts, TLS never
        // answers) counts as unreachable after this, so a caller may try another one.
        .connect_timeout(PINNED_CONNECT_TIMEOUT.min(timeout))
        .timeout(timeout)
        .build()
        .map_err(|e| CallError::Setup(e.to_string()))
}

/// A client for a discovery service. Over HTTPS it trusts the system's roots, like etcd's own
/// discovery client; plain HTTP never loads them, so hosts (or FROM-scratch images) without a
/// CA bundle still work.
pub fn discovery(url: &str, connect_timeout: Duration) -> Result<reqwest::Client, CallError> {
    plain_or_public(url, connect_timeout, "the discovery service")
}

/// A client for a FleetLock health gate's Prometheus URL: built as a discovery client is (plain
/// HTTP, or HTTPS with the system's roots).
pub fn gate(url: &str, connect_timeout: Duration) -> Result<reqwest::Client, CallError> {
    plain_or_public(url, connect_timeout, "a health gate")
}

fn plain_or_public(
    url: &str,
    connect_timeout: Duration,
    what: &str,
) -> Result<reqwest::Client, CallError> {
    let mut builder = reqwest::Client::builder().connect_timeout(connect_timeout);
    if url.starts_with("http://") {
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| CallError::Setup(e.to_string()))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        builder = builder.tls_backend_preconfigured(tls);
    } else {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    builder.build().map_err(|e| {
        CallError::Setup(format!(
            "cannot set up HTTPS for {what} ({e}); is a CA bundle installed (ca-certificates)?"
        ))
    })
}

/// How long a connection to a peer may take to open.
pub const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Idle connections kept to each peer (they close after reqwest's 90 s idle timeout). Enough for
/// a follower's share of 64 concurrent clients; members behind one address (one host, a NAT)
/// then stay far below a listener's per-source connection limit.
const PEER_IDLE_CONNECTIONS: usize = 32;

/// A keep-alive mutual-TLS client for one peer, and the base URL that reaches it by its
/// identity name: only the certificate the cluster CA issued to that node id carries the name,
/// so a message for node X is never delivered to another node now sitting at X's address.
#[derive(Clone)]
pub struct PeerClient {
    pub http: reqwest::Client,
    pub base: String,
}

/// One keep-alive client per peer, shared by raft's RPCs and forwarded operations. A client is
/// rebuilt when the peer's address changes or after [`PeerClients::forget`] (its address is
/// resolved again, so a peer back on a new IP is found).
#[derive(Clone)]
pub struct PeerClients {
    tls: Arc<rustls::ClientConfig>,
    cluster_id: String,
    cached: Arc<Mutex<HashMap<NodeId, (String, PeerClient)>>>,
}

impl PeerClients {
    pub fn new(tls: Arc<rustls::ClientConfig>, cluster_id: &str) -> Self {
        Self {
            tls,
            cluster_id: cluster_id.to_string(),
            cached: Arc::default(),
        }
    }

    /// The client for peer `id` at `addr` (`host:port`).
    pub async fn get(&self, id: NodeId, addr: &str) -> Result<PeerClient, CallError> {
        if let Ok(cached) = self.cached.lock()
            && let Some((cached_addr, client)) = cached.get(&id)
            && cached_addr == addr
        {
            return Ok(client.clone());
        }
        let unreachable = |reason: String| CallError::Unreachable {
            addr: addr.to_string(),
            reason,
            connect: true,
        };
        let resolved: SocketAddr = tokio::net::lookup_host(addr)
            .await
            .map_err(|e| unreachable(format!("cannot resolve {addr}: {e}")))?
            .next()
            .ok_or_else(|| unreachable(format!("{addr} resolves to no address")))?;
        let name = tls::node_dns_name(id, &self.cluster_id);
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.tls).clone())
            .resolve(&name, resolved)
            .http1_only()
            .no_proxy()
            .tcp_nodelay(true)
            // A peer behind a partition drops the SYN: say so within a second instead of the
            // kernel's two minutes (loopback and LAN connects take microseconds).
            .connect_timeout(PEER_CONNECT_TIMEOUT)
            // Keep as many connections as requests run at once: forwarded operations from many
            // clients go concurrently, one connection each (HTTP/1.1), and a connection dropped
            // after every burst costs the next request a full mutual-TLS handshake (signature
            // checks dominated a follower's CPU under 64 writers with 2 kept).
            .pool_max_idle_per_host(PEER_IDLE_CONNECTIONS)
            .build()
            .map_err(|e| CallError::Setup(e.to_string()))?;
        let client = PeerClient {
            http,
            base: format!("https://{name}:{}", resolved.port()),
        };
        if let Ok(mut cached) = self.cached.lock() {
            cached.insert(id, (addr.to_string(), client.clone()));
        }
        Ok(client)
    }

    /// Drops the cached client of `id`: the next call resolves its address again.
    pub fn forget(&self, id: NodeId) {
        if let Ok(mut cached) = self.cached.lock() {
            cached.remove(&id);
        }
    }
}

/// One HTTP/1.1 request over the agent's unix socket. Returns status and body.
pub async fn socket_call(
    socket: &Path,
    method: &str,
    path_and_query: &str,
    body: Option<String>,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    let call = async {
        let stream = tokio::net::UnixStream::connect(socket).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        let req = hyper::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(hyper::header::HOST, "muster")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.unwrap_or_default(),
            )))
            .map_err(std::io::Error::other)?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(std::io::Error::other)?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok((status, bytes.to_vec()))
    };
    tokio::time::timeout(timeout, call).await.map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        )
    })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_decode_to_their_type_or_their_error() {
        let ok: Result<serde_json::Value, _> = decode_answer(200, br#"{"a":1}"#);
        assert_eq!(ok.ok().map(|v| v["a"].clone()), Some(serde_json::json!(1)));
        let err: Result<serde_json::Value, _> =
            decode_answer(409, br#"{"kind":"name_taken","message":"taken"}"#);
        match err {
            Err(CallError::Api(e)) => {
                assert_eq!(e.kind, crate::api::ErrorKind::NameTaken);
                assert_eq!(e.message, "taken");
            }
            other => panic!("expected an API error, got {other:?}"),
        }
    }
}
