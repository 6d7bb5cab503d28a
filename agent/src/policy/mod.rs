//! Membership policy as pure functions: which voters a cluster wants, who counts as reachable
//! and caught up, whether taking voters out keeps a quorum, when a failed voter is replaced and
//! a dead member cleaned up, and the reconciler's next step.
//!
//! Nothing here reads a clock, the network or raft: callers gather a [`ClusterView`] (see
//! `reconcile.rs`) and carry out what [`plan`] returns. The tables in `tests.rs` pin every rule.

pub mod leadership;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::time::Duration;

pub use muster_shared::policy::voter_target;

use crate::state::NodeId;

/// A peer counts as reachable if the leader heard from it this recently.
pub const REACHABLE_WITHIN: Duration = Duration::from_secs(3);
/// A nonvoter counts as caught up when it is at most this many entries behind the leader.
pub const CAUGHT_UP_LAG: u64 = 5;
/// A removed nonvoter is dropped from the configuration once its log holds the removal and it
/// has had this long to apply it and stop by itself …
pub const REMOVAL_NOTICE: Duration = Duration::from_secs(1);
/// … or after this long in any case (it may be down and never hear of it).
pub const REMOVAL_GRACE: Duration = Duration::from_secs(5);

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

/// One membership change for the reconciler to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Complete a joint configuration with these voters.
    FinishJoint(BTreeSet<NodeId>),
    /// Make these nonvoters voters, in one change.
    Promote(BTreeSet<NodeId>, Why),
    Demote(NodeId, Why),
    /// Take a removed nonvoter out of the configuration.
    Remove(NodeId),
    /// Record a member unreachable for `--cleanup-dead-after` as removed (as `node remove`
    /// does; the removal steps then take it out).
    CleanUp(NodeId),
    /// Take a surplus standby out of the configuration: it stays a member, as a spare.
    MakeSpare(NodeId),
    /// Add a spare to the configuration as a nonvoter: it replicates again, as a standby.
    MakeStandby(NodeId),
    /// The discovery cohort has formed: forget the formation and mark the record formed.
    FormationDone,
}

/// Why a change is made (it goes into the log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The voter table wants more (or fewer) voters for this many members.
    VoterTable,
    /// The formation cohort has caught up.
    Formation,
    /// A removed voter is demoted before it leaves.
    Removal,
    /// The last voter is removed; another member takes over first.
    Successor,
    /// A voter was unreachable for `--replace-after`; a healthy nonvoter takes its place.
    FailedVoter,
}

/// Something the reconciler is waiting for rather than changing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// Demoting this removed voter now would lose quorum.
    RemovalKeepsQuorum(QuorumRefusal),
    /// The last voter is removed but no other member can take over yet.
    NoSuccessor { name: String },
    /// The leader does not hear from a majority: no automatic change until it does.
    NoQuorum,
    /// A failed voter stays: no reachable, caught-up standby can take its place.
    NoReplacement { name: String },
    /// A dead member stays: removing it would leave fewer members than `--min-voters`.
    CleanupBelowMinVoters {
        name: String,
        members_after: usize,
        min_voters: usize,
    },
    /// Dead members stay: as many members are unreachable as reachable, which looks more
    /// like a network split than dead machines.
    CleanupTooManyUnreachable { unreachable: usize, members: usize },
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wait::RemovalKeepsQuorum(why) => {
                write!(f, "a removal waits: demoting now would lose quorum: {why}")
            }
            Wait::NoSuccessor { name } => write!(
                f,
                "{name} is removed but is the last voter, and no other member has caught up to take over"
            ),
            Wait::NoQuorum => write!(
                f,
                "automatic membership changes are paused: the leader does not hear from a majority of the voters"
            ),
            Wait::NoReplacement { name } => write!(
                f,
                "voter {name} is unreachable but stays a voter: no reachable, caught-up standby can take its place (start another machine with the same user-data)"
            ),
            Wait::CleanupBelowMinVoters {
                name,
                members_after,
                min_voters,
            } => write!(
                f,
                "{name} is dead but is not cleaned up: that would leave {members_after} members, fewer than --min-voters {min_voters}; start a replacement or remove it with `muster node remove {name} --force`"
            ),
            Wait::CleanupTooManyUnreachable {
                unreachable,
                members,
            } => write!(
                f,
                "dead members are not cleaned up: {unreachable} of {members} members are unreachable, which looks like a network split; remove them by hand with `muster node remove` if they are gone"
            ),
        }
    }
}

/// What [`plan`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub change: Option<Change>,
    pub waiting: Vec<Wait>,
}

