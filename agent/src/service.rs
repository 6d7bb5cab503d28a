//! The running agent: raft, this node's identity and TLS material, and the operations the
//! operator API and peers call (status, kv, join), plus the leader's voter reconciler.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_shared::bootstrap::{BootstrapRecord, RecordState};
use muster_shared::tls::ClusterCa;
use serde::{Deserialize, Serialize};

use crate::api::types::{KvEntry, Member, Status};
use crate::discovery::DiscoveryClient;
use crate::raft::node::{RaftNode, RaftNodeError};
use crate::raft::types::{Node, NodeId, NodeRecord, Request};

/// A nonvoter is promoted only after it has been in the configuration this long.
pub const PROMOTE_AFTER: Duration = Duration::from_secs(3);
/// A nonvoter counts as caught up when it is at most this many entries behind the leader.
const CAUGHT_UP_LAG: u64 = 5;
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

pub struct Agent {
    pub raft: RaftNode,
    pub data_dir: std::path::PathBuf,
    pub node_id: NodeId,
    pub name: String,
    pub advertise: String,
    pub cluster_id: String,
    /// TLS client config with this node's certificate, for forwarding to the leader.
    pub peer_tls: Arc<rustls::ClientConfig>,
    /// Set on the initiator while its cohort is joining.
    pub formation: Mutex<Option<Formation>>,
    /// Leader-side: when each node was first seen in the configuration.
    first_seen: Mutex<HashMap<NodeId, Instant>>,
    /// RPCs refused because the caller had no cluster certificate (or another cluster's).
    pub refused_rpcs: std::sync::atomic::AtomicU64,
}

/// A join request: a registrant of the discovery URL proving the key it registered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub discovery_url: String,
    pub member_id: String,
    pub name: String,
    pub addr: String,
    pub csr_pem: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinResponse {
    pub cluster_id: String,
    pub ca_cert_pem: String,
    pub cert_pem: String,
    pub node_id: String,
}

/// An operation forwarded from a follower to the leader over mutual TLS.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ForwardedOp {
    Write { request: Request },
    KvGet { key: String },
    KvList { prefix: String },
    Status,
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
}

impl From<RaftNodeError> for OpError {
    fn from(e: RaftNodeError) -> Self {
        use crate::api::types::kind;
        match e {
            RaftNodeError::NotLeader { .. } | RaftNodeError::NoLeader => {
                OpError::new(kind::NO_LEADER, 503, e.to_string())
            }
            RaftNodeError::Timeout(_) | RaftNodeError::QuorumLost(_) => {
                OpError::new(kind::QUORUM_LOST, 503, e.to_string())
            }
            RaftNodeError::Refused(_) => OpError::new(kind::INVALID_ARGUMENT, 409, e.to_string()),
            _ => OpError::new(kind::INTERNAL, 500, e.to_string()),
        }
    }
}

