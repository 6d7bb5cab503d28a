//! Raft RPCs over HTTPS with mutual TLS.
//!
//! Each peer gets one keep-alive client whose TLS server name is the peer's identity name
//! (`node-<id>.<cluster>.muster`), resolved to the peer's advertised address. Only the
//! certificate the cluster CA issued to that node id carries that name, so a message for node X
//! can never be delivered to another node that happens to sit at X's old address.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_shared::tls::node_dns_name;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::TypeConfig;
use super::types::{Node, NodeId};

/// Paths of the raft RPC endpoints on a node's TLS listener.
pub const APPEND_PATH: &str = "/raft/append";
pub const VOTE_PATH: &str = "/raft/vote";
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";

/// What peers' answers tell about them and about us: when each peer last answered an RPC
/// (feeds `reachable` and `last_seen_ms` in status), and whether one refused us as removed.
#[derive(Clone, Default)]
pub struct PeerLiveness {
    seen: Arc<Mutex<HashMap<NodeId, Instant>>>,
    removed: Arc<AtomicBool>,
}

impl PeerLiveness {
    fn saw(&self, id: NodeId) {
        if let Ok(mut map) = self.seen.lock() {
            map.insert(id, Instant::now());
        }
    }

    /// Milliseconds since `id` last answered, if it ever did.
    pub fn last_seen_ms(&self, id: NodeId) -> Option<u64> {
        self.seen
            .lock()
            .ok()
            .and_then(|m| m.get(&id).map(|t| t.elapsed().as_millis() as u64))
    }

    /// True once a peer answered `410 removed`: this node was removed from the cluster.
    pub fn peer_said_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }
}

/// A peer's keep-alive client, and the address spelling it was built for.
struct PeerConn {
    addr: String,
    http: reqwest::Client,
}

/// Builds per-peer clients. Connections are cached per node and survive openraft asking for
/// a new client (it does so for every vote and every linearizable read).
pub struct Network {
    tls: Arc<rustls::ClientConfig>,
    cluster_id: String,
    liveness: PeerLiveness,
    conns: Arc<Mutex<HashMap<NodeId, PeerConn>>>,
}

impl Network {
    pub fn new(tls: Arc<rustls::ClientConfig>, cluster_id: String, liveness: PeerLiveness) -> Self {
        Self {
            tls,
            cluster_id,
            liveness,
            conns: Arc::default(),
        }
    }
}

/// A client for one peer.
pub struct PeerClient {
    target: NodeId,
    /// The identity name the peer's certificate must carry.
    name: String,
    /// `host:port` as advertised (resolved when connecting, so a new IP is picked up).
    addr: String,
    tls: Arc<rustls::ClientConfig>,
    conns: Arc<Mutex<HashMap<NodeId, PeerConn>>>,
    liveness: PeerLiveness,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    /// Cheap and non-blocking: openraft calls this inside its core loop, so no DNS here.
    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        PeerClient {
            target,
            name: node_dns_name(target, &self.cluster_id),
            addr: node.addr.clone(),
            tls: self.tls.clone(),
            conns: self.conns.clone(),
            liveness: self.liveness.clone(),
        }
    }
}

fn unreachable(why: impl std::fmt::Display) -> Unreachable {
    Unreachable::new(&std::io::Error::other(why.to_string()))
}

impl PeerClient {
    /// The cached client for this peer, or a new one for its current address.
    async fn client(&self) -> Result<reqwest::Client, Unreachable> {
        if let Ok(conns) = self.conns.lock()
            && let Some(conn) = conns.get(&self.target)
            && conn.addr == self.addr
        {
            return Ok(conn.http.clone());
        }
        let resolved: SocketAddr = tokio::net::lookup_host(self.addr.as_str())
            .await
            .map_err(|e| unreachable(format!("cannot resolve {}: {e}", self.addr)))?
            .next()
            .ok_or_else(|| unreachable(format!("{} resolves to no address", self.addr)))?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*self.tls).clone())
            .resolve(&self.name, resolved)
            .http1_only()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(2)
            .build()
            .map_err(|e| unreachable(format!("cannot build a client: {e}")))?;
        if let Ok(mut conns) = self.conns.lock() {
            conns.insert(
                self.target,
                PeerConn {
                    addr: self.addr.clone(),
                    http: http.clone(),
                },
            );
        }
        Ok(http)
    }

    /// Forgets the cached connection: the next attempt resolves the address again (the peer
    /// may have come back on another IP).
    fn forget(&self) {
        if let Ok(mut conns) = self.conns.lock() {
            conns.remove(&self.target);
        }
    }

    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let http = self.client().await.map_err(RPCError::Unreachable)?;
        let port = self.addr.rsplit_once(':').map(|(_, p)| p).unwrap_or("7000");
        let timeout = option.hard_ttl().max(Duration::from_millis(50));
        let sent = http
            .post(format!("https://{}:{port}{path}", self.name))
            .json(req)
            .timeout(timeout)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            // Connection refused, TLS failure and the like: back off before trying again.
            Err(e) if e.is_connect() => {
                self.forget();
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if resp.status() == reqwest::StatusCode::GONE {
            // The peer's state says this node was removed; the agent stops on seeing this.
            self.liveness.removed.store(true, Ordering::Relaxed);
        }
        if !resp.status().is_success() {
            let e = std::io::Error::other(format!("peer answered HTTP {}", resp.status()));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let result: Result<Resp, RaftError<NodeId, E>> = resp
            .json()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        self.liveness.saw(self.target);
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(APPEND_PATH, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(SNAPSHOT_PATH, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(VOTE_PATH, &rpc, &option).await
    }

    /// After an unreachable peer, retry soon and then back off: a node that was just admitted
    /// starts listening a moment after the leader first tries it, and openraft's fixed 500 ms
    /// default would add that much to every formation.
    fn backoff(&self) -> Backoff {
        Backoff::new(
            [25u64, 50, 100, 200, 400]
                .into_iter()
                .chain(std::iter::repeat(500))
                .map(Duration::from_millis),
        )
    }
}
