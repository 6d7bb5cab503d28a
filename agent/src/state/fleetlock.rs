//! FleetLock's reboot semaphores in the replicated state: per group, a number of slots and the
//! machines holding them. Recursive and owned, as Zincati's protocol asks: a holder locking again
//! keeps its one slot; an unlock by a non-holder changes nothing. Pure functions, decided the
//! same way on every node (the clock, and the facts the quorum gate needs, are in the command).
//! [`FleetLock::decide`] says what a lock or unlock would come to without changing anything, so
//! that the leader answers the ones that change nothing from a read instead of a log entry.
//!
//! Which member a Zincati id belongs to: every agent knows its own machine's FleetLock id
//! (`--fleetlock-id`, by default the id Zincati derives from /etc/machine-id). A request for
//! that id through that agent is marked `own`, and the state learns the id as that member's,
//! one id per member; a later request for it through any member is then known as that
//! member's machine too. The quorum gate (`fleetlock_quorum.rs`) needs this to know which
//! askers and holders vote.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::NodeId;
use super::fleetlock_quorum::{self, QuorumFacts};
use super::fleetlock_trail::{EventKind, Trail};
use super::fleetlock_window::{self, Window};
use crate::api::ErrorKind;
use crate::state::Refusal;

/// The group every Zincati uses unless configured otherwise; it always exists.
pub const DEFAULT_GROUP: &str = "default";
/// Slots of a group nobody configured (`default`, and groups created on first use).
pub const DEFAULT_SLOTS: u32 = 1;
/// Longest group or id, as other FleetLock servers cap them.
pub const MAX_NAME: usize = 253;
/// Most configured groups (`muster fleetlock group set`): a bound on replicated state.
pub const MAX_GROUPS: usize = 1_000;
/// Most groups created on first use, counted apart from configured ones: anyone who can reach
/// the FleetLock port can make these up, and they must never crowd out the operator's groups.
pub const MAX_GROUPS_ON_FIRST_USE: usize = 100;

/// What happens to a lock or unlock for a group nobody configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownGroups {
    /// Created on first use with [`DEFAULT_SLOTS`] (as poseidon's fleetlock does).
    #[default]
    Create,
    /// Refused with `unknown_group` (as airlock does). A Zincati in such a group never gets past
    /// its start-up unlock, so it never looks for updates.
    Reject,
}

/// One holder of a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// When it first took the slot (the leader's clock).
    pub since_ms: u64,
    /// The member whose FleetLock endpoint the lock came through: released with that member.
    pub via: NodeId,
    /// The member whose machine holds the slot, when known (see the module comment): the
    /// quorum gate counts it as down while it holds. Absent in state written before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<NodeId>,
}

/// One group's semaphore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub slots: u32,
    #[serde(default)]
    pub holders: BTreeMap<String, Holder>,
    /// Created by a lock (not by the operator): removed again when its last holder unlocks,
    /// and counted under [`MAX_GROUPS_ON_FIRST_USE`]. Absent (false) in state written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_first_use: bool,
    /// When its machines may take a slot; none: always. Absent in state written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<Window>,
    /// The health gates (names of gates the members define) the leader checks before it
    /// grants one of its slots; none: no gate. Absent in state written before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<String>,
}

/// All of FleetLock's replicated state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetLock {
    #[serde(default)]
    pub groups: BTreeMap<String, Group>,
    #[serde(default)]
    pub unknown_groups: UnknownGroups,
    /// Every slot taken and given back, bounded (see `fleetlock_trail.rs`). Absent (empty) in
    /// state written before the trail existed.
    #[serde(default, skip_serializing_if = "Trail::is_empty")]
    pub trail: Trail,
    /// The FleetLock id each member's own machine uses, learned from requests the member marked
    /// as its own (one per member, so bounded by the members). Absent in state written before.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "super::id_keyed_map"
    )]
    pub machines: BTreeMap<NodeId, String>,
}

/// What a lock or unlock carries beside the clock: whether the request came from the machine
/// of the member it came through, and (locks only) the quorum gate's facts, which the leader
/// stamps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stamped<'a> {
    /// The member whose own machine asks (the request was marked `own` by the member it came
    /// through).
    pub machine: Option<NodeId>,
    /// `None`: no quorum gate (it is off, or the command predates it).
    pub quorum: Option<&'a QuorumFacts>,
}

