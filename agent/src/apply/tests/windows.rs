//! Maintenance windows in `cluster.toml`: parsed in UTC only, exported, and planned as a
//! difference of the group (the same step as slots).

use super::*;

const MEMBER: &str = "[[member]]\nname = \"n1\"\naddress = \"n1:7000\"\n";

fn with_groups(groups: &str) -> Result<Manifest, super::super::manifest::ManifestError> {
    Manifest::parse(&format!("[fleetlock]\n{groups}{MEMBER}"))
}

fn group(name: &str, slots: u32, windows: &[&str]) -> GroupStatus {
    GroupStatus {
        name: name.into(),
        slots,
        configured: true,
        holders: Vec::new(),
        windows: windows.iter().map(|w| w.to_string()).collect(),
        open: true,
        next_open_ms: None,
        gates: Vec::new(),
    }
}

#[test]
fn windows_parse_in_utc_and_export_back() {
    let m = with_groups(
        "[[fleetlock.group]]\nname = \"db\"\nslots = 2\nwindows = [\"sat 02:00-06:00 UTC\", \"daily 22:00-01:00 UTC\"]\n",
    )
    .expect("valid file");
    let db = &m.fleetlock.as_ref().expect("fleetlock").groups["db"];
    assert_eq!(db.windows, ["Sat 02:00-06:00 UTC", "daily 22:00-01:00 UTC"]);
    let again = Manifest::parse(&m.to_toml(&[])).expect("exported file parses");
    assert_eq!(again, m);
    for (windows, want) in [
        ("[\"Sat 02:00-06:00 CET\"]", "UTC only"),
        ("[\"Sat 02:00-06:00\"]", "UTC only"),
        ("[\"Someday 02:00-06:00 UTC\"]", "not a weekday"),
    ] {
        let err = with_groups(&format!(
            "[[fleetlock.group]]\nname = \"db\"\nslots = 2\nwindows = {windows}\n"
        ))
        .expect_err(windows);
        assert!(err.to_string().contains(want), "{windows}: {err}");
        assert_eq!(err.line, 5, "{err}");
    }
}

#[test]
fn a_window_difference_is_planned_like_a_slots_difference() {
    let want = with_groups(
        "[[fleetlock.group]]\nname = \"db\"\nslots = 2\nwindows = [\"Sat 02:00-06:00 UTC\"]\n[[fleetlock.group]]\nname = \"web\"\nslots = 1\n",
    )
    .expect("file");
    let mut have = observed(vec![member("n1", "voter", true)]);
    let set_groups = |have: &mut Observed, groups: Vec<GroupStatus>| {
        if let Some(f) = have.fleetlock.as_mut() {
            f.groups = groups;
        }
    };
    // Same slots, no windows yet: one step, saying it is the windows.
    set_groups(&mut have, vec![group("db", 2, &[]), group("web", 1, &[])]);
    let p = plan(&want, &have);
    assert_eq!(actions(&p), vec!["group db=2"]);
    assert!(
        p.steps[0].reason.contains("windows"),
        "{}",
        p.steps[0].reason
    );
    let Action::SetFleetlockGroup {
        windows,
        from_windows,
        ..
    } = &p.steps[0].action
    else {
        panic!("{:?}", p.steps[0].action);
    };
    assert_eq!(
        (windows.as_slice(), from_windows.len()),
        (&["Sat 02:00-06:00 UTC".to_string()][..], 0)
    );
    // Windows set by hand that the file does not list are taken away.
    set_groups(
        &mut have,
        vec![
            group("db", 2, &["Sat 02:00-06:00 UTC"]),
            group("web", 1, &["daily 02:00-04:00 UTC"]),
        ],
    );
    assert_eq!(actions(&plan(&want, &have)), vec!["group web=1"]);
    // In step: nothing to do.
    set_groups(
        &mut have,
        vec![
            group("db", 2, &["Sat 02:00-06:00 UTC"]),
            group("web", 1, &[]),
        ],
    );
    assert!(plan(&want, &have).steps.is_empty());
}
