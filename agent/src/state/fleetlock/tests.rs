//! Table tests of FleetLock's semaphores: locks, unlocks, groups and their limits.

use super::*;

fn lock(group: &str, id: &str) -> Command {
    Command::Lock {
        group: group.into(),
        id: id.into(),
        via: 1,
        now_ms: 5,
        own: false,
        quorum: None,
    }
}

fn unlock(group: &str, id: &str) -> Command {
    Command::Unlock {
        group: group.into(),
        id: id.into(),
        via: 1,
        now_ms: 6,
        forced: false,
        own: false,
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
        windows: Vec::new(),
        gates: Vec::new(),
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
        assert_eq!(
            kind(f.decide(group, id, is_lock, 5, Stamped::default())),
            want,
            "case {i}"
        );
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
        windows: Vec::new(),
        gates: Vec::new(),
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
        windows: Vec::new(),
        gates: Vec::new(),
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
        own: false,
        quorum: None,
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
        own: false,
        quorum: None,
    };
    let release = |id: &str, forced, now_ms| Command::Unlock {
        group: "default".into(),
        id: id.into(),
        via: 3,
        now_ms,
        forced,
        own: false,
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
        own: false,
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

mod gates;
mod quorum;
mod windows;
