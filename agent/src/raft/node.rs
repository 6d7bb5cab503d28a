//! The agent's handle on its raft group. This facade is the only place that calls openraft's
//! `Raft` API; callers see Muster types ([`RaftView`], [`Request`], [`ClusterState`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, ClientWriteError, InitializeError, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use openraft::{ChangeMembers, Config, Raft, ServerState, SnapshotPolicy};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::TypeConfig;
use super::network::{Network, PeerLiveness};
use super::pacemaker::{LeaderContact, Pacemaker, PreVote, TimerPlan, answer_prevote};
use super::read_batch::ReadBatch;
use super::stats::{RaftStats, StatsSnapshot};
use super::store::{self, StateMachineStore, StoreError};
use crate::api::{ApiError, ErrorKind, paths};
use crate::client::PeerClients;
use crate::state::{ClusterState, Node, NodeId, Refusal, Request, Response};

/// Every write and membership change gets at most this long: an isolated leader in openraft 0.9
/// accepts writes that never commit, so an unbounded wait would hang the caller forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Raft timing from the agent's flags.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub heartbeat: Duration,
    /// The shortest election timeout; the longest is twice this.
    pub election_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RaftNodeError {
    #[error("this node is not the leader")]
    NotLeader { leader: Option<(NodeId, Node)> },
    #[error("no leader is known right now (an election may be in progress, or quorum is lost)")]
    NoLeader,
    #[error(
        "{0} did not finish within {WRITE_TIMEOUT:?}: quorum may be lost, and the outcome is unknown until it is back"
    )]
    Timeout(&'static str),
    #[error("this node cannot reach a quorum of voters: {0}")]
    QuorumLost(String),
    #[error("raft has stopped: {0}")]
    Fatal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state machine refused the command; the kind is one of the API's error kinds.
    #[error("{}", .0.message)]
    Refused(Refusal),
    /// openraft refused a membership change (one is in progress, a node is unknown, …).
    #[error("membership change refused: {0}")]
    MembershipRefused(String),
    #[error("{0}")]
    Other(String),
}

impl From<RaftNodeError> for ApiError {
    fn from(e: RaftNodeError) -> Self {
        let kind = match &e {
            RaftNodeError::NotLeader { .. } | RaftNodeError::NoLeader => ErrorKind::NoLeader,
            RaftNodeError::Timeout(_) | RaftNodeError::QuorumLost(_) => ErrorKind::QuorumLost,
            RaftNodeError::Refused(refusal) => refusal.kind,
            // Another membership change is still in flight: worth retrying shortly.
            RaftNodeError::MembershipRefused(_) => ErrorKind::MembershipBusy,
            _ => ErrorKind::Internal,
        };
        ApiError::new(kind, e.to_string())
    }
}

