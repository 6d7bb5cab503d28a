//! The leader's picture of the cluster for the policy: the raft configuration, the replicated
//! state's records and tombstones, and what the leader has seen of each peer.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::api::ApiError;
use crate::leading::{Leader, Replica};
use crate::policy::{self, ClusterView, MemberView, RemovalView};
use crate::raft::RaftView;
use crate::state::NodeId;

/// What the reconciler remembers between steps: when this leader first saw each member in the
/// configuration, and when each removed member became a nonvoter (with the leader's last log
/// index at that moment, which holds the removal and the demotion).
#[derive(Debug, Default)]
pub struct Sightings {
    first_seen: HashMap<NodeId, Instant>,
    nonvoter_since: HashMap<NodeId, (Instant, u64)>,
    /// The term this node leads in and when it first saw itself leading in it: silence is
    /// counted from then at the earliest.
    leading_since: Option<(u64, Instant)>,
    /// When this leader first knew of each member (record or configuration): silence is
    /// counted from then at the earliest too, so a machine that has just joined is never
    /// "silent for" longer than it has existed.
    known_since: HashMap<NodeId, Instant>,
    /// Members this leader has found silent for the reachability window, until they answer.
    silent: HashSet<NodeId>,
    /// When each member that was silent answered again: it settles for `--promote-after`.
    back_since: HashMap<NodeId, Instant>,
}

impl Sightings {
    /// Brings the memory up to date with the configuration in `raft`, the member records and
    /// the tombstones.
    /// `seen` says how long ago the leader last heard from a member.
    pub fn observe(
        &mut self,
        raft: &RaftView,
        records: &BTreeSet<NodeId>,
        removed: &BTreeSet<NodeId>,
        seen: impl Fn(NodeId) -> Option<Duration>,
    ) {
        let now = Instant::now();
        self.known_since
            .retain(|id, _| raft.nodes.contains_key(id) || records.contains(id));
        for id in raft.nodes.keys().chain(records) {
            self.known_since.entry(*id).or_insert(now);
        }
        if self.leading_since.is_none_or(|(term, _)| term != raft.term) {
            self.leading_since = Some((raft.term, now));
            // Who was silent under another term's leadership says nothing of this one.
            self.silent.clear();
            self.back_since.clear();
        }
        self.first_seen.retain(|id, _| raft.nodes.contains_key(id));
        for id in raft.nodes.keys() {
            self.first_seen.entry(*id).or_insert(now);
        }
        let leaving_nonvoter = |id: &NodeId| {
            raft.nodes.contains_key(id) && removed.contains(id) && !raft.voters.contains(id)
        };
        self.nonvoter_since.retain(|id, _| leaving_nonvoter(id));
        for id in raft.nodes.keys().filter(|id| leaving_nonvoter(id)) {
            self.nonvoter_since
                .entry(*id)
                .or_insert((now, raft.last_log_index.unwrap_or(0)));
        }
        self.observe_comebacks(now, raft, records, seen);
    }

    /// Notes who fell silent and who answered again. A member counts as silent only once it
    /// has been unreachable for the reachability window under this leader, so that a new
    /// leader's first moments (before every follower has answered once) mark nobody.
    fn observe_comebacks(
        &mut self,
        now: Instant,
        raft: &RaftView,
        records: &BTreeSet<NodeId>,
        seen: impl Fn(NodeId) -> Option<Duration>,
    ) {
        let known = |id: &NodeId| raft.nodes.contains_key(id) || records.contains(id);
        self.silent.retain(known);
        self.back_since.retain(|id, _| known(id));
        let clock = Clock {
            sightings: self,
            now,
        };
        let mut fell_silent = Vec::new();
        let mut answered = Vec::new();
        for id in raft.nodes.keys().chain(records) {
            let last = seen(*id);
            if policy::is_reachable(last) {
                answered.push(*id);
            } else if clock.silent_for(*id, last) >= policy::REACHABLE_WITHIN {
                fell_silent.push(*id);
            }
        }
        for id in fell_silent {
            self.silent.insert(id);
            self.back_since.remove(&id);
        }
        for id in answered {
            if self.silent.remove(&id) {
                self.back_since.insert(id, now);
            }
        }
    }
}