/// A FleetLock change, applied by every node the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fleetlock", rename_all = "snake_case")]
pub enum Command {
    Lock {
        group: String,
        id: String,
        via: NodeId,
        now_ms: u64,
        /// `id` is the FleetLock id of `via`'s own machine (see the module comment); false
        /// before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        own: bool,
        /// The quorum gate's facts, stamped by the leader; none: no gate (and before).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quorum: Option<QuorumFacts>,
    },
    Unlock {
        group: String,
        id: String,
        /// The member the unlock came through (its FleetLock endpoint, or the operator API
        /// for a force-release). For the audit trail only; 0 in commands written before.
        #[serde(default)]
        via: NodeId,
        /// The leader's clock when it wrote the command (for the audit trail; 0 before).
        #[serde(default)]
        now_ms: u64,
        /// An operator's force-release (`muster fleetlock release`), not the holder's own
        /// unlock. Only the trail tells them apart: the slot goes either way.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        forced: bool,
        /// `id` is the FleetLock id of `via`'s own machine (see the module comment); false
        /// before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        own: bool,
    },
    SetGroup {
        name: String,
        slots: u32,
        /// Its maintenance windows; none: always open (and in commands written before).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        windows: Vec<Window>,
        /// Its health gates; none: no gate (and in commands written before).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gates: Vec<String>,
    },
    DeleteGroup {
        name: String,
    },
    SetUnknownGroups {
        mode: UnknownGroups,
    },
}

/// What a lock or unlock came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A slot was taken now.
    Locked,
    /// The caller held a slot already (recursive lock).
    AlreadyHeld,
    /// The caller's slot was released.
    Unlocked,
    /// The caller held nothing: nothing changed.
    NotHeld,
    /// A group was set or deleted, or the setting changed.
    Done,
}

/// A group name as the protocol allows it: `^[a-zA-Z0-9.-]+$`, at most [`MAX_NAME`].
pub fn valid_group(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

/// An id as accepted: non-empty, at most [`MAX_NAME`], printable.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_NAME && !id.chars().any(char::is_control)
}

impl FleetLock {
    /// Slots of `group`: its own if it exists, [`DEFAULT_SLOTS`] for `default` or (in create
    /// mode) any other group, which is then one created on first use.
    fn group_or_default(&self, group: &str) -> Option<Group> {
        match self.groups.get(group) {
            Some(g) => Some(g.clone()),
            None if group == DEFAULT_GROUP || self.unknown_groups == UnknownGroups::Create => {
                Some(Group {
                    slots: DEFAULT_SLOTS,
                    holders: BTreeMap::new(),
                    on_first_use: true,
                    windows: Vec::new(),
                    gates: Vec::new(),
                })
            }
            None => None,
        }
    }

    fn unknown(group: &str) -> Refusal {
        Refusal::new(
            ErrorKind::UnknownGroup,
            format!(
                "unknown group {group:?}: create it with `muster fleetlock group set {group} \
                 --slots N`, or let unknown groups be created (`muster fleetlock unknown-groups \
                 create`)"
            ),
        )
    }

