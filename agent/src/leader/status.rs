//! `muster status`: this node's view, with the leader's view of the members merged in. With no
//! leader answering, the leader raft remembers is not named (it may be the machine that died),
//! and this node asks each member itself, so that the answer says how many voters are left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::task::JoinSet;

use super::{Authority, LeaderOp, run_once};
use crate::agent::Here;
use crate::api::types::{Member, Status, ZoneCoverage};
use crate::api::{ApiError, paths};
use crate::client::PeerClients;
use crate::leading::{Leader, Replica};
use crate::policy;
use crate::policy::leadership::{LeaderWord, quorum_lost, shown_leader};
use crate::raft::RaftView;
use crate::state::{NodeId, NodeRecord, member_id, parse_member_id};

/// How long a follower waits for the leader's status: `status` answers now with what this node
/// knows rather than after the forwarding timeout (a leader cut off by a partition never
/// answers).
const LEADER_ANSWER_WAIT: Duration = Duration::from_secs(5);
/// How long each member may take to answer this node's own check, with no leader: a dead one
/// refuses at once, one behind a partition is given up on after this.
const MEMBER_CHECK_WAIT: Duration = Duration::from_secs(1);

/// Status as this node sees it. On the leader it includes replication progress.
pub fn local(here: Here<'_>) -> Result<Status, ApiError> {
    let me = Myself {
        name: here.me.name.as_str(),
        refused_rpcs: here.counters.refused_rpcs(),
        revoked_certificates: here.revoked.len(),
    };
    status_of(here.leader(), &me)
}

/// What only this node's process knows of itself: its name and its listeners' counts.
pub(super) struct Myself<'a> {
    pub(super) name: &'a str,
    pub(super) refused_rpcs: u64,
    pub(super) revoked_certificates: usize,
}

/// Status from this node's raft group and leader-side state (the fake's in the unit tests).
pub(super) fn status_of(
    leader: Leader<'_, impl Replica>,
    me: &Myself<'_>,
) -> Result<Status, ApiError> {
    let replica = leader.replica;
    let view = replica.view();
    let records = replica.read_local(|s| s.nodes.clone())?;
    let seen = |id: NodeId| replica.last_seen_ms(id);
    let mut members = configured(&view, &records, replica.id(), seen);
    let removed = replica.read_local(|s| s.removed.clone())?;
    members.extend(spares(&view, &records, &removed, seen));
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let (membership_events, membership_waiting) = if view.is_leader {
        leader.local.membership_log()
    } else {
        Default::default()
    };
    let cut_off = replica.quorum_lost();
    // A follower's raft leader is only what it last heard; `status` replaces it with the
    // leader's own answer, or with none.
    let leader_shown = if view.is_leader {
        shown_leader(LeaderWord::Leads {
            me: me.name,
            cut_off,
        })
    } else {
        view.leader.map(|id| name_of(&records, &view, id))
    };
    let voters_reachable = view.is_leader.then(|| voters_answering(&members));
    let zones = zone_coverage(&members);
    let recovered = replica.read_local(|s| s.recoveries.last().map(recovered))?;
    Ok(Status {
        cluster_id: leader.settings().cluster_id.clone(),
        self_name: me.name.to_string(),
        leader: leader_shown,
        term: view.term,
        commit_index: view.last_applied.unwrap_or(0),
        members,
        refused_rpcs: me.refused_rpcs,
        revoked_certificates: me.revoked_certificates,
        quorum_lost: cut_off,
        voters_reachable,
        membership_events,
        membership_waiting,
        zones,
        recovered,
    })
}

fn recovered(r: &crate::state::RecoveryRecord) -> crate::api::types::Recovered {
    crate::api::types::Recovered {
        epoch: r.epoch,
        at_ms: r.at_ms,
        by: r.by.clone(),
        lost: r.lost.iter().map(|m| m.name.clone()).collect(),
        kept_through_index: r.kept_through_index,
    }
}

