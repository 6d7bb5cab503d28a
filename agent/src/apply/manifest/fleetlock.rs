//! The `[fleetlock]` table of `cluster.toml`: the rule for unknown groups, and each group
//! with its slots, maintenance windows and health gates.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{DesiredFleetLock, MAX_SLOTS, ManifestError, count, refuse};
use crate::state::fleetlock::{MAX_GATES, MAX_GROUPS, valid_gate_name, valid_group};
use crate::state::fleetlock_window::{MAX_WINDOWS, Window};

/// One group as the file wants it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredGroup {
    pub slots: u32,
    /// Its maintenance windows as the server writes them (`Sat 02:00-06:00 UTC`), so that
    /// they compare with what status shows; none: always open.
    pub windows: Vec<String>,
    /// Its health gates: names of gates every member defines (`--fleetlock-gate`); none: no
    /// gate.
    pub gates: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFleetLock {
    unknown_groups: Option<Spanned<String>>,
    #[serde(default)]
    group: Vec<RawGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: Spanned<String>,
    slots: Spanned<i64>,
    #[serde(default)]
    windows: Vec<Spanned<String>>,
    #[serde(default)]
    gates: Vec<Spanned<String>>,
}

/// The `[fleetlock]` table: the rule for unknown groups, and the groups with their slots.
pub(super) fn fleetlock(text: &str, f: &RawFleetLock) -> Result<DesiredFleetLock, ManifestError> {
    let unknown_groups = match &f.unknown_groups {
        Some(mode) if ["create", "reject"].contains(&mode.get_ref().as_str()) => {
            Some(mode.get_ref().clone())
        }
        Some(mode) => {
            return Err(refuse(
                text,
                mode.span(),
                &format!(
                    "unknown_groups = {:?}: write \"create\" (a group nobody \
                     configured is created on first use) or \"reject\"",
                    mode.get_ref()
                ),
            ));
        }
        None => None,
    };
    Ok(DesiredFleetLock {
        unknown_groups,
        groups: groups(text, &f.group)?,
    })
}

/// The `[[fleetlock.group]]` tables: valid, unique names, slots in range, valid windows, not
/// too many.
fn groups(text: &str, raw: &[RawGroup]) -> Result<BTreeMap<String, DesiredGroup>, ManifestError> {
    let mut groups = BTreeMap::new();
    for g in raw {
        let name = g.name.get_ref();
        if !valid_group(name) {
            return Err(refuse(
                text,
                g.name.span(),
                &format!(
                    "group name {name:?}: use 1 to 253 characters of [a-zA-Z0-9.-] \
                     (Zincati's group names)"
                ),
            ));
        }
        let slots =
            count(&g.slots, 1, MAX_SLOTS, "slots").map_err(|m| refuse(text, g.slots.span(), &m))?;
        let group = DesiredGroup {
            slots,
            windows: windows(text, &g.windows)?,
            gates: gates(text, &g.gates)?,
        };
        if groups.insert(name.clone(), group).is_some() {
            return Err(refuse(
                text,
                g.name.span(),
                &format!("group {name:?} is listed twice"),
            ));
        }
    }
    if groups.len() > MAX_GROUPS {
        return Err(ManifestError {
            line: 1,
            message: format!("at most {MAX_GROUPS} FleetLock groups"),
        });
    }
    Ok(groups)
}

/// A group's `gates`: each a gate name, at most [`MAX_GATES`], none twice.
fn gates(text: &str, raw: &[Spanned<String>]) -> Result<Vec<String>, ManifestError> {
    if let Some(extra) = raw.get(MAX_GATES) {
        let message = format!("at most {MAX_GATES} gates per group");
        return Err(refuse(text, extra.span(), &message));
    }
    let mut gates: Vec<String> = Vec::new();
    for g in raw {
        let name = g.get_ref();
        if !valid_gate_name(name) {
            let message = format!(
                "gate {name:?}: a gate's NAME as the members define it (--fleetlock-gate \
                 NAME=…): 1 to 63 characters of [a-zA-Z0-9.-]"
            );
            return Err(refuse(text, g.span(), &message));
        }
        if gates.contains(name) {
            return Err(refuse(
                text,
                g.span(),
                &format!("gate {name:?} is listed twice"),
            ));
        }
        gates.push(name.clone());
    }
    Ok(gates)
}

/// A group's `windows`: each one valid (UTC), at most [`MAX_WINDOWS`], in the server's spelling.
fn windows(text: &str, raw: &[Spanned<String>]) -> Result<Vec<String>, ManifestError> {
    if let Some(extra) = raw.get(MAX_WINDOWS) {
        let message = format!("at most {MAX_WINDOWS} windows per group");
        return Err(refuse(text, extra.span(), &message));
    }
    raw.iter()
        .map(|w| {
            w.get_ref()
                .parse::<Window>()
                .map(|w| w.to_string())
                .map_err(|e| refuse(text, w.span(), &e))
        })
        .collect()
}