    /// What a lock (`lock == true`) or unlock of `id` in `group` comes to against this state,
    /// changing nothing. Only [`Outcome::Locked`] and [`Outcome::Unlocked`] change the
    /// semaphores; every other answer, refusals included, may be given from a linearizable read
    /// unless it teaches a member's Zincati id ([`FleetLock::learns`]). `now_ms` (the leader's
    /// clock) says whether the group's maintenance windows are open; `stamped` who asks and
    /// whether the quorum gate applies.
    pub fn decide(
        &self,
        group: &str,
        id: &str,
        lock: bool,
        now_ms: u64,
        stamped: Stamped<'_>,
    ) -> Result<Outcome, Refusal> {
        let existing = self.groups.get(group);
        if !lock {
            if existing.is_none() && self.group_or_default(group).is_none() {
                return Err(Self::unknown(group));
            }
            let held = existing.is_some_and(|g| g.holders.contains_key(id));
            return Ok(if held {
                Outcome::Unlocked
            } else {
                Outcome::NotHeld
            });
        }
        let g = match existing {
            Some(g) => g,
            None => {
                if self.group_or_default(group).is_none() {
                    return Err(Self::unknown(group));
                }
                let made_up = self
                    .groups
                    .iter()
                    .filter(|(name, g)| g.on_first_use && *name != DEFAULT_GROUP)
                    .count();
                if group != DEFAULT_GROUP && made_up >= MAX_GROUPS_ON_FIRST_USE {
                    return Err(Refusal::new(
                        ErrorKind::TooManyGroups,
                        format!(
                            "{MAX_GROUPS_ON_FIRST_USE} groups created on first use hold slots \
                             already; configure this group (`muster fleetlock group set \
                             {group} --slots N`), or release stale slots (`muster fleetlock \
                             status`)"
                        ),
                    ));
                }
                // A new group with one free slot: the lock takes it, unless the asker votes
                // and others are down.
                self.quorum_gate(id, stamped)?;
                return Ok(Outcome::Locked);
            }
        };
        // A holder keeps its slot whenever it asks: it took it inside a window.
        if let Some(holder) = g.holders.get(id) {
            if let (Some(asker), Some(holding)) = (stamped.machine, holder.machine)
                && asker != holding
            {
                return Err(Self::shared_id(id, holding, asker));
            }
            return Ok(Outcome::AlreadyHeld);
        }
        if let Some(refusal) = Self::outside_window(group, g, now_ms) {
            return Err(refusal);
        }
        if g.holders.len() >= g.slots as usize {
            // Never who holds them: the protocol port is open to anyone who can reach it, and
            // a holder's id is all it takes to unlock in its name. Operators see the holders in
            // `muster fleetlock status`.
            return Err(Refusal::new(
                ErrorKind::SemaphoreFull,
                format!(
                    "all {} slots of group {group} are held; try again later",
                    g.slots
                ),
            ));
        }
        self.quorum_gate(id, stamped)?;
        Ok(Outcome::Locked)
    }

    /// The member whose machine asks as `id`: the one it came through when that member marked
    /// it its own, else the member that id was learned for.
    fn machine_of(&self, id: &str, machine: Option<NodeId>) -> Option<NodeId> {
        machine.or_else(|| {
            self.machines
                .iter()
                .find(|(_, known)| known.as_str() == id)
                .map(|(member, _)| *member)
        })
    }

    /// The members whose machines hold a slot, in any group.
    pub fn holding(&self) -> BTreeSet<NodeId> {
        self.groups
            .values()
            .flat_map(|g| g.holders.iter())
            .filter_map(|(id, h)| h.machine.or_else(|| self.machine_of(id, None)))
            .collect()
    }

    /// Refuses a slot to a voter whose reboot would leave the cluster below its floor (see
    /// `fleetlock_quorum.rs`).
    fn quorum_gate(&self, id: &str, stamped: Stamped<'_>) -> Result<(), Refusal> {
        let (Some(facts), Some(asker)) = (stamped.quorum, self.machine_of(id, stamped.machine))
        else {
            return Ok(());
        };
        let mut holding = self.holding();
        holding.remove(&asker);
        fleetlock_quorum::check(facts, asker, &holding)
            .map_err(|short| Refusal::new(ErrorKind::QuorumGate, short.to_string()))
    }

    /// True when a request for `id` through `via`, marked as `via`'s own machine's (`own`),
    /// would teach the state that id as `via`'s: a change even when the slot stays as it was.
    /// An id another member's machine already has stays that member's (until it is removed):
    /// two members that share an id (a cloned /etc/machine-id) must not take it in turns.
    pub fn learns(&self, via: NodeId, id: &str, own: bool) -> bool {
        own && self.machines.get(&via).map(String::as_str) != Some(id)
            && !self
                .machines
                .iter()
                .any(|(member, known)| *member != via && known == id)
    }

    /// Records `id` as the FleetLock id of `via`'s machine: one id per member (a new one
    /// replaces), one member per id.
    fn learn(&mut self, via: NodeId, id: &str, own: bool) {
        if self.learns(via, id, own) {
            self.machines.insert(via, id.to_string());
        }
    }

    /// The refusal of a lock by member `asker`'s machine for an id whose slot member
    /// `holding`'s machine holds: both say the id is theirs, and granting it as "already held"
    /// would let both reboot at once.
    fn shared_id(id: &str, holding: NodeId, asker: NodeId) -> Refusal {
        Refusal::new(
            ErrorKind::QuorumGate,
            format!(
                "FleetLock id {id} holds a slot as the machine of member {}, and member {} says \
                 it is its own machine's too: two members share one id (a cloned \
                 /etc/machine-id?). Give each machine its own id (--fleetlock-id)",
                super::member_id(holding),
                super::member_id(asker)
            ),
        )
    }