/// Why a raft RPC from a peer was not served.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The body is not the request the endpoint takes (a peer of another version, or garbage).
    #[error("bad {endpoint} request: {source}")]
    BadRequest {
        endpoint: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("no raft endpoint {0}")]
    NoEndpoint(String),
    #[error("cannot encode the {endpoint} answer: {source}")]
    Encode {
        endpoint: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl From<RpcError> for ApiError {
    fn from(e: RpcError) -> Self {
        match e {
            RpcError::BadRequest { .. } | RpcError::NoEndpoint(_) => {
                ApiError::invalid(e.to_string())
            }
            RpcError::Encode { .. } => ApiError::internal(e.to_string()),
        }
    }
}

/// What the agent needs to know about the raft group right now.
#[derive(Debug, Clone)]
pub struct RaftView {
    pub is_leader: bool,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied: Option<u64>,
    pub voters: BTreeSet<NodeId>,
    pub nodes: BTreeMap<NodeId, Node>,
    /// Log index of the membership config in effect (it may not be committed yet).
    pub membership_index: Option<u64>,
    /// Voter sets of the config in effect: one set normally, two in a joint config.
    pub voter_sets: Vec<BTreeSet<NodeId>>,
    /// Leader only: highest log index replicated to each node.
    pub matched: BTreeMap<NodeId, Option<u64>>,
    /// Leader only: how long since a majority of the voters last acknowledged it.
    pub quorum_silence: Option<Duration>,
}

impl RaftView {
    /// True once the membership config in effect has been applied (so a new change may start).
    pub fn membership_settled(&self) -> bool {
        match (self.membership_index, self.last_applied) {
            (None, _) => true,
            (Some(m), Some(a)) => a >= m,
            (Some(_), None) => false,
        }
    }
}

pub struct RaftNode {
    id: NodeId,
    raft: Raft<TypeConfig>,
    state_machine: StateMachineStore,
    liveness: PeerLiveness,
    plan: TimerPlan,
    /// When this node last heard from a leader; the pacemaker's election clock.
    contact: LeaderContact,
    pacemaker: tokio::task::JoinHandle<()>,
    /// Proposal latencies and leader changes, for `/metrics`.
    stats: Arc<RaftStats>,
    /// Counts leader changes into `stats`.
    leader_watch: tokio::task::JoinHandle<()>,
    /// Concurrent membership changes can leave a joint config behind; one at a time.
    membership_lock: tokio::sync::Mutex<()>,
    /// Leadership checks shared by concurrent linearizable reads.
    reads: ReadBatch<LeadershipCheck>,
}

/// What a leadership check for linearizable reads came to.
type LeadershipCheck =
    Result<Option<openraft::LogId<NodeId>>, RaftError<NodeId, CheckIsLeaderError<NodeId, Node>>>;

impl RaftNode {
    /// Opens the raft store in `dir` and starts the raft core. Nothing is initialized here.
    pub async fn start(
        id: NodeId,
        dir: &Path,
        peers: PeerClients,
        timing: Timing,
    ) -> Result<Self, RaftNodeError> {
        let dir = dir.to_path_buf();
        let (log_store, state_machine) = tokio::task::spawn_blocking(move || store::open(&dir))
            .await
            .map_err(|e| RaftNodeError::Other(e.to_string()))??;
        let plan = TimerPlan::new(timing.heartbeat, timing.election_timeout);
        let ms = |d: Duration| d.as_millis() as u64;
        let config = Config {
            cluster_name: "muster".into(),
            // Heartbeats and elections are the pacemaker's (see pacemaker.rs); what openraft
            // calls the heartbeat interval is then only its AppendEntries timeout, and its
            // election timeout only the leader lease.
            heartbeat_interval: ms(plan.rpc_timeout),
            election_timeout_min: ms(plan.lease_floor),
            election_timeout_max: ms(plan.lease),
            enable_heartbeat: false,
            enable_elect: false,
            // One snapshot chunk over HTTPS on a slow link can take far longer than the 200 ms
            // default; a timeout there makes the sender start over forever.
            install_snapshot_timeout: 10_000,
            // A snapshot chunk travels as JSON (about 3.6 bytes per byte): 1 MiB chunks stay
            // well inside the peer listener's body limit and the snapshot timeout.
            snapshot_max_chunk_size: 1024 * 1024,
            // Entries per AppendEntries; the log reader also caps a batch's bytes
            // (log_store::REPLICATION_BATCH_BYTES).
            max_payload_entries: 256,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(10_000),
            max_in_snapshot_log_to_keep: 1_000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| RaftNodeError::Other(format!("raft timing: {e}")))?;
        let liveness = PeerLiveness::default();
        let peers_for_pacemaker = peers.clone();
        let network = Network::new(peers, liveness.clone());
        let raft = Raft::new(
            id,
            Arc::new(config),
            network,
            log_store,
            state_machine.clone(),
        )
        .await
        .map_err(|e| RaftNodeError::Fatal(e.to_string()))?;
        let contact = LeaderContact::default();
        let pacemaker = tokio::spawn(
            Pacemaker::new(raft.clone(), plan, contact.clone(), peers_for_pacemaker).run(),
        );
        let stats = Arc::new(RaftStats::default());
        let leader_watch = tokio::spawn(count_leader_changes(raft.clone(), stats.clone()));
        let reads = {
            let raft = raft.clone();
            ReadBatch::new(move || {
                let raft = raft.clone();
                Box::pin(async move { raft.ensure_linearizable().await })
            })
        };
        Ok(Self {
            id,
            raft,
            state_machine,
            liveness,
            plan,
            contact,
            pacemaker,
            stats,
            leader_watch,
            membership_lock: tokio::sync::Mutex::new(()),
            reads,
        })
    }

    /// `Err(QuorumLost)` when this node leads but has not heard from a majority of the voters
    /// for [`TimerPlan::quorum_window`]: it is cut off, and a write could not commit. Answering
    /// at once beats making every caller wait out the write timeout.
    fn check_quorum_contact(&self) -> Result<(), RaftNodeError> {
        let view = self.view();
        match view.quorum_silence {
            Some(silence)
                if view.is_leader
                    && view.voters.len() > 1
                    && silence > self.plan.quorum_window() =>
            {
                Err(RaftNodeError::QuorumLost(format!(
                    "this node leads but has heard from no majority of the voters for {} ms; \
                     it is probably cut off from them, and writes cannot commit until it is back",
                    silence.as_millis()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Resolves (with the reason) once this node leads but has lost contact with a majority:
    /// a write waiting to commit then answers at once instead of after the write timeout.
    async fn quorum_loss(&self) -> String {
        loop {
            tokio::time::sleep(self.plan.election / 4).await;
            if let Err(RaftNodeError::QuorumLost(why)) = self.check_quorum_contact() {
                return why;
            }
        }
    }

    /// True when this node leads and a majority of the voters has acknowledged it within the
    /// quorum window (a node that comes back from a restart as leader has no such ack yet).
    pub fn leads_with_quorum(&self) -> bool {
        let view = self.view();
        view.is_leader
            && (view.voters.len() <= 1
                || view
                    .quorum_silence
                    .is_some_and(|silence| silence <= self.plan.quorum_window()))
    }

    /// True when [`Self::check_quorum_contact`] would refuse.
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    pub fn quorum_lost(&self) -> bool {
        self.check_quorum_contact().is_err()
    }

    pub fn liveness(&self) -> &PeerLiveness {
        &self.liveness
    }

    /// Makes this node a one-member cluster and waits until that membership is applied, so that
    /// membership changes can follow at once.
    pub async fn initialize(&self, me: Node) -> Result<(), RaftNodeError> {
        let members = BTreeMap::from([(self.id, me)]);
        match self.raft.initialize(members).await {
            Ok(()) => {}
            // Already initialized (a restart): there is nothing to wait for, and this node may
            // not even lead any more.
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => return Ok(()),
            Err(e) => return Err(RaftNodeError::Other(e.to_string())),
        }
        self.raft
            .wait(Some(WRITE_TIMEOUT))
            .metrics(
                |m| {
                    m.state == ServerState::Leader
                        && m.last_applied >= *m.membership_config.log_id()
                },
                "initial membership applied",
            )
            .await
            .map_err(|_| RaftNodeError::Timeout("initializing raft"))?;
        Ok(())
    }

    /// Replicates `request` and returns the state machine's answer. Only the leader can write.
    pub async fn write(&self, request: Request) -> Result<Response, RaftNodeError> {
        let started = std::time::Instant::now();
        let result = self.propose(request).await;
        self.stats.proposal_done(started.elapsed());
        if result.is_err() {
            self.stats.proposal_failed();
        }
        result
    }

    /// Proposal latencies and leader changes so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    async fn propose(&self, request: Request) -> Result<Response, RaftNodeError> {
        self.check_quorum_contact()?;
        let result = tokio::select! {
            result = tokio::time::timeout(WRITE_TIMEOUT, self.raft.client_write(request)) => {
                result.map_err(|_| RaftNodeError::Timeout("the write"))?
            }
            why = self.quorum_loss() => return Err(RaftNodeError::QuorumLost(format!(
                "{why}; the write's outcome is unknown until the cluster is whole again"
            ))),
        };
        let response = result.map_err(client_write_error)?.data;
        if let Some(refusal) = response.refused.clone() {
            return Err(RaftNodeError::Refused(refusal));
        }
        Ok(response)
    }

    /// Runs `f` on state that includes every write committed before this call (leader only).
    pub async fn read_linearizable<R>(
        &self,
        f: impl FnOnce(&ClusterState) -> R,
    ) -> Result<R, RaftNodeError> {
        self.check_quorum_contact()?;
        let checked = tokio::time::timeout(WRITE_TIMEOUT, self.reads.check())
            .await
            .ok()
            .flatten()
            .ok_or(RaftNodeError::Timeout("the linearizable read"))?;
        if let Err(e) = checked {
            return Err(match e.forward_to_leader::<Node>() {
                Some(fwd) => RaftNodeError::NotLeader {
                    leader: fwd.leader_id.zip(fwd.leader_node.clone()),
                },
                None if matches!(
                    e,
                    RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))
                ) =>
                {
                    RaftNodeError::QuorumLost(e.to_string())
                }
                None => RaftNodeError::Other(e.to_string()),
            });
        }
        Ok(self.state_machine.read(f)?)
    }

    /// Snapshots everything applied so far and drops the log it covers, so that peers catch up
    /// from the snapshot (sent in chunks) instead of the entries. Needed after an entry too large
    /// for one AppendEntries (a restored state).
    pub async fn compact_log(&self, timeout: Duration) -> Result<(), RaftNodeError> {
        let fatal = |e: openraft::error::Fatal<NodeId>| RaftNodeError::Fatal(e.to_string());
        let applied = self
            .raft
            .metrics()
            .borrow()
            .last_applied
            .map(|l| l.index)
            .unwrap_or(0);
        self.raft.trigger().snapshot().await.map_err(fatal)?;
        let mut metrics = self.raft.metrics();
        let snapshotted = tokio::time::timeout(
            timeout,
            metrics.wait_for(|m| m.snapshot.is_some_and(|s| s.index >= applied)),
        )
        .await;
        if !matches!(snapshotted, Ok(Ok(_))) {
            return Err(RaftNodeError::Timeout("building a snapshot"));
        }
        self.raft.trigger().purge_log(applied).await.map_err(fatal)
    }

    /// Runs `f` on this node's applied state (may lag the leader).
    pub fn read_local<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> Result<R, RaftNodeError> {
        Ok(self.state_machine.read(f)?)
    }

    /// Adds a nonvoter. Returns as soon as the change is committed; catching up happens after.
    pub async fn add_learner(&self, id: NodeId, node: Node) -> Result<(), RaftNodeError> {
        let _one_at_a_time = self.membership_lock.lock().await;
        let result = tokio::time::timeout(WRITE_TIMEOUT, self.raft.add_learner(id, node, false))
            .await
            .map_err(|_| RaftNodeError::Timeout("adding a nonvoter"))?;
        result.map(|_| ()).map_err(client_write_error)
    }

    /// Records a new address for a member of the configuration (the same node, moved): peers
    /// dial it there from the next message on.
    pub async fn set_node(&self, id: NodeId, node: Node) -> Result<(), RaftNodeError> {
        self.change(
            ChangeMembers::SetNodes(std::collections::BTreeMap::from([(id, node)])),
            true,
            "moving a member",
        )
        .await
    }

    /// Makes existing nonvoters voters, in one membership change.
    pub async fn promote(&self, ids: BTreeSet<NodeId>) -> Result<(), RaftNodeError> {
        self.change(ChangeMembers::AddVoterIds(ids), true, "promoting")
            .await
    }

    /// Makes voters nonvoters (they stay in the cluster and keep replicating).
    pub async fn demote(&self, ids: BTreeSet<NodeId>) -> Result<(), RaftNodeError> {
        self.change(ChangeMembers::RemoveVoters(ids), true, "demoting")
            .await
    }

    async fn change(
        &self,
        change: ChangeMembers<NodeId, Node>,
        retain: bool,
        what: &'static str,
    ) -> Result<(), RaftNodeError> {
        let _one_at_a_time = self.membership_lock.lock().await;
        self.check_quorum_contact()?;
        // A membership change is two log entries (joint, then uniform). Run it in its own task so
        // a caller's timeout can never cancel it between the two and leave a joint config behind.
        let raft = self.raft.clone();
        let task = tokio::spawn(async move { raft.change_membership(change, retain).await });
        let result = tokio::time::timeout(WRITE_TIMEOUT, task)
            .await
            .map_err(|_| RaftNodeError::Timeout(what))?
            .map_err(|e| RaftNodeError::Other(e.to_string()))?;
        result.map(|_| ()).map_err(client_write_error)
    }

    /// Takes nonvoters out of the configuration: the leader stops replicating to them.
    pub async fn remove_nonvoters(&self, ids: BTreeSet<NodeId>) -> Result<(), RaftNodeError> {
        self.change(ChangeMembers::RemoveNodes(ids), false, "removing")
            .await
    }

    /// Completes a joint configuration left by a change that was interrupted (say, by a leader
    /// crash between its two steps): openraft 0.9 does not finish one on its own.
    pub async fn finish_joint(&self, voters: BTreeSet<NodeId>) -> Result<(), RaftNodeError> {
        self.change(
            ChangeMembers::ReplaceAllVoters(voters),
            true,
            "finishing a joint configuration",
        )
        .await
    }

    /// A copy of the current raft metrics in Muster's terms.
    pub fn view(&self) -> RaftView {
        // Clone at once: holding the metrics borrow blocks their publication.
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        RaftView {
            is_leader: m.state == ServerState::Leader,
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            last_applied: m.last_applied.map(|l| l.index),
            voters: membership.voter_ids().collect(),
            nodes: membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
            membership_index: m.membership_config.log_id().map(|l| l.index),
            voter_sets: membership.get_joint_config().clone(),
            matched: m
                .replication
                .map(|r| {
                    r.into_iter()
                        .map(|(id, log)| (id, log.map(|l| l.index)))
                        .collect()
                })
                .unwrap_or_default(),
            quorum_silence: m.millis_since_quorum_ack.map(Duration::from_millis),
        }
    }

    /// Resolves once this node has applied past `applied` (an index from [`RaftView`]), or at
    /// `deadline`, whichever comes first.
    pub async fn applied_after(&self, applied: Option<u64>, deadline: tokio::time::Instant) {
        let mut metrics = self.raft.metrics();
        let _ = tokio::time::timeout_at(
            deadline,
            metrics.wait_for(|m| {
                m.last_applied.map(|l| l.index) != applied || m.running_state.is_err()
            }),
        )
        .await;
    }

    /// Resolves once this node no longer sees `leader` as the leader (an election started, or
    /// another node won one).
    pub async fn leader_changed_from(&self, leader: NodeId) {
        let mut metrics = self.raft.metrics();
        let _ = metrics
            .wait_for(|m| m.current_leader != Some(leader) || m.running_state.is_err())
            .await;
    }

    /// Resolves when raft stops with a fatal error (a failed fsync, say); returns its message.
    pub async fn fatal(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(e) = &metrics.borrow_and_update().running_state {
                return e.to_string();
            }
            if metrics.changed().await.is_err() {
                return "raft stopped".into();
            }
        }
    }

    /// Serves one raft RPC received by the TLS listener: JSON in, JSON out. Accepted entries
    /// from a leader, and a granted vote, restart the pacemaker's election clock.
    pub async fn handle_rpc(&self, path: &str, body: &[u8]) -> Result<Vec<u8>, RpcError> {
        let contact = &self.contact;
        match path {
            paths::RAFT_APPEND => rpc("append", body, |req: AppendEntriesRequest<TypeConfig>| async move {
                // From a leader at least as new as the one this node follows: it is alive, even
                // if applying this (large) batch takes a while.
                if req.vote >= self.raft.metrics().borrow().vote {
                    contact.heard();
                }
                let result = self.raft.append_entries(req).await;
                if matches!(&result, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                    contact.heard();
                }
                result
            })
            .await,
            paths::RAFT_VOTE => {
                rpc("vote", body, |req| async move {
                    let result = self.raft.vote(req).await;
                    if matches!(&result, Ok(r) if r.vote_granted) {
                        contact.heard();
                    }
                    result
                })
                .await
            }
            paths::RAFT_SNAPSHOT => {
                rpc("snapshot", body, |req| async move {
                    let result = self.raft.install_snapshot(req).await;
                    if result.is_ok() {
                        contact.heard();
                    }
                    result
                })
                .await
            }
            paths::RAFT_PREVOTE => {
                let endpoint = "pre-vote";
                let ask: PreVote = serde_json::from_slice(body)
                    .map_err(|source| RpcError::BadRequest { endpoint, source })?;
                let answer = answer_prevote(&self.raft, &self.plan, contact, &ask);
                serde_json::to_vec(&answer).map_err(|source| RpcError::Encode { endpoint, source })
            }
            other => Err(RpcError::NoEndpoint(other.to_string())),
        }
    }

    pub async fn shutdown(&self) {
        self.pacemaker.abort();
        self.leader_watch.abort();
        let _ = self.raft.shutdown().await;
    }
}

async fn rpc<Req, Resp, E, F, Fut>(
    endpoint: &'static str,
    body: &[u8],
    call: F,
) -> Result<Vec<u8>, RpcError>
where
    Req: DeserializeOwned,
    Resp: Serialize,
    E: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: std::future::Future<Output = Result<Resp, E>>,
{
    let req: Req =
        serde_json::from_slice(body).map_err(|source| RpcError::BadRequest { endpoint, source })?;
    let result = call(req).await;
    serde_json::to_vec(&result).map_err(|source| RpcError::Encode { endpoint, source })
}

fn client_write_error(e: RaftError<NodeId, ClientWriteError<NodeId, Node>>) -> RaftNodeError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(fwd)) => {
            match fwd.leader_id.zip(fwd.leader_node) {
                Some(leader) => RaftNodeError::NotLeader {
                    leader: Some(leader),
                },
                None => RaftNodeError::NoLeader,
            }
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            RaftNodeError::MembershipRefused(e.to_string())
        }
        RaftError::Fatal(f) => RaftNodeError::Fatal(f.to_string()),
    }
}

/// Counts every new leader this node sees (an election that ends with the same leader, or
/// the moment without one in between, counts nothing) until raft stops.
async fn count_leader_changes(raft: Raft<TypeConfig>, stats: Arc<RaftStats>) {
    let mut metrics = raft.metrics();
    let mut leader = metrics.borrow_and_update().current_leader;
    while metrics.changed().await.is_ok() {
        let now = metrics.borrow_and_update().current_leader;
        if now.is_some() && now != leader {
            if leader.is_some() {
                stats.leader_changed();
            }
            leader = now;
        }
    }
}
