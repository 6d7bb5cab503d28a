//! The agent's handle on its raft group. This facade is the only place that calls openraft's
//! `Raft` API; callers see Muster types ([`RaftView`], [`Request`], [`ClusterState`]).
//!
//! This file starts the node and carries writes and reads; membership changes
//! (`node/membership.rs`), the view and waits on it (`node/watch.rs`), serving peers' RPCs
//! (`node/rpc.rs`) and the errors (`node/errors.rs`) each have a file of their own.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use openraft::error::{CheckIsLeaderError, InitializeError, RaftError};
use openraft::{Config, Raft, ServerState, SnapshotPolicy};

mod batch;
mod errors;
mod handover;
mod membership;
mod rpc;
mod watch;

pub use errors::{RaftNodeError, RpcError};
pub use handover::HandOver;
pub use watch::RaftView;

use muster_shared::retry::RetryPolicy;

use super::TypeConfig;
use super::network::{Network, PeerLiveness};
use super::pacemaker::{LeaderContact, Pacemaker, TimerPlan};
use super::read_batch::ReadBatch;
use super::stats::{RaftStats, StatsSnapshot};
use super::store::{self, StateMachineStore};
use crate::client::PeerClients;
use crate::state::{ClusterState, Node, NodeId, Request, Response};
use batch::ProposalBatch;
use watch::count_leader_changes;

/// Every write and membership change gets at most this long: an isolated leader in openraft 0.9
/// accepts writes that never commit, so an unbounded wait would hang the caller forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The pause before another round of heartbeats for a linearizable read that no majority
/// answered: about a heartbeat.
const READ_ROUND_PAUSE: Duration = Duration::from_millis(50);

/// Raft timing from the agent's flags.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub heartbeat: Duration,
    /// The shortest election timeout; the longest is twice this.
    pub election_timeout: Duration,
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
    /// Concurrent writes committed together (group commit).
    proposals: ProposalBatch,
    /// Set while this leader hands over (see `node/handover.rs`): no writes, no heartbeats.
    handing_over: Arc<AtomicBool>,
    /// The peer clients, for asking a successor to campaign.
    peers: PeerClients,
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
        let peers_for_handover = peers.clone();
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
        let handing_over = Arc::new(AtomicBool::new(false));
        let pacemaker = tokio::spawn(
            Pacemaker::new(
                raft.clone(),
                plan,
                contact.clone(),
                peers_for_pacemaker,
                handing_over.clone(),
                liveness.clone(),
            )
            .run(),
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
        let proposals = {
            let state_machine = state_machine.clone();
            let metrics = raft.metrics();
            ProposalBatch::new(
                raft.clone(),
                stats.clone(),
                handing_over.clone(),
                move || {
                    let in_raft: Vec<NodeId> = metrics
                        .borrow()
                        .membership_config
                        .membership()
                        .nodes()
                        .map(|(id, _)| *id)
                        .collect();
                    state_machine
                        .read(|s| s.members_read_batches(&in_raft))
                        .unwrap_or(false)
                },
                WRITE_TIMEOUT,
            )
        };
        Ok(Self {
            id,
            raft,
            state_machine,
            proposals,
            liveness,
            plan,
            contact,
            pacemaker,
            stats,
            leader_watch,
            membership_lock: tokio::sync::Mutex::new(()),
            reads,
            handing_over,
            peers: peers_for_handover,
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

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// True when [`Self::check_quorum_contact`] would refuse.
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
        // A new entry would renew the followers' leases and hold the successor's election up.
        if self.handing_over.load(Ordering::SeqCst) {
            return Err(RaftNodeError::NoLeader);
        }
        self.check_quorum_contact()?;
        let result = tokio::select! {
            result = self.proposals.submit(request) => result,
            why = self.quorum_loss() => return Err(RaftNodeError::QuorumLost(format!(
                "{why}; the write's outcome is unknown until the cluster is whole again"
            ))),
        };
        let response = result?;
        if let Some(refusal) = response.refused.clone() {
            return Err(RaftNodeError::Refused(refusal));
        }
        Ok(response)
    }

    /// Runs `f` on state that includes every write committed before this call (leader only).
    ///
    /// A round of heartbeats that no majority answered in time is tried again while this node
    /// still hears from a majority (`check_quorum_contact`): the one live follower of three may
    /// be busy writing a large append to disk, and a busy follower is not a lost quorum. A
    /// leader that is cut off stops hearing from a majority within its quorum window and is
    /// answered `quorum_lost` then; every read ends within [`WRITE_TIMEOUT`].
    pub async fn read_linearizable<R>(
        &self,
        f: impl FnOnce(&ClusterState) -> R,
    ) -> Result<R, RaftNodeError> {
        let mut rounds = RetryPolicy::constant(READ_ROUND_PAUSE)
            .within(WRITE_TIMEOUT)
            .start();
        loop {
            // A read's round of heartbeats would renew the followers' leases and hold the
            // successor's election up.
            if self.handing_over.load(Ordering::SeqCst) {
                return Err(RaftNodeError::NoLeader);
            }
            self.check_quorum_contact()?;
            let wait = rounds.remaining().unwrap_or(WRITE_TIMEOUT);
            let checked = tokio::time::timeout(wait, self.reads.check())
                .await
                .ok()
                .flatten()
                .ok_or(RaftNodeError::Timeout("the linearizable read"))?;
            match checked.map_err(leadership_check_error) {
                Ok(_) => return Ok(self.state_machine.read(f)?),
                Err(RaftNodeError::QuorumLost(_)) if rounds.wait().await => {}
                Err(e) => return Err(e),
            }
        }
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

    /// Runs `f` on this leader's applied state once that holds every entry committed before
    /// its term (an entry of its own term is applied), else as [`Self::read_linearizable`]: no
    /// round trip, for a check made just before an operation that raft orders by itself (a
    /// write commits through the log, a read confirms the leadership). An answer this leader
    /// gave (a token revoked) was applied here before it went out; one a deposed leader would
    /// miss is caught by the operation that follows, which cannot commit or confirm.
    pub async fn read_leader_state<R>(
        &self,
        f: impl FnOnce(&ClusterState) -> R,
    ) -> Result<R, RaftNodeError> {
        let current = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow();
            m.state.is_leader()
                && m.last_applied
                    .is_some_and(|applied| applied.leader_id.term == m.current_term)
        };
        if current && !self.handing_over.load(Ordering::SeqCst) {
            return Ok(self.state_machine.read(f)?);
        }
        self.read_linearizable(f).await
    }

    /// Runs `f` on this node's applied state (may lag the leader).
    pub fn read_local<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> Result<R, RaftNodeError> {
        Ok(self.state_machine.read(f)?)
    }

    pub async fn shutdown(&self) {
        self.pacemaker.abort();
        self.leader_watch.abort();
        let _ = self.raft.shutdown().await;
    }
}

/// What a failed leadership check for a linearizable read answers.
fn leadership_check_error(e: RaftError<NodeId, CheckIsLeaderError<NodeId, Node>>) -> RaftNodeError {
    match e.forward_to_leader::<Node>() {
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
    }
}
