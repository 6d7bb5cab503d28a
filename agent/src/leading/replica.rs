//! What a leader action needs of the raft group, as a small trait: a replicated write, a
//! linearizable read, a read of this node's applied state, adding a nonvoter or moving a member
//! in the configuration, the group's view,
//! this node's wall clock, its id, when it last heard from each peer and whether it hears from
//! a quorum. `RaftNode` is the real one; `leading/fake.rs` is an in-memory one that applies
//! writes to a `ClusterState` directly, so that every leader action is unit-tested without a
//! raft (as hashicorp/raft-autopilot tests its promoter against a fake).

use std::future::Future;

use crate::api::ApiError;
use crate::raft::{RaftNode, RaftView};
use crate::state::{ClusterState, Node, NodeId, Request, Response};

pub trait Replica: Sync {
    /// Replicates `request` and returns the state machine's answer (a refusal is an error).
    fn write(&self, request: Request) -> impl Future<Output = Result<Response, ApiError>> + Send;

    /// Runs `f` on state that includes every write committed before the call.
    fn read<R: Send>(
        &self,
        f: impl FnOnce(&ClusterState) -> R + Send,
    ) -> impl Future<Output = Result<R, ApiError>> + Send;

    /// Runs `f` on the leader's state without a round trip once that state holds every entry
    /// committed in earlier terms (else as [`Replica::read`]): for a check just before an
    /// operation raft orders by itself (see `RaftNode::read_leader_state`).
    fn read_leader_state<R: Send>(
        &self,
        f: impl FnOnce(&ClusterState) -> R + Send,
    ) -> impl Future<Output = Result<R, ApiError>> + Send;

    /// Runs `f` on this node's applied state (no round trip; may lag the leader's commits).
    fn read_local<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> Result<R, ApiError>;

    /// Adds a member to the raft configuration as a nonvoter (it then catches up; the
    /// reconciler promotes it).
    fn add_learner(
        &self,
        id: NodeId,
        node: Node,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// Changes the address the raft configuration holds for member `id` (what peers dial).
    fn set_node(&self, id: NodeId, node: Node)
    -> impl Future<Output = Result<(), ApiError>> + Send;

    /// The raft group as this node sees it now (term, leader, voters, replication).
    fn view(&self) -> RaftView;

    /// This node's wall clock in milliseconds since the epoch.
    fn wall_ms(&self) -> u64;

    /// This node's id.
    fn id(&self) -> NodeId;

    /// How long ago (ms) this node last heard from `id`; `None` if it never has.
    fn last_seen_ms(&self, id: NodeId) -> Option<u64>;

    /// True when this leader has not heard from a majority of the voters lately.
    fn quorum_lost(&self) -> bool;
}

impl Replica for RaftNode {
    async fn write(&self, request: Request) -> Result<Response, ApiError> {
        Ok(RaftNode::write(self, request).await?)
    }

    async fn read<R: Send>(
        &self,
        f: impl FnOnce(&ClusterState) -> R + Send,
    ) -> Result<R, ApiError> {
        Ok(self.read_linearizable(f).await?)
    }

    async fn read_leader_state<R: Send>(
        &self,
        f: impl FnOnce(&ClusterState) -> R + Send,
    ) -> Result<R, ApiError> {
        Ok(RaftNode::read_leader_state(self, f).await?)
    }

    fn read_local<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> Result<R, ApiError> {
        Ok(RaftNode::read_local(self, f)?)
    }

    async fn add_learner(&self, id: NodeId, node: Node) -> Result<(), ApiError> {
        Ok(RaftNode::add_learner(self, id, node).await?)
    }

    async fn set_node(&self, id: NodeId, node: Node) -> Result<(), ApiError> {
        Ok(RaftNode::set_node(self, id, node).await?)
    }

    fn view(&self) -> RaftView {
        RaftNode::view(self)
    }

    fn wall_ms(&self) -> u64 {
        crate::clock::now_ms()
    }

    fn id(&self) -> NodeId {
        RaftNode::id(self)
    }

    fn last_seen_ms(&self, id: NodeId) -> Option<u64> {
        self.liveness().last_seen_ms(id)
    }

    fn quorum_lost(&self) -> bool {
        RaftNode::quorum_lost(self)
    }
}