    /// The refusal of a lock in `group` at `now_ms` when none of its windows is open: which
    /// windows it has, and when the next opens (so that whoever reads Zincati's log knows).
    fn outside_window(group: &str, g: &Group, now_ms: u64) -> Option<Refusal> {
        let opens = fleetlock_window::next_open(&g.windows, now_ms)?;
        let windows: Vec<String> = g.windows.iter().map(Window::to_string).collect();
        Some(Refusal::new(
            ErrorKind::OutsideWindow,
            format!(
                "group {group} is outside its maintenance windows ({}); the next opens at {}",
                windows.join(", "),
                fleetlock_window::describe_opening(opens, now_ms)
            ),
        ))
    }

    /// Applies `command`; a refusal leaves everything as it was.
    pub fn apply(&mut self, command: &Command) -> Result<Outcome, Refusal> {
        match command {
            Command::Lock {
                group,
                id,
                via,
                now_ms,
                own,
                quorum,
            } => {
                let stamped = Stamped {
                    machine: own.then_some(*via),
                    quorum: quorum.as_ref(),
                };
                let outcome = self.lock(group, id, *via, *now_ms, stamped)?;
                self.learn(*via, id, *own);
                Ok(outcome)
            }
            Command::Unlock {
                group,
                id,
                via,
                now_ms,
                forced,
                own,
            } => {
                let outcome = self.unlock(group, id, *via, *now_ms, *forced)?;
                self.learn(*via, id, *own);
                Ok(outcome)
            }
            Command::SetGroup {
                name,
                slots,
                windows,
                gates,
            } => self.set_group(name, *slots, windows, gates),
            Command::DeleteGroup { name } => self.delete_group(name),
            Command::SetUnknownGroups { mode } => {
                self.unknown_groups = *mode;
                Ok(Outcome::Done)
            }
        }
    }

    /// A lock as [`FleetLock::decide`] judges it; a slot taken is recorded in the trail.
    fn lock(
        &mut self,
        group: &str,
        id: &str,
        via: NodeId,
        now_ms: u64,
        stamped: Stamped<'_>,
    ) -> Result<Outcome, Refusal> {
        let outcome = self.decide(group, id, true, now_ms, stamped)?;
        if outcome == Outcome::Locked
            && let Some(mut g) = self.group_or_default(group)
        {
            let machine = self.machine_of(id, stamped.machine);
            g.holders.insert(
                id.to_string(),
                Holder {
                    since_ms: now_ms,
                    via,
                    machine,
                },
            );
            self.groups.insert(group.to_string(), g);
            self.trail.record(EventKind::Lock, group, id, via, now_ms);
        }
        Ok(outcome)
    }

    /// An unlock (or an operator's force-release) as [`FleetLock::decide`] judges it.
    fn unlock(
        &mut self,
        group: &str,
        id: &str,
        via: NodeId,
        now_ms: u64,
        forced: bool,
    ) -> Result<Outcome, Refusal> {
        let outcome = self.decide(group, id, false, now_ms, Stamped::default())?;
        if outcome == Outcome::Unlocked {
            self.release(group, id);
            let kind = if forced {
                EventKind::ForceRelease
            } else {
                EventKind::Unlock
            };
            self.trail.record(kind, group, id, via, now_ms);
        }
        Ok(outcome)
    }

    /// Releases `id`'s slot of `group`; a group created on first use goes with its last
    /// holder, so that made-up groups do not pile up in the replicated state.
    fn release(&mut self, group: &str, id: &str) {
        if let Some(g) = self.groups.get_mut(group) {
            g.holders.remove(id);
            if g.on_first_use && g.holders.is_empty() {
                self.groups.remove(group);
            }
        }
    }

    /// Releases every slot held through `member` (it was removed from the cluster, by a
    /// command the leader stamped with `now_ms`); returns what was released as `(group, id)`.
    pub fn release_member(&mut self, member: NodeId, now_ms: u64) -> Vec<(String, String)> {
        let released: Vec<(String, String)> = self
            .groups
            .iter()
            .flat_map(|(name, g)| {
                g.holders
                    .iter()
                    .filter(|(_, h)| h.via == member)
                    .map(|(id, _)| (name.clone(), id.clone()))
            })
            .collect();
        for (group, id) in &released {
            self.release(group, id);
            self.trail
                .record(EventKind::AutoRelease, group, id, member, now_ms);
        }
        self.machines.remove(&member);
        released
    }
}

mod groups;
pub use groups::{MAX_GATES, valid_gate_name};
#[cfg(test)]
mod tests;
