//! What the membership policy decides from: the leader's view of the cluster
//! ([`ClusterView`]), its members and the repairs' settings, with the judgements made of a
//! member (reachable, caught up, promotable). Separate from the steps so that `reconcile.rs`
//! and `node remove` can build and read a view, and both kinds of step share one judgement.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{CAUGHT_UP_LAG, REACHABLE_WITHIN, voter_target};
use crate::state::NodeId;

/// True if the leader last heard from a peer `last_seen` ago.
pub fn is_reachable(last_seen: Option<Duration>) -> bool {
    last_seen.is_some_and(|d| d < REACHABLE_WITHIN)
}

/// True if a member whose log matches the leader's up to `matched` is close enough to the
/// leader's last index to vote without slowing commits down.
pub fn is_caught_up(matched: Option<u64>, leader_last: Option<u64>) -> bool {
    let leader_last = leader_last.unwrap_or(0);
    matched.is_some_and(|m| m + CAUGHT_UP_LAG >= leader_last)
}

/// A member of the raft configuration as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    pub name: String,
    pub voter: bool,
    /// The leader heard from it lately (always true for the leader itself).
    pub reachable: bool,
    pub caught_up: bool,
    /// How long this leader has seen it in the configuration.
    pub in_config_for: Duration,
    /// Set when the member was removed (tombstoned) and is still in the configuration.
    pub removal: Option<RemovalView>,
    /// How long this leader has not heard from it (`None` while reachable). Counted from the
    /// later of its last answer and the start of this leadership, so a new leader never
    /// judges a member by another leader's silence.
    pub unreachable_for: Option<Duration>,
    /// How long it has answered again since this leader last saw it silent (`None`: not
    /// silent under this leader, or silent now). Within `--promote-after` it is settling
    /// after a restart: it is not promoted, and failed voters wait to be replaced.
    pub back_for: Option<Duration>,
    /// Its failure zone (`--zone`), from its member record.
    pub zone: Option<String>,
    /// The agent version it reported, from its member record.
    pub version: Option<String>,
}

impl MemberView {
    /// Back from a silence for less than `promote_after`.
    pub fn settling(&self, promote_after: Duration) -> bool {
        self.back_for.is_some_and(|back| back < promote_after)
    }
}

/// The automatic membership repairs, as the agent's flags set them (`None`: off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Automation {
    /// `--replace-after`: a voter unreachable this long is demoted when a reachable,
    /// caught-up nonvoter can take its place (the voter table then promotes that one).
    pub replace_after: Option<Duration>,
    /// `--cleanup-dead-after`: a member unreachable this long is removed as `node remove`
    /// removes it.
    pub cleanup_dead_after: Option<Duration>,
    /// `--min-voters`: cleanup never leaves fewer members than this.
    pub min_voters: usize,
    /// `--standbys`: how many nonvoters beyond the voters replicate, ready to be promoted;
    /// every further member is a spare (known, not in the raft configuration).
    pub standbys: usize,
}

impl Automation {
    pub const DEFAULT_REPLACE_AFTER: Duration = Duration::from_secs(30);
    pub const DEFAULT_CLEANUP_DEAD_AFTER: Duration = Duration::from_secs(600);
    pub const DEFAULT_MIN_VOTERS: usize = 3;
    pub const DEFAULT_STANDBYS: usize = 2;
}

impl Default for Automation {
    fn default() -> Self {
        Self {
            replace_after: Some(Self::DEFAULT_REPLACE_AFTER),
            cleanup_dead_after: Some(Self::DEFAULT_CLEANUP_DEAD_AFTER),
            min_voters: Self::DEFAULT_MIN_VOTERS,
            standbys: Self::DEFAULT_STANDBYS,
        }
    }
}

/// Where a removed member still in the configuration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemovalView {
    /// The operator overrode the quorum check (`node remove --force`).
    pub forced: bool,
    /// How long it has been a nonvoter since the removal (`None` while still a voter).
    pub nonvoter_for: Option<Duration>,
    /// Its log holds everything up to the moment it became a nonvoter (so, its removal).
    pub informed: bool,
}

/// The discovery cohort of a formation still in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormationView {
    /// How many registrants form the cluster.
    pub size: usize,
    /// Node ids of the URL's first `size` registrants (fewer while registrations are missing).
    pub cohort: BTreeSet<NodeId>,
    /// Ids the replicated state has tombstoned (a registrant removed meanwhile).
    pub removed: BTreeSet<NodeId>,
}

/// Everything [`plan`] decides from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    pub leader: NodeId,
    /// The members of the configuration in effect, in id order.
    pub members: Vec<MemberView>,
    /// Spares: members with a record but outside the raft configuration (`voter` false,
    /// reachability from their contact with the leader).
    pub spares: Vec<MemberView>,
    /// The voters a joint configuration left by an interrupted change was heading for.
    pub joint_target: Option<BTreeSet<NodeId>>,
    /// A nonvoter becomes eligible for promotion after this long in the configuration.
    pub promote_after: Duration,
    /// Present while a discovery formation is in progress and its cohort could be read.
    pub formation: Option<FormationView>,
    pub automation: Automation,
    /// The leader heard from a majority of the voters within the quorum window. Without it
    /// nothing is repaired: a leader cut off from the others must not judge them dead.
    pub has_quorum: bool,
}

impl ClusterView {
    pub fn member(&self, id: NodeId) -> Option<&MemberView> {
        self.members.iter().chain(&self.spares).find(|m| m.id == id)
    }

    pub fn name(&self, id: NodeId) -> String {
        self.member(id)
            .map(|m| m.name.clone())
            .unwrap_or_else(|| crate::state::member_id(id))
    }

    /// Every member: the configuration's and the spares.
    pub fn member_count(&self) -> usize {
        self.members.len() + self.spares.len()
    }

    /// The nonvoters in the configuration that are not leaving: the standbys.
    pub fn standbys(&self) -> Vec<&MemberView> {
        self.members
            .iter()
            .filter(|m| !m.voter && m.removal.is_none())
            .collect()
    }

    /// How many standbys the cluster wants: `--standbys`, but never more than the members
    /// beyond the voters.
    pub fn standby_target(&self) -> usize {
        let total = self.member_count();
        self.automation
            .standbys
            .min(total.saturating_sub(voter_target(total)))
    }

    pub fn voters(&self) -> BTreeSet<NodeId> {
        self.members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.id)
            .collect()
    }
}

/// A nonvoter that may become a voter now.
pub(super) fn promotable(view: &ClusterView, m: &MemberView) -> bool {
    !m.voter
        && m.removal.is_none()
        && m.in_config_for >= view.promote_after
        // A nonvoter that is down would stay "caught up" on an idle cluster; voting it in
        // would make the quorum wait for it.
        && m.caught_up
        && m.reachable
        // Back from a restart only just: it proves it stays up before it votes.
        && !m.settling(view.promote_after)
}
