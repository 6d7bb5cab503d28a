//! The steps of the plan that leave the voters as they are: the cluster settings, FleetLock's
//! groups, and join tokens for the machines the file adds. Separate from the removals because
//! none of them moves the failure tolerance; each only compares the file with what is in force.

use super::{Action, Decided, Observed, Quorum, Step, steady};
use crate::api::probe::SettingsUpdate;
use crate::apply::manifest::Manifest;

/// The `[cluster]` settings step: none when they match, blocked (why) when it cannot be written.
pub(super) fn settings(desired: &Manifest, observed: &Observed, q: Quorum) -> Option<Decided> {
    let from = observed.settings?;
    let s = desired.settings;
    let to = SettingsUpdate {
        replace_after_ms: s.replace_after_ms.unwrap_or(from.replace_after_ms),
        cleanup_dead_after_ms: s
            .cleanup_dead_after_ms
            .unwrap_or(from.cleanup_dead_after_ms),
        min_voters: s.min_voters.unwrap_or(from.min_voters),
        standbys: s.standbys.unwrap_or(from.standbys),
    };
    // Values are compared, not where they come from: the file `config export` wrote
    // from an untouched cluster (the leader's flags) is no change.
    if to == from {
        return None;
    }
    let older: Vec<&str> = observed
        .members
        .iter()
        .filter(|m| m.older())
        .map(|m| m.name.as_str())
        .collect();
    if !older.is_empty() {
        return Some(Decided::Blocked(format!(
            "the [cluster] settings are not written while older agents run ({}): they \
             could not read the entry; upgrade them first",
            older.join(", ")
        )));
    }
    Some(Decided::Step(steady(
        Action::SetSettings { from, to },
        "[cluster] differs from the settings in force".into(),
        q,
    )))
}

/// The `[fleetlock]` steps: the rule for unknown groups, then groups set, then groups deleted.
pub(super) fn fleetlock(desired: &Manifest, observed: &Observed, q: Quorum) -> Vec<Step> {
    let (Some(want), Some(have)) = (&desired.fleetlock, &observed.fleetlock) else {
        return Vec::new();
    };
    let mut steps = Vec::new();
    if let Some(mode) = &want.unknown_groups
        && *mode != have.unknown_groups
    {
        steps.push(steady(
            Action::SetUnknownGroups {
                from: have.unknown_groups.clone(),
                to: mode.clone(),
            },
            "[fleetlock] unknown_groups differs".into(),
            q,
        ));
    }
    for (group, g) in &want.groups {
        let current = have.groups.iter().find(|h| h.name == *group);
        let configured = current.filter(|h| h.configured);
        let from = configured.map(|h| h.slots);
        let from_windows = configured.map(|h| h.windows.clone()).unwrap_or_default();
        let from_gates: Vec<String> = configured
            .map(|h| h.gates.iter().map(|gate| gate.name.clone()).collect())
            .unwrap_or_default();
        // Windows and gates count as slots do: a group set by hand with other windows or
        // gates is set again.
        if from == Some(g.slots) && from_windows == g.windows && from_gates == g.gates {
            continue;
        }
        let why = match from {
            None => format!("group {group} is not configured"),
            Some(n) if n != g.slots => {
                format!("the file gives group {group} {} slot(s), not {n}", g.slots)
            }
            Some(_) if from_windows != g.windows => {
                format!("the file gives group {group} other maintenance windows")
            }
            Some(_) => format!("the file gives group {group} other health gates"),
        };
        let action = Action::SetFleetlockGroup {
            group: group.clone(),
            from,
            slots: g.slots,
            from_windows,
            windows: g.windows.clone(),
            from_gates,
            gates: g.gates.clone(),
        };
        steps.push(steady(action, why, q));
    }
    for g in have
        .groups
        .iter()
        .filter(|g| g.configured && !want.groups.contains_key(&g.name))
    {
        steps.push(steady(
            Action::DeleteFleetlockGroup {
                group: g.name.clone(),
            },
            format!("group {} is not in the file", g.name),
            q,
        ));
    }
    steps
}

/// A join token for each machine the file lists that is not a member.
pub(super) fn joins(desired: &Manifest, observed: &Observed, q: Quorum) -> Vec<Step> {
    desired
        .members
        .iter()
        .filter(|d| observed.member(&d.name).is_none())
        .map(|d| {
            steady(
                Action::IssueToken {
                    name: d.name.clone(),
                    address: d.address.clone(),
                    data_dir: d.data_dir.clone(),
                },
                "in the file, not a member: start the machine with the printed command".into(),
                q,
            )
        })
        .collect()
}
