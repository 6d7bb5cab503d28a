//! The quorum gate in the replicated state: which member's machine a Zincati id is (learned
//! from requests a member marked as its own machine's), a voter refused while others are down
//! or rebooting, and the rest (non-voters, unknown ids, old commands) never gated.

use super::*;
use crate::state::fleetlock_quorum::QuorumFacts;

/// Three voters, 1 to 3, with `unreachable` down.
fn three_voters(unreachable: &[NodeId]) -> QuorumFacts {
    QuorumFacts {
        voters: (1..=3).map(|i| (i, format!("n{i}"))).collect(),
        unreachable: unreachable.iter().copied().collect(),
        min_tolerance: 0,
        changing: false,
    }
}

fn lock_via(id: &str, via: NodeId, own: bool, quorum: Option<QuorumFacts>) -> Command {
    Command::Lock {
        group: "default".into(),
        id: id.into(),
        via,
        now_ms: 10,
        own,
        quorum,
    }
}

fn unlock_via(id: &str, via: NodeId, own: bool) -> Command {
    Command::Unlock {
        group: "default".into(),
        id: id.into(),
        via,
        now_ms: 11,
        forced: false,
        own,
    }
}

fn two_slots() -> FleetLock {
    let mut f = FleetLock::default();
    f.apply(&Command::SetGroup {
        name: "default".into(),
        slots: 2,
        windows: Vec::new(),
        gates: Vec::new(),
    })
    .expect("group");
    f
}

#[test]
fn a_machine_s_id_is_learned_from_requests_its_member_marks_as_its_own() {
    let mut f = two_slots();
    // Zincati's start-up unlock holds nothing, yet teaches whose machine m2 is.
    assert!(f.learns(2, "m2", true));
    assert_eq!(
        kind(f.apply(&unlock_via("m2", 2, true))),
        Ok(Outcome::NotHeld)
    );
    assert_eq!(f.machines.get(&2).map(String::as_str), Some("m2"));
    assert!(!f.learns(2, "m2", true), "known already: no write needed");
    // Not marked as the member's own: nothing is learned.
    f.apply(&unlock_via("m3", 3, false)).expect("unlock");
    assert!(!f.learns(3, "m3", false));
    assert_eq!(f.machines.get(&3), None);
    // One id per member: a new one replaces the old.
    f.apply(&unlock_via("m2-new", 2, true)).expect("unlock");
    assert_eq!(f.machines.get(&2).map(String::as_str), Some("m2-new"));
    // One member per id: another member saying the id is its own does not take it over.
    assert!(!f.learns(3, "m2-new", true));
    f.apply(&unlock_via("m2-new", 3, true)).expect("unlock");
    assert_eq!(f.machines.get(&2).map(String::as_str), Some("m2-new"));
    assert_eq!(f.machines.get(&3), None);
    // A removed member's id goes with it, and may then be another's.
    f.release_member(2, 12);
    assert!(f.machines.is_empty());
    f.apply(&unlock_via("m2-new", 3, true)).expect("unlock");
    assert_eq!(f.machines.get(&3).map(String::as_str), Some("m2-new"));
}

#[test]
fn two_members_sharing_one_id_never_both_hold_its_slot() {
    let mut f = two_slots();
    let facts = three_voters(&[]);
    assert_eq!(
        kind(f.apply(&lock_via("cloned", 1, true, Some(facts.clone())))),
        Ok(Outcome::Locked)
    );
    // Member 2's machine says the same id is its own: not "already held".
    let refused = f
        .apply(&lock_via("cloned", 2, true, Some(facts.clone())))
        .expect_err("shared id");
    assert_eq!(refused.kind, ErrorKind::QuorumGate);
    assert!(
        refused.message.contains("two members share one id"),
        "{}",
        refused.message
    );
    // Member 1's machine asking again keeps its slot.
    assert_eq!(
        kind(f.apply(&lock_via("cloned", 1, true, Some(facts)))),
        Ok(Outcome::AlreadyHeld)
    );
}

