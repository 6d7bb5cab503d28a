//! The two key-value stores the benchmark compares, each a 3-member cluster on loopback at the
//! same raft timing, and one operation of each workload on either, over that system's own client
//! path: muster's operator API over TCP (TLS, an operator token, as `muster --server` and
//! scripts use it), etcd's v3 gRPC (the `etcd-client` crate; plain TCP, etcd's default).
//!
//! Client `i` talks to member `i % 3` on both, as clients spread over a cluster's members do:
//! a write or linearizable read that lands on a follower takes that system's own way to the
//! leader.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use muster_tests::etcd_cluster::EtcdCluster;
use muster_tests::{AgentProc, Discovery, OperatorApi, form_through_discovery, urlencode};

use crate::cluster::system::RaftTiming;

/// A started cluster of either system and its clients.
pub(super) enum KvSystem {
    Muster {
        agents: Vec<AgentProc>,
        api: OperatorApi,
    },
    Etcd {
        cluster: EtcdCluster,
        /// One client (one HTTP/2 connection) per member.
        clients: Vec<etcd_client::Client>,
    },
}

/// What a compare-and-set writer remembers between its writes: the revision it last wrote.
pub(super) type Revision = i64;

impl KvSystem {
    pub(super) async fn muster(
        root: &Path,
        discovery: &Discovery,
        timing: RaftTiming,
    ) -> Result<Self> {
        let agents =
            form_through_discovery(discovery, root, "kv", 3, |_| timing.muster_args()).await?;
        let token = AgentProc::operator_token_of(&agents)
            .await
            .context("operator token")?;
        let api = OperatorApi::new(&token, Duration::from_secs(10))?;
        Ok(Self::Muster { agents, api })
    }

    pub(super) async fn etcd(bin: &Path, timing: RaftTiming) -> Result<Self> {
        let cluster =
            EtcdCluster::start_with_timing(bin, 3, timing.heartbeat_ms, timing.election_ms).await?;
        let mut clients = Vec::new();
        for m in &cluster.members {
            clients.push(
                etcd_client::Client::connect([m.client_url.as_str()], None)
                    .await
                    .with_context(|| format!("connect to {}", m.client_url))?,
            );
        }
        Ok(Self::Etcd { cluster, clients })
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            KvSystem::Muster { .. } => "muster",
            KvSystem::Etcd { .. } => "etcd",
        }
    }

    /// The server processes, whose CPU and fsyncs count.
    pub(super) fn pids(&self) -> Vec<u32> {
        match self {
            KvSystem::Muster { agents, .. } => agents.iter().filter_map(|a| a.pid()).collect(),
            KvSystem::Etcd { cluster, .. } => {
                cluster.members.iter().filter_map(|m| m.pid()).collect()
            }
        }
    }

    /// A plain put of `value` at `key` through member `member % 3`.
    pub(super) async fn put(&self, member: usize, key: &str, value: &str) -> Result<Revision> {
        match self {
            KvSystem::Muster { agents, api } => {
                let addr = &agents[member % agents.len()].addr;
                let reply = api.put(addr, key, value).await?;
                if !reply.ok() {
                    bail!("put {key}: {} {}", reply.status, reply.body);
                }
                reply.body["revision"]
                    .as_i64()
                    .with_context(|| format!("put {key}: no revision in {}", reply.body))
            }
            KvSystem::Etcd { clients, .. } => {
                let mut c = clients[member % clients.len()].kv_client();
                let resp = c.put(key, value, None).await?;
                Ok(resp.header().context("no header")?.revision())
            }
        }
    }

    /// A put of `key` only if it is still at `revision` (which this writer wrote last): the
    /// revision of this write. A refused compare is an error (nobody else writes the key).
    pub(super) async fn cas(
        &self,
        member: usize,
        key: &str,
        value: &str,
        revision: Revision,
    ) -> Result<Revision> {
        match self {
            KvSystem::Muster { agents, api } => {
                let addr = &agents[member % agents.len()].addr;
                let reply = api
                    .call(
                        addr,
                        "PUT",
                        &format!("/v1/kv?key={}", urlencode(key)),
                        Some(serde_json::json!({"value": value, "if_revision": revision})),
                    )
                    .await?;
                if !reply.ok() {
                    bail!("cas {key}: {} {}", reply.status, reply.body);
                }
                reply.body["revision"]
                    .as_i64()
                    .with_context(|| format!("cas {key}: no revision in {}", reply.body))
            }
            KvSystem::Etcd { clients, .. } => {
                let mut c = clients[member % clients.len()].kv_client();
                let txn = Txn::new()
                    .when([Compare::mod_revision(key, CompareOp::Equal, revision)])
                    .and_then([TxnOp::put(key, value, None)]);
                let resp = c.txn(txn).await?;
                if !resp.succeeded() {
                    bail!("cas {key}: the compare failed");
                }
                Ok(resp.header().context("no header")?.revision())
            }
        }
    }

    /// A linearizable read of `key` (etcd's default, muster's only kind): its value.
    pub(super) async fn get(&self, member: usize, key: &str) -> Result<String> {
        match self {
            KvSystem::Muster { agents, api } => {
                let addr = &agents[member % agents.len()].addr;
                let reply = api.get(addr, key).await?;
                if !reply.ok() {
                    bail!("get {key}: {} {}", reply.status, reply.body);
                }
                Ok(reply.body["value"].as_str().unwrap_or_default().to_string())
            }
            KvSystem::Etcd { clients, .. } => {
                let mut c = clients[member % clients.len()].kv_client();
                let resp = c.get(key, None).await?;
                let kv = resp
                    .kvs()
                    .first()
                    .with_context(|| format!("{key} missing"))?;
                Ok(kv.value_str()?.to_string())
            }
        }
    }

    pub(super) fn member_count(&self) -> usize {
        match self {
            KvSystem::Muster { agents, .. } => agents.len(),
            KvSystem::Etcd { cluster, .. } => cluster.members.len(),
        }
    }

    /// The client of member `member` for a watch (etcd), or the operator API and the member's
    /// address (muster).
    pub(super) fn watch_endpoint(&self, member: usize) -> WatchEndpoint {
        match self {
            KvSystem::Muster { agents, api } => WatchEndpoint::Muster {
                api: api.clone(),
                addr: agents[member % agents.len()].addr.clone(),
            },
            KvSystem::Etcd { clients, .. } => {
                WatchEndpoint::Etcd(Box::new(clients[member % clients.len()].clone()))
            }
        }
    }

    /// The member that leads now (writes go there in the end on both systems): logged with the
    /// figures so a run's shape can be told.
    pub(super) async fn leader(&self) -> Option<String> {
        match self {
            KvSystem::Muster { agents, .. } => {
                for a in agents {
                    if let Some(s) = a.status().await {
                        return s["leader"].as_str().map(String::from);
                    }
                }
                None
            }
            KvSystem::Etcd { clients, .. } => {
                let mut c = clients[0].maintenance_client();
                let status = c.status().await.ok()?;
                Some(format!("member id {:x}", status.leader()))
            }
        }
    }
}

/// Where a watcher listens.
pub(super) enum WatchEndpoint {
    Muster { api: OperatorApi, addr: String },
    Etcd(Box<etcd_client::Client>),
}
