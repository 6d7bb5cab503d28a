//! The raft half of `muster recover`, on a stopped member's store: read what the member holds
//! (its log, its configuration, the state through its last entry), and write the new
//! configuration that makes it the only voter. Here because it writes openraft's log entries
//! and vote; the decision about what to write is `crate::recover`'s.
//!
//! The surgery appends, at a term above every term the member has seen:
//! 1. a membership entry with this member as the only voter and the other survivors as
//!    learners (non-voters), so it needs nobody to commit;
//! 2. one `Recovered` entry that removes the lost members for good and records the recovery;
//!
//! and stores a vote for itself at that term. Nothing already in the log is dropped: the
//! entries the member held but had not seen committed are committed with the rest at its first
//! election (a write acknowledged by the lost majority may be among them). On its next start
//! the member is a sole voter, which the pacemaker makes leader at once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, RaftLogReader, Vote};

use super::TypeConfig;
use super::codec::StoreError;
use crate::state::{ClusterState, Node, NodeId, Request};

/// What a stopped member's raft store holds.
#[derive(Debug, Clone)]
pub struct OnDisk {
    /// The highest term the member has seen (its vote's, or its last entry's).
    pub term: u64,
    /// The member's last log entry: (term, index).
    pub last_log: Option<(u64, u64)>,
    /// The last index the member knew to be committed.
    pub committed: Option<u64>,
    /// The configuration in effect in its log (the last membership entry, committed or not).
    pub voters: BTreeMap<NodeId, Node>,
    pub learners: BTreeMap<NodeId, Node>,
    /// The voter sets: one, or two in a joint configuration (a change under way).
    pub configs: Vec<Vec<NodeId>>,
    /// The replicated state with every entry the member holds applied (committed or not):
    /// what the recovered cluster starts from.
    pub state: ClusterState,
}

/// Where the surgery put the member.
#[derive(Debug, Clone, Copy)]
pub struct Rewritten {
    pub term: u64,
    /// The index of the `Recovered` entry: the last one written.
    pub last_index: u64,
}

fn storage_error(e: openraft::StorageError<NodeId>) -> StoreError {
    StoreError::Corrupt {
        what: "raft store",
        reason: e.to_string(),
    }
}

/// Reads a stopped member's store in `dir` (`<data-dir>/raft`). Writes nothing.
pub async fn read(dir: &Path) -> Result<OnDisk, StoreError> {
    let dir = dir.to_path_buf();
    let (mut log, mut sm) = tokio::task::spawn_blocking(move || super::store::open(&dir)).await??;
    inspect(&mut log, &mut sm).await
}

async fn inspect(
    log: &mut super::store::LogStore,
    sm: &mut super::store::StateMachineStore,
) -> Result<OnDisk, StoreError> {
    let state_of_log = log.get_log_state().await.map_err(storage_error)?;
    let vote = log.read_vote().await.map_err(storage_error)?;
    let committed = log.read_committed().await.map_err(storage_error)?;
    let (applied, stored_membership) = sm.applied_state().await.map_err(storage_error)?;
    let mut membership = stored_membership.membership().clone();
    let mut state = sm.read(|s| s.clone())?;
    let from = applied.map(|l| l.index + 1).unwrap_or(0);
    let to = state_of_log.last_log_id.map(|l| l.index + 1).unwrap_or(0);
    if to > from {
        for entry in log
            .try_get_log_entries(from..to)
            .await
            .map_err(storage_error)?
        {
            match &entry.payload {
                EntryPayload::Normal(request) => {
                    state.apply(request);
                }
                EntryPayload::Membership(m) => membership = m.clone(),
                EntryPayload::Blank => {}
            }
        }
    }
    let last_log = state_of_log
        .last_log_id
        .map(|l| (l.leader_id.term, l.index));
    let term = vote
        .map(|v| v.leader_id().term)
        .unwrap_or(0)
        .max(last_log.map(|(t, _)| t).unwrap_or(0));
    let voter_ids: BTreeSet<NodeId> = membership.voter_ids().collect();
    let configs = membership
        .get_joint_config()
        .iter()
        .map(|set| set.iter().copied().collect())
        .collect();
    let (voters, learners) = membership
        .nodes()
        .map(|(id, n)| (*id, n.clone()))
        .partition(|(id, _)| voter_ids.contains(id));
    Ok(OnDisk {
        term,
        last_log,
        committed: committed.map(|c| c.index),
        voters,
        learners,
        configs,
        state,
    })
}

/// Appends the new configuration (`me` the only voter, `learners` the other survivors) and the
/// `recovered` entry at a new term, and votes for `me` in it; every write is fsync'd before
/// this returns. Refuses if the store changed since `seen` was read (another process).
pub async fn rewrite(
    dir: &Path,
    seen: &OnDisk,
    me: (NodeId, Node),
    learners: BTreeMap<NodeId, Node>,
    recovered: Request,
) -> Result<Rewritten, StoreError> {
    let dir = dir.to_path_buf();
    let (mut log, mut sm) = tokio::task::spawn_blocking(move || super::store::open(&dir)).await??;
    let now = inspect(&mut log, &mut sm).await?;
    if now.last_log != seen.last_log || now.term != seen.term {
        return Err(StoreError::Corrupt {
            what: "raft store",
            reason: "it changed while muster recover read it (is an agent running on it?)".into(),
        });
    }
    let term = seen.term + 1;
    let (me_id, me_node) = me;
    let leader = CommittedLeaderId::new(term, me_id);
    let first = seen.last_log.map(|(_, i)| i + 1).unwrap_or(1);
    let mut nodes = learners;
    nodes.insert(me_id, me_node);
    let configuration = Membership::new(vec![BTreeSet::from([me_id])], nodes);
    let entries = vec![
        Entry::<TypeConfig> {
            log_id: LogId::new(leader, first),
            payload: EntryPayload::Membership(configuration),
        },
        Entry::<TypeConfig> {
            log_id: LogId::new(leader, first + 1),
            payload: EntryPayload::Normal(recovered),
        },
    ];
    // The vote first: once it is on disk no leader of an older term can append to this log,
    // whatever happens to the rest of the surgery.
    log.save_vote(&Vote::new(term, me_id))
        .await
        .map_err(storage_error)?;
    log.blocking_append(entries).await.map_err(storage_error)?;
    Ok(Rewritten {
        term,
        last_index: first + 1,
    })
}
