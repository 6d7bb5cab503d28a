//! `muster status`: this node's view, with the leader's view of the members merged in.

use std::time::Duration;

use super::{Authority, LeaderOp, run_once};
use crate::agent::Agent;
use crate::api::ApiError;
use crate::api::types::{Member, Status};
use crate::policy;
use crate::state::{NodeId, member_id};

/// Status as this node sees it. On the leader it includes replication progress.
pub fn local(agent: &Agent) -> Result<Status, ApiError> {
    let view = agent.raft().view();
    let records = agent.raft().read_local(|s| s.nodes.clone())?;
    let name_of = |id: NodeId| {
        records
            .get(&id)
            .map(|r| r.name.clone())
            .or_else(|| view.nodes.get(&id).map(|n| n.name.clone()))
            .unwrap_or_else(|| member_id(id))
    };
    let liveness = agent.raft().liveness();
    let mut members: Vec<Member> = view
        .nodes
        .iter()
        .map(|(id, node)| {
            let me = *id == agent.node_id();
            let (reachable, last_seen_ms, match_index) = if view.is_leader {
                let seen = if me {
                    Some(0)
                } else {
                    liveness.last_seen_ms(*id)
                };
                let fresh = policy::is_reachable(seen.map(Duration::from_millis));
                (
                    Some(me || fresh),
                    seen,
                    view.matched.get(id).copied().flatten(),
                )
            } else {
                (None, None, None)
            };
            let voter = view.voters.contains(id);
            Member {
                name: name_of(*id),
                id: member_id(*id),
                address: node.addr.clone(),
                suffrage: if voter { "voter" } else { "nonvoter" }.into(),
                role: if voter { "voter" } else { "standby" }.into(),
                reachable,
                last_seen_ms,
                match_index,
            }
        })
        .collect();
    // Spares: recorded, not removed, outside the configuration. Reachable means "checked in
    // lately" (the leader only).
    let removed = agent.raft().read_local(|s| s.removed.clone())?;
    for (id, record) in records
        .iter()
        .filter(|(id, _)| !view.nodes.contains_key(id) && !removed.contains(id))
    {
        let seen = view.is_leader.then(|| liveness.last_seen_ms(*id)).flatten();
        members.push(Member {
            name: record.name.clone(),
            id: member_id(*id),
            address: record.addr.clone(),
            suffrage: "nonvoter".into(),
            role: "spare".into(),
            reachable: view
                .is_leader
                .then(|| policy::is_reachable(seen.map(Duration::from_millis))),
            last_seen_ms: seen,
            match_index: None,
        });
    }
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let (membership_events, membership_waiting) = if view.is_leader {
        agent.leader_local().membership_log()
    } else {
        Default::default()
    };
    Ok(Status {
        cluster_id: agent.cluster_id().to_string(),
        self_name: agent.name().to_string(),
        leader: view.leader.map(name_of),
        term: view.term,
        commit_index: view.last_applied.unwrap_or(0),
        members,
        refused_rpcs: agent.counters().refused_rpcs(),
        revoked_certificates: agent.revoked().len(),
        quorum_lost: agent.raft().quorum_lost(),
        membership_events,
        membership_waiting,
    })
}

/// Status with the leader's view of the members (falls back to the local view).
pub async fn status(agent: &Agent) -> Result<Status, ApiError> {
    let mut local = local(agent)?;
    if agent.raft().view().is_leader {
        return Ok(local);
    }
    // One attempt: during an election `status` answers at once with what this node knows
    // (no leader) rather than waiting for the outcome.
    if let Ok(value) = run_once(agent, &Authority::Node, LeaderOp::Status).await
        && let Ok(leader) = serde_json::from_value::<Status>(value)
    {
        local.members = leader.members;
        local.leader = leader.leader;
        // A spare's own raft view stands still; the leader's term is the cluster's.
        local.term = local.term.max(leader.term);
        local.membership_events = leader.membership_events;
        local.membership_waiting = leader.membership_waiting;
        local.commit_index = local.commit_index.max(leader.commit_index);
    }
    Ok(local)
}
