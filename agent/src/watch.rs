//! How a node keeps in touch when no leader talks to it, and how it learns that it was
//! removed: it applies its own tombstone and is no longer a voter, a peer answers it
//! `410 removed`, or, after hearing nothing from a leader for a second, it **checks in** with
//! its peers (`GET /raft/member`) and one says so.
//!
//! Checking in is also how a spare lives: it is outside the raft configuration, so no leader
//! ever contacts it. Every second it asks the leader it last heard of (then any member it
//! knows) and learns who leads and where every member is; the leader counts the check-in as
//! hearing from it, which is how spares count as reachable.

use std::time::{Duration, Instant};

use crate::agent::{CHECK_IN_AFTER_SILENCE, CheckIn, Group};
use crate::api::paths;
use crate::api::types::MemberCheck;
use crate::raft::RaftView;
use crate::state::{Node, NodeId, parse_member_id};

/// A node that has heard nothing from a leader for [`CHECK_IN_AFTER_SILENCE`] checks in at
/// most this often.
const CHECK_IN_EVERY: Duration = Duration::from_secs(1);
/// How long one check-in call may take.
const CHECK_IN_TIMEOUT: Duration = Duration::from_secs(2);

/// Watches for this node's own removal (and checks in while no leader talks to it); tells the
/// agent's removal signal when the removal happened.
pub async fn removal_watch(group: &Group, me: NodeId) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_check_in: Option<Instant> = None;
    loop {
        tick.tick().await;
        let view = group.raft().view();
        let tombstoned = group
            .raft()
            .read_local(|s| s.removed.contains(&me))
            .unwrap_or(false);
        // A removed voter keeps voting until it has been demoted, so a quorum is never short.
        let own_tombstone = tombstoned && !view.voters.contains(&me);
        let peer_said = group.raft().liveness().peer_said_removed();
        if own_tombstone || peer_said {
            tracing::info!(own_tombstone, peer_said, "this node learned it was removed");
            group.removal().conclude();
            return;
        }
        let due = last_check_in.is_none_or(|t| t.elapsed() >= CHECK_IN_EVERY);
        if !view.is_leader && group.removal().silence() >= CHECK_IN_AFTER_SILENCE && due {
            last_check_in = Some(Instant::now());
            if check_in(group, me, &view).await == Outcome::Removed {
                group.removal().conclude();
                return;
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Answered,
    Removed,
    NobodyAnswered,
}

/// Checks in until the leader has heard from this node: the leader it last heard of first,
/// then the members of its configuration, then every member it last heard of. An answer that
/// names a leader sends the check-in there at once; one that names none (the peer hears from
/// no leader either) only refreshes the member list.
async fn check_in(group: &Group, me: NodeId, view: &RaftView) -> Outcome {
    let known = group.check_in();
    let mut targets: Vec<(NodeId, Node)> = Vec::new();
    let candidates = known
        .leader
        .iter()
        .cloned()
        .chain(view.nodes.iter().map(|(id, n)| (*id, n.clone())))
        .chain(known.members.iter().cloned());
    for (id, node) in candidates {
        if id != me && !targets.iter().any(|(t, _)| *t == id) {
            targets.push((id, node));
        }
    }
    let mut outcome = Outcome::NobodyAnswered;
    let mut asked = 0;
    let mut next = targets.into_iter();
    let mut redirect: Option<(NodeId, Node)> = None;
    // Bounded: the targets, plus one redirect to a named leader.
    while asked < MAX_CHECK_IN_CALLS {
        let Some((id, node)) = redirect.take().or_else(|| next.next()) else {
            break;
        };
        asked += 1;
        let Ok(peer) = group.peers().get(id, &node.addr).await else {
            continue;
        };
        let answer = peer
            .http
            .get(format!("{}{}", peer.base, paths::MEMBER_CHECK))
            .timeout(CHECK_IN_TIMEOUT)
            .send()
            .await;
        let answer = match answer {
            Ok(a) => a,
            // A former peer refuses this node's certificate as revoked: it was removed.
            Err(e) if muster_shared::tls::is_certificate_revoked(&e) => return Outcome::Removed,
            Err(e) => {
                tracing::debug!(peer = %node.name, error = %e, "check-in failed");
                continue;
            }
        };
        if answer.status() == reqwest::StatusCode::GONE {
            return Outcome::Removed;
        }
        if !answer.status().is_success() {
            tracing::debug!(peer = %node.name, status = %answer.status(), "check-in refused");
            continue;
        }
        // A check-in answer lists every member: bounded, like every answer we read.
        let Ok(body) = crate::client::read_limited(&node.addr, answer, MAX_CHECK_IN_ANSWER).await
        else {
            continue;
        };
        let Ok(check) = serde_json::from_slice::<MemberCheck>(&body) else {
            continue;
        };
        tracing::debug!(peer = %node.name, leader = ?check.leader.as_ref().map(|l| &l.name), "checked in");
        let mut learned = learned(&check);
        outcome = Outcome::Answered;
        match learned.leader.clone() {
            // The leader itself answered: it has heard from this node.
            Some((leader, _)) if leader == id => {
                learned.confirmed_at = Some(Instant::now());
                group.set_check_in(learned);
                return outcome;
            }
            // Someone who knows the leader first-hand named it (and its list is current).
            Some(leader) => {
                group.set_check_in(learned);
                redirect = Some(leader);
            }
            // A peer that knows no leader either (another spare, or one cut off): its list
            // may be as old as its last replication; keep what this node knew.
            None => {}
        }
    }
    outcome
}

/// The most calls one check-in makes (a cluster's members are tried in turn until one names
/// the leader).
const MAX_CHECK_IN_CALLS: usize = 16;
/// The largest check-in answer read (a member list of a few thousand members).
const MAX_CHECK_IN_ANSWER: usize = 1024 * 1024;

/// What a check-in answer says, as ids and nodes.
fn learned(check: &MemberCheck) -> CheckIn {
    let node = |p: &crate::api::types::PeerAddress| {
        parse_member_id(&p.id).map(|id| {
            (
                id,
                Node {
                    name: p.name.clone(),
                    addr: p.addr.clone(),
                },
            )
        })
    };
    CheckIn {
        leader: check.leader.as_ref().and_then(node),
        members: check.members.iter().filter_map(node).collect(),
        confirmed_at: None,
    }
}