/// Why taking voters out would leave the cluster unable to commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuorumRefusal {
    #[error(
        "{name} is the last voter and no other member is reachable and caught up to take \
         over; start or repair another member first, or repeat with --force"
    )]
    LastVoter { name: String },
    #[error(
        "removing {name} would leave {after} voters of which only {alive_after} reachable ({reachable_after}); \
         a quorum needs {majority}. Bring back {unreachable_before} first, or repeat with --force \
         to remove it anyway: the cluster then stops taking writes until enough of the remaining \
         voters are back"
    )]
    WouldLoseQuorum {
        name: String,
        after: usize,
        alive_after: usize,
        /// Names, comma-separated.
        reachable_after: String,
        majority: usize,
        /// Names, comma-separated.
        unreachable_before: String,
    },
}

/// May the voters in `leaving` go? The joint configuration of the change needs a reachable
/// majority of the voters now and of the voters after; the last voter may leave only once a
/// reachable, caught-up member can take over. `name` names the member being removed.
pub fn check_voters_leaving(
    view: &ClusterView,
    leaving: &BTreeSet<NodeId>,
    name: &str,
) -> Result<(), QuorumRefusal> {
    let before = view.voters();
    let after: BTreeSet<NodeId> = before.difference(leaving).copied().collect();
    let reachable = |id: &NodeId| view.member(*id).is_some_and(|m| m.reachable);
    if after.is_empty() {
        let successor = view
            .members
            .iter()
            .any(|m| !leaving.contains(&m.id) && m.reachable && m.caught_up);
        return if successor {
            Ok(())
        } else {
            Err(QuorumRefusal::LastVoter {
                name: name.to_string(),
            })
        };
    }
    let majority = |set: &BTreeSet<NodeId>| set.len() / 2 + 1;
    let alive = |set: &BTreeSet<NodeId>| set.iter().filter(|v| reachable(v)).count();
    if alive(&after) >= majority(&after) && alive(&before) >= majority(&before) {
        return Ok(());
    }
    let names = |set: &BTreeSet<NodeId>, want: bool| {
        set.iter()
            .filter(|v| reachable(v) == want)
            .map(|v| view.name(*v))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(QuorumRefusal::WouldLoseQuorum {
        name: name.to_string(),
        after: after.len(),
        alive_after: alive(&after),
        reachable_after: names(&after, true),
        majority: majority(&after),
        unreachable_before: names(&before, false),
    })
}

/// The reconciler's next step: at most one membership change, in this order:
/// 1. finish a joint configuration left by an interrupted change;
/// 2. take removed members out (demote a removed voter while the voters left keep a reachable
///    majority, unless forced; drop a removed nonvoter once it has heard, or after the grace);
/// 3. during formation, promote the discovery cohort together once it has caught up;
/// 4. replace a failed voter: demote a voter unreachable for `--replace-after` when a healthy
///    nonvoter can take its place (step 5 then promotes it);
/// 5. follow the voter table: promote the lexicographically-first eligible nonvoter, or demote
///    a voter other than the leader (an unreachable one first, then the lexicographically-last);
/// 6. keep `--standbys` nonvoters replicating: a surplus one becomes a spare (out of the
///    configuration), a spare becomes a standby when one is missing;
/// 7. clean up one member unreachable for `--cleanup-dead-after`, never below `--min-voters`
///    and never while as many members are unreachable as reachable.
///
/// Nothing happens while the leader does not hear from a majority.
pub fn plan(view: &ClusterView) -> Plan {
    // Every change below is a raft write; without a majority none can commit, and a leader
    // cut off from the others must not judge them dead.
    if !view.has_quorum {
        return Plan {
            change: None,
            waiting: vec![Wait::NoQuorum],
        };
    }
    if let Some(target) = &view.joint_target {
        return change(Change::FinishJoint(target.clone()));
    }
    let mut waiting = Vec::new();
    if view.members.iter().any(|m| m.removal.is_some()) {
        // Removals first: they must not wait for a formation that discovery may hold up, and
        // the voter table must not count the members that are leaving.
        return Plan {
            change: removal_step(view, &mut waiting),
            waiting,
        };
    }
    if let Some(formation) = &view.formation {
        match formation_step(view, formation) {
            FormationStep::Forming(change) => return Plan { change, waiting },
            FormationStep::Done => return self::change(Change::FormationDone),
        }
    }
    if let Some(change) = replacement_step(view, &mut waiting) {
        return Plan {
            change: Some(change),
            waiting,
        };
    }
    if let Some(change) = voter_table_step(view) {
        return Plan {
            change: Some(change),
            waiting,
        };
    }
    if let Some(change) = standby_step(view) {
        return Plan {
            change: Some(change),
            waiting,
        };
    }
    Plan {
        change: cleanup_step(view, &mut waiting),
        waiting,
    }
}

fn unreachable_at_least(member: &MemberView, after: Option<Duration>) -> bool {
    match (after, member.unreachable_for) {
        (Some(after), Some(down)) => !member.reachable && down >= after,
        _ => false,
    }
}

/// A nonvoter that may become a voter now.
fn promotable(view: &ClusterView, m: &MemberView) -> bool {
    !m.voter
        && m.removal.is_none()
        && m.in_config_for >= view.promote_after
        // A nonvoter that is down would stay "caught up" on an idle cluster; voting it in
        // would make the quorum wait for it.
        && m.caught_up
        && m.reachable
}

fn replacement_step(view: &ClusterView, waiting: &mut Vec<Wait>) -> Option<Change> {
    let mut failed: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| m.voter && m.id != view.leader)
        .filter(|m| unreachable_at_least(m, view.automation.replace_after))
        .collect();
    // The longest-silent first; names break ties so every leader picks the same one.
    failed.sort_by(|a, b| {
        b.unreachable_for
            .cmp(&a.unreachable_for)
            .then(a.name.cmp(&b.name))
    });
    let victim = failed.first()?;
    if !view.members.iter().any(|m| promotable(view, m)) {
        waiting.push(Wait::NoReplacement {
            name: victim.name.clone(),
        });
        return None;
    }
    // Demoting an unreachable voter never costs reachable votes, but the joint configuration
    // of the change still needs a reachable majority of the voters before and after.
    check_voters_leaving(view, &BTreeSet::from([victim.id]), &victim.name).ok()?;
    Some(Change::Demote(victim.id, Why::FailedVoter))
}