#[test]
fn a_voter_waits_while_another_voter_is_down_or_rebooting() {
    let mut f = two_slots();
    // n1's machine takes a slot through its own agent: n1 holds.
    let facts = three_voters(&[]);
    assert_eq!(
        kind(f.apply(&lock_via("m1", 1, true, Some(facts.clone())))),
        Ok(Outcome::Locked)
    );
    assert_eq!(f.groups["default"].holders["m1"].machine, Some(1));
    // n2's machine may not while n1 reboots, though a slot is free.
    let refused = f
        .apply(&lock_via("m2", 2, true, Some(facts.clone())))
        .expect_err("n1 holds a slot");
    assert_eq!(refused.kind, ErrorKind::QuorumGate);
    assert_eq!(refused.kind.as_str(), "failed_lock_quorum");
    assert!(
        refused.message.contains("n1 holds a reboot slot"),
        "{}",
        refused.message
    );
    assert!(!f.groups["default"].holders.contains_key("m2"));
    // The refusal changed nothing, not even what it would have taught.
    assert_eq!(f.machines.get(&2), None);
    // Once n1 is back (its slot released), n2 goes, even through another member, its id
    // having been learned.
    f.apply(&unlock_via("m1", 1, true)).expect("unlock");
    f.apply(&unlock_via("m2", 2, true)).expect("learn m2");
    assert_eq!(
        kind(f.apply(&lock_via("m2", 3, false, Some(facts.clone())))),
        Ok(Outcome::Locked)
    );
    // The holder keeps its slot whatever the gate would say now.
    assert_eq!(
        kind(f.apply(&lock_via("m2", 2, true, Some(three_voters(&[3]))))),
        Ok(Outcome::AlreadyHeld)
    );
}

#[test]
fn an_unreachable_voter_holds_back_the_others_and_not_itself() {
    let mut f = two_slots();
    let down3 = three_voters(&[3]);
    let refused = f
        .apply(&lock_via("m1", 1, true, Some(down3.clone())))
        .expect_err("n3 down");
    assert!(
        refused.message.contains("n3 unreachable"),
        "{}",
        refused.message
    );
    // The unreachable one itself reboots (it is down already): nothing is lost.
    assert_eq!(
        kind(f.apply(&lock_via("m3", 3, true, Some(down3)))),
        Ok(Outcome::Locked)
    );
}

#[test]
fn machines_that_are_not_voters_and_old_commands_are_never_gated() {
    let mut f = two_slots();
    let down = three_voters(&[2, 3]);
    // A stand-by or spare (member 9), and an id no member's machine has used.
    assert_eq!(
        kind(f.apply(&lock_via("m9", 9, true, Some(down.clone())))),
        Ok(Outcome::Locked)
    );
    assert_eq!(
        kind(f.apply(&lock_via("worker", 1, false, Some(down.clone())))),
        Ok(Outcome::Locked)
    );
    // A lock written before the gate (no facts) is decided as it was.
    let mut g = two_slots();
    let old: Command = serde_json::from_str(
        r#"{"fleetlock":"lock","group":"default","id":"m1","via":1,"now_ms":3}"#,
    )
    .expect("old lock");
    assert_eq!(kind(g.apply(&old)), Ok(Outcome::Locked));
    assert_eq!(g.groups["default"].holders["m1"].machine, None);
    // And state written before reads, with no machines known.
    let before: FleetLock = serde_json::from_str(
        r#"{"groups":{"default":{"slots":1,"holders":{"a":{"since_ms":1,"via":2}}}}}"#,
    )
    .expect("old state");
    assert!(before.machines.is_empty());
    assert_eq!(before.groups["default"].holders["a"].machine, None);
}

#[test]
fn the_gate_s_facts_and_learned_machines_survive_the_log_s_tagged_commands() {
    // Inside the log's internally tagged commands, map keys stay strings: node-id keyed maps
    // must read them back (a lock that did not would stop raft on every member).
    let lock = crate::state::Request::FleetLock(lock_via("m1", 1, true, Some(three_voters(&[3]))));
    let bytes = serde_json::to_vec(&lock).expect("encode");
    let back: crate::state::Request = serde_json::from_slice(&bytes).expect("decode");
    assert_eq!(back, lock);

    let mut state = crate::state::ClusterState::default();
    state
        .fleetlock
        .apply(&unlock_via("m2", 2, true))
        .expect("learn");
    let restore = crate::state::Request::RestoreState {
        state: Box::new(state),
    };
    let bytes = serde_json::to_vec(&restore).expect("encode");
    let back: crate::state::Request = serde_json::from_slice(&bytes).expect("decode");
    assert_eq!(back, restore);
}