/// The cluster as the policy sees it, from this node's raft view and applied state. Only
/// meaningful on the leader (replication progress exists only there). `sightings` may be
/// empty (a member then counts as new, and a removed one as just demoted).
pub fn cluster_view(
    leader: Leader<'_, impl Replica>,
    raft: &RaftView,
    sightings: &Sightings,
) -> Result<ClusterView, ApiError> {
    let me = leader.replica.id();
    let (records, removed, forced, settings) = leader.replica.read_local(|s| {
        (
            s.nodes.clone(),
            s.removed.clone(),
            s.forced_removals.clone(),
            s.settings,
        )
    })?;
    let clock = Clock {
        sightings,
        now: Instant::now(),
    };
    let seen = |id: &NodeId| leader.replica.last_seen_ms(*id).map(Duration::from_millis);
    let members = raft
        .nodes
        .iter()
        .map(|(id, node)| {
            let record = records.get(id);
            let name = record.map_or(&node.name, |r| &r.name);
            let removal = removed.contains(id).then(|| forced.contains(id));
            let mut member = member_view(&clock, raft, *id, name, removal, *id == me, seen(id));
            if let Some(r) = record {
                member.zone = r.zone.clone();
                member.version = r.version.clone();
            }
            member
        })
        .collect();
    // Spares: recorded members outside the configuration. The leader hears from them when they
    // check in (see `watch.rs`); a new leader counts their silence from its election.
    let spares = records
        .iter()
        .filter(|(id, _)| !raft.nodes.contains_key(id) && !removed.contains(id))
        .map(|(id, record)| {
            let mut spare = spare_view(&clock, *id, &record.name, seen(id));
            spare.zone = record.zone.clone();
            spare.version = record.version.clone();
            spare
        })
        .collect();
    Ok(ClusterView {
        leader: me,
        members,
        spares,
        joint_target: (raft.voter_sets.len() > 1)
            .then(|| raft.voter_sets.last().cloned().unwrap_or_default()),
        promote_after: leader.settings().promote_after,
        formation: None,
        automation: super::settings::effective(leader.settings().automation, settings),
        has_quorum: !leader.replica.quorum_lost(),
    })
}

/// The leader's memory read at one instant, so every member's durations are measured from the
/// same `now`.
struct Clock<'a> {
    sightings: &'a Sightings,
    now: Instant,
}

impl Clock<'_> {
    fn since(&self, t: Instant) -> Duration {
        self.now.duration_since(t)
    }

    /// How long a member that was silent has answered again (`None` while unreachable, or
    /// when this leader never found it silent).
    fn back_for(&self, id: NodeId, reachable: bool) -> Option<Duration> {
        reachable
            .then(|| self.sightings.back_since.get(&id).map(|t| self.since(*t)))
            .flatten()
    }

    /// How long this leader has not heard from `id`, given how long ago it last did (`None`:
    /// never): never more than it has been in a position to hear from it.
    fn silent_for(&self, id: NodeId, seen: Option<Duration>) -> Duration {
        let leading_for = self
            .sightings
            .leading_since
            .map(|(_, t)| self.since(t))
            .unwrap_or_default();
        let known_for = self
            .sightings
            .known_since
            .get(&id)
            .map(|t| self.since(*t))
            .unwrap_or_default();
        seen.unwrap_or(Duration::MAX)
            .min(leading_for.min(known_for))
    }
}