/// The members by zone and role (pure); empty when no member said a zone. Members without
/// one are the zone `""`.
pub(super) fn zone_coverage(members: &[Member]) -> Vec<ZoneCoverage> {
    if members.iter().all(|m| m.zone.is_none()) {
        return Vec::new();
    }
    let mut zones: BTreeMap<&str, ZoneCoverage> = BTreeMap::new();
    for m in members {
        let zone = m.zone.as_deref().unwrap_or("");
        let z = zones.entry(zone).or_insert_with(|| ZoneCoverage {
            zone: zone.to_string(),
            voters: 0,
            standbys: 0,
            spares: 0,
            reachable: Some(0),
        });
        match m.role.as_str() {
            "voter" => z.voters += 1,
            "spare" => z.spares += 1,
            _ => z.standbys += 1,
        }
        z.reachable = match (z.reachable, m.reachable) {
            (Some(n), Some(true)) => Some(n + 1),
            (Some(n), Some(false)) => Some(n),
            _ => None,
        };
    }
    zones.into_values().collect()
}

/// A member's name: its record's, else the configuration's, else its id.
fn name_of(records: &BTreeMap<NodeId, NodeRecord>, view: &RaftView, id: NodeId) -> String {
    records
        .get(&id)
        .map(|r| r.name.clone())
        .or_else(|| view.nodes.get(&id).map(|n| n.name.clone()))
        .unwrap_or_else(|| member_id(id))
}

/// The rows of the raft configuration's members (pure). Contact and replication progress are
/// the leader's to know; `seen` is how many milliseconds ago it last heard from a member.
fn configured(
    view: &RaftView,
    records: &BTreeMap<NodeId, NodeRecord>,
    me: NodeId,
    seen: impl Fn(NodeId) -> Option<u64>,
) -> Vec<Member> {
    view.nodes
        .iter()
        .map(|(id, node)| {
            let is_me = *id == me;
            let (reachable, last_seen_ms, match_index) = if view.is_leader {
                let seen = if is_me { Some(0) } else { seen(*id) };
                let fresh = policy::is_reachable(seen.map(Duration::from_millis));
                (
                    Some(is_me || fresh),
                    seen,
                    view.matched.get(id).copied().flatten(),
                )
            } else {
                (None, None, None)
            };
            let voter = view.voters.contains(id);
            Member {
                name: name_of(records, view, *id),
                id: member_id(*id),
                address: node.addr.clone(),
                suffrage: if voter { "voter" } else { "nonvoter" }.into(),
                role: if voter { "voter" } else { "standby" }.into(),
                reachable,
                last_seen_ms,
                match_index,
                zone: records.get(id).and_then(|r| r.zone.clone()),
                version: records.get(id).and_then(|r| r.version.clone()),
            }
        })
        .collect()
}

/// The rows of the spares: recorded, not removed, outside the configuration (pure).
/// Reachable means "checked in lately" (the leader only).
fn spares<'a>(
    view: &'a RaftView,
    records: &'a BTreeMap<NodeId, NodeRecord>,
    removed: &'a BTreeSet<NodeId>,
    seen: impl Fn(NodeId) -> Option<u64> + 'a,
) -> impl Iterator<Item = Member> + 'a {
    records
        .iter()
        .filter(|(id, _)| !view.nodes.contains_key(id) && !removed.contains(id))
        .map(move |(id, record)| {
            let seen = view.is_leader.then(|| seen(*id)).flatten();
            Member {
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
                zone: record.zone.clone(),
                version: record.version.clone(),
            }
        })
}

/// Voters marked reachable.
fn voters_answering(members: &[Member]) -> usize {
    members
        .iter()
        .filter(|m| m.suffrage == "voter" && m.reachable == Some(true))
        .count()
}

/// Status with the leader's view of the members; with no leader answering, this node's own
/// view, no leader named, and the members this node reaches itself.
pub async fn status(here: Here<'_>) -> Result<Status, ApiError> {
    let mut local = local(here)?;
    if here.raft().view().is_leader {
        return Ok(local);
    }
    // One attempt: during an election `status` answers at once with what this node knows
    // (no leader) rather than waiting for the outcome.
    let asked = tokio::time::timeout(
        LEADER_ANSWER_WAIT,
        run_once(here, &Authority::Node, LeaderOp::Status),
    )
    .await;
    if let Ok(Ok(value)) = asked
        && let Ok(leader) = serde_json::from_value::<Status>(value)
    {
        local.members = leader.members;
        local.leader = shown_leader(LeaderWord::Answered(leader.leader.as_deref()));
        local.quorum_lost = leader.quorum_lost;
        local.voters_reachable = leader.voters_reachable;
        // A spare's own raft view stands still; the leader's term is the cluster's.
        local.term = local.term.max(leader.term);
        local.membership_events = leader.membership_events;
        local.membership_waiting = leader.membership_waiting;
        local.commit_index = local.commit_index.max(leader.commit_index);
        local.zones = zone_coverage(&local.members);
        return Ok(local);
    }
    local.leader = shown_leader(LeaderWord::Silent);
    let me = here.me.name.clone();
    let answering = ask_members(here.group.peers(), &local.members, &me).await;
    for member in &mut local.members {
        member.reachable = Some(member.name == me || answering.contains(&member.name));
    }
    let voters = local
        .members
        .iter()
        .filter(|m| m.suffrage == "voter")
        .count();
    let reachable = voters_answering(&local.members);
    local.voters_reachable = Some(reachable);
    local.quorum_lost = quorum_lost(voters, reachable);
    local.zones = zone_coverage(&local.members);
    Ok(local)
}

