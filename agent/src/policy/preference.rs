//! Which member a change picks when several qualify: voters spread over failure zones first
//! (`--zone`), then members on the newest agent version once most members run it, then names,
//! so that every leader picks the same one. Also the step that moves a vote into a zone with
//! too few (`spread_step`). Separate from the steps because promotion, demotion and standby
//! choices all order members by the same rules.
//!
//! A member without a zone counts as one zone of its own (`""`): with no zones said anywhere,
//! every rule here falls back to names, as before zones existed.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::view::promotable;
use super::{Change, ClusterView, MemberView, Why, voter_target};

/// The zone a member counts in.
pub fn zone_of(m: &MemberView) -> &str {
    m.zone.as_deref().unwrap_or("")
}

/// Voters per zone, over every zone a member of the configuration or a spare is in (zones
/// with none at 0).
pub fn voters_per_zone(view: &ClusterView) -> BTreeMap<&str, usize> {
    let mut zones: BTreeMap<&str, usize> = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.removal.is_none())
        .map(|m| (zone_of(m), 0))
        .collect();
    for m in view.members.iter().filter(|m| m.voter) {
        *zones.entry(zone_of(m)).or_default() += 1;
    }
    zones
}

/// A version as numbers (`1.10.0` after `1.9.3`); text that is no version sorts first.
fn version_key(v: Option<&str>) -> Vec<u64> {
    v.map(|v| {
        v.split(['.', '-', '+'])
            .map_while(|part| part.parse::<u64>().ok())
            .collect()
    })
    .unwrap_or_default()
}

/// The newest version most members run, if any: promotions then prefer members on it (a
/// rolling upgrade's new voters), and demotions take the others first. Until a majority of
/// the members run it, versions do not count (a new version on one machine may be a canary).
pub fn majority_version(view: &ClusterView) -> Option<Vec<u64>> {
    let all: Vec<&MemberView> = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.removal.is_none())
        .collect();
    let newest = all
        .iter()
        .map(|m| version_key(m.version.as_deref()))
        .max()?;
    if newest.is_empty() {
        return None;
    }
    let on_newest = all
        .iter()
        .filter(|m| version_key(m.version.as_deref()) == newest)
        .count();
    (on_newest * 2 > all.len()).then_some(newest)
}

/// Orders members for promotion, best first: the zone with the fewest voters, then the
/// majority's newest version, then the name.
pub fn promotion_order(view: &ClusterView, candidates: &mut [&MemberView]) {
    let zones = voters_per_zone(view);
    let newest = majority_version(view);
    let on_newest = |m: &MemberView| newest.as_ref() == Some(&version_key(m.version.as_deref()));
    let voters = |m: &MemberView| zones.get(zone_of(m)).copied().unwrap_or(0);
    candidates.sort_by(|a, b| {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        voters(a)
            .cmp(&voters(b))
            .then(on_newest(b).cmp(&on_newest(a)))
            .then(a.name.cmp(&b.name))
    });
}

/// The voter to demote when there are too many, among `candidates` (the leader never among
/// them): an unreachable one first, then one from the zone with the most voters, then one
/// not on the majority's newest version, then the last by name.
pub fn demotion_pick<'a>(
    view: &ClusterView,
    candidates: &[&'a MemberView],
) -> Option<&'a MemberView> {
    let zones = voters_per_zone(view);
    let newest = majority_version(view);
    let on_newest = |m: &MemberView| newest.as_ref() == Some(&version_key(m.version.as_deref()));
    let voters = |m: &MemberView| zones.get(zone_of(m)).copied().unwrap_or(0);
    candidates.iter().copied().max_by(|a, b| -> Ordering {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        b.reachable
            .cmp(&a.reachable)
            .then(voters(a).cmp(&voters(b)))
            .then(on_newest(b).cmp(&on_newest(a)))
            .then(a.name.cmp(&b.name))
    })
}

/// Moves a vote into a zone with too few: with the voter table met, a promotable nonvoter in
/// a zone that has at least two voters fewer than the fullest zone is promoted (the voter
/// table then demotes one from the fullest zone, see [`demotion_pick`]). Each such pair of
/// changes narrows the gap between the zones, so it ends. Waits while any voter is
/// unreachable: replacing it comes first.
pub(super) fn spread_step(view: &ClusterView) -> Option<Change> {
    let voters = view.voters();
    if voters.len() != voter_target(view.member_count()) || voters.len() < 2 {
        return None;
    }
    if view.members.iter().any(|m| m.voter && !m.reachable) {
        return None;
    }
    let zones = voters_per_zone(view);
    let fullest = zones.values().copied().max()?;
    let mut candidates: Vec<&MemberView> = view
        .members
        .iter()
        .filter(|m| promotable(view, m))
        .filter(|m| zones.get(zone_of(m)).copied().unwrap_or(0) + 2 <= fullest)
        .collect();
    promotion_order(view, &mut candidates);
    candidates
        .first()
        .map(|m| Change::Promote(BTreeSet::from([m.id]), Why::ZoneSpread))
}

/// The standby to make a spare when there are too many, among `standbys`: reachable ones
/// stay before unreachable ones and caught-up ones before lagging ones; then one whose zone
/// has another standby goes first (so the standbys cover as many zones as they can), then the
/// last by name.
pub fn surplus_standby<'a>(standbys: &[&'a MemberView]) -> Option<&'a MemberView> {
    let mut per_zone: BTreeMap<&str, usize> = BTreeMap::new();
    for s in standbys {
        *per_zone.entry(zone_of(s)).or_default() += 1;
    }
    let shared = |m: &MemberView| per_zone.get(zone_of(m)).copied().unwrap_or(0) > 1;
    standbys.iter().copied().max_by(|a, b| {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        b.reachable
            .cmp(&a.reachable)
            .then(b.caught_up.cmp(&a.caught_up))
            .then(shared(a).cmp(&shared(b)))
            .then(a.name.cmp(&b.name))
    })
}

/// The spare to make a standby when one is missing, among reachable `spares`: one from a
/// zone no standby covers first, then by name.
pub fn spare_to_standby<'a>(
    standbys: &[&MemberView],
    spares: &[&'a MemberView],
) -> Option<&'a MemberView> {
    let covered: BTreeSet<&str> = standbys.iter().map(|s| zone_of(s)).collect();
    let covered = &covered;
    spares.iter().copied().min_by(|a, b| {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        covered
            .contains(zone_of(a))
            .cmp(&covered.contains(zone_of(b)))
            .then(a.name.cmp(&b.name))
    })
}
