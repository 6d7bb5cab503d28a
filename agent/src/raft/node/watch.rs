//! What the agent sees of its raft group: [`RaftView`], a snapshot of openraft's metrics in
//! Muster's terms, and the waits on them (applied past an index, a leader change, a fatal
//! stop, leader changes counted for `/metrics`). Separate because it only observes; nothing
//! here changes the group.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::{Raft, ServerState};

use super::RaftNode;
use crate::raft::TypeConfig;
use crate::raft::stats::RaftStats;
use crate::state::{Node, NodeId};

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

impl RaftNode {
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
}

/// Counts every new leader this node sees (an election that ends with the same leader, or
/// the moment without one in between, counts nothing) until raft stops.
pub(super) async fn count_leader_changes(raft: Raft<TypeConfig>, stats: Arc<RaftStats>) {
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
