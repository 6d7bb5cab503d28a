//! The cluster's shape in the reconciler's plan: the formation cohort voted in together, the
//! voter table followed, the standbys kept at their number. Separate from the repairs
//! (`repairs.rs`): these steps only move healthy members between roles.

use std::collections::BTreeSet;

use super::preference::{demotion_pick, promotion_order, spare_to_standby, surplus_standby};
use super::view::promotable;
use super::{Change, ClusterView, FormationView, MemberView, Why, voter_target};
use crate::state::NodeId;

pub(super) enum FormationStep {
    /// Still forming: the voter table waits.
    Forming(Option<Change>),
    Done,
}

pub(super) fn formation_step(view: &ClusterView, formation: &FormationView) -> FormationStep {
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
    // The voter table applies to the cohort too (4 registrants → 3 voters): promote the first
    // nonvoters in promotion order (zones first, then names), all in one membership change.
    let voters = view.voters();
    let wanted = voter_target(cohort.len()).saturating_sub(voters.len());
    let nonvoters: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| cohort.contains(&m.id) && !m.voter)
        .collect();
    let promote = pick_spread(view, nonvoters, wanted);
    if promote.is_empty() {
        return FormationStep::Done;
    }
    if promote.iter().all(|m| m.caught_up) {
        let ids = promote.iter().map(|m| m.id).collect();
        return FormationStep::Forming(Some(Change::Promote(ids, Why::Formation)));
    }
    FormationStep::Forming(None)
}

pub(super) fn voter_table_step(view: &ClusterView) -> Option<Change> {
    let voters = view.voters();
    let target = voter_target(view.member_count());
    if voters.len() < target {
        let mut eligible: Vec<&MemberView> = view
            .members
            .iter()
            .filter(|m| promotable(view, m))
            .collect();
        promotion_order(view, &mut eligible);
        return eligible
            .first()
            .map(|m| Change::Promote(BTreeSet::from([m.id]), Why::VoterTable));
    }
    if voters.len() > target {
        let demotable: Vec<&MemberView> = view
            .members
            .iter()
            .filter(|m| m.voter && m.id != view.leader)
            .collect();
        return demotion_pick(view, &demotable).map(|m| Change::Demote(m.id, Why::VoterTable));
    }
    None
}

/// `wanted` of `candidates`, one at a time in promotion order, each counted in its zone
/// before the next is chosen, so that a formation's voters spread over the zones too.
fn pick_spread<'a>(
    view: &ClusterView,
    mut candidates: Vec<&'a MemberView>,
    wanted: usize,
) -> Vec<&'a MemberView> {
    let mut picked: Vec<&'a MemberView> = Vec::new();
    let mut trial = view.clone();
    while picked.len() < wanted && !candidates.is_empty() {
        promotion_order(&trial, &mut candidates);
        let next = candidates.remove(0);
        if let Some(m) = trial.members.iter_mut().find(|m| m.id == next.id) {
            m.voter = true;
        }
        picked.push(next);
    }
    picked
}

/// Keeps the standbys at their target. Who stays a standby is a fixed order, so that any
/// leader keeps the same ones: reachable before unreachable, caught up before lagging, then
/// one per zone, then by name (`preference.rs`). Waits while the voter table is short and a
/// reachable nonvoter in the configuration may be about to become a voter; short with none
/// there, a spare is made a standby first, so that the voter table can promote it. Also waits while a
/// surplus nonvoter is newer than `--promote-after`, and while it is still catching up.
pub(super) fn standby_step(view: &ClusterView) -> Option<Change> {
    if view.voters().len() < voter_target(view.member_count()) {
        // A standby that answers will be promoted; one that does not cannot be.
        if view.standbys().iter().any(|s| s.reachable) {
            return None;
        }
        let spares: Vec<&MemberView> = view.spares.iter().filter(|s| s.reachable).collect();
        return spare_to_standby(&[], &spares).map(|s| Change::MakeStandby(s.id));
    }
    let target = view.standby_target();
    let standbys = view.standbys();
    if standbys.len() > target {
        let surplus = surplus_standby(&standbys)?;
        // A reachable one first catches up: a spare knows the cluster only from its own log
        // until it checks in, and a new one may not have received the membership yet.
        let settled = surplus.caught_up || !surplus.reachable;
        return (surplus.in_config_for >= view.promote_after && settled)
            .then_some(Change::MakeSpare(surplus.id));
    }
    if standbys.len() < target {
        let spares: Vec<&MemberView> = view.spares.iter().filter(|s| s.reachable).collect();
        return spare_to_standby(&standbys, &spares).map(|s| Change::MakeStandby(s.id));
    }
    None
}
