//! Raft RPCs over HTTPS with mutual TLS, through the agent's per-peer keep-alive clients
//! ([`PeerClients`]): a peer is reached by its identity name, so only the certificate the
//! cluster CA issued to that node id is accepted.
//!
//! This file is openraft's side: a client per peer, and an AppendEntries kept in flight across
//! openraft's retries. One RPC and its outcome is `network/link.rs`; what peers' answers say
//! about them is `network/liveness.rs`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{LogId, Vote};

use super::TypeConfig;
use crate::api::paths;
use crate::client::PeerClients;
use crate::state::{Node, NodeId};

mod link;
mod liveness;

use link::PeerLink;
pub use liveness::PeerLiveness;

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
    link: PeerLink,
    /// The AppendEntries with entries that is still on its way, if any (see
    /// [`PeerClient::append_entries`]).
    in_flight: Option<InFlight>,
}

/// The task of an AppendEntries in flight ended without an answer (it panicked).
fn task_lost() -> RPCError<NodeId, Node, RaftError<NodeId>> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "the AppendEntries task ended without an answer",
    )))
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    /// Cheap and non-blocking: openraft calls this inside its core loop, so no DNS here.
    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        PeerClient {
            link: PeerLink {
                target,
                name: node.name.clone(),
                addr: node.addr.clone(),
                peers: self.peers.clone(),
                liveness: self.liveness.clone(),
            },
            in_flight: None,
        }
    }
}

/// How long an AppendEntries that carries entries may take, whatever openraft's own timeout.
const DATA_RPC_TIMEOUT: Duration = Duration::from_secs(10);

type AppendResult =
    Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>>;

/// Which AppendEntries a retry repeats: same leader, same place in the log, same entries.
#[derive(Clone, PartialEq, Eq)]
struct AppendKey {
    vote: Vote<NodeId>,
    prev: Option<LogId<NodeId>>,
    last: Option<LogId<NodeId>>,
}

/// An AppendEntries with entries, running in a task of its own. Its answer is taken once, by
/// whichever attempt of openraft's is waiting when it comes.
struct InFlight {
    key: AppendKey,
    answer: Arc<Mutex<Option<AppendResult>>>,
    done: tokio::sync::watch::Receiver<bool>,
}

impl RaftNetwork<TypeConfig> for PeerClient {
    /// openraft gives every AppendEntries its heartbeat interval (here the pacemaker's RPC
    /// timeout) and then drops it. A batch of large entries to a busy follower can take longer;
    /// dropped and sent again from scratch, it would never arrive, and the follower would never
    /// catch up. So a batch runs in its own task, bounded by [`DATA_RPC_TIMEOUT`] instead, and
    /// openraft's retry of the same batch waits for that task rather than starting over.
    /// Heartbeats (no entries) are sent plainly.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        if rpc.entries.is_empty() {
            return self
                .link
                .call(paths::RAFT_APPEND, &rpc, option.hard_ttl(), 0)
                .await;
        }
        let key = AppendKey {
            vote: rpc.vote,
            prev: rpc.prev_log_id,
            last: rpc.entries.last().map(|e| e.log_id),
        };
        let (answer, mut done) = match &self.in_flight {
            Some(f) if f.key == key => (f.answer.clone(), f.done.clone()),
            _ => {
                let (tx, rx) = tokio::sync::watch::channel(false);
                let answer = Arc::new(Mutex::new(None));
                let link = self.link.clone();
                let slot = answer.clone();
                tokio::spawn(async move {
                    let entries = rpc.entries.len();
                    let result = link
                        .call(paths::RAFT_APPEND, &rpc, DATA_RPC_TIMEOUT, entries)
                        .await;
                    if let Ok(mut slot) = slot.lock() {
                        *slot = Some(result);
                    }
                    let _ = tx.send(true);
                });
                self.in_flight = Some(InFlight {
                    key,
                    answer: answer.clone(),
                    done: rx.clone(),
                });
                (answer, rx)
            }
        };
        let _ = done.wait_for(|finished| *finished).await;
        self.in_flight = None;
        let taken = answer.lock().ok().and_then(|mut a| a.take());
        match taken {
            Some(result) => result,
            None => Err(task_lost()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.link
            .call(paths::RAFT_SNAPSHOT, &rpc, option.hard_ttl(), 0)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.link
            .call(paths::RAFT_VOTE, &rpc, option.hard_ttl(), 0)
            .await
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
