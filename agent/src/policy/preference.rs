//! Which member a change picks when several qualify: voters spread over failure zones first
//! (`--zone`), then members on the newest agent version most members run, then names, so that
//! every leader picks the same one. Also the step that moves a vote into a zone with too few
//! (`spread_step`). Separate from the steps because promotion, demotion and standby choices
//! all order members by the same rules.
//!
//! A member that reported no zone counts as one zone of its own (`""`). A member that has not
//! reported yet (a joiner in its first seconds, an agent older than the report) is left out of
//! the zone arithmetic: counting it as `""` would move a vote there and back once it reports.
//! With no zone said anywhere, every rule here falls back to names, as before zones existed.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use super::view::promotable;
use super::{Change, ClusterView, MemberView, Why, voter_target};

/// The zone a member counts in: `None` until it has reported (its record has no version).
pub fn zone_of(m: &MemberView) -> Option<&str> {
    m.version.as_ref().map(|_| m.zone.as_deref().unwrap_or(""))
}

/// True when some member said a zone: otherwise zones decide nothing.
fn zones_in_use(view: &ClusterView) -> bool {
    view.members
        .iter()
        .chain(&view.spares)
        .any(|m| m.zone.is_some())
}

/// Voters per zone, over every zone a reported member of the configuration or a spare is in
/// (zones with none at 0).
pub fn voters_per_zone(view: &ClusterView) -> BTreeMap<&str, usize> {
    let mut zones: BTreeMap<&str, usize> = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.removal.is_none())
        .filter_map(|m| zone_of(m).map(|z| (z, 0)))
        .collect();
    for m in view.members.iter().filter(|m| m.voter) {
        if let Some(z) = zone_of(m) {
            *zones.entry(z).or_default() += 1;
        }
    }
    zones
}

/// How a version sorts: its numbers (`1.10.0` after `1.9.3`, a leading `v` ignored), then a
/// release after its pre-releases (`1.2.3` after `1.2.3-rc.2`), then the pre-release's text.
/// Text that is no version sorts first.
type VersionKey = (Vec<u64>, bool, String);

fn version_key(v: &str) -> VersionKey {
    let v = v.strip_prefix('v').unwrap_or(v);
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (v.split('+').next().unwrap_or(v), None),
    };
    let numbers = core
        .split('.')
        .map_while(|part| part.parse::<u64>().ok())
        .collect();
    (numbers, pre.is_none(), pre.unwrap_or_default().to_string())
}

/// The newest version a majority of the members run, if any: promotions then prefer members
/// on it (a rolling upgrade's new voters), and demotions take the others first. A version
/// fewer than half the members run does not count (one machine on it may be a canary), and
/// members that have not reported count against every version.
pub fn majority_version(view: &ClusterView) -> Option<VersionKey> {
    let all: Vec<&MemberView> = view
        .members
        .iter()
        .chain(&view.spares)
        .filter(|m| m.removal.is_none())
        .collect();
    let mut runs: BTreeMap<VersionKey, usize> = BTreeMap::new();
    for m in &all {
        if let Some(v) = m.version.as_deref() {
            *runs.entry(version_key(v)).or_default() += 1;
        }
    }
    runs.into_iter()
        .rev()
        .find(|(key, n)| !key.0.is_empty() && n * 2 > all.len())
        .map(|(key, _)| key)
}

/// Whether a member runs the majority's version (`newest`).
fn on_version(newest: Option<&VersionKey>, m: &MemberView) -> bool {
    newest.is_some_and(|n| m.version.as_deref().map(version_key).as_ref() == Some(n))
}

/// Voters in a member's zone, for ordering: a member not yet reported counts as in the fullest
/// zone (it is chosen last while zones are in use).
fn zone_load(zones: &BTreeMap<&str, usize>, in_use: bool, m: &MemberView) -> usize {
    if !in_use {
        return 0;
    }
    zone_of(m).map_or(usize::MAX, |z| zones.get(z).copied().unwrap_or(0))
}

/// Orders members for promotion, best first: the zone with the fewest voters, then the
/// majority's newest version, then the name.
pub fn promotion_order(view: &ClusterView, candidates: &mut [&MemberView]) {
    let zones = voters_per_zone(view);
    let in_use = zones_in_use(view);
    let newest = majority_version(view);
    candidates.sort_by(|a, b| {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        zone_load(&zones, in_use, a)
            .cmp(&zone_load(&zones, in_use, b))
            .then(on_version(newest.as_ref(), b).cmp(&on_version(newest.as_ref(), a)))
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
    let in_use = zones_in_use(view);
    let newest = majority_version(view);
    // Not reported: its zone is unknown, so it is not taken for its zone's sake.
    let load = |m: &MemberView| {
        zone_of(m)
            .filter(|_| in_use)
            .map_or(0, |z| zones.get(z).copied().unwrap_or(0))
    };
    candidates.iter().copied().max_by(|a, b| -> Ordering {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        b.reachable
            .cmp(&a.reachable)
            .then(load(a).cmp(&load(b)))
            .then(on_version(newest.as_ref(), b).cmp(&on_version(newest.as_ref(), a)))
            .then(a.name.cmp(&b.name))
    })
}

/// Moves a vote into a zone with too few: with the voter table met, a promotable, reported
/// nonvoter in a zone that has at least two voters fewer than the fullest zone is promoted
/// (the voter table then demotes one from the fullest zone, see [`demotion_pick`]). Each such
/// pair of changes narrows the gap between the zones, so it ends. Waits while any voter is
/// unreachable: replacing it comes first.
pub(super) fn spread_step(view: &ClusterView) -> Option<Change> {
    let voters = view.voters();
    if !zones_in_use(view) || voters.len() != voter_target(view.member_count()) || voters.len() < 2
    {
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
        .filter(|m| zone_of(m).is_some_and(|z| zones.get(z).copied().unwrap_or(0) + 2 <= fullest))
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
        if let Some(z) = zone_of(s) {
            *per_zone.entry(z).or_default() += 1;
        }
    }
    let shared = |m: &MemberView| zone_of(m).is_some_and(|z| per_zone.get(z).copied() > Some(1));
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
    let covered: BTreeSet<&str> = standbys.iter().filter_map(|s| zone_of(s)).collect();
    let uncovered = |m: &MemberView| zone_of(m).is_some_and(|z| !covered.contains(z));
    spares.iter().copied().min_by(|a, b| {
        let (a, b): (&MemberView, &MemberView) = (a, b);
        uncovered(b).cmp(&uncovered(a)).then(a.name.cmp(&b.name))
    })
}

#[cfg(test)]
mod tests {
    use super::version_key;

    #[test]
    fn versions_sort_as_releases_do() {
        let ordered = [
            "not-a-version",
            "0.9.0",
            "1.2.3-rc.1",
            "1.2.3-rc.2",
            "1.2.3",
            "v1.2.4",
            "1.10.0",
        ];
        for pair in ordered.windows(2) {
            assert!(
                version_key(pair[0]) < version_key(pair[1]),
                "{} before {}",
                pair[0],
                pair[1]
            );
        }
        assert_eq!(version_key("1.2.3+build.7"), version_key("1.2.3"));
    }
}
