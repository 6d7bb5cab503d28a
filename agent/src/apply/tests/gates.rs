//! Health gates in `cluster.toml`: names checked, exported, and planned as a difference of the
//! group (the same step as slots and windows).

use super::*;
use crate::api::fleetlock::GateStatus;

const MEMBER: &str = "[[member]]\nname = \"n1\"\naddress = \"n1:7000\"\n";

fn with_groups(groups: &str) -> Result<Manifest, super::super::manifest::ManifestError> {
    Manifest::parse(&format!("[fleetlock]\n{groups}{MEMBER}"))
}

fn group(name: &str, gates: &[&str]) -> GroupStatus {
    GroupStatus {
        name: name.into(),
        slots: 1,
        configured: true,
        holders: Vec::new(),
        windows: Vec::new(),
        open: true,
        next_open_ms: None,
        gates: gates
            .iter()
            .map(|g| GateStatus {
                name: g.to_string(),
                check: None,
                last: None,
            })
            .collect(),
    }
}

#[test]
fn gates_parse_export_back_and_bad_ones_say_where() {
    let m = with_groups(
        "[[fleetlock.group]]\nname = \"db\"\nslots = 1\ngates = [\"alerts\", \"drained\"]\n",
    )
    .expect("valid file");
    let db = &m.fleetlock.as_ref().expect("fleetlock").groups["db"];
    assert_eq!(db.gates, ["alerts", "drained"]);
    let again = Manifest::parse(&m.to_toml(&[])).expect("exported file parses");
    assert_eq!(again, m);
    for (gates, want) in [
        ("[\"al erts\"]", "gate \"al erts\""),
        ("[\"a\", \"a\"]", "listed twice"),
        (
            "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]",
            "at most 8",
        ),
    ] {
        let err = with_groups(&format!(
            "[[fleetlock.group]]\nname = \"db\"\nslots = 1\ngates = {gates}\n"
        ))
        .expect_err(gates);
        assert!(err.to_string().contains(want), "{gates}: {err}");
        assert_eq!(err.line, 5, "{err}");
    }
}

#[test]
fn a_gate_difference_is_planned_like_a_slots_difference() {
    let want = with_groups(
        "[[fleetlock.group]]\nname = \"db\"\nslots = 1\ngates = [\"alerts\"]\n[[fleetlock.group]]\nname = \"web\"\nslots = 1\n",
    )
    .expect("file");
    let mut have = observed(vec![member("n1", "voter", true)]);
    let mut set_groups = |groups: Vec<GroupStatus>| {
        if let Some(f) = have.fleetlock.as_mut() {
            f.groups = groups;
        }
        plan(&want, &have)
    };
    let p = set_groups(vec![group("db", &[]), group("web", &[])]);
    assert_eq!(actions(&p), vec!["group db=1"]);
    assert!(
        p.steps[0].reason.contains("health gates"),
        "{}",
        p.steps[0].reason
    );
    let Action::SetFleetlockGroup {
        gates, from_gates, ..
    } = &p.steps[0].action
    else {
        panic!("{:?}", p.steps[0].action);
    };
    assert_eq!(
        (gates.as_slice(), from_gates.len()),
        (&["alerts".to_string()][..], 0)
    );
    // Gates set by hand that the file does not list are taken away.
    let p = set_groups(vec![group("db", &["alerts"]), group("web", &["drained"])]);
    assert_eq!(actions(&p), vec!["group web=1"]);
    // In step: nothing to do.
    let p = set_groups(vec![group("db", &["alerts"]), group("web", &[])]);
    assert!(p.steps.is_empty());
}