fn cleanup_step(view: &ClusterView, waiting: &mut Vec<Wait>) -> Option<Change> {
    let after = view.automation.cleanup_dead_after?;
    let in_config = |m: &MemberView| view.members.iter().any(|c| c.id == m.id);
    let mut dead: Vec<&MemberView> = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.id != view.leader && m.removal.is_none())
        .filter(|m| unreachable_at_least(m, Some(after)))
        .collect();
    // Spares first, then nonvoters (they cost no vote), then the longest-silent, then by name.
    dead.sort_by(|a, b| {
        in_config(a)
            .cmp(&in_config(b))
            .then(a.voter.cmp(&b.voter))
            .then(b.unreachable_for.cmp(&a.unreachable_for))
            .then(a.name.cmp(&b.name))
    });
    let victim = dead.first()?;
    let members = view.member_count();
    let unreachable = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| !m.reachable)
        .count();
    if unreachable * 2 >= members {
        waiting.push(Wait::CleanupTooManyUnreachable {
            unreachable,
            members,
        });
        return None;
    }
    let members_after = members - 1;
    if members_after < view.automation.min_voters {
        waiting.push(Wait::CleanupBelowMinVoters {
            name: victim.name.clone(),
            members_after,
            min_voters: view.automation.min_voters,
        });
        return None;
    }
    if victim.voter {
        check_voters_leaving(view, &BTreeSet::from([victim.id]), &victim.name).ok()?;
    }
    Some(Change::CleanUp(victim.id))
}

fn change(c: Change) -> Plan {
    Plan {
        change: Some(c),
        waiting: Vec::new(),
    }
}

fn removal_step(view: &ClusterView, waiting: &mut Vec<Wait>) -> Option<Change> {
    let doomed: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| m.removal.is_some())
        .collect();
    // One change per step; a member that cannot move yet does not hold up the others.
    for member in &doomed {
        let Some(removal) = member.removal else {
            continue;
        };
        if !member.voter {
            let waited = removal.nonvoter_for.unwrap_or_default();
            if (removal.informed && waited >= REMOVAL_NOTICE) || waited >= REMOVAL_GRACE {
                return Some(Change::Remove(member.id));
            }
            continue;
        }
        if view.voters().len() == 1 {
            let mut successors: Vec<&MemberView> = view
                .members
                .iter()
                .filter(|m| m.removal.is_none() && m.caught_up && m.reachable)
                .collect();
            successors.sort_by(|a, b| a.name.cmp(&b.name));
            if let Some(s) = successors.first() {
                return Some(Change::Promote(BTreeSet::from([s.id]), Why::Successor));
            }
            waiting.push(Wait::NoSuccessor {
                name: member.name.clone(),
            });
            continue;
        }
        if !removal.forced {
            // Voters may have gone away since `node remove` checked: demoting now must still
            // leave a reachable majority, or it waits for them.
            let leaving = doomed.iter().filter(|d| d.voter).map(|d| d.id).collect();
            if let Err(refusal) = check_voters_leaving(view, &leaving, &member.name) {
                waiting.push(Wait::RemovalKeepsQuorum(refusal));
                continue;
            }
        }
        return Some(Change::Demote(member.id, Why::Removal));
    }
    None
}

