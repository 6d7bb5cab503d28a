//! Configured groups: set (slots, maintenance windows, health gates) and deleted by the operator.

use std::collections::BTreeMap;

use super::{FleetLock, Group, MAX_GROUPS, Outcome, valid_group};
use crate::api::ErrorKind;
use crate::state::Refusal;
use crate::state::fleetlock_window::{MAX_WINDOWS, Window};

/// Most health gates one group uses: each runs before every grant of its slots.
pub const MAX_GATES: usize = 8;
/// Longest gate name: it is quoted in refusals, which Zincati logs.
const MAX_GATE_NAME: usize = 63;

/// A gate name as a member defines it (`--fleetlock-gate NAME=…`): a short group-like name.
pub fn valid_gate_name(name: &str) -> bool {
    name.len() <= MAX_GATE_NAME && valid_group(name)
}

impl FleetLock {
    /// Configures a group's slots and maintenance windows (`muster fleetlock group set`).
    /// Both take effect at once: the next lock is decided against them.
    pub(super) fn set_group(
        &mut self,
        name: &str,
        slots: u32,
        windows: &[Window],
        gates: &[String],
    ) -> Result<Outcome, Refusal> {
        if !valid_group(name) || slots == 0 || slots > 1_000 {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                "a group name is 1 to 253 characters of [a-zA-Z0-9.-] and has 1 to 1000 slots",
            ));
        }
        if windows.len() > MAX_WINDOWS {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!("at most {MAX_WINDOWS} maintenance windows per group"),
            ));
        }
        if gates.len() > MAX_GATES || !gates.iter().all(|g| valid_gate_name(g)) {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!(
                    "at most {MAX_GATES} health gates per group, each named with 1 to \
                     {MAX_GATE_NAME} characters of [a-zA-Z0-9.-]"
                ),
            ));
        }
        // A gate named twice runs once: keep its first place.
        let mut gates = gates.to_vec();
        let mut seen = std::collections::BTreeSet::new();
        gates.retain(|g| seen.insert(g.clone()));
        let configured = self.groups.values().filter(|g| !g.on_first_use).count();
        let is_configured = self.groups.get(name).is_some_and(|g| !g.on_first_use);
        if !is_configured && configured >= MAX_GROUPS {
            return Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!("at most {MAX_GROUPS} configured groups"),
            ));
        }
        // Fewer slots than holders: nobody loses a slot; new locks wait until enough
        // holders have unlocked. A group created on first use becomes a configured one.
        self.groups
            .entry(name.to_string())
            .and_modify(|g| {
                g.slots = slots;
                g.on_first_use = false;
                g.windows = windows.to_vec();
                g.gates = gates.clone();
            })
            .or_insert(Group {
                slots,
                holders: BTreeMap::new(),
                on_first_use: false,
                windows: windows.to_vec(),
                gates,
            });
        Ok(Outcome::Done)
    }

    /// Deletes a group nobody holds a slot of.
    pub(super) fn delete_group(&mut self, name: &str) -> Result<Outcome, Refusal> {
        match self.groups.get(name) {
            None => Err(Refusal::new(
                ErrorKind::NotFound,
                format!("no group {name:?} is configured"),
            )),
            Some(g) if !g.holders.is_empty() => Err(Refusal::new(
                ErrorKind::InvalidArgument,
                format!(
                    "group {name} still has holders ({}); release them first (muster \
                     fleetlock release {name} ID)",
                    g.holders.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )),
            Some(_) => {
                self.groups.remove(name);
                Ok(Outcome::Done)
            }
        }
    }
}
