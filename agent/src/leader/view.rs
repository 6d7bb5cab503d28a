//! The leader's picture of the cluster for the policy: the raft configuration, the replicated
//! state's records and tombstones, and what the leader has seen of each peer.

use std::collections::{BTreeSet, HashMap};
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
}

impl Sightings {
    /// Brings the memory up to date with the configuration in `raft`, the member records and
    /// the tombstones.
    pub fn observe(
        &mut self,
        raft: &RaftView,
        records: &BTreeSet<NodeId>,
        removed: &BTreeSet<NodeId>,
    ) {
        let now = Instant::now();
        self.known_since
            .retain(|id, _| raft.nodes.contains_key(id) || records.contains(id));
        for id in raft.nodes.keys().chain(records) {
            self.known_since.entry(*id).or_insert(now);
        }
        if self.leading_since.is_none_or(|(term, _)| term != raft.term) {
            self.leading_since = Some((raft.term, now));
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
    let now = Instant::now();
    let leading_for = sightings
        .leading_since
        .map(|(_, t)| now.duration_since(t))
        .unwrap_or_default();
    // How long this leader has been in a position to hear from `id`.
    let watched_for = |id: &NodeId| {
        let known_for = sightings
            .known_since
            .get(id)
            .map(|t| now.duration_since(*t))
            .unwrap_or_default();
        leading_for.min(known_for)
    };
    let members = raft
        .nodes
        .iter()
        .map(|(id, node)| {
            let matched = raft.matched.get(id).copied().flatten();
            let removal = removed.contains(id).then(|| {
                let since = sightings.nonvoter_since.get(id);
                RemovalView {
                    forced: forced.contains(id),
                    nonvoter_for: since.map(|(t, _)| now.duration_since(*t)),
                    informed: since.is_some_and(|(_, index)| matched.is_some_and(|m| m >= *index)),
                }
            });
            let reachable = *id == me
                || policy::is_reachable(
                    leader.replica.last_seen_ms(*id).map(Duration::from_millis),
                );
            let silent_for = leader
                .replica
                .last_seen_ms(*id)
                .map(Duration::from_millis)
                .unwrap_or(Duration::MAX);
            MemberView {
                id: *id,
                name: records
                    .get(id)
                    .map(|r| r.name.clone())
                    .unwrap_or_else(|| node.name.clone()),
                voter: raft.voters.contains(id),
                reachable,
                unreachable_for: (!reachable).then(|| silent_for.min(watched_for(id))),
                caught_up: policy::is_caught_up(matched, raft.last_log_index),
                in_config_for: sightings
                    .first_seen
                    .get(id)
                    .map(|t| now.duration_since(*t))
                    .unwrap_or_default(),
                removal,
            }
        })
        .collect();
    // Spares: recorded members outside the configuration. The leader hears from them when they
    // check in (see `watch.rs`); a new leader counts their silence from its election.
    let spares = records
        .iter()
        .filter(|(id, _)| !raft.nodes.contains_key(id) && !removed.contains(id))
        .map(|(id, record)| {
            let seen = leader.replica.last_seen_ms(*id).map(Duration::from_millis);
            let reachable = policy::is_reachable(seen);
            MemberView {
                id: *id,
                name: record.name.clone(),
                voter: false,
                reachable,
                caught_up: false,
                in_config_for: Duration::ZERO,
                removal: None,
                unreachable_for: (!reachable)
                    .then(|| seen.unwrap_or(Duration::MAX).min(watched_for(id))),
            }
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
