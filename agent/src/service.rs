//! The running agent: raft, this node's identity and TLS material, and the operations the
//! operator API and peers call. Operations run on the leader: [`Agent::on_leader`] runs one here
//! or forwards it over mutual TLS, and [`Agent::execute`] dispatches it to the module that owns
//! it (admission, tokens, removal, backup, the key-value space).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::api::types::{KvEntry, Member, Status, kind};
use crate::raft::node::{RaftNode, RaftNodeError};
use crate::raft::types::{NodeId, Request};
use crate::removal::RemovalWatch;

/// How long a follower waits for the leader to answer a forwarded operation: longer than the
/// leader's own longest wait (`node remove` waits for the node to leave), shorter than the
/// CLI's 30 s.
pub(crate) const FORWARD_TIMEOUT: Duration = Duration::from_secs(25);

/// How long an operator call waits for a leader before answering `no_leader`.
const ELECTION_GRACE: Duration = Duration::from_secs(5);
/// Node certificates are valid this long: as long as the CA, because certificate rotation does
/// not exist yet and an expired certificate would silently cut a node off its cluster.
pub const CERT_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

pub use muster_shared::policy::voter_target;

/// A formation in progress on the initiator: the discovery URL whose first `size` registrants
/// are admitted and made voters together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Formation {
    pub discovery_url: String,
    pub size: usize,
    pub initiator: bool,
    /// The CA, kept until raft holds it, so a restarted initiator can finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<crate::raft::types::CaMaterial>,
}

/// Who this agent is and how it behaves; fixed for the life of the process.
pub struct AgentInit {
    pub data_dir: std::path::PathBuf,
    pub node_id: NodeId,
    pub name: String,
    pub advertise: String,
    pub cluster_id: String,
    /// SHA-256 of the cluster CA's SubjectPublicKeyInfo (goes into every token).
    pub ca_pin: String,
    /// TLS client config with this node's certificate, for forwarding to the leader.
    pub peer_tls: Arc<rustls::ClientConfig>,
    /// A nonvoter is promoted only after it has been in the configuration this long.
    pub promote_after: Duration,
}

pub struct Agent {
    pub raft: RaftNode,
    pub data_dir: std::path::PathBuf,
    pub node_id: NodeId,
    pub name: String,
    pub advertise: String,
    pub cluster_id: String,
    pub ca_pin: String,
    pub peer_tls: Arc<rustls::ClientConfig>,
    pub promote_after: Duration,
    /// Set on the initiator while its cohort is joining.
    pub formation: Mutex<Option<Formation>>,
    /// Leader-side: when each node was first seen in the configuration.
    pub(crate) first_seen: Mutex<HashMap<NodeId, Instant>>,
    /// Leader-side: when each removed (tombstoned) node was first seen as a nonvoter still in
    /// the configuration, and the leader's last log index at that moment.
    pub(crate) removal_seen: Mutex<HashMap<NodeId, (Instant, u64)>>,
    /// Leader-side: one `node remove` at a time, so each quorum check sees the one before it.
    pub(crate) removal_lock: tokio::sync::Mutex<()>,
    /// Whether this node has learnt that it was removed, and when the leader last reached it.
    pub removal: RemovalWatch,
    /// RPCs refused because the caller had no cluster certificate (or another cluster's).
    pub refused_rpcs: std::sync::atomic::AtomicU64,
}

/// An operation that runs on the leader, sent there over mutual TLS when this node is a
/// follower. Each variant is executed by the leader's own code, which does every check again:
/// a member can ask for nothing it could not ask through the operator API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ForwardedOp {
    Write { request: Request },
    KvGet { key: String },
    KvList { prefix: String },
    Status,
    TokenJoin { join: crate::admission::TokenJoin },
    CreateJoinToken { create: crate::tokens::NewToken },
    ListJoinTokens,
    RevokeJoinToken { id: String },
    CreateOperatorToken { create: crate::tokens::NewToken },
    ListOperatorTokens,
    RevokeOperatorToken { id: String },
    RemoveNode { name: String, force: bool },
    Backup,
}

/// Why an operation failed, with the agent's stable error kind.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct OpError {
    pub kind: &'static str,
    pub message: String,
    pub status: u16,
}

impl OpError {
    pub fn new(kind: &'static str, status: u16, message: impl Into<String>) -> Self {
        Self {
            kind,
            status,
            message: message.into(),
        }
    }

