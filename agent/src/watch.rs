//! How a node keeps in touch when no leader talks to it, and how it learns that it was
//! removed: it applies its own tombstone and is no longer a voter, a peer answers it
//! `410 removed`, or, after hearing nothing from a leader for a second, it **checks in** with
//! its peers (`GET /raft/member`) and one says so.
//!
//! Checking in is also how a spare lives: it is outside the raft configuration, so no leader
//! ever contacts it. Every second it asks the leader it last heard of (then any member it
//! knows) and learns who leads and where every member is; the leader counts the check-in as
//! hearing from it, which is how spares count as reachable. What a check-in learns is kept in
//! `peers.json`, so a spare that restarts knows where to check in again.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agent::{CHECK_IN_AFTER_SILENCE, CheckIn, Group};
use crate::api::paths;
use crate::api::types::MemberCheck;
use crate::datadir::KnownPeers;
use crate::raft::RaftView;
use crate::state::{Node, NodeId, parse_member_id};

/// A node that has heard nothing from a leader for [`CHECK_IN_AFTER_SILENCE`] checks in at
/// most this often.
const CHECK_IN_EVERY: Duration = Duration::from_secs(1);
/// How long one check-in call may take.
const CHECK_IN_TIMEOUT: Duration = Duration::from_secs(2);

/// Watches for this node's own removal (and checks in while no leader talks to it); tells the
/// agent's removal signal when the removal happened.
pub async fn removal_watch(group: &Group, me: NodeId, data_dir: &Path) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_check_in: Option<Instant> = None;
    let mut peers_file = PeersFile::new(data_dir, KnownPeers::from(&group.check_in()));
    loop {
        tick.tick().await;
        peers_file.keep(group).await;
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
        .chain(known.members.iter().cloned())
        .chain(known.hints.iter().cloned());
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
                keep_known(&mut learned, &known);
                group.set_check_in(learned);
                return outcome;
            }
            // Someone who knows the leader first-hand named it. Its list is kept unless it has
            // none (a peer that knows no members yet must not make this node forget them).
            Some(leader) => {
                keep_known(&mut learned, &known);
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

/// Keeps what this node knew where an answer says less: an answer with no members (a peer
/// that knows none yet, or could not read its state) must not make it forget them, and the
/// hints stay for the next time nobody answers.
fn keep_known(learned: &mut CheckIn, known: &CheckIn) {
    if learned.members.is_empty() {
        learned.members = known.members.clone();
    }
    learned.hints = known.hints.clone();
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
        ..CheckIn::default()
    }
}

/// `peers.json` is rewritten at most this often: a burst of joins changes the member list many
/// times a second, and every spare would write it each time.
const PEERS_FILE_EVERY: Duration = Duration::from_secs(10);

/// Keeps `peers.json` in step with what check-ins learned.
struct PeersFile {
    dir: PathBuf,
    written: KnownPeers,
    at: Option<Instant>,
}

impl PeersFile {
    /// `on_disk`: what the file held when the node started.
    fn new(dir: &Path, on_disk: KnownPeers) -> Self {
        Self {
            dir: dir.to_path_buf(),
            written: on_disk,
            at: None,
        }
    }

    async fn keep(&mut self, group: &Group) {
        let now = KnownPeers::from(&group.check_in());
        if !peers_file_due(&self.written, self.at.map(|t| t.elapsed()), &now) {
            return;
        }
        let dir = self.dir.clone();
        let to_write = now.clone();
        let wrote = tokio::task::spawn_blocking(move || to_write.write(&dir)).await;
        match wrote {
            Ok(Ok(())) => self.written = now,
            // Tried again after the pause, as what is on disk still differs.
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot keep the peers this node learned"),
            Err(e) => tracing::warn!(error = %e, "cannot keep the peers this node learned"),
        }
        self.at = Some(Instant::now());
    }
}

/// True when what check-ins learned should be written: it names members, differs from what
/// was written, and the last write is at least [`PEERS_FILE_EVERY`] ago (`since`; `None`:
/// nothing written by this process yet). Pure.
fn peers_file_due(written: &KnownPeers, since: Option<Duration>, now: &KnownPeers) -> bool {
    !now.members.is_empty() && now != written && since.is_none_or(|s| s >= PEERS_FILE_EVERY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datadir::KnownPeer;

    #[test]
    fn the_peers_file_is_written_on_a_change_at_most_every_ten_seconds() {
        let peer = |id: u64| KnownPeer {
            id,
            name: format!("m{id}"),
            addr: format!("10.0.0.{id}:7000"),
        };
        let one = KnownPeers {
            leader: Some(peer(1)),
            members: vec![peer(1)],
        };
        let two = KnownPeers {
            leader: Some(peer(1)),
            members: vec![peer(1), peer(2)],
        };
        let secs = |s: u64| Some(Duration::from_secs(s));
        let cases = [
            (
                "first change in this process",
                KnownPeers::default(),
                None,
                &one,
                true,
            ),
            (
                "nothing learned yet",
                one.clone(),
                None,
                &KnownPeers::default(),
                false,
            ),
            ("unchanged", one.clone(), secs(60), &one, false),
            ("changed, too soon", one.clone(), secs(3), &two, false),
            (
                "changed, after ten seconds",
                one.clone(),
                secs(10),
                &two,
                true,
            ),
        ];
        for (what, written, since, now, due) in cases {
            assert_eq!(peers_file_due(&written, since, now), due, "{what}");
        }
    }
}
