//! Test support, not an API: the raft store of [`super::store::open`] driven through the same
//! openraft storage calls RaftCore makes, with plain types in and out. Hidden from the docs and
//! changed along with the store, like `crate::fuzzing`.
//!
//! It exists for `agent/tests/power_cut_store.rs`, which needs one storage call followed by
//! nothing else that syncs, and then a power cut: in a running cluster the next log append
//! fsyncs the shared fjall journal within milliseconds and makes an unsynced vote or snapshot
//! durable with it, so the cluster power-cut test cannot tell whether those calls sync. The
//! callers are outside `raft/` and must not name openraft types, hence the plain types here.

use std::io::Cursor;
use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    Vote,
};

use super::log_store::LogStore;
use super::state_machine::StateMachineStore;
use super::store;
use crate::state::{Node, NodeId, Request};

pub use super::codec::StoreError;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An openraft storage call failed; openraft's error as text, so that its type stays in
    /// `raft/`.
    #[error("raft storage call failed: {0}")]
    Raft(String),
}

impl From<StorageError<NodeId>> for ProbeError {
    fn from(e: StorageError<NodeId>) -> Self {
        Self::Raft(e.to_string())
    }
}

/// A stored vote: its term, the node it is for, and whether it is a leader's committed vote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredVote {
    pub term: u64,
    pub voted_for: Option<NodeId>,
    pub committed: bool,
}

/// Where a stored snapshot ends: the index and term of its last log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotEnd {
    pub index: u64,
    pub term: u64,
}

/// A snapshot built by one store, to be installed in another (as a leader sends it).
pub struct BuiltSnapshot {
    meta: SnapshotMeta<NodeId, Node>,
    data: Vec<u8>,
}

/// The node that leads every term of the entries [`RaftStore::apply_put`] makes.
const LEADER: NodeId = 1;

/// A raft store (log store and state machine) opened on a directory.
///
/// Dropping it drops fjall's journal, which fsyncs it: a test of what survives a power cut
/// keeps the store open until the process is killed.
pub struct RaftStore {
    log: LogStore,
    sm: StateMachineStore,
}

impl RaftStore {
    /// Opens (creating if needed) the raft store in `dir`, as the agent does at startup.
    /// Blocking.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let (log, sm) = store::open(dir)?;
        Ok(Self { log, sm })
    }

    /// `RaftLogStorage::save_vote` of a vote for `voted_for` in `term`: what a candidate (for
    /// itself) or a voter (for the candidate) does before it answers.
    pub async fn save_vote(&mut self, term: u64, voted_for: NodeId) -> Result<(), ProbeError> {
        Ok(self.log.save_vote(&Vote::new(term, voted_for)).await?)
    }

    /// `RaftLogStorage::read_vote`, as at startup.
    pub async fn vote(&mut self) -> Result<Option<StoredVote>, ProbeError> {
        let vote = self.log.read_vote().await?;
        Ok(vote.map(|v| StoredVote {
            term: v.leader_id().get_term(),
            voted_for: v.leader_id().voted_for(),
            committed: v.is_committed(),
        }))
    }

    /// `RaftStateMachine::apply` of one committed key-value put at `index` of `term` (in
    /// memory, as the state machine applies; snapshots make it durable).
    pub async fn apply_put(
        &mut self,
        term: u64,
        index: u64,
        key: &str,
        value: &str,
    ) -> Result<(), ProbeError> {
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, LEADER), index),
            payload: EntryPayload::Normal(Request::KvPut {
                key: key.into(),
                value: value.into(),
                expect: None,
            }),
        };
        self.sm.apply([entry]).await?;
        Ok(())
    }

    /// `RaftSnapshotBuilder::build_snapshot` of the state applied so far, which stores it.
    pub async fn build_snapshot(&mut self) -> Result<BuiltSnapshot, ProbeError> {
        let snapshot = self
            .sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await?;
        Ok(BuiltSnapshot {
            meta: snapshot.meta,
            data: snapshot.snapshot.into_inner(),
        })
    }

    /// `begin_receiving_snapshot` and `install_snapshot` of a snapshot another store built, as
    /// a follower does with the one its leader sends.
    pub async fn install_snapshot(&mut self, snapshot: BuiltSnapshot) -> Result<(), ProbeError> {
        let mut receiving = self.sm.begin_receiving_snapshot().await?;
        *receiving = Cursor::new(snapshot.data);
        self.sm.install_snapshot(&snapshot.meta, receiving).await?;
        Ok(())
    }

    /// Where the stored snapshot (`get_current_snapshot`) ends, if there is one.
    pub async fn snapshot(&mut self) -> Result<Option<SnapshotEnd>, ProbeError> {
        let snapshot = self.sm.get_current_snapshot().await?;
        Ok(snapshot
            .and_then(|s| s.meta.last_log_id)
            .map(|id| SnapshotEnd {
                index: id.index,
                term: id.leader_id.term,
            }))
    }

    /// `key`'s value in the state machine: after [`RaftStore::open`], as restored from the
    /// stored snapshot.
    pub fn value(&self, key: &str) -> Result<Option<String>, StoreError> {
        self.sm.read(|s| s.kv.get(key).map(|v| v.value.clone()))
    }
}
