//! `muster node remove NAME` on the leader.
//!
//! Removal is recorded first: [`Request::RemoveNode`] drops the member's record and tombstones
//! its id in the replicated state, so the id is never admitted again and its name is free for a
//! new machine. The reconciler then takes the node out of the raft configuration (a voter is
//! demoted first), whichever node is leader by then; removing the leader works the same way, it
//! just hands over leadership on the way. How a removed node finds out is in `watch.rs`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::forward::FORWARD_TIMEOUT;
use super::view::{Sightings, cluster_view};
use crate::api::types::NodeRemoved;
use crate::api::{ApiError, ErrorKind};
use crate::leading::{Leader, Replica};
use crate::policy::{self, REMOVAL_GRACE};
use crate::state::{Request, member_id};

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
    let id = records
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
        })?;
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
    let result = |complete: bool, message: String| NodeRemoved {
        name: name.to_string(),
        id: member_id(id),
        was_voter,
        complete,
        message,
    };
    if id == leader.replica.id() {
        return Ok(result(
            false,
            format!(
                "{name} was the leader: it hands leadership to another voter and stops; `muster members` on another member shows when it is gone"
            ),
        ));
    }
    let deadline = Instant::now() + REMOVE_WAIT;
    while Instant::now() < deadline {
        if !leader.replica.view().nodes.contains_key(&id) {
            return Ok(result(
                true,
                format!("{name} removed from the cluster; its id is never reused"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(result(
        false,
        format!(
            "{name} is recorded as removed; the leader is still taking it out of the configuration (it waits up to {}s for the node to hear of it)",
            REMOVAL_GRACE.as_secs()
        ),
    ))
}
