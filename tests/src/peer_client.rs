//! A test client that speaks a member's HTTPS routes directly, the way a peer, a joiner or an
//! attacker would: the raft and forwarding routes (`/raft/…`), the join routes (`/v1/join`,
//! `/v1/join/token`), the operator API over TCP and anything else on the node's port.
//!
//! It comes in three credentials ([`Credential`]): no client certificate (the CA pinned, like a
//! joiner), a member's own certificate read from its data dir, or arbitrary certificate files
//! (another cluster's member, or a certificate the test signed itself). Peers are addressed by
//! their identity name `node-<id hex>.<cluster id>.muster`, resolved to the member's address, as
//! the agent's own `PeerClients::get` does, so the server certificate is checked against the CA
//! **and** the node it belongs to.
//!
//! Every connection is new (no keep-alive pool), so a refused handshake is exactly one refusal
//! on the server, and every call is bounded by the client's timeout.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use muster_shared::tls::{NodeKey, node_dns_name};
use serde_json::{Value, json};

use crate::AgentProc;

/// How long any one call may take, unless the caller says otherwise.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The files that make up a member's TLS identity (`tls/ca.pem`, `tls/node.pem`, `node.key`).
#[derive(Clone)]
pub struct MemberFiles {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl MemberFiles {
    /// Reads them from a member's data dir.
    pub fn read(data_dir: &Path) -> Result<Self> {
        let read = |rel: &str| {
            std::fs::read_to_string(data_dir.join(rel))
                .with_context(|| format!("reading {}", data_dir.join(rel).display()))
        };
        Ok(Self {
            ca_pem: read("tls/ca.pem")?,
            cert_pem: read("tls/node.pem")?,
            key_pem: read("node.key")?,
        })
    }

    /// The cluster's CA pin (SHA-256 of the CA's SPKI).
    pub fn ca_pin(&self) -> Result<String> {
        Ok(muster_shared::tls::spki_pin(&self.ca_pem)?)
    }
}

/// Who the client claims to be at the TLS layer.
pub enum Credential {
    /// No client certificate; trusts a server whose chain holds the CA with this pin.
    Pinned { ca_pin: String },
    /// Trusts `trust_ca_pem` and presents `cert_pem`/`key_pem`, whoever issued them.
    Certificate {
        trust_ca_pem: String,
        cert_pem: String,
        key_pem: String,
    },
}

impl Credential {
    /// No client certificate, pinning the CA of the member whose data dir this is.
    pub fn no_certificate(data_dir: &Path) -> Result<Self> {
        Ok(Self::Pinned {
            ca_pin: MemberFiles::read(data_dir)?.ca_pin()?,
        })
    }

    /// The member's own certificate and key, trusting its cluster's CA.
    pub fn member(data_dir: &Path) -> Result<Self> {
        let files = MemberFiles::read(data_dir)?;
        Ok(Self::Certificate {
            trust_ca_pem: files.ca_pem,
            cert_pem: files.cert_pem,
            key_pem: files.key_pem,
        })
    }

    /// The certificate of a member of **another** cluster (`foreign_data_dir`), sent to a
    /// server that is checked against the CA of `trusted_data_dir`: the server then sees a
    /// client certificate its CA did not issue.
    pub fn foreign(foreign_data_dir: &Path, trusted_data_dir: &Path) -> Result<Self> {
        let foreign = MemberFiles::read(foreign_data_dir)?;
        let trusted = MemberFiles::read(trusted_data_dir)?;
        Ok(Self::Certificate {
            trust_ca_pem: trusted.ca_pem,
            cert_pem: foreign.cert_pem,
            key_pem: foreign.key_pem,
        })
    }
}

/// A member as the network sees it: its node id, cluster and address.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub node_id: u64,
    pub cluster_id: String,
    /// `host:port`.
    pub addr: String,
}

