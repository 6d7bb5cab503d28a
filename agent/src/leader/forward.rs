//! Reaching the leader: run an operation here when this node leads, else forward it to the
//! leader over mutual TLS. While an election is in progress it waits instead of failing.

use std::time::Duration;

use super::{Authority, Forwarded, LeaderOp, execute};
use crate::agent::Here;
use crate::api::{ApiError, ErrorKind, paths};
use crate::client::{CallError, PeerClient, send_json};
use crate::state::{Node, NodeId};
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
    here: Here<'_>,
    authority: &Authority,
    op: LeaderOp,
) -> Result<serde_json::Value, ApiError> {
    let mut backoff = RetryPolicy::constant(Duration::from_millis(100))
        .within(ELECTION_GRACE)
        .start();
    loop {
        match run_once(here, authority, op.clone()).await {
            Err(e) if e.kind == ErrorKind::NoLeader && backoff.wait().await => {}
            other => return other,
        }
    }
}

/// One attempt at [`run`]: here if this node leads, else to the leader this node knows, with no
/// waiting for an election. For answers that are better now than complete (`status`).
pub async fn run_once(
    here: Here<'_>,
    authority: &Authority,
    op: LeaderOp,
) -> Result<serde_json::Value, ApiError> {
    let view = here.raft().view();
    if view.is_leader {
        super::authorize(here.leader(), authority, &op).await?;
        return execute(here, op).await;
    }
    let from_raft = view
        .leader
        .and_then(|id| view.nodes.get(&id).map(|n| (id, n.clone())));
    // A node no leader has talked to lately (a spare, outside the configuration, or one cut
    // off) trusts the leader it learned by checking in over its own stale view; one outside
    // its own view of the configuration (a spare just made, or one that never replicated)
    // does so as soon as that leader has answered it lately.
    let silent = here.group.removal().silence() >= crate::agent::CHECK_IN_AFTER_SILENCE;
    let outside = !view.nodes.contains_key(&here.me.node_id);
    let checked_in = match (silent, outside) {
        (true, _) => here.group.check_in().leader,
        (false, true) => here.group.check_in().confirmed_leader(),
        (false, false) => None,
    };
    // Only a leader raft told us about can be watched for a change; one learned by checking in
    // is not this node's raft leader, and raft would report a change at once.
    // A hand-over changes the leader on purpose: its answer is what counts, not the change.
    let watch_raft = checked_in.is_none() && !op.changes_leader();
    let target = checked_in.or(from_raft);
    let Some((leader, node)) = target else {
        return Err(ApiError::new(
            ErrorKind::NoLeader,
            "no leader is known right now; retry in a moment",
        ));
    };
    let peer = here
        .group
        .peers()
        .get(leader, &node.addr)
        .await
        .map_err(|e| ApiError::new(ErrorKind::NoLeader, e.to_string()))?;
    match forward(here, &peer, authority, op, (leader, &node), watch_raft).await {
        Ok(value) => Ok(value),
        Err(failed) => {
            let (error, aftermath) = failure(&node.name, failed);
            match aftermath {
                // The leader says this node was removed: stop like on any other sign of it.
                Aftermath::Removed => here.group.removal().conclude(),
                Aftermath::ForgetLeader => here.group.peers().forget(leader),
                Aftermath::Nothing => {}
            }
            Err(error)
        }
    }
}

/// Why a forward got no answer.
#[derive(Debug)]
enum Failed {
    /// The leader stopped leading while the request was in flight.
    StoppedLeading {
        read_only: bool,
    },
    Call(CallError),
}

/// What this node does about a failed forward, besides answering the error.
#[derive(Debug, PartialEq, Eq)]
enum Aftermath {
    Nothing,
    /// The leader said this node was removed.
    Removed,
    /// The leader's connection never came up: ask the peer table for a new one next time.
    ForgetLeader,
}

/// Sends `op` to `leader` over `peer` and waits for its answer, or for raft to see another
/// leader.
async fn forward(
    here: Here<'_>,
    peer: &PeerClient,
    authority: &Authority,
    op: LeaderOp,
    (leader, node): (NodeId, &Node),
    watch_raft: bool,
) -> Result<serde_json::Value, Failed> {
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
    tokio::select! {
        answer = send_json(&node.addr, request) => answer.map_err(Failed::Call),
        () = leader_changed(here, leader, watch_raft) => Err(Failed::StoppedLeading { read_only }),
    }
}

/// The error a failed forward answers, and what this node does about it (pure). Only a request
/// that never reached the leader may be retried (`no_leader`); after that a write may have been
/// applied, and sending it again would apply it twice.
fn failure(leader_name: &str, failed: Failed) -> (ApiError, Aftermath) {
    match failed {
        Failed::StoppedLeading { read_only: true } => (
            ApiError::new(
                ErrorKind::NoLeader,
                format!("{leader_name} stopped leading; asking the new leader"),
            ),
            Aftermath::Nothing,
        ),
        Failed::StoppedLeading { read_only: false } => (
            ApiError::new(
                ErrorKind::QuorumLost,
                format!(
                    "{leader_name} stopped leading while the request was in flight; the outcome is unknown, read before retrying"
                ),
            ),
            Aftermath::Nothing,
        ),
        Failed::Call(CallError::Api(e)) => {
            let aftermath = if e.kind == ErrorKind::Removed {
                Aftermath::Removed
            } else {
                Aftermath::Nothing
            };
            (e, aftermath)
        }
        Failed::Call(CallError::Unreachable {
            connect: true,
            reason,
            ..
        }) => (
            ApiError::new(
                ErrorKind::NoLeader,
                format!("leader {leader_name} is not reachable ({reason})"),
            ),
            Aftermath::ForgetLeader,
        ),
        Failed::Call(e) => (
            ApiError::new(
                ErrorKind::QuorumLost,
                format!(
                    "leader {leader_name} did not answer ({e}); the outcome is unknown, read before retrying"
                ),
            ),
            Aftermath::Nothing,
        ),
    }
}

/// Resolves when raft sees another leader than `leader`; never, when `leader` was not learned
/// from raft (a spare's, from its check-in).
async fn leader_changed(here: Here<'_>, leader: NodeId, watch_raft: bool) {
    if watch_raft {
        here.raft().leader_changed_from(leader).await;
    } else {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::{Aftermath, Failed, failure};
    use crate::api::{ApiError, ErrorKind};
    use crate::client::CallError;

    fn unreachable(connect: bool) -> Failed {
        Failed::Call(CallError::Unreachable {
            addr: "b:1".into(),
            reason: "refused".into(),
            connect,
        })
    }

    #[test]
    fn only_a_request_that_never_left_may_be_retried() {
        let (e, after) = failure("b", unreachable(true));
        assert_eq!(
            (e.kind, after),
            (ErrorKind::NoLeader, Aftermath::ForgetLeader)
        );
        assert_eq!(e.message, "leader b is not reachable (refused)");
        let (e, after) = failure("b", unreachable(false));
        assert_eq!((e.kind, after), (ErrorKind::QuorumLost, Aftermath::Nothing));
        let (e, _) = failure("b", Failed::StoppedLeading { read_only: true });
        assert_eq!(e.kind, ErrorKind::NoLeader);
        let (e, _) = failure("b", Failed::StoppedLeading { read_only: false });
        assert_eq!(e.kind, ErrorKind::QuorumLost);
        let removed = ApiError::new(ErrorKind::Removed, "removed");
        let (e, after) = failure("b", Failed::Call(CallError::Api(removed)));
        assert_eq!((e.kind, after), (ErrorKind::Removed, Aftermath::Removed));
    }
}