enum FormationStep {
    /// Still forming: the voter table waits.
    Forming(Option<Change>),
    Done,
}

fn formation_step(view: &ClusterView, formation: &FormationView) -> FormationStep {
    let in_config = |id: &NodeId| view.member(*id).is_some();
    if formation.cohort.len() < formation.size
        || !formation
            .cohort
            .iter()
            .all(|id| in_config(id) || formation.removed.contains(id))
    {
        // Registrations or joins are still missing.
        return FormationStep::Forming(None);
    }
    // A registrant removed meanwhile counts as present but is never voted in.
    let cohort: BTreeSet<NodeId> = formation
        .cohort
        .difference(&formation.removed)
        .copied()
        .collect();
    // The voter table applies to the cohort too (4 registrants → 3 voters): promote the
    // lexicographically-first nonvoters, all in one membership change.
    let voters = view.voters();
    let wanted = voter_target(cohort.len()).saturating_sub(voters.len());
    let mut nonvoters: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| cohort.contains(&m.id) && !m.voter)
        .collect();
    nonvoters.sort_by(|a, b| a.name.cmp(&b.name));
    let promote: Vec<&MemberView> = nonvoters.into_iter().take(wanted).collect();
    if promote.is_empty() {
        return FormationStep::Done;
    }
    if promote.iter().all(|m| m.caught_up) {
        let ids = promote.iter().map(|m| m.id).collect();
        return FormationStep::Forming(Some(Change::Promote(ids, Why::Formation)));
    }
    FormationStep::Forming(None)
}

fn voter_table_step(view: &ClusterView) -> Option<Change> {
    let voters = view.voters();
    let target = voter_target(view.member_count());
    if voters.len() < target {
        let mut eligible: Vec<&MemberView> = view
            .members
            .iter()
            .filter(|m| promotable(view, m))
            .collect();
        eligible.sort_by(|a, b| a.name.cmp(&b.name));
        return eligible
            .first()
            .map(|m| Change::Promote(BTreeSet::from([m.id]), Why::VoterTable));
    }
    if voters.len() > target {
        let mut demotable: Vec<&MemberView> = view
            .members
            .iter()
            .filter(|m| m.voter && m.id != view.leader)
            .collect();
        // Reachable ones last, so an unreachable voter goes first.
        demotable.sort_by(|a, b| {
            a.reachable
                .cmp(&b.reachable)
                .reverse()
                .then(a.name.cmp(&b.name))
        });
        return demotable
            .last()
            .map(|m| Change::Demote(m.id, Why::VoterTable));
    }
    None
}

/// Keeps the standbys at their target. Who stays a standby is a fixed order, so that any
/// leader keeps the same ones: reachable before unreachable, caught up before lagging, then by
/// name. Waits while the voter table is short (a new nonvoter may be about to become a voter),
/// while a surplus nonvoter is newer than `--promote-after`, and while it is still catching up.
fn standby_step(view: &ClusterView) -> Option<Change> {
    if view.voters().len() < voter_target(view.member_count()) {
        return None;
    }
    let target = view.standby_target();
    let mut standbys = view.standbys();
    if standbys.len() > target {
        standbys.sort_by(|a, b| {
            b.reachable
                .cmp(&a.reachable)
                .then(b.caught_up.cmp(&a.caught_up))
                .then(a.name.cmp(&b.name))
        });
        let surplus = standbys.last()?;
        // A reachable one first catches up: a spare knows the cluster only from its own log
        // until it checks in, and a new one may not have received the membership yet.
        let settled = surplus.caught_up || !surplus.reachable;
        return (surplus.in_config_for >= view.promote_after && settled)
            .then_some(Change::MakeSpare(surplus.id));
    }
    if standbys.len() < target {
        let mut spares: Vec<&MemberView> = view.spares.iter().filter(|s| s.reachable).collect();
        spares.sort_by(|a, b| a.name.cmp(&b.name));
        return spares.first().map(|s| Change::MakeStandby(s.id));
    }
    None
}
