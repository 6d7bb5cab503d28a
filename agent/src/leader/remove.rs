//! `muster node remove NAME` on the leader.
//!
//! Removal is recorded first: [`Request::RemoveNode`] drops the member's record and tombstones
//! its id in the replicated state, so the id is never admitted again and its name is free for a
//! new machine. The reconciler then takes the node out of the raft configuration (a voter is
//! demoted first), whichever node is leader by then; removing the leader works the same way, it
//! just hands over leadership on the way. How a removed node finds out is in `watch.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::forward::FORWARD_TIMEOUT;
use super::view::{Sightings, cluster_view};
use crate::api::types::NodeRemoved;
use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::policy::{self, REMOVAL_GRACE};
use crate::raft::RaftView;
use crate::state::{NodeId, NodeRecord, Request, member_id};

/// How long `node remove` waits for the node to leave the configuration before it answers
/// "in progress".
const REMOVE_WAIT: Duration = Duration::from_secs(15);
// A forwarded `node remove` must get its answer before the follower gives up on the leader.
const _: () = assert!(REMOVE_WAIT.as_secs() + 5 <= FORWARD_TIMEOUT.as_secs());

/// Removes the member called `name`. Refuses, unless `force`, when the voters left would not
/// have a reachable majority.
pub async fn remove_node(
    leader: Leader<'_, impl Replica>,
    name: &str,
    force: bool,
) -> Result<NodeRemoved, ApiError> {
    // Two removals at once could each pass the quorum check alone and fail it together.
    let one_at_a_time = leader.local.membership_ops.lock().await;
    let (records, removed) = leader
        .replica
        .read(|s| (s.nodes.clone(), s.removed.clone()))
        .await?;
    let raft = leader.replica.view();
    let id = find_member(&records, &removed, &raft, name)?;
    refuse_only_member(&raft, &removed, id, name)?;
    let was_voter = raft.voters.contains(&id);
    if was_voter && !force {
        // Voters already leaving count as gone.
        let mut leaving: BTreeSet<_> = removed.clone();
        leaving.insert(id);
        let view = cluster_view(leader, &raft, &Sightings::default())?;
        policy::check_voters_leaving(&view, &leaving, name)
            .map_err(|refusal| ApiError::new(ErrorKind::WouldLoseQuorum, refusal.to_string()))?;
    }
    leader
        .replica
        .write(Request::RemoveNode {
            id,
            force,
            now_ms: leader.replica.wall_ms(),
        })
        .await?;
    // The next removal's check sees this one in `removed`; it need not wait for this one to
    // finish leaving.
    drop(one_at_a_time);
    tracing::info!(node = %name, id = %member_id(id), force, "member removed; taking it out of the configuration");
    leader.local.record_membership_event(
        format!("removed {name}"),
        if force {
            "muster node remove --force".into()
        } else {
            "muster node remove".into()
        },
    );
    let exit = if id == leader.replica.id() {
        Exit::WasLeader
    } else if left_in_time(leader, id).await {
        Exit::Gone
    } else {
        Exit::Leaving
    };
    Ok(answer(name, id, was_voter, exit))
}

/// The member called `name` (pure): by its record, else by the configuration (a member whose
/// record is gone but which is not removed).
fn find_member(
    records: &BTreeMap<NodeId, NodeRecord>,
    removed: &BTreeSet<NodeId>,
    raft: &RaftView,
    name: &str,
) -> Result<NodeId, ApiError> {
    records
        .iter()
        .find(|(_, r)| r.name == name)
        .map(|(id, _)| *id)
        .or_else(|| {
            raft.nodes
                .iter()
                .find(|(id, n)| n.name == name && !removed.contains(id))
                .map(|(id, _)| *id)
        })
        .ok_or_else(|| {
            ApiError::new(
                ErrorKind::NotFound,
                format!("no member is called {name:?}; `muster members` lists them"),
            )
        })
}