    /// An error whose HTTP status follows from its kind.
    pub fn of_kind(kind: &str, message: impl Into<String>) -> Self {
        let kind = static_kind(kind);
        let status = match kind {
            kind::NOT_FOUND => 404,
            kind::INVALID_ARGUMENT => 400,
            kind::NAME_TAKEN | kind::WOULD_LOSE_QUORUM => 409,
            kind::REMOVED => 410,
            kind::UNAUTHORIZED
            | kind::TOKEN_EXPIRED
            | kind::TOKEN_CONSUMED
            | kind::TOKEN_REVOKED
            | kind::CA_PIN_MISMATCH => 403,
            kind::NO_LEADER
            | kind::QUORUM_LOST
            | kind::CLUSTER_UNINITIALIZED
            | kind::MEMBERSHIP_BUSY => 503,
            _ => 500,
        };
        Self::new(kind, status, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(kind::INTERNAL, 500, message)
    }
}

impl From<RaftNodeError> for OpError {
    fn from(e: RaftNodeError) -> Self {
        match e {
            RaftNodeError::NotLeader { .. } | RaftNodeError::NoLeader => {
                OpError::new(kind::NO_LEADER, 503, e.to_string())
            }
            RaftNodeError::Timeout(_) | RaftNodeError::QuorumLost(_) => {
                OpError::new(kind::QUORUM_LOST, 503, e.to_string())
            }
            RaftNodeError::Refused(refusal) => OpError::of_kind(&refusal.kind, refusal.message),
            // Another membership change is still in flight: worth retrying shortly.
            RaftNodeError::MembershipRefused(_) => {
                OpError::new(kind::MEMBERSHIP_BUSY, 503, e.to_string())
            }
            _ => OpError::internal(e.to_string()),
        }
    }
}

impl Agent {
    pub fn new(raft: RaftNode, init: AgentInit) -> Self {
        Self {
            raft,
            data_dir: init.data_dir,
            node_id: init.node_id,
            name: init.name,
            advertise: init.advertise,
            cluster_id: init.cluster_id,
            ca_pin: init.ca_pin,
            peer_tls: init.peer_tls,
            promote_after: init.promote_after,
            formation: Mutex::new(None),
            first_seen: Mutex::new(HashMap::new()),
            removal_seen: Mutex::new(HashMap::new()),
            removal_lock: tokio::sync::Mutex::new(()),
            removal: RemovalWatch::default(),
            refused_rpcs: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Runs `op` on the leader: here if this node leads, else forwarded over mutual TLS. While
    /// an election is in progress it waits (up to [`ELECTION_GRACE`]) instead of failing.
    pub async fn on_leader(&self, op: ForwardedOp) -> Result<serde_json::Value, OpError> {
        let deadline = Instant::now() + ELECTION_GRACE;
        loop {
            match self.on_leader_once(op.clone()).await {
                Err(e) if e.kind == kind::NO_LEADER && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    async fn on_leader_once(&self, op: ForwardedOp) -> Result<serde_json::Value, OpError> {
        let view = self.raft.view();
        if view.is_leader {
            return self.execute(op).await;
        }
        let Some(leader) = view
            .leader
            .and_then(|id| view.nodes.get(&id).map(|n| (id, n.clone())))
        else {
            return Err(OpError::new(
                kind::NO_LEADER,
                503,
                "no leader is known right now; retry in a moment",
            ));
        };
        let (client, base) = self.peer_client(leader.0, &leader.1.addr).await?;
        let url = format!("{base}{}", crate::server::FORWARD_PATH);
        let resp = client
            .post(url)
            .json(&op)
            .timeout(FORWARD_TIMEOUT)
            .send()
            .await
            .map_err(|e| {
                // Only a request that never reached the leader may be retried; after that a
                // write may have been applied, and sending it again would apply it twice.
                let kind = if e.is_connect() {
                    kind::NO_LEADER
                } else {
                    kind::QUORUM_LOST
                };
                OpError::new(
                    kind,
                    503,
                    format!("leader {} did not answer ({e}); the outcome is unknown, read before retrying", leader.1.name),
                )
            })?;
        let status = resp.status().as_u16();
        let body: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| OpError::new(kind::INTERNAL, 502, e.to_string()))?;
        if status >= 400 {
            let kind = body["kind"].as_str().unwrap_or("internal");
            if kind == kind::REMOVED {
                // The leader says this node was removed: stop like on any other sign of it.
                self.removal.conclude();
            }
            let message = body["message"]
                .as_str()
                .unwrap_or("leader refused")
                .to_string();
            return Err(OpError::new(static_kind(kind), status, message));
        }
        Ok(body)
    }

    /// A mutual-TLS client for peer `id` and the base URL to reach it by its identity name, so
    /// only the certificate the CA issued to that node is accepted.
    pub(crate) async fn peer_client(
        &self,
        id: NodeId,
        addr: &str,
    ) -> Result<(reqwest::Client, String), OpError> {
        let name = muster_shared::tls::node_dns_name(id, &self.cluster_id);
        let port = addr.rsplit_once(':').map(|(_, p)| p).unwrap_or("7000");
        let resolved = tokio::net::lookup_host(addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                OpError::new(
                    kind::NO_LEADER,
                    503,
                    format!("cannot resolve peer address {addr}"),
                )
            })?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.peer_tls).clone())
            .resolve(&name, resolved)
            .no_proxy()
            .build()
            .map_err(|e| OpError::internal(e.to_string()))?;
        Ok((client, format!("https://{name}:{port}")))
    }

    /// Executes an operation on this node, which must be the leader.
    pub async fn execute(&self, op: ForwardedOp) -> Result<serde_json::Value, OpError> {
        match op {
            ForwardedOp::Write { request } => {
                let response = self.raft.write(request).await?;
                Ok(serde_json::json!({ "previous": response.previous }))
            }
            ForwardedOp::KvGet { key } => {
                let value = self
                    .raft
                    .read_linearizable(|s| s.kv.get(&key).cloned())
                    .await?;
                match value {
                    Some(value) => Ok(json(&KvEntry { key, value })),
                    None => Err(OpError::new(
                        kind::NOT_FOUND,
                        404,
                        format!("key {key:?} not found"),
                    )),
                }
            }
            ForwardedOp::KvList { prefix } => {
                let entries = self
                    .raft
                    .read_linearizable(|s| {
                        s.kv.range(prefix.clone()..)
                            .take_while(|(k, _)| k.starts_with(&prefix))
                            .map(|(k, v)| KvEntry {
                                key: k.clone(),
                                value: v.clone(),
                            })
                            .collect::<Vec<_>>()
                    })
                    .await?;
                Ok(json(&entries))
            }
            ForwardedOp::Status => Ok(json(&self.local_status()?)),
            ForwardedOp::TokenJoin { join } => Ok(json(&self.admit_with_token(join).await?)),
            ForwardedOp::CreateJoinToken { create } => {
                Ok(json(&self.create_join_token(create).await?))
            }
            ForwardedOp::ListJoinTokens => Ok(json(&self.list_join_tokens().await?)),
            ForwardedOp::RevokeJoinToken { id } => Ok(json(&self.revoke_join_token(&id).await?)),
            ForwardedOp::CreateOperatorToken { create } => {
                Ok(json(&self.create_operator_token(create).await?))
            }
            ForwardedOp::ListOperatorTokens => Ok(json(&self.list_operator_tokens().await?)),
            ForwardedOp::RevokeOperatorToken { id } => {
                Ok(json(&self.revoke_operator_token(&id).await?))
            }
            ForwardedOp::RemoveNode { name, force } => {
                Ok(json(&self.remove_node(&name, force).await?))
            }
            ForwardedOp::Backup => Ok(json(&self.backup().await?)),
        }
    }

    /// Status as this node sees it. On the leader it includes replication progress.
    pub fn local_status(&self) -> Result<Status, OpError> {
        let view = self.raft.view();
        let records = self.raft.read_local(|s| s.nodes.clone())?;
        let name_of = |id: NodeId| {
            records
                .get(&id)
                .map(|r| r.name.clone())
                .or_else(|| view.nodes.get(&id).map(|n| n.name.clone()))
                .unwrap_or_else(|| format!("{id:x}"))
        };
        let liveness = self.raft.liveness();
        let mut members: Vec<Member> = view
            .nodes
            .iter()
            .map(|(id, node)| {
                let me = *id == self.node_id;
                let (reachable, last_seen_ms, match_index) = if view.is_leader {
                    let seen = if me {
                        Some(0)
                    } else {
                        liveness.last_seen_ms(*id)
                    };
                    let fresh = seen.is_some_and(|ms| ms < 3_000);
                    (
                        Some(me || fresh),
                        seen,
                        view.matched.get(id).copied().flatten(),
                    )
                } else {
                    (None, None, None)
                };
                Member {
                    name: name_of(*id),
                    id: format!("{id:x}"),
                    address: node.addr.clone(),
                    suffrage: if view.voters.contains(id) {
                        "voter"
                    } else {
                        "nonvoter"
                    }
                    .into(),
                    reachable,
                    last_seen_ms,
                    match_index,
                }
            })
            .collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Status {
            cluster_id: self.cluster_id.clone(),
            self_name: self.name.clone(),
            leader: view.leader.map(name_of),
            term: view.term,
            commit_index: view.last_applied.unwrap_or(0),
            members,
            refused_rpcs: self.refused_rpcs.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Status with the leader's view of the members (falls back to the local view).
    pub async fn status(&self) -> Result<Status, OpError> {
        let mut local = self.local_status()?;
        if self.raft.view().is_leader {
            return Ok(local);
        }
        if let Ok(value) = self.on_leader(ForwardedOp::Status).await
            && let Ok(leader) = serde_json::from_value::<Status>(value)
        {
            local.members = leader.members;
            local.leader = leader.leader;
            local.commit_index = local.commit_index.max(leader.commit_index);
        }
        Ok(local)
    }
}

/// The `&'static` spelling of a kind that came over the wire (from the leader or the state
/// machine); an unknown kind becomes `internal`.
pub fn static_kind(name: &str) -> &'static str {
    kind::ALL
        .iter()
        .copied()
        .find(|k| *k == name)
        .unwrap_or(kind::INTERNAL)
}

/// Operator answers travel as JSON values (they may be forwarded); typed shapes go in here.
fn json(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or_default()
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