impl Agent {
    pub fn new(
        raft: RaftNode,
        data_dir: std::path::PathBuf,
        node_id: NodeId,
        name: String,
        advertise: String,
        cluster_id: String,
        peer_tls: Arc<rustls::ClientConfig>,
    ) -> Self {
        Self {
            raft,
            data_dir,
            node_id,
            name,
            advertise,
            cluster_id,
            peer_tls,
            formation: Mutex::new(None),
            first_seen: Mutex::new(HashMap::new()),
            refused_rpcs: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Runs `op` on the leader: here if this node leads, else forwarded over mutual TLS. While
    /// an election is in progress it waits (up to [`ELECTION_GRACE`]) instead of failing.
    pub async fn on_leader(&self, op: ForwardedOp) -> Result<serde_json::Value, OpError> {
        let deadline = Instant::now() + ELECTION_GRACE;
        loop {
            match self.on_leader_once(op.clone()).await {
                Err(e)
                    if e.kind == crate::api::types::kind::NO_LEADER
                        && Instant::now() < deadline =>
                {
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
                crate::api::types::kind::NO_LEADER,
                503,
                "no leader is known right now; retry in a moment",
            ));
        };
        // Address the leader by its identity name so only its certificate is accepted.
        let name = muster_shared::tls::node_dns_name(leader.0, &self.cluster_id);
        let url = format!(
            "https://{name}:{}{}",
            leader
                .1
                .addr
                .rsplit_once(':')
                .map(|(_, p)| p)
                .unwrap_or("7000"),
            crate::server::FORWARD_PATH
        );
        let addr = tokio::net::lookup_host(leader.1.addr.as_str())
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                OpError::new(
                    crate::api::types::kind::NO_LEADER,
                    503,
                    format!("cannot resolve leader address {}", leader.1.addr),
                )
            })?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.peer_tls).clone())
            .resolve(&name, addr)
            .no_proxy()
            .build()
            .map_err(|e| OpError::new(crate::api::types::kind::INTERNAL, 500, e.to_string()))?;
        let resp = client
            .post(url)
            .json(&op)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| {
                // Only a request that never reached the leader may be retried; after that a
                // write may have been applied, and sending it again would apply it twice.
                let kind = if e.is_connect() {
                    crate::api::types::kind::NO_LEADER
                } else {
                    crate::api::types::kind::QUORUM_LOST
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
            .map_err(|e| OpError::new(crate::api::types::kind::INTERNAL, 502, e.to_string()))?;
        if status >= 400 {
            let kind = body["kind"].as_str().unwrap_or("internal");
            let message = body["message"]
                .as_str()
                .unwrap_or("leader refused")
                .to_string();
            return Err(OpError::new(static_kind(kind), status, message));
        }
        Ok(body)
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
                        crate::api::types::kind::NOT_FOUND,
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
            ForwardedOp::Status => {
                Ok(serde_json::to_value(self.local_status()?).unwrap_or_default())
            }
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

    /// Admits a first-N registrant of this cluster's discovery URL (leader only).
    pub async fn admit(&self, req: JoinRequest) -> Result<JoinResponse, OpError> {
        use crate::api::types::kind;
        let formation = self
            .formation
            .lock()
            .map_err(|_| OpError::new(kind::INTERNAL, 500, "lock poisoned"))?
            .clone();
        let Some(formation) = formation else {
            return Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                "this cluster is not admitting discovery registrants; use a join token",
            ));
        };
        if !self.raft.view().is_leader {
            return Err(OpError::new(
                kind::NO_LEADER,
                503,
                "this node is not the leader; retry",
            ));
        }
        if req.discovery_url.trim_end_matches('/') != formation.discovery_url.trim_end_matches('/')
        {
            return Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                "this cluster formed through another discovery URL",
            ));
        }
        let node_id = u64::from_str_radix(&req.member_id, 16)
            .map_err(|_| OpError::new(kind::INVALID_ARGUMENT, 400, "member id is not hex"))?;
        // Check the registration and the key it registered, straight from the discovery service.
        let discovery = DiscoveryClient::new(&formation.discovery_url)
            .map_err(|e| OpError::new(kind::INTERNAL, 500, e.to_string()))?;
        let listing = discovery
            .listing()
            .await
            .map_err(|e| OpError::new(kind::INTERNAL, 503, e.to_string()))?;
        let registered = listing
            .cohort()
            .iter()
            .find(|r| r.id == req.member_id)
            .ok_or_else(|| {
                OpError::new(
                    kind::UNAUTHORIZED,
                    403,
                    format!(
                        "member {} is not one of the first registrants of the discovery URL",
                        req.member_id
                    ),
                )
            })?;
        if registered.name != req.name || registered.addr != req.addr {
            return Err(OpError::new(
                kind::UNAUTHORIZED,
                403,
                format!(
                    "registration says {}@{}, request says {}@{}",
                    registered.name, registered.addr, req.name, req.addr
                ),
            ));
        }
        let meta = discovery
            .meta(&req.member_id)
            .await
            .map_err(|e| OpError::new(kind::INTERNAL, 503, e.to_string()))?
            .ok_or_else(|| {
                OpError::new(kind::UNAUTHORIZED, 403, "no key registered for this member")
            })?;
        let ca = self.raft.read_local(|s| s.ca.clone())?.ok_or_else(|| {
            OpError::new(
                kind::CLUSTER_UNINITIALIZED,
                503,
                "cluster CA not yet replicated",
            )
        })?;
        let ca = ClusterCa::from_pem(&ca.cert_pem, &ca.key_pem)
            .map_err(|e| OpError::new(kind::INTERNAL, 500, e.to_string()))?;
        let host = req
            .addr
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or(&req.addr);
        let cert_pem = ca
            .sign_node(
                &req.csr_pem,
                node_id,
                &self.cluster_id,
                &meta.key_fingerprint,
                host,
                CERT_VALIDITY,
            )
            .map_err(|e| {
                OpError::new(
                    kind::UNAUTHORIZED,
                    403,
                    format!("certificate request refused: {e}"),
                )
            })?;
        self.raft
            .write(Request::UpsertNode {
                id: node_id,
                node: NodeRecord {
                    name: req.name.clone(),
                    addr: req.addr.clone(),
                    key_fingerprint: meta.key_fingerprint.clone(),
                    joined_ms: now_ms(),
                },
            })
            .await?;
        self.raft
            .add_learner(
                node_id,
                Node {
                    name: req.name.clone(),
                    addr: req.addr.clone(),
                },
            )
            .await?;
        tracing::info!(node = %req.name, id = %req.member_id, "admitted registrant as nonvoter");
        Ok(JoinResponse {
            cluster_id: self.cluster_id.clone(),
            ca_cert_pem: ca.cert_pem().to_string(),
            cert_pem,
            node_id: req.member_id,
        })
    }

    /// One reconciler step on the leader: the cohort of a fresh formation becomes voters at
    /// once when all of it has caught up; otherwise at most one suffrage change per tick.
    pub async fn reconcile(&self) -> Result<(), OpError> {
        let view = self.raft.view();
        if !view.is_leader || !view.membership_settled() {
            return Ok(());
        }
        if view.voter_sets.len() > 1 {
            let target = view.voter_sets.last().cloned().unwrap_or_default();
            tracing::warn!(voters = ?target, "finishing a joint configuration left by an interrupted change");
            self.raft.finish_joint(target).await?;
            return Ok(());
        }
        let now = Instant::now();
        {
            let mut seen = self
                .first_seen
                .lock()
                .map_err(|_| OpError::new("internal", 500, "lock poisoned"))?;
            seen.retain(|id, _| view.nodes.contains_key(id));
            for id in view.nodes.keys() {
                seen.entry(*id).or_insert(now);
            }
        }
        let leader_last = view.last_log_index.unwrap_or(0);
        let caught_up = |id: &NodeId| {
            view.matched
                .get(id)
                .copied()
                .flatten()
                .is_some_and(|m| m + CAUGHT_UP_LAG >= leader_last)
        };
        let formation = self.formation.lock().ok().and_then(|f| f.clone());
        if let Some(formation) = &formation {
            match self.formation_step(formation, &view, &caught_up).await {
                // Still forming: leave suffrage to the formation.
                Ok(true) => return Ok(()),
                Ok(false) => {}
                // The discovery service is unreachable: the general policy below still runs,
                // so a cluster never depends on discovery for its voters.
                Err(e) => tracing::debug!(error = %e, "formation step skipped"),
            }
        }
        let names = self.raft.read_local(|s| s.nodes.clone())?;
        let name = |id: &NodeId| {
            names
                .get(id)
                .map(|r| r.name.clone())
                .or_else(|| view.nodes.get(id).map(|n| n.name.clone()))
                .unwrap_or_default()
        };
        let target = voter_target(view.nodes.len());
        let seen = self
            .first_seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        if view.voters.len() < target {
            let mut eligible: Vec<NodeId> = view
                .nodes
                .keys()
                .filter(|id| !view.voters.contains(id))
                .filter(|id| {
                    seen.get(id)
                        .is_some_and(|t| now.duration_since(*t) >= PROMOTE_AFTER)
                })
                .filter(|id| caught_up(id))
                .copied()
                .collect();
            eligible.sort_by_key(&name);
            if let Some(first) = eligible.first() {
                tracing::info!(node = %name(first), "promoting nonvoter to voter");
                self.raft.promote(BTreeSet::from([*first])).await?;
            }
        } else if view.voters.len() > target {
            let mut voters: Vec<NodeId> = view
                .voters
                .iter()
                .filter(|id| **id != self.node_id)
                .copied()
                .collect();
            voters.sort_by_key(&name);
            if let Some(last) = voters.last() {
                tracing::info!(node = %name(last), "demoting voter to nonvoter");
                self.raft.demote(BTreeSet::from([*last])).await?;
            }
        }
        Ok(())
    }

    /// One formation step. Returns true while the cohort is still being formed (the general
    /// reconciler must then wait), false once formation is over.
    async fn formation_step(
        &self,
        formation: &Formation,
        view: &crate::raft::node::RaftView,
        caught_up: &impl Fn(&NodeId) -> bool,
    ) -> Result<bool, OpError> {
        let discovery = DiscoveryClient::new(&formation.discovery_url)
            .map_err(|e| OpError::new("internal", 500, e.to_string()))?;
        let listing = discovery
            .listing()
            .await
            .map_err(|e| OpError::new("internal", 503, e.to_string()))?;
        let cohort: BTreeSet<NodeId> = listing
            .cohort()
            .iter()
            .filter_map(|r| u64::from_str_radix(&r.id, 16).ok())
            .collect();
        if cohort.len() < formation.size || !cohort.iter().all(|id| view.nodes.contains_key(id)) {
            // Registrations or joins are still missing.
            return Ok(true);
        }
        // The voter table applies to the cohort too (4 registrants → 3 voters): promote the
        // lexicographically-first nonvoters, all in one membership change.
        let records = self.raft.read_local(|s| s.nodes.clone())?;
        let name = |id: &NodeId| records.get(id).map(|r| r.name.clone()).unwrap_or_default();
        let wanted = voter_target(cohort.len()).saturating_sub(view.voters.len());
        let mut nonvoters: Vec<NodeId> = cohort.difference(&view.voters).copied().collect();
        nonvoters.sort_by_key(&name);
        let promote: BTreeSet<NodeId> = nonvoters.into_iter().take(wanted).collect();
        if promote.is_empty() {
            // Done. Forget the formation here and now; marking the record formed is best effort
            // in the background, so an unreachable discovery service never holds the cluster.
            self.forget_formation();
            let formation = formation.clone();
            tokio::spawn(async move { mark_formed(&formation).await });
            return Ok(false);
        }
        if promote.iter().all(caught_up) {
            tracing::info!(
                count = promote.len(),
                "promoting the formation cohort to voters"
            );
            self.raft.promote(promote).await?;
        }
        Ok(true)
    }

    fn forget_formation(&self) {
        if let Err(e) = crate::bootstrap::clear_formation(&self.data_dir) {
            tracing::warn!(error = %e, "cannot update cluster.json; will retry");
            return;
        }
        if let Ok(mut f) = self.formation.lock() {
            *f = None;
        }
    }
}

