//! Membership policy as pure functions: which voters a cluster wants, who counts as reachable
//! and caught up, whether taking voters out keeps a quorum, when a failed voter is replaced and
//! a dead member cleaned up, and the reconciler's next step.
//!
//! Nothing here reads a clock, the network or raft: callers gather a [`ClusterView`] (see
//! `reconcile.rs`) and carry out what [`plan`] returns. The tables in `tests.rs` pin every rule.
//!
//! This file holds what a plan can say and the order its steps are tried in; the view is
//! `view.rs`, the quorum rule `quorum.rs`, and the steps `repairs.rs` (members leaving or gone)
//! and `shape.rs` (formation, voter table, standbys). `admission.rs` asks the plan where a
//! member admitted with a token starts (in the configuration, or as a spare).

mod admission;
pub mod leadership;
pub mod preference;
mod quorum;
mod repairs;
mod shape;
#[cfg(test)]
mod tests;
mod view;

use std::collections::BTreeSet;
use std::time::Duration;

pub use admission::{Placement, placement};
pub use muster_shared::policy::voter_target;
use preference::spread_step;
pub use quorum::{QuorumRefusal, check_voters_leaving};
pub use repairs::REMOVAL_GRACE;
use repairs::{cleanup_step, removal_step, replacement_step};
use shape::{FormationStep, formation_step, standby_step, voter_table_step};
pub use view::{
    Automation, ClusterView, FormationView, MemberView, RemovalView, is_caught_up, is_reachable,
};

use crate::state::NodeId;

/// A peer counts as reachable if the leader heard from it this recently.
pub const REACHABLE_WITHIN: Duration = Duration::from_secs(3);
/// A nonvoter counts as caught up when it is at most this many entries behind the leader.
pub const CAUGHT_UP_LAG: u64 = 5;

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
    /// A zone has at least two voters fewer than another: a nonvoter there becomes a voter
    /// (and one from the fullest zone then steps down).
    ZoneSpread,
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
    /// Repairs of failed members wait: this member answers again after a silence and is
    /// still settling (for `--promote-after`), as in a rolling restart.
    Settling { name: String },
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
            Wait::Settling { name } => write!(
                f,
                "repairs of failed members wait: {name} has just come back and is settling (--promote-after)"
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

/// The reconciler's next step: at most one membership change, in this order:
/// 1. finish a joint configuration left by an interrupted change;
/// 2. take removed members out (demote a removed voter while the voters left keep a reachable
///    majority, unless forced; drop a removed nonvoter once it has heard, or after the grace);
/// 3. during formation, promote the discovery cohort together once it has caught up;
/// 4. replace a failed voter: demote a voter unreachable for `--replace-after` when a healthy
///    nonvoter can take its place (step 5 then promotes it);
/// 5. follow the voter table: promote an eligible nonvoter, or demote a voter other than the
///    leader (an unreachable one first); which one is `preference.rs`'s order (zones with the
///    fewest voters first, then the majority's newest version, then names);
/// 6. spread the voters over zones: promote a nonvoter in a zone two voters short of the
///    fullest (step 5 then demotes one there);
/// 7. keep `--standbys` nonvoters replicating: a surplus one becomes a spare (out of the
///    configuration), a spare becomes a standby when one is missing (covering zones first);
/// 8. clean up one member unreachable for `--cleanup-dead-after`, never below `--min-voters`
///    and never while as many members are unreachable as reachable.
///
/// Nothing happens while the leader does not hear from a majority. Steps 4 and 8 (repairs of
/// failed members) wait while a member is settling after a restart, for at most one
/// `--promote-after` past when they were due. At most one voter changes
/// per step and each step needs a reachable majority before and after it, so no round of
/// repairs ever takes out more than (voters − 1) / 2 failed voters (Consul's cap).
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
    if let Some(change) = spread_step(view) {
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

fn change(c: Change) -> Plan {
    Plan {
        change: Some(c),
        waiting: Vec::new(),
    }
}
