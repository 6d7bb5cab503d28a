//! Membership changes through the facade: one at a time, bounded by the write timeout, and run
//! so that a caller's timeout never leaves a joint configuration behind. Separate from writes
//! and reads because openraft's membership API has rules of its own (two log entries per
//! change, no concurrent changes).

use std::collections::{BTreeMap, BTreeSet};

use openraft::ChangeMembers;

use super::errors::client_write_error;
use super::{RaftNode, RaftNodeError, WRITE_TIMEOUT};
use crate::state::{Node, NodeId};

impl RaftNode {
    /// Adds a nonvoter. Returns as soon as the change is committed; catching up happens after.
    pub async fn add_learner(&self, id: NodeId, node: Node) -> Result<(), RaftNodeError> {
        let _one_at_a_time = self.membership_lock.lock().await;
        if self.handing_over() {
            return Err(RaftNodeError::NoLeader);
        }
        let result = tokio::time::timeout(WRITE_TIMEOUT, self.raft.add_learner(id, node, false))
            .await
            .map_err(|_| RaftNodeError::Timeout("adding a nonvoter"))?;
        result.map(|_| ()).map_err(client_write_error)
    }

    /// Records a new address for a member of the configuration (the same node, moved): peers
    /// dial it there from the next message on.
    pub async fn set_node(&self, id: NodeId, node: Node) -> Result<(), RaftNodeError> {
        self.change(
            ChangeMembers::SetNodes(BTreeMap::from([(id, node)])),
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
        if self.handing_over() {
            return Err(RaftNodeError::NoLeader);
        }
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
}