/// The names of the members (other than `me`) that answer on their node port within
/// [`MEMBER_CHECK_WAIT`], all asked at once.
async fn ask_members(peers: &PeerClients, members: &[Member], me: &str) -> Vec<String> {
    let mut asks = JoinSet::new();
    for member in members.iter().filter(|m| m.name != me) {
        let Some(id) = parse_member_id(&member.id) else {
            continue;
        };
        let (peers, member) = (peers.clone(), member.clone());
        asks.spawn(async move {
            let ask = async {
                let peer = peers.get(id, &member.address).await.ok()?;
                let answer = peer
                    .http
                    .get(format!("{}{}", peer.base, paths::HEALTH))
                    .timeout(MEMBER_CHECK_WAIT)
                    .send()
                    .await
                    .ok()?;
                answer.status().is_success().then_some(member.name)
            };
            tokio::time::timeout(MEMBER_CHECK_WAIT, ask)
                .await
                .ok()
                .flatten()
        });
    }
    let mut answering = Vec::new();
    while let Some(done) = asks.join_next().await {
        if let Ok(Some(name)) = done {
            answering.push(name);
        }
    }
    answering
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::{configured, spares};
    use crate::raft::RaftView;
    use crate::state::{Node, NodeRecord};

    fn raft(is_leader: bool) -> RaftView {
        let node = |name: &str| Node {
            name: name.into(),
            addr: format!("{name}:1"),
        };
        RaftView {
            is_leader,
            leader: Some(1),
            term: 3,
            last_log_index: Some(20),
            last_applied: Some(20),
            voters: BTreeSet::from([1, 2]),
            nodes: BTreeMap::from([(1, node("a")), (2, node("b")), (3, node("c"))]),
            membership_index: None,
            voter_sets: Vec::new(),
            matched: BTreeMap::from([(1, Some(20)), (2, Some(19)), (3, None)]),
            quorum_silence: None,
        }
    }

    fn record(name: &str) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            addr: format!("{name}:1"),
            key_fingerprint: String::new(),
            joined_ms: 0,
            joined_with: None,
            zone: None,
            version: None,
        }
    }

    #[test]
    fn rows_show_roles_and_only_the_leader_knows_contact() {
        // Node 2's record renames it; 4 is a spare, 5 a removed one.
        let records = BTreeMap::from([(2, record("b2")), (4, record("d")), (5, record("e"))]);
        let removed = BTreeSet::from([5]);
        let seen = |id| (id == 2).then_some(100).or((id == 4).then_some(999_999));

        let rows = configured(&raft(true), &records, 1, seen);
        let row = |name: &str| rows.iter().find(|m| m.name == name).expect(name);
        assert_eq!(
            (row("a").reachable, row("a").last_seen_ms),
            (Some(true), Some(0))
        );
        assert_eq!(row("b2").reachable, Some(true));
        assert_eq!(row("b2").match_index, Some(19));
        assert_eq!(
            (row("c").role.as_str(), row("c").reachable),
            ("standby", Some(false))
        );
        let spare: Vec<_> = spares(&raft(true), &records, &removed, seen).collect();
        assert_eq!(spare.len(), 1);
        assert_eq!(
            (spare[0].name.as_str(), spare[0].role.as_str()),
            ("d", "spare")
        );
        assert_eq!(spare[0].reachable, Some(false));

        let rows = configured(&raft(false), &records, 2, seen);
        assert!(
            rows.iter()
                .all(|m| m.reachable.is_none() && m.last_seen_ms.is_none())
        );
        let spare: Vec<_> = spares(&raft(false), &records, &removed, seen).collect();
        assert_eq!((spare[0].reachable, spare[0].last_seen_ms), (None, None));
    }
}