impl Target {
    /// The member `agent` is, read from its `muster status --json`.
    pub async fn of(agent: &AgentProc) -> Result<Self> {
        let status = agent
            .status()
            .await
            .ok_or_else(|| anyhow!("{} does not answer `muster status`", agent.name))?;
        let cluster_id = status["cluster_id"]
            .as_str()
            .ok_or_else(|| anyhow!("no cluster_id in {status}"))?
            .to_string();
        let id = status["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == agent.name.as_str()))
            .and_then(|m| m["id"].as_str())
            .ok_or_else(|| anyhow!("{} is not among the members: {status}", agent.name))?;
        Ok(Self {
            name: agent.name.clone(),
            node_id: u64::from_str_radix(id, 16).with_context(|| format!("member id {id}"))?,
            cluster_id,
            addr: agent.addr.clone(),
        })
    }

    /// The identity name only this node's certificate carries.
    pub fn dns_name(&self) -> String {
        node_dns_name(self.node_id, &self.cluster_id)
    }
}

/// An answer: status, content type, body as text and (if it parses) as JSON.
#[derive(Debug, Clone)]
pub struct PeerReply {
    pub status: u16,
    pub content_type: String,
    pub text: String,
    pub json: Value,
}

impl PeerReply {
    /// The `kind` of an error answer.
    pub fn kind(&self) -> Option<&str> {
        self.json["kind"].as_str()
    }

    pub fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or("")
    }

    /// `(status, kind)`, for one-line assertions.
    pub fn status_kind(&self) -> (u16, Option<&str>) {
        (self.status, self.kind())
    }

    /// True if the body is a JSON error `{kind, message}` served as `application/json`.
    pub fn is_json_error(&self) -> bool {
        self.content_type.starts_with("application/json")
            && self.json["kind"].is_string()
            && self.json["message"].is_string()
    }
}

impl std::fmt::Display for PeerReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: String = self.text.chars().take(400).collect();
        write!(f, "HTTP {} ({}) {shown}", self.status, self.content_type)
    }
}

/// A client for one member's HTTPS port with one [`Credential`].
#[derive(Clone)]
pub struct PeerApi {
    http: reqwest::Client,
    base: String,
}

impl PeerApi {
    /// A client that reaches `target` by its identity name, bounded by [`CALL_TIMEOUT`].
    pub fn new(target: &Target, credential: &Credential) -> Result<Self> {
        Self::with_timeout(target, credential, CALL_TIMEOUT)
    }

    pub fn with_timeout(
        target: &Target,
        credential: &Credential,
        timeout: Duration,
    ) -> Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = match credential {
            Credential::Pinned { ca_pin } => muster_shared::tls::pinned_client_config(ca_pin)?,
            Credential::Certificate {
                trust_ca_pem,
                cert_pem,
                key_pem,
            } => muster_shared::tls::client_config(trust_ca_pem, cert_pem, key_pem)?,
        };
        let addr: SocketAddr = target
            .addr
            .parse()
            .with_context(|| format!("address {}", target.addr))?;
        let name = target.dns_name();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .resolve(&name, addr)
            .http1_only()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .connect_timeout(Duration::from_secs(2))
            .timeout(timeout)
            .build()?;
        Ok(Self {
            http,
            base: format!("https://{name}:{}", addr.port()),
        })
    }

    /// Any method, path, headers and body. `Err` only when no answer came (a refused
    /// handshake, a reset, a timeout).
    pub async fn raw(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<PeerReply> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut req = self
            .http
            .request(method, format!("{}{path_and_query}", self.base))
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await?;
        let status = resp.status().as_u16();
        let content_type = crate::http::header_text(&resp, "content-type");
        let bytes = resp.bytes().await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(PeerReply {
            status,
            content_type,
            text,
            json,
        })
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<PeerReply> {
        self.raw(
            "POST",
            path,
            &[("content-type", "application/json")],
            serde_json::to_vec(body)?,
        )
        .await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<PeerReply> {
        self.raw("GET", path, &[], Vec::new()).await
    }

    /// `POST /raft/client`: `op` (a `LeaderOp` as JSON, tagged with `"op"`) forwarded on behalf
    /// of `authority` (`None` sends the operation alone, as senders that predate it do).
    pub async fn forward(&self, op: Value, authority: Option<Value>) -> Result<PeerReply> {
        self.post_json("/raft/client", &forwarded(op, authority)?)
            .await
    }
}

/// A forwarded operation: the `LeaderOp` object with an `authority` field added.
pub fn forwarded(op: Value, authority: Option<Value>) -> Result<Value> {
    let mut body = op;
    let Some(obj) = body.as_object_mut() else {
        bail!("a LeaderOp is a JSON object");
    };
    if let Some(authority) = authority {
        obj.insert("authority".into(), authority);
    }
    Ok(body)
}

/// `{"by":"operator_token","id":…,"secret_sha256":…}` for an operator token's text
/// (`OP1.<pin>.<id>.<secret>`).
pub fn operator_token_authority(token: &str) -> Result<Value> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    let [_, _, id, secret] = parts[..] else {
        bail!("not an operator token: {token}");
    };
    Ok(json!({
        "by": "operator_token",
        "id": id,
        "secret_sha256": muster_shared::token::hash_secret(secret),
    }))
}

