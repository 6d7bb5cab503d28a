//! Raft RPCs over HTTPS with mutual TLS, through the agent's per-peer keep-alive clients
//! ([`PeerClients`]): a peer is reached by its identity name, so only the certificate the
//! cluster CA issued to that node id is accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
use crate::api::paths;
use crate::client::{CallError, PeerClients};
use crate::state::{Node, NodeId};

/// What peers' answers tell about them and about us: when each peer last answered an RPC
/// (feeds `reachable` and `last_seen_ms` in status), and whether one refused us as removed.
/// A peer that stops answering, and one that answers again, is logged once per change, not
/// once per retry.
#[derive(Clone, Default)]
pub struct PeerLiveness {
    seen: Arc<Mutex<HashMap<NodeId, Instant>>>,
    failing: Arc<Mutex<HashMap<NodeId, bool>>>,
    removed: Arc<AtomicBool>,
}

impl PeerLiveness {
    fn saw(&self, id: NodeId, name: &str) {
        if let Ok(mut map) = self.seen.lock() {
            map.insert(id, Instant::now());
        }
        if self.set_failing(id, false) == Some(true) {
            tracing::info!(peer = %name, "peer answers again");
        }
    }

    fn failed(&self, id: NodeId, name: &str, addr: &str, why: &dyn std::fmt::Display) {
        if self.set_failing(id, true) != Some(true) {
            // The innermost cause ("Connection refused (os error 111)") says it; the chain of
            // wrappers around it does not.
            let why = why.to_string();
            let reason = why.rsplit("source: ").next().unwrap_or(&why);
            tracing::warn!(peer = %name, %addr, %reason, "cannot reach peer; retrying quietly until it answers");
        }
    }

    /// Records whether `id` is failing; returns what was recorded before.
    fn set_failing(&self, id: NodeId, failing: bool) -> Option<bool> {
        self.failing.lock().ok()?.insert(id, failing)
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

/// Hands openraft a client per peer; the connections themselves live in [`PeerClients`] and
/// survive openraft asking for a new client (it does so for every vote and linearizable read).
pub struct Network {
    peers: PeerClients,
    liveness: PeerLiveness,
}

impl Network {
    pub fn new(peers: PeerClients, liveness: PeerLiveness) -> Self {
        Self { peers, liveness }
    }
}

/// openraft's client for one peer.
pub struct PeerClient {
    target: NodeId,
    name: String,
    /// `host:port` as advertised (resolved when connecting, so a new IP is picked up).
    addr: String,
    peers: PeerClients,
    liveness: PeerLiveness,
}

fn unreachable(why: CallError) -> Unreachable {
    Unreachable::new(&std::io::Error::other(why.to_string()))
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    /// Cheap and non-blocking: openraft calls this inside its core loop, so no DNS here.
    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        PeerClient {
            target,
            name: node.name.clone(),
            addr: node.addr.clone(),
            peers: self.peers.clone(),
            liveness: self.liveness.clone(),
        }
    }
}

impl PeerClient {
    /// One RPC; its outcome feeds [`PeerLiveness`].
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
        let result = self.send(path, req, option).await;
        match &result {
            Ok(_) | Err(RPCError::RemoteError(_)) => self.liveness.saw(self.target, &self.name),
            Err(e) => self.liveness.failed(self.target, &self.name, &self.addr, e),
        }
        result
    }

    async fn send<Req, Resp, E>(
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
        let peer = match self.peers.get(self.target, &self.addr).await {
            Ok(peer) => peer,
            Err(e) => return Err(RPCError::Unreachable(unreachable(e))),
        };
        let timeout = option.hard_ttl().max(Duration::from_millis(50));
        let sent = peer
            .http
            .post(format!("{}{path}", peer.base))
            .json(req)
            .timeout(timeout)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            // Connection refused, TLS failure and the like: back off before trying again.
            Err(e) if e.is_connect() => {
                self.peers.forget(self.target);
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
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(paths::RAFT_APPEND, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(paths::RAFT_SNAPSHOT, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(paths::RAFT_VOTE, &rpc, &option).await
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
