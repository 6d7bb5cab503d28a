//! Health gates in the replicated state: a group names them (bounded, valid names), old state
//! and commands without them still decode, and a group without gates is written as before.

use super::*;

fn set(gates: &[&str]) -> Command {
    Command::SetGroup {
        name: "db".into(),
        slots: 1,
        windows: Vec::new(),
        gates: gates.iter().map(|g| g.to_string()).collect(),
    }
}

#[test]
fn a_group_names_its_gates_bounded_and_valid() {
    let mut f = FleetLock::default();
    assert_eq!(
        kind(f.apply(&set(&["alerts", "drained"]))),
        Ok(Outcome::Done)
    );
    assert_eq!(f.groups["db"].gates, ["alerts", "drained"]);
    // Setting the group again replaces them; none: no gate.
    assert_eq!(kind(f.apply(&set(&[]))), Ok(Outcome::Done));
    assert!(f.groups["db"].gates.is_empty());
    let nine: Vec<String> = (0..=MAX_GATES).map(|i| format!("g{i}")).collect();
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    for bad in [&nine[..], &["al erts"], &[""], &["x".repeat(64).as_str()]] {
        assert_eq!(
            kind(f.apply(&set(bad))),
            Err(ErrorKind::InvalidArgument),
            "{bad:?}"
        );
    }
    assert!(f.groups["db"].gates.is_empty(), "a refusal changes nothing");
    // A gate never changes what the state decides: the leader runs gates before the write.
    assert_eq!(kind(f.apply(&set(&["alerts"]))), Ok(Outcome::Done));
    assert_eq!(kind(f.apply(&lock("db", "a"))), Ok(Outcome::Locked));
}

#[test]
fn state_and_commands_without_gates_decode_and_are_written_as_before() {
    let old_group = r#"{"slots":2,"holders":{}}"#;
    let g: Group = serde_json::from_str(old_group).expect("old group");
    assert!(g.gates.is_empty());
    assert_eq!(serde_json::to_string(&g).expect("json"), old_group);
    let old_command = r#"{"fleetlock":"set_group","name":"db","slots":1}"#;
    let c: Command = serde_json::from_str(old_command).expect("old command");
    assert_eq!(c, set(&[]));
    assert_eq!(serde_json::to_string(&c).expect("json"), old_command);
    let with = serde_json::to_string(&set(&["alerts"])).expect("json");
    assert!(with.contains(r#""gates":["alerts"]"#), "{with}");
}
