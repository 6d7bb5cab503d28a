//! Reaching the leader: run an operation here when this node leads, else forward it to the
//! leader over mutual TLS. While an election is in progress it waits instead of failing.

use std::time::Duration;

use super::{Authority, Forwarded, LeaderOp, execute};
use crate::agent::Agent;
use crate::api::{ApiError, ErrorKind, paths};
use crate::client::{CallError, send_json};
use muster_shared::retry::RetryPolicy;

/// How long a follower waits for the leader to answer a forwarded operation: longer than the
/// leader's own longest wait (`node remove` waits for the node to leave), shorter than the
/// CLI's 30 s.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(25);
/// How long an operation waits for a leader before answering `no_leader`.
const ELECTION_GRACE: Duration = Duration::from_secs(5);

/// Runs `op` on the leader on behalf of `authority`: here if this node leads, else forwarded
/// over mutual TLS (and checked again there).
pub async fn run(
    agent: &Agent,
    authority: &Authority,
    op: LeaderOp,
) -> Result<serde_json::Value, ApiError> {
    let mut backoff = RetryPolicy::constant(Duration::from_millis(100))
        .within(ELECTION_GRACE)
        .start();
    loop {
        match run_once(agent, authority, op.clone()).await {
            Err(e) if e.kind == ErrorKind::NoLeader && backoff.wait().await => {}
            other => return other,
        }
    }
}

/// One attempt at [`run`]: here if this node leads, else to the leader this node knows, with no
/// waiting for an election. For answers that are better now than complete (`status`).
pub async fn run_once(
    agent: &Agent,
    authority: &Authority,
    op: LeaderOp,
) -> Result<serde_json::Value, ApiError> {
    let view = agent.raft().view();
    if view.is_leader {
        super::authorize(agent.leader(), authority, &op).await?;
        return execute(agent, op).await;
    }
    let from_raft = view
        .leader
        .and_then(|id| view.nodes.get(&id).map(|n| (id, n.clone())));
    // A node no leader has talked to lately (a spare, outside the configuration, or one cut
    // off) trusts the leader it learned by checking in over its own stale view.
    let silent = agent.removal().silence() >= crate::agent::CHECK_IN_AFTER_SILENCE;
    let checked_in = silent.then(|| agent.check_in().leader).flatten();
    // Only a leader raft told us about can be watched for a change; one learned by checking in
    // is not this node's raft leader, and raft would report a change at once.
    let watch_raft = checked_in.is_none();
    let target = checked_in.or(from_raft);
    let Some((leader, node)) = target else {
        return Err(ApiError::new(
            ErrorKind::NoLeader,
            "no leader is known right now; retry in a moment",
        ));
    };
    let peer = agent
        .peers()
        .get(leader, &node.addr)
        .await
        .map_err(|e| ApiError::new(ErrorKind::NoLeader, e.to_string()))?;
    let read_only = op.is_read_only();
    let forwarded = Forwarded {
        op,
        authority: authority.clone(),
    };
    let request = peer
        .http
        .post(format!("{}{}", peer.base, paths::FORWARD))
        .json(&forwarded)
        .timeout(FORWARD_TIMEOUT);
    // A leader cut off from this node (and from the majority) never answers; the majority
    // elects another within an election window. Follow it instead of waiting out the timeout.
    let answer = tokio::select! {
        answer = send_json(&node.addr, request) => answer,
        () = leader_changed(agent, leader, watch_raft) => {
            return Err(if read_only {
                ApiError::new(ErrorKind::NoLeader, format!("{} stopped leading; asking the new leader", node.name))
            } else {
                ApiError::new(
                    ErrorKind::QuorumLost,
                    format!(
                        "{} stopped leading while the request was in flight; the outcome is unknown, read before retrying",
                        node.name
                    ),
                )
            });
        }
    };
    match answer {
        Ok(value) => Ok(value),
        Err(CallError::Api(e)) => {
            if e.kind == ErrorKind::Removed {
                // The leader says this node was removed: stop like on any other sign of it.
                agent.removal().conclude();
            }
            Err(e)
        }
        // Only a request that never reached the leader may be retried; after that a write may
        // have been applied, and sending it again would apply it twice.
        Err(CallError::Unreachable {
            connect: true,
            reason,
            ..
        }) => {
            agent.peers().forget(leader);
            Err(ApiError::new(
                ErrorKind::NoLeader,
                format!("leader {} is not reachable ({reason})", node.name),
            ))
        }
        Err(e) => Err(ApiError::new(
            ErrorKind::QuorumLost,
            format!(
                "leader {} did not answer ({e}); the outcome is unknown, read before retrying",
                node.name
            ),
        )),
    }
}

/// Resolves when raft sees another leader than `leader`; never, when `leader` was not learned
/// from raft (a spare's, from its check-in).
async fn leader_changed(agent: &Agent, leader: crate::state::NodeId, watch_raft: bool) {
    if watch_raft {
        agent.raft().leader_changed_from(leader).await;
    } else {
        std::future::pending::<()>().await;
    }
}
