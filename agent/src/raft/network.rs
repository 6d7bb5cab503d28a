//! Raft RPCs over HTTPS with mutual TLS, through the agent's per-peer keep-alive clients
//! ([`PeerClients`]): a peer is reached by its identity name, so only the certificate the
//! cluster CA issued to that node id is accepted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{LogId, Vote};
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
    /// The last refusal status logged per peer.
    refusals: Arc<Mutex<HashMap<NodeId, u16>>>,
    removed: Arc<AtomicBool>,
    /// When each peer that never answered was first found silent.
    silent_since: Arc<Mutex<HashMap<NodeId, Instant>>>,
}

/// How long a peer that never answered may stay silent before that is a warning: longer than a
/// loaded machine takes to start an agent and serve, far shorter than anyone waits.
const STARTUP_GRACE: Duration = Duration::from_secs(15);
/// How long a peer that answered before may stay silent before that is a warning: several
/// election timeouts, so one slow RPC on a busy machine is not reported as an outage.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(3);

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
        // The innermost cause ("Connection refused (os error 111)") says it; the chain of
        // wrappers around it does not.
        let why = why.to_string();
        let reason = why.rsplit("source: ").next().unwrap_or(&why);
        let last_seen = self.seen.lock().ok().and_then(|m| m.get(&id).copied());
        // How long the peer has been silent, and how long that may last before it is news. A
        // peer that never answered since this process started is, in a healthy formation, one
        // still starting (its port bound but closing connections until it serves: "tls
        // handshake eof"); one RPC that times out on a loaded machine is not an outage either.
        // Both are retried; only silence past the grace is a warning.
        let (silent_for, grace) = match last_seen {
            Some(seen) => (seen.elapsed(), UNREACHABLE_GRACE),
            None => {
                let first = match self.silent_since.lock() {
                    Ok(mut map) => *map.entry(id).or_insert_with(|| {
                        tracing::info!(peer = %name, %addr, %reason, "peer does not answer yet (still starting?); retrying");
                        Instant::now()
                    }),
                    Err(_) => Instant::now(),
                };
                (first.elapsed(), STARTUP_GRACE)
            }
        };
        if silent_for < grace {
            return;
        }
        if self.set_failing(id, true) != Some(true) {
            tracing::warn!(peer = %name, %addr, %reason, silent_s = silent_for.as_secs(), "cannot reach peer; retrying quietly until it answers");
        }
    }

    /// The peer answered but refused the RPC: logged once per kind of refusal, since every
    /// retry gets the same answer.
    fn refused(&self, id: NodeId, name: &str, status: u16, reason: &str) {
        let Ok(mut map) = self.refusals.lock() else {
            return;
        };
        if map.insert(id, status) != Some(status) {
            tracing::warn!(peer = %name, status, %reason, "peer refuses this node's raft messages");
        }
    }

    /// The peer accepted an RPC: a later refusal is news again.
    fn accepted(&self, id: NodeId) {
        if let Ok(mut map) = self.refusals.lock() {
            map.remove(&id);
        }
    }

    /// Records whether `id` is failing; returns what was recorded before.
    fn set_failing(&self, id: NodeId, failing: bool) -> Option<bool> {
        self.failing.lock().ok()?.insert(id, failing)
    }

    /// A member checked in with this node (a spare, which the leader never contacts itself).
    pub fn checked_in(&self, id: NodeId) {
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

/// What an RPC to one peer needs; cloned into the task of an AppendEntries in flight.
#[derive(Clone)]
struct PeerLink {
    target: NodeId,
    name: String,
    /// `host:port` as advertised (resolved when connecting, so a new IP is picked up).
    addr: String,
    peers: PeerClients,
    liveness: PeerLiveness,
}

/// The task of an AppendEntries in flight ended without an answer (it panicked).
fn task_lost() -> RPCError<NodeId, Node, RaftError<NodeId>> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "the AppendEntries task ended without an answer",
    )))
}

/// How an RPC failed, as far as the peer's liveness is concerned.
enum Failure<E: std::error::Error> {
    /// The peer answered (an error, a refusal): it is up.
    Answered(RPCError<NodeId, Node, RaftError<NodeId, E>>),
    /// No answer: refused connection, timeout, cut off.
    NoAnswer(RPCError<NodeId, Node, RaftError<NodeId, E>>),
}