/// Refuses to remove the last member not already leaving (pure): the cluster would have none.
fn refuse_only_member(
    raft: &RaftView,
    removed: &BTreeSet<NodeId>,
    id: NodeId,
    name: &str,
) -> Result<(), ApiError> {
    let remaining = raft
        .nodes
        .keys()
        .filter(|i| **i != id && !removed.contains(i))
        .count();
    if remaining == 0 {
        return Err(ApiError::invalid(format!(
            "{name} is the cluster's only member and cannot be removed; to retire the cluster, stop its agent"
        )));
    }
    Ok(())
}

/// Waits up to [`REMOVE_WAIT`] for `id` to leave the configuration; true if it did.
async fn left_in_time(leader: Leader<'_, impl Replica>, id: NodeId) -> bool {
    let deadline = Instant::now() + REMOVE_WAIT;
    while Instant::now() < deadline {
        if !leader.replica.view().nodes.contains_key(&id) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// Where the removed member stands when `node remove` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// It led: it hands over leadership and stops, after this answer.
    WasLeader,
    Gone,
    /// Still in the configuration after [`REMOVE_WAIT`].
    Leaving,
}

/// The answer to `node remove` (pure).
fn answer(name: &str, id: NodeId, was_voter: bool, exit: Exit) -> NodeRemoved {
    let message = match exit {
        Exit::WasLeader => format!(
            "{name} was the leader: it hands leadership to another voter and stops; `muster members` on another member shows when it is gone"
        ),
        Exit::Gone => format!("{name} removed from the cluster; its id is never reused"),
        Exit::Leaving => format!(
            "{name} is recorded as removed; the leader is still taking it out of the configuration (it waits up to {}s for the node to hear of it)",
            REMOVAL_GRACE.as_secs()
        ),
    };
    NodeRemoved {
        name: name.to_string(),
        id: member_id(id),
        was_voter,
        complete: exit == Exit::Gone,
        message,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::{Exit, answer, find_member, refuse_only_member};
    use crate::api::ErrorKind;
    use crate::raft::RaftView;
    use crate::state::{Node, NodeRecord};

    fn raft() -> RaftView {
        let node = |name: &str| Node {
            name: name.into(),
            addr: format!("{name}:1"),
        };
        RaftView {
            is_leader: true,
            leader: Some(1),
            term: 1,
            last_log_index: None,
            last_applied: None,
            voters: BTreeSet::from([1]),
            nodes: BTreeMap::from([(1, node("a")), (2, node("b"))]),
            membership_index: None,
            voter_sets: Vec::new(),
            matched: BTreeMap::new(),
            quorum_silence: None,
        }
    }

    #[test]
    fn a_member_is_found_by_record_then_by_configuration_unless_removed() {
        let records = BTreeMap::from([(
            1,
            NodeRecord {
                name: "a".into(),
                addr: "a:1".into(),
                key_fingerprint: String::new(),
                joined_ms: 0,
                joined_with: None,
                zone: None,
                version: None,
            },
        )]);
        let none = BTreeSet::new();
        assert_eq!(find_member(&records, &none, &raft(), "a").ok(), Some(1));
        assert_eq!(find_member(&records, &none, &raft(), "b").ok(), Some(2));
        let removed = BTreeSet::from([2]);
        let missing = find_member(&records, &removed, &raft(), "b").expect_err("removed");
        assert_eq!(missing.kind, ErrorKind::NotFound);
        // With b leaving, a is the only member left.
        assert!(refuse_only_member(&raft(), &none, 1, "a").is_ok());
        assert!(refuse_only_member(&raft(), &removed, 1, "a").is_err());
    }

    #[test]
    fn only_a_member_gone_from_the_configuration_is_complete() {
        assert!(answer("b", 2, true, Exit::Gone).complete);
        let leader = answer("a", 1, true, Exit::WasLeader);
        assert!(!leader.complete && leader.message.starts_with("a was the leader"));
        assert!(!answer("b", 2, false, Exit::Leaving).complete);
    }
}
