//! FleetLock's reboot semaphores in the replicated state: per group, a number of slots and the
//! machines holding them. Recursive and owned, as Zincati's protocol asks: a holder locking again
//! keeps its one slot; an unlock by a non-holder changes nothing. Pure functions, decided the
//! same way on every node (the clock is in the command). [`FleetLock::decide`] says what a lock
//! or unlock would come to without changing anything, so that the leader answers the ones that
//! change nothing from a read instead of a log entry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::NodeId;
use super::fleetlock_trail::{EventKind, Trail};
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
    },
    SetGroup {
        name: String,
        slots: u32,
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
    /// changing nothing. Only [`Outcome::Locked`] and [`Outcome::Unlocked`] change the state;
    /// every other answer, refusals included, may be given from a linearizable read.
    pub fn decide(&self, group: &str, id: &str, lock: bool) -> Result<Outcome, Refusal> {
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
                // A new group with one free slot: the lock takes it.
                return Ok(Outcome::Locked);
            }
        };
        if g.holders.contains_key(id) {
            return Ok(Outcome::AlreadyHeld);
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
        Ok(Outcome::Locked)
    }

    /// Applies `command`; a refusal leaves everything as it was.
    pub fn apply(&mut self, command: &Command) -> Result<Outcome, Refusal> {
        match command {
            Command::Lock {
                group,
                id,
                via,
                now_ms,
            } => {
                let outcome = self.decide(group, id, true)?;
                if outcome == Outcome::Locked
                    && let Some(mut g) = self.group_or_default(group)
                {
                    g.holders.insert(
                        id.clone(),
                        Holder {
                            since_ms: *now_ms,
                            via: *via,
                        },
                    );
                    self.groups.insert(group.clone(), g);
                    self.trail.record(EventKind::Lock, group, id, *via, *now_ms);
                }
                Ok(outcome)
            }
            Command::Unlock {
                group,
                id,
                via,
                now_ms,
                forced,
            } => {
                let outcome = self.decide(group, id, false)?;
                if outcome == Outcome::Unlocked {
                    self.release(group, id);
                    let kind = if *forced {
                        EventKind::ForceRelease
                    } else {
                        EventKind::Unlock
                    };
                    self.trail.record(kind, group, id, *via, *now_ms);
                }
                Ok(outcome)
            }
            Command::SetGroup { name, slots } => {
                if !valid_group(name) || *slots == 0 || *slots > 1_000 {
                    return Err(Refusal::new(
                        ErrorKind::InvalidArgument,
                        "a group name is 1 to 253 characters of [a-zA-Z0-9.-] and has 1 to 1000 slots",
                    ));
                }
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
                    .entry(name.clone())
                    .and_modify(|g| {
                        g.slots = *slots;
                        g.on_first_use = false;
                    })
                    .or_insert(Group {
                        slots: *slots,
                        holders: BTreeMap::new(),
                        on_first_use: false,
                    });
                Ok(Outcome::Done)
            }
            Command::DeleteGroup { name } => match self.groups.get(name) {
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
            },
            Command::SetUnknownGroups { mode } => {
                self.unknown_groups = *mode;
                Ok(Outcome::Done)
            }
        }
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
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(group: &str, id: &str) -> Command {
        Command::Lock {
            group: group.into(),
            id: id.into(),
            via: 1,
            now_ms: 5,
        }
    }

    fn unlock(group: &str, id: &str) -> Command {
        Command::Unlock {
            group: group.into(),
            id: id.into(),
            via: 1,
            now_ms: 6,
            forced: false,
        }
    }

    fn kind(r: Result<Outcome, Refusal>) -> Result<Outcome, ErrorKind> {
        r.map_err(|e| e.kind)
    }

    #[test]
    fn the_semaphore_is_recursive_owned_and_counted() {
        let mut f = FleetLock::default();
        let cases: [(Command, Result<Outcome, ErrorKind>); 9] = [
            (lock("default", "a"), Ok(Outcome::Locked)),
            (lock("default", "a"), Ok(Outcome::AlreadyHeld)),
            (lock("default", "b"), Err(ErrorKind::SemaphoreFull)),
            (unlock("default", "b"), Ok(Outcome::NotHeld)),
            (unlock("default", "a"), Ok(Outcome::Unlocked)),
            (unlock("default", "a"), Ok(Outcome::NotHeld)),
            (lock("default", "b"), Ok(Outcome::Locked)),
            // Groups are independent, and unknown ones are created with one slot by default.
            (lock("workers", "a"), Ok(Outcome::Locked)),
            (lock("workers", "c"), Err(ErrorKind::SemaphoreFull)),
        ];
        for (i, (command, want)) in cases.into_iter().enumerate() {
            assert_eq!(kind(f.apply(&command)), want, "step {i}: {command:?}");
        }
    }

    #[test]
    fn slots_and_unknown_groups_follow_the_settings() {
        let mut f = FleetLock::default();
        let set = |name: &str, slots| Command::SetGroup {
            name: name.into(),
            slots,
        };
        assert_eq!(kind(f.apply(&set("db", 2))), Ok(Outcome::Done));
        assert_eq!(kind(f.apply(&lock("db", "a"))), Ok(Outcome::Locked));
        assert_eq!(kind(f.apply(&lock("db", "b"))), Ok(Outcome::Locked));
        assert_eq!(
            kind(f.apply(&lock("db", "c"))),
            Err(ErrorKind::SemaphoreFull)
        );
        // Fewer slots than holders: both keep theirs; the next lock waits for two unlocks.
        assert_eq!(kind(f.apply(&set("db", 1))), Ok(Outcome::Done));
        assert_eq!(kind(f.apply(&unlock("db", "a"))), Ok(Outcome::Unlocked));
        assert_eq!(
            kind(f.apply(&lock("db", "c"))),
            Err(ErrorKind::SemaphoreFull)
        );
        assert_eq!(kind(f.apply(&unlock("db", "b"))), Ok(Outcome::Unlocked));
        assert_eq!(kind(f.apply(&lock("db", "c"))), Ok(Outcome::Locked));
        // A group with holders cannot be deleted.
        let del = |name: &str| Command::DeleteGroup { name: name.into() };
        assert_eq!(kind(f.apply(&del("db"))), Err(ErrorKind::InvalidArgument));
        assert_eq!(kind(f.apply(&del("nope"))), Err(ErrorKind::NotFound));
        // Reject mode: unknown groups are refused both ways; `default` always exists.
        let reject = Command::SetUnknownGroups {
            mode: UnknownGroups::Reject,
        };
        assert_eq!(kind(f.apply(&reject)), Ok(Outcome::Done));
        assert_eq!(
            kind(f.apply(&lock("new", "a"))),
            Err(ErrorKind::UnknownGroup)
        );
        assert_eq!(
            kind(f.apply(&unlock("new", "a"))),
            Err(ErrorKind::UnknownGroup)
        );
        assert_eq!(kind(f.apply(&lock("default", "z"))), Ok(Outcome::Locked));
        for bad in [set("bad group", 1), set("ok", 0), set(&"x".repeat(254), 1)] {
            assert_eq!(
                kind(f.apply(&bad)),
                Err(ErrorKind::InvalidArgument),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn decide_changes_nothing_and_agrees_with_apply() {
        // (state built by these locks, then the request, then the outcome) for every answer
        // the leader may give from a read.
        let setup = [lock("default", "a"), lock("typo", "b")];
        let reject = [Command::SetUnknownGroups {
            mode: UnknownGroups::Reject,
        }];
        // (commands applied first, group, id, lock?, outcome)
        type Case<'a> = (
            &'a [Command],
            &'a str,
            &'a str,
            bool,
            Result<Outcome, ErrorKind>,
        );
        let cases: [Case; 8] = [
            (&setup, "default", "a", true, Ok(Outcome::AlreadyHeld)),
            (&setup, "default", "x", true, Err(ErrorKind::SemaphoreFull)),
            (&setup, "default", "x", false, Ok(Outcome::NotHeld)),
            (&setup, "nowhere", "x", false, Ok(Outcome::NotHeld)),
            (&setup, "default", "a", false, Ok(Outcome::Unlocked)),
            (&setup, "fresh", "x", true, Ok(Outcome::Locked)),
            (&reject, "nowhere", "x", false, Err(ErrorKind::UnknownGroup)),
            (&reject, "nowhere", "x", true, Err(ErrorKind::UnknownGroup)),
        ];
        for (i, (before, group, id, is_lock, want)) in cases.into_iter().enumerate() {
            let mut f = FleetLock::default();
            for c in before {
                f.apply(c).expect("setup");
            }
            let snapshot = f.clone();
            assert_eq!(kind(f.decide(group, id, is_lock)), want, "case {i}");
            assert_eq!(f, snapshot, "case {i}: decide changed the state");
            let command = if is_lock {
                lock(group, id)
            } else {
                unlock(group, id)
            };
            assert_eq!(kind(f.apply(&command)), want, "case {i}: apply disagrees");
        }
    }

    #[test]
    fn the_refusal_of_a_full_group_names_no_holder() {
        let mut f = FleetLock::default();
        f.apply(&lock("default", "secret-machine-id"))
            .expect("lock");
        let refusal = f
            .apply(&lock("default", "other"))
            .expect_err("the group is full");
        assert_eq!(refusal.kind, ErrorKind::SemaphoreFull);
        assert!(
            !refusal.message.contains("secret-machine-id"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn groups_made_on_first_use_are_capped_apart_and_go_with_their_last_holder() {
        let mut f = FleetLock::default();
        for i in 0..MAX_GROUPS_ON_FIRST_USE {
            f.apply(&lock(&format!("ghost{i}"), "x")).expect("ghost");
        }
        // Over the cap: a new made-up group is refused with its own kind ...
        assert_eq!(
            kind(f.apply(&lock("one-more", "x"))),
            Err(ErrorKind::TooManyGroups)
        );
        // ... while `default`, configured groups and the existing ghosts still work.
        assert_eq!(kind(f.apply(&lock("default", "y"))), Ok(Outcome::Locked));
        let set = Command::SetGroup {
            name: "db".into(),
            slots: 1,
        };
        assert_eq!(kind(f.apply(&set)), Ok(Outcome::Done));
        assert_eq!(kind(f.apply(&lock("db", "y"))), Ok(Outcome::Locked));
        assert_eq!(
            kind(f.apply(&lock("ghost0", "x"))),
            Ok(Outcome::AlreadyHeld)
        );
        // A made-up group leaves with its last holder, which frees room for another.
        assert_eq!(kind(f.apply(&unlock("ghost0", "x"))), Ok(Outcome::Unlocked));
        assert!(!f.groups.contains_key("ghost0"));
        assert_eq!(kind(f.apply(&lock("one-more", "x"))), Ok(Outcome::Locked));
        // A configured group stays when empty; setting a made-up group's slots configures it.
        assert_eq!(kind(f.apply(&unlock("db", "y"))), Ok(Outcome::Unlocked));
        assert!(f.groups.contains_key("db"));
        let adopt = Command::SetGroup {
            name: "ghost1".into(),
            slots: 2,
        };
        assert_eq!(kind(f.apply(&adopt)), Ok(Outcome::Done));
        assert_eq!(kind(f.apply(&unlock("ghost1", "x"))), Ok(Outcome::Unlocked));
        assert!(f.groups.contains_key("ghost1"));
    }

    #[test]
    fn a_removed_member_s_slots_are_released() {
        let mut f = FleetLock::default();
        let via = |group: &str, id: &str, via| Command::Lock {
            group: group.into(),
            id: id.into(),
            via,
            now_ms: 1,
        };
        f.apply(&via("default", "a", 7)).expect("lock");
        f.apply(&via("workers", "b", 7)).expect("lock");
        f.apply(&via("others", "c", 8)).expect("lock");
        let mut released = f.release_member(7, 9);
        released.sort();
        assert_eq!(
            released,
            [
                ("default".to_string(), "a".to_string()),
                ("workers".to_string(), "b".to_string())
            ]
        );
        assert!(f.groups["others"].holders.contains_key("c"));
    }

    #[test]
    fn the_trail_records_every_change_of_a_slot_and_no_no_op() {
        let mut f = FleetLock::default();
        let at = |group: &str, id: &str, via, now_ms| Command::Lock {
            group: group.into(),
            id: id.into(),
            via,
            now_ms,
        };
        let release = |id: &str, forced, now_ms| Command::Unlock {
            group: "default".into(),
            id: id.into(),
            via: 3,
            now_ms,
            forced,
        };
        f.apply(&at("default", "a", 7, 10)).expect("lock");
        // No-ops and refusals change no slot, and are not events.
        f.apply(&at("default", "a", 7, 11)).expect("recursive lock");
        f.apply(&at("default", "b", 7, 12)).expect_err("full");
        f.apply(&release("b", false, 13)).expect("not held");
        f.apply(&release("a", true, 14)).expect("force-release");
        f.apply(&release("a", true, 15))
            .expect("nothing to release");
        f.apply(&at("workers", "c", 8, 16)).expect("lock");
        f.apply(&release("c", false, 17))
            .expect("another group: not held");
        f.apply(&Command::Unlock {
            group: "workers".into(),
            id: "c".into(),
            via: 8,
            now_ms: 18,
            forced: false,
        })
        .expect("unlock");
        f.apply(&at("default", "d", 8, 19)).expect("lock");
        f.release_member(8, 20);
        let got: Vec<(u64, EventKind, &str, &str, NodeId, u64)> = f
            .trail
            .events()
            .map(|e| {
                (
                    e.seq,
                    e.kind,
                    e.group.as_str(),
                    e.id.as_str(),
                    e.via,
                    e.at_ms,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (1, EventKind::Lock, "default", "a", 7, 10),
                (2, EventKind::ForceRelease, "default", "a", 3, 14),
                (3, EventKind::Lock, "workers", "c", 8, 16),
                (4, EventKind::Unlock, "workers", "c", 8, 18),
                (5, EventKind::Lock, "default", "d", 8, 19),
                (6, EventKind::AutoRelease, "default", "d", 8, 20),
            ]
        );
    }

    #[test]
    fn state_and_commands_written_before_the_trail_still_read() {
        // FleetLock state as snapshots and backups held it before the trail existed.
        let old = r#"{"groups":{"default":{"slots":1,"holders":{"a":{"since_ms":5,"via":1}}}},
            "unknown_groups":"create"}"#;
        let mut f: FleetLock = serde_json::from_str(old).expect("old state reads");
        assert!(f.trail.is_empty());
        assert!(f.groups["default"].holders.contains_key("a"));
        // An unlock in a log written before: no via, no clock; it still releases, and is
        // recorded with zeros.
        let old_unlock = r#"{"fleetlock":"unlock","group":"default","id":"a"}"#;
        let command: Command = serde_json::from_str(old_unlock).expect("old command reads");
        assert_eq!(kind(f.apply(&command)), Ok(Outcome::Unlocked));
        let e = f.trail.events().next().expect("recorded");
        assert_eq!((e.kind, e.via, e.at_ms), (EventKind::Unlock, 0, 0));
        // And a state with a trail writes it, and reads it back.
        let json = serde_json::to_string(&f).expect("encode");
        assert_eq!(serde_json::from_str::<FleetLock>(&json).expect("decode"), f);
        // An empty trail is left out, so a state without events writes as before.
        let empty = serde_json::to_value(FleetLock::default()).expect("encode");
        assert!(empty.get("trail").is_none(), "{empty}");
    }

    #[test]
    fn names_follow_the_protocol() {
        for (group, ok) in [
            ("default", true),
            ("a.b-C9", true),
            ("", false),
            ("a b", false),
            ("a/b", false),
        ] {
            assert_eq!(valid_group(group), ok, "{group:?}");
        }
        assert!(valid_group(&"x".repeat(253)) && !valid_group(&"x".repeat(254)));
        for (id, ok) in [("e0f3745b", true), ("", false), ("a\nb", false)] {
            assert_eq!(valid_id(id), ok, "{id:?}");
        }
    }
}