/// One member of the configuration (pure). `removal` is `Some(forced)` for a tombstoned one;
/// `seen` is how long ago the leader last heard from it.
fn member_view(
    clock: &Clock<'_>,
    raft: &RaftView,
    id: NodeId,
    name: &str,
    removal: Option<bool>,
    is_me: bool,
    seen: Option<Duration>,
) -> MemberView {
    let matched = raft.matched.get(&id).copied().flatten();
    let removal = removal.map(|forced| {
        let since = clock.sightings.nonvoter_since.get(&id);
        RemovalView {
            forced,
            nonvoter_for: since.map(|(t, _)| clock.since(*t)),
            // It has the entries that removed and demoted it.
            informed: since.is_some_and(|(_, index)| matched.is_some_and(|m| m >= *index)),
        }
    });
    let reachable = is_me || policy::is_reachable(seen);
    MemberView {
        id,
        name: name.to_string(),
        voter: raft.voters.contains(&id),
        reachable,
        unreachable_for: (!reachable).then(|| clock.silent_for(id, seen)),
        back_for: clock.back_for(id, reachable),
        zone: None,
        version: None,
        caught_up: policy::is_caught_up(matched, raft.last_log_index),
        in_config_for: clock
            .sightings
            .first_seen
            .get(&id)
            .map(|t| clock.since(*t))
            .unwrap_or_default(),
        removal,
    }
}

/// A spare: recorded, outside the configuration, never caught up (pure).
fn spare_view(clock: &Clock<'_>, id: NodeId, name: &str, seen: Option<Duration>) -> MemberView {
    let reachable = policy::is_reachable(seen);
    MemberView {
        id,
        name: name.to_string(),
        voter: false,
        reachable,
        caught_up: false,
        in_config_for: Duration::ZERO,
        removal: None,
        unreachable_for: (!reachable).then(|| clock.silent_for(id, seen)),
        back_for: clock.back_for(id, reachable),
        zone: None,
        version: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::{Duration, Instant};

    use super::{Clock, Sightings, member_view, spare_view};
    use crate::raft::RaftView;

    fn raft(matched: &[(u64, u64)]) -> RaftView {
        RaftView {
            is_leader: true,
            leader: Some(1),
            term: 2,
            last_log_index: Some(12),
            last_applied: Some(12),
            voters: BTreeSet::from([1]),
            nodes: BTreeMap::new(),
            membership_index: None,
            voter_sets: Vec::new(),
            matched: matched.iter().map(|(id, m)| (*id, Some(*m))).collect(),
            quorum_silence: None,
        }
    }

    #[test]
    fn silence_is_counted_from_the_start_of_leadership_and_removal_from_the_demotion() {
        let now = Instant::now();
        let ago = |secs| now - Duration::from_secs(secs);
        let sightings = Sightings {
            leading_since: Some((2, ago(5))),
            known_since: [(2, ago(60)), (3, ago(60)), (4, ago(60))].into(),
            nonvoter_since: [(3, (ago(2), 10)), (4, (ago(2), 10))].into(),
            first_seen: [(2, ago(60))].into(),
            ..Sightings::default()
        };
        let clock = Clock {
            sightings: &sightings,
            now,
        };
        let raft = raft(&[(3, 12), (4, 9)]);

        let me = member_view(&clock, &raft, 1, "a", None, true, None);
        assert!(me.voter && me.reachable && me.unreachable_for.is_none());

        // Never heard from: silent only as long as this leader has led.
        let silent = member_view(&clock, &raft, 2, "b", None, false, None);
        assert!(!silent.reachable && !silent.voter);
        assert_eq!(silent.unreachable_for, Some(Duration::from_secs(5)));
        assert_eq!(silent.in_config_for, Duration::from_secs(60));

        let told = member_view(&clock, &raft, 3, "c", Some(true), false, None);
        let removal = told.removal.expect("removed");
        assert!(removal.forced && removal.informed);
        assert_eq!(removal.nonvoter_for, Some(Duration::from_secs(2)));
        let behind = member_view(&clock, &raft, 4, "d", Some(false), false, None);
        assert!(!behind.removal.expect("removed").informed);

        let spare = spare_view(&clock, 5, "e", Some(Duration::from_secs(3600)));
        assert!(!spare.reachable && !spare.caught_up);
        // Unknown to this leader until now: not silent for any time it could have heard.
        assert_eq!(spare.unreachable_for, Some(Duration::ZERO));
    }
}
