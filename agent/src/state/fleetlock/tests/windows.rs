//! Maintenance windows in the replicated state: a lock outside them refused, the holder and
//! unlocks answered, old state and commands without windows read.

use super::*;

/// 2026-11-28T03:00Z, a Saturday, and Thursday 2026-11-26T18:00Z before it.
const SATURDAY_3AM: u64 = 1_795_834_800_000;
const THURSDAY_6PM: u64 = 1_795_716_000_000;

fn lock_at(group: &str, id: &str, now_ms: u64) -> Command {
    Command::Lock {
        group: group.into(),
        id: id.into(),
        via: 1,
        now_ms,
        own: false,
        quorum: None,
    }
}

#[test]
fn a_lock_outside_every_window_is_refused_and_says_when_the_next_opens() {
    let mut f = FleetLock::default();
    let windows =
        crate::state::fleetlock_window::parse_all(&["Sat 02:00-06:00 UTC"]).expect("window");
    let set = Command::SetGroup {
        name: "db".into(),
        slots: 2,
        windows,
        gates: Vec::new(),
    };
    assert_eq!(kind(f.apply(&set)), Ok(Outcome::Done));
    assert_eq!(
        kind(f.apply(&lock_at("db", "a", SATURDAY_3AM))),
        Ok(Outcome::Locked)
    );
    let refused = f
        .apply(&lock_at("db", "b", THURSDAY_6PM))
        .expect_err("closed");
    assert_eq!(refused.kind, ErrorKind::OutsideWindow);
    assert_eq!(refused.kind.as_str(), "failed_lock_outside_window");
    assert!(
        refused.message.contains("2026-11-28T02:00:00Z (in 1d8h0m)"),
        "{}",
        refused.message
    );
    assert_eq!(
        kind(f.decide("db", "b", true, THURSDAY_6PM, Stamped::default())),
        Err(ErrorKind::OutsideWindow)
    );
    // The holder keeps its slot outside the window, and may always give it back.
    assert_eq!(
        kind(f.apply(&lock_at("db", "a", THURSDAY_6PM))),
        Ok(Outcome::AlreadyHeld)
    );
    assert_eq!(kind(f.apply(&unlock("db", "a"))), Ok(Outcome::Unlocked));
    assert_eq!(kind(f.apply(&unlock("db", "b"))), Ok(Outcome::NotHeld));
    // Other groups have no windows; setting none opens the group at once.
    assert_eq!(
        kind(f.apply(&lock_at("default", "b", THURSDAY_6PM))),
        Ok(Outcome::Locked)
    );
    let open = Command::SetGroup {
        name: "db".into(),
        slots: 2,
        windows: Vec::new(),
        gates: Vec::new(),
    };
    assert_eq!(kind(f.apply(&open)), Ok(Outcome::Done));
    assert_eq!(
        kind(f.apply(&lock_at("db", "b", THURSDAY_6PM))),
        Ok(Outcome::Locked)
    );
    let too_many = vec!["daily 02:00-04:00 UTC".parse().expect("window"); 17];
    let set = Command::SetGroup {
        name: "db".into(),
        slots: 2,
        windows: too_many,
        gates: Vec::new(),
    };
    assert_eq!(kind(f.apply(&set)), Err(ErrorKind::InvalidArgument));
}

#[test]
fn windows_are_optional_in_old_state_and_commands() {
    let old_set = r#"{"fleetlock":"set_group","name":"db","slots":2}"#;
    let command: Command = serde_json::from_str(old_set).expect("old command reads");
    let mut f = FleetLock::default();
    assert_eq!(kind(f.apply(&command)), Ok(Outcome::Done));
    assert!(f.groups["db"].windows.is_empty());
    let old_state = r#"{"groups":{"db":{"slots":2,"holders":{}}}}"#;
    let read: FleetLock = serde_json::from_str(old_state).expect("old state reads");
    assert_eq!(read, f);
    // No windows are left out, so a group without them writes as before.
    let json = serde_json::to_value(&f).expect("encode");
    assert!(json["groups"]["db"].get("windows").is_none(), "{json}");
    let with: Command = serde_json::from_str(
        r#"{"fleetlock":"set_group","name":"db","slots":2,"windows":["Sat 02:00-06:00 UTC"]}"#,
    )
    .expect("new command reads");
    assert_eq!(kind(f.apply(&with)), Ok(Outcome::Done));
    let json = serde_json::to_string(&f).expect("encode");
    assert!(
        json.contains(r#""windows":["Sat 02:00-06:00 UTC"]"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<FleetLock>(&json).expect("decode"), f);
}