/// Moves the discovery record from open to formed (a few tries; the cluster does not need it).
async fn mark_formed(formation: &Formation) {
    let Ok(discovery) = DiscoveryClient::new(&formation.discovery_url) else {
        return;
    };
    for attempt in 0..5u32 {
        match discovery.record().await {
            Ok(Some((record, index))) if record.state == RecordState::Open => {
                let formed = BootstrapRecord {
                    state: RecordState::Formed,
                    ..record
                };
                if discovery.update_record(&formed, index).await.is_ok() {
                    tracing::info!("cluster formed: the discovery record now says formed");
                    return;
                }
            }
            Ok(_) => return,
            Err(e) => tracing::debug!(error = %e, "cannot read the discovery record"),
        }
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
    }
    tracing::warn!(
        "could not mark the discovery record formed; the URL still refuses newcomers once full"
    );
}

fn static_kind(kind: &str) -> &'static str {
    use crate::api::types::kind::*;
    [
        CLUSTER_UNINITIALIZED,
        NO_LEADER,
        QUORUM_LOST,
        UNAUTHORIZED,
        NOT_FOUND,
        INVALID_ARGUMENT,
        CA_PIN_MISMATCH,
    ]
    .into_iter()
    .find(|k| *k == kind)
    .unwrap_or(INTERNAL)
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

/// Keeps the agent reconciling while it runs.
pub async fn reconcile_loop(agent: Arc<Agent>) {
    // Frequent ticks keep formation fast; a tick outside formation reads only local state.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = agent.reconcile().await {
            tracing::debug!(error = %e, "reconcile step failed; will retry");
        }
    }
}