/// The lowercase hex spelling of a node key's member id.
pub fn member_id_hex(key: &NodeKey) -> String {
    format!("{:x}", key.member_id())
}

/// A `POST /v1/join/token` body for a fresh key, with the token's text (`K1.<pin>.<id>.<secret>`)
/// split into id and secret.
pub fn token_join_body(token: &str, key: &NodeKey, name: &str, addr: &str) -> Result<Value> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    let [_, _, id, secret] = parts[..] else {
        bail!("not a join token: {token}");
    };
    token_join_body_parts(id, secret, key, name, addr)
}

/// A `POST /v1/join/token` body from a token id and a secret (possibly wrong).
pub fn token_join_body_parts(
    token_id: &str,
    secret: &str,
    key: &NodeKey,
    name: &str,
    addr: &str,
) -> Result<Value> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    Ok(json!({
        "token_id": token_id,
        "secret": secret,
        "node_id": member_id_hex(key),
        "name": name,
        "addr": addr,
        "key_fingerprint": key.fingerprint(),
        "csr_pem": key.csr_pem(name, host)?,
    }))
}

/// A `POST /v1/join` body (a discovery registrant): `member_id` as given, the CSR made with
/// `key` (which may or may not give that id).
pub fn registrant_join_body(
    discovery_url: &str,
    member_id: &str,
    key: &NodeKey,
    name: &str,
    addr: &str,
) -> Result<Value> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    Ok(json!({
        "discovery_url": discovery_url,
        "member_id": member_id,
        "name": name,
        "addr": addr,
        "csr_pem": key.csr_pem(name, host)?,
    }))
}

/// The cluster CA (certificate and private key) out of a `muster backup` file: a header line,
/// then the replicated state as JSON.
pub fn ca_from_backup(backup: &[u8]) -> Result<muster_shared::tls::ClusterCa> {
    let newline = backup
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| anyhow!("no header line in the backup"))?;
    let state: Value = serde_json::from_slice(&backup[newline + 1..]).context("backup payload")?;
    let cert = state["ca"]["cert_pem"]
        .as_str()
        .ok_or_else(|| anyhow!("no CA certificate in the backup"))?;
    let key = state["ca"]["key_pem"]
        .as_str()
        .ok_or_else(|| anyhow!("no CA key in the backup"))?;
    Ok(muster_shared::tls::ClusterCa::from_pem(cert, key)?)
}

/// A certificate the cluster's CA signs for a node that never joined: a valid identity of
/// this cluster for id `node_id`, which is no member. Returns the credential presenting it.
pub fn outsider_of_cluster(
    ca: &muster_shared::tls::ClusterCa,
    cluster_id: &str,
    key: &NodeKey,
) -> Result<Credential> {
    let csr = key.csr_pem("outsider", "127.0.0.1")?;
    let cert = ca.sign_node(
        &csr,
        key.member_id(),
        cluster_id,
        &key.fingerprint(),
        "127.0.0.1",
        Duration::from_secs(3600),
    )?;
    Ok(Credential::Certificate {
        trust_ca_pem: ca.cert_pem().to_string(),
        cert_pem: cert,
        key_pem: key.to_pem(),
    })
}

/// The rustls error inside a failed call's error chain, if the call failed in the TLS layer.
/// `std::io::Error::source()` skips the error it wraps (where hyper and tokio-rustls put the
/// rustls error), so the walk looks inside each io::Error itself. For the tests that must tell
/// "refused at the handshake, for this reason" from any other failure (a timeout, a refused
/// connection, a crashed server).
pub fn rustls_error(err: &anyhow::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err.as_ref());
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

/// The TLS alert the server sent to refuse the call, if that is how it failed.
pub fn alert_received(err: &anyhow::Error) -> Option<rustls::AlertDescription> {
    match rustls_error(err) {
        Some(rustls::Error::AlertReceived(alert)) => Some(*alert),
        _ => None,
    }
}
