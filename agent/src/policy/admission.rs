//! Where a member admitted with a join token starts: inside the raft configuration as a
//! nonvoter (it replicates, and the reconciler may make it a voter or keep it a standby), or
//! outside it as a spare from its first moment.
//!
//! The answer is the plan's own: the newcomer is put in the configuration as a settled,
//! caught-up standby, and the plan is followed step by step on that picture until it has
//! nothing left to do. If the newcomer ends as a spare there, it starts as one. Every nonvoter
//! still catching up, and every member admitted in the last few seconds, is judged as it will
//! be once it has settled: otherwise, in a burst of joins, the voter table being filled or a
//! standby catching up would pull every later joiner in. So admission places a member where
//! the role rules would put it anyway, and a burst of machines settles as fast as it is
//! admitted. Should a member placed in the configuration die before it gets there, the voter
//! table still fills: short of voters with no nonvoter to promote, the plan makes a spare a
//! standby first (`shape.rs`).

use std::collections::BTreeSet;

use super::{Change, ClusterView, plan};
use crate::state::NodeId;

/// Where an admitted member starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Added to the raft configuration as a nonvoter.
    Configuration,
    /// Left outside the configuration: a spare that replicates nothing.
    Spare,
}

/// Where `newcomer` starts, given the cluster as the leader sees it with the newcomer's record
/// already written (so it shows among `view.spares`) and the members admitted too recently to
/// have answered yet (`recent`: in a burst, the others still starting). Pure.
pub fn placement(view: &ClusterView, newcomer: NodeId, recent: &BTreeSet<NodeId>) -> Placement {
    if !view.spares.iter().any(|s| s.id == newcomer) {
        // Already in the configuration (a member asking again), or not recorded.
        return Placement::Configuration;
    }
    // A formation votes its cohort in together; without a quorum nothing changes roles.
    if view.formation.is_some() || !view.has_quorum {
        return Placement::Configuration;
    }
    // The newcomer, and every member admitted a moment ago (some are still being placed as
    // this one is, and none has had the time to answer), count as answering, settled
    // standbys: so all of a burst is placed by one order, and the newcomer, the one that has
    // just asked, does not look like the only member able to take a role.
    let arriving = |id: &NodeId| *id == newcomer || recent.contains(id);
    let mut trial = view.clone();
    let (joining, spares): (Vec<_>, Vec<_>) = std::mem::take(&mut trial.spares)
        .into_iter()
        .partition(|s| arriving(&s.id));
    trial.spares = spares;
    trial.members.extend(joining);
    for member in trial.members.iter_mut() {
        if arriving(&member.id) {
            member.reachable = true;
            member.unreachable_for = None;
            member.back_for = None;
        }
        // A nonvoter as the reconciler will see it once it has caught up (whether it answers
        // is what it is: an unreachable standby stays the one made a spare first).
        if !member.voter && member.removal.is_none() {
            member.caught_up = true;
            member.in_config_for = member.in_config_for.max(view.promote_after);
        }
    }
    // Each step moves one member or finishes one change: more steps than members twice over
    // means the rules went round in a circle, and the newcomer replicates to be safe.
    for _ in 0..2 * (view.member_count() + 2) {
        let Some(change) = plan(&trial).change else {
            return match trial.spares.iter().any(|s| s.id == newcomer) {
                true => Placement::Spare,
                false => Placement::Configuration,
            };
        };
        carry_out(&mut trial, &change);
    }
    Placement::Configuration
}

/// `change` done on the picture (what the reconciler does to the cluster, in the view's terms).
fn carry_out(trial: &mut ClusterView, change: &Change) {
    let promote_after = trial.promote_after;
    match change {
        Change::FinishJoint(voters) => {
            trial.joint_target = None;
            for m in &mut trial.members {
                m.voter = voters.contains(&m.id);
            }
        }
        Change::Promote(ids, _) => {
            for m in trial.members.iter_mut().filter(|m| ids.contains(&m.id)) {
                m.voter = true;
            }
        }
        Change::Demote(id, _) => {
            if let Some(m) = trial.members.iter_mut().find(|m| m.id == *id) {
                m.voter = false;
            }
        }
        Change::Remove(id) | Change::CleanUp(id) => {
            trial.members.retain(|m| m.id != *id);
            trial.spares.retain(|m| m.id != *id);
        }
        Change::MakeSpare(id) => {
            if let Some(at) = trial.members.iter().position(|m| m.id == *id) {
                let spare = trial.members.remove(at);
                trial.spares.push(spare);
            }
        }
        Change::MakeStandby(id) => {
            if let Some(at) = trial.spares.iter().position(|m| m.id == *id) {
                let mut standby = trial.spares.remove(at);
                standby.voter = false;
                standby.in_config_for = promote_after;
                standby.caught_up = true;
                trial.members.push(standby);
            }
        }
        Change::FormationDone => trial.formation = None,
    }
}