fn unreachable(why: CallError) -> Unreachable {
    Unreachable::new(&std::io::Error::other(why.to_string()))
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

impl PeerLink {
    /// One RPC; its outcome feeds [`PeerLiveness`]. `entries` is how many log entries the
    /// request carries, for the hint after a `413`.
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        timeout: Duration,
        entries: usize,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        match self.send(path, req, timeout, entries).await {
            Ok(resp) => {
                self.liveness.saw(self.target, &self.name);
                self.liveness.accepted(self.target);
                Ok(resp)
            }
            Err(Failure::Answered(e)) => {
                // The peer is up: it answered, if not what was hoped for.
                self.liveness.saw(self.target, &self.name);
                Err(e)
            }
            Err(Failure::NoAnswer(e)) => {
                self.liveness
                    .failed(self.target, &self.name, &self.addr, &e);
                Err(e)
            }
        }
    }

    async fn send<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        timeout: Duration,
        entries: usize,
    ) -> Result<Resp, Failure<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        use Failure::{Answered, NoAnswer};
        let peer = match self.peers.get(self.target, &self.addr).await {
            Ok(peer) => peer,
            Err(e) => return Err(NoAnswer(RPCError::Unreachable(unreachable(e)))),
        };
        let timeout = timeout.max(Duration::from_millis(50));
        let sent = peer
            .http
            .post(format!("{}{path}", peer.base))
            .json(req)
            .timeout(timeout)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            // The peer refused this node's certificate as revoked: it was removed. (With TLS
            // 1.3 the refusal comes after the client's side of the handshake, as an error on
            // the request, so every error is looked at.)
            Err(e) if muster_shared::tls::is_certificate_revoked(&e) => {
                tracing::info!(peer = %self.target, "a peer refused this node's certificate as revoked: this node was removed");
                self.liveness.removed.store(true, Ordering::Relaxed);
                self.peers.forget(self.target);
                return Err(NoAnswer(RPCError::Unreachable(Unreachable::new(
                    &self.described(e),
                ))));
            }
            // Connection refused, TLS failure and the like: back off before trying again.
            Err(e) if e.is_connect() => {
                self.peers.forget(self.target);
                return Err(NoAnswer(RPCError::Unreachable(Unreachable::new(
                    &self.described(e),
                ))));
            }
            Err(e) => {
                return Err(NoAnswer(RPCError::Network(NetworkError::new(
                    &self.described(e),
                ))));
            }
        };
        let status = resp.status();
        if status == reqwest::StatusCode::GONE {
            // The peer's state says this node was removed; the agent stops on seeing this.
            tracing::info!(peer = %self.target, "a peer answered 410: this node was removed");
            self.liveness.removed.store(true, Ordering::Relaxed);
        }
        if status == reqwest::StatusCode::PAYLOAD_TOO_LARGE && entries > 1 {
            // Send fewer entries next time (openraft keeps the hint for a while).
            let hint = (entries / 2).max(1) as u64;
            tracing::warn!(peer = %self.name, entries, hint, "peer refused an AppendEntries as too large; sending smaller batches");
            return Err(Answered(RPCError::PayloadTooLarge(
                PayloadTooLarge::new_entries_hint(hint),
            )));
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            let reason = crate::api::ApiError::from_response(status.as_u16(), body.as_bytes());
            self.liveness.refused(
                self.target,
                &self.name,
                status.as_u16(),
                &reason.to_string(),
            );
            let e = std::io::Error::other(format!(
                "peer {} refused {path}: HTTP {status}: {reason}",
                self.name
            ));
            // Unreachable, so openraft backs off before trying again.
            return Err(Answered(RPCError::Unreachable(Unreachable::new(&e))));
        }
        let result: Result<Resp, RaftError<NodeId, E>> = resp
            .json()
            .await
            .map_err(|e| NoAnswer(RPCError::Network(NetworkError::new(&self.described(e)))))?;
        result.map_err(|e| Answered(RPCError::RemoteError(RemoteError::new(self.target, e))))
    }

    /// A failed call as openraft carries it (and may pass on to an operator): the peer's name,
    /// its address and the cause. Never reqwest's own text, whose URL names the peer by its
    /// internal identity (`node-….muster`), which means nothing to an operator.
    fn described(&self, e: reqwest::Error) -> std::io::Error {
        let e = e.without_url();
        std::io::Error::other(format!(
            "peer {} at {}",
            self.name,
            crate::net_error::describe(&self.addr, &e)
        ))
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
