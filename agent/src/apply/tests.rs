//! Table tests of `cluster.toml` parsing and of the plan.

use super::manifest::{DEFAULT_DATA_DIR, Manifest};
use super::plan::{Action, FoundBackup, Observed, ObservedMember, plan, recovery_steps};
use crate::api::fleetlock::{FleetLockStatus, GroupStatus};
use crate::api::probe::{DataDirHealth, NodeProbe, SettingsUpdate};

const FILE: &str = r#"
[cluster]
replace_after = "30s"
cleanup_dead_after = "0"
min_voters = 3
standbys = 1

[fleetlock]
unknown_groups = "reject"

[[fleetlock.group]]
name = "workers"
slots = 2

[defaults]
data_dir = "/srv/muster"

[[member]]
name = "n1"
address = "10.0.0.1:7000"

[[member]]
name = "n2"
address = "10.0.0.2:7000"
data_dir = "/data/muster"
"#;

#[test]
fn parses_a_full_file() {
    let m = Manifest::parse(FILE).expect("valid file");
    assert_eq!(m.members.len(), 2);
    assert_eq!(m.members[0].data_dir, "/srv/muster");
    assert_eq!(m.members[1].data_dir, "/data/muster");
    assert_eq!(m.settings.replace_after_ms, Some(30_000));
    assert_eq!(m.settings.cleanup_dead_after_ms, Some(0));
    assert_eq!(m.settings.standbys, Some(1));
    let f = m.fleetlock.expect("fleetlock table");
    assert_eq!(f.unknown_groups.as_deref(), Some("reject"));
    assert_eq!(f.groups.get("workers").map(|g| g.slots), Some(2));
}

#[test]
fn export_reads_back_to_the_same_manifest() {
    let m = Manifest::parse(FILE).expect("valid file");
    let again = Manifest::parse(&m.to_toml(&[])).expect("exported file parses");
    assert_eq!(again, m);
    let mut odd = m.clone();
    odd.settings.replace_after_ms = Some(1_500);
    let again = Manifest::parse(&odd.to_toml(&["a note".into()])).expect("exported file parses");
    assert_eq!(again.settings.replace_after_ms, Some(1_500));
}

#[test]
fn refusals_name_the_line() {
    let member =
        |name: &str, addr: &str| format!("[[member]]\nname = \"{name}\"\naddress = \"{addr}\"\n");
    let cases: Vec<(String, usize, &str)> = vec![
        // (file, line, a word the message must contain)
        (
            format!("{}bogus = 1\n", member("n1", "10.0.0.1:7000")),
            4,
            "unknown field",
        ),
        (
            format!(
                "{}{}",
                member("n1", "10.0.0.1:7000"),
                member("n1", "10.0.0.2:7000")
            ),
            5,
            "twice",
        ),
        (member("n1", "10.0.0.1"), 3, "host:port"),
        (member("n1", "0.0.0.0:7000"), 3, "0.0.0.0"),
        (
            format!(
                "{}{}",
                member("n1", "10.0.0.1:7000"),
                member("n2", "10.0.0.1:7000")
            ),
            6,
            "both",
        ),
        (member("bad name", "10.0.0.1:7000"), 2, "name"),
        (
            format!(
                "[cluster]\nmin_voters = 9\n{}",
                member("n1", "10.0.0.1:7000")
            ),
            2,
            "from 1 to 7",
        ),
        (
            format!(
                "[cluster]\nreplace_after = \"soon\"\n{}",
                member("n1", "10.0.0.1:7000")
            ),
            2,
            "duration",
        ),
        (
            format!(
                "[cluster]\nstandbys = \"2\"\n{}",
                member("n1", "10.0.0.1:7000")
            ),
            2,
            "expected i64",
        ),
        (
            format!(
                "[fleetlock]\nunknown_groups = \"maybe\"\n{}",
                member("n1", "10.0.0.1:7000")
            ),
            2,
            "reject",
        ),
        (
            format!(
                "[[fleetlock.group]]\nname = \"g\"\nslots = 0\n{}",
                member("n1", "10.0.0.1:7000")
            ),
            3,
            "from 1 to 1000",
        ),
        ("[cluster]\nstandbys = 1\n".to_string(), 3, "no member"),
        ("[[member]]\nname = \"n1\"\n".to_string(), 1, "address"),
        ("[[member]\nname = \"n1\"\n".to_string(), 1, "invalid"),
    ];
    for (text, line, word) in cases {
        let err = Manifest::parse(&text).expect_err(&text);
        assert_eq!(err.line, line, "{text}\n→ {err}");
        assert!(
            err.message.to_lowercase().contains(&word.to_lowercase()),
            "{text}\n→ {err} (wanted {word:?})"
        );
    }
}

fn settings() -> SettingsUpdate {
    SettingsUpdate {
        replace_after_ms: 30_000,
        cleanup_dead_after_ms: 600_000,
        min_voters: 3,
        standbys: 2,
    }
}

fn member(name: &str, role: &str, reachable: bool) -> ObservedMember {
    ObservedMember {
        name: name.into(),
        address: format!("{name}:7000"),
        role: role.into(),
        reachable,
        answered: reachable,
        match_index: reachable.then_some(10),
        report: reachable.then(|| NodeProbe {
            name: name.into(),
            version: "0.1.0".into(),
            cert_expires_ms: None,
            ca_expires_ms: None,
            applied_index: 10,
            leader: Some("n1".into()),
            data_dir: DataDirHealth {
                ok: true,
                bytes: 1,
                problem: None,
            },
            data_dir_path: Some(format!("/srv/{name}")),
        }),
        error: (!reachable).then(|| "connection refused".into()),
    }
}

fn observed(members: Vec<ObservedMember>) -> Observed {
    Observed {
        cluster_id: "c1".into(),
        asked: String::new(),
        leader: Some("n1".into()),
        commit_index: 10,
        members,
        settings: Some(settings()),
        settings_pinned: true,
        fleetlock: Some(FleetLockStatus {
            unknown_groups: "create".into(),
            groups: vec![GroupStatus {
                name: "default".into(),
                slots: 1,
                configured: false,
                holders: Vec::new(),
                windows: Vec::new(),
                open: true,
                next_open_ms: None,
                gates: Vec::new(),
            }],
            recent: Vec::new(),
            machines: Vec::new(),
            quorum_gate: None,
        }),
    }
}

fn desired(names: &[&str]) -> Manifest {
    let mut text = String::new();
    for n in names {
        text.push_str(&format!(
            "[[member]]\nname = \"{n}\"\naddress = \"{n}:7000\"\n"
        ));
    }
    Manifest::parse(&text).expect("test file")
}

/// The actions of a plan, as short strings.
fn actions(p: &super::Plan) -> Vec<String> {
    p.steps
        .iter()
        .map(|s| match &s.action {
            Action::RemoveMember { name, .. } => {
                format!("remove {name} {}→{}", s.tolerance_before, s.tolerance_after)
            }
            Action::IssueToken { name, .. } => format!("token {name}"),
            Action::SetSettings { .. } => "settings".into(),
            Action::SetFleetlockGroup { group, slots, .. } => format!("group {group}={slots}"),
            Action::DeleteFleetlockGroup { group } => format!("delete {group}"),
            Action::SetUnknownGroups { to, .. } => format!("unknown {to}"),
            Action::Upgrade { name, .. } => format!("upgrade {name}"),
        })
        .collect()
}

#[test]
fn plans_in_a_quorum_safe_order() {
    let five = |dead: &[&str]| {
        observed(
            ["n1", "n2", "n3", "n4", "n5"]
                .iter()
                .map(|n| member(n, "voter", !dead.contains(n)))
                .collect(),
        )
    };
    let cases: Vec<(&str, Manifest, Observed, Vec<&str>, usize)> = vec![
        (
            "in sync",
            desired(&["n1", "n2", "n3", "n4", "n5"]),
            five(&[]),
            vec![],
            0,
        ),
        (
            "two dead replaced: the dead removed first, then tokens",
            desired(&["n1", "n2", "n3", "n6", "n7"]),
            five(&["n4", "n5"]),
            vec!["remove n4 0→0", "remove n5 0→1", "token n6", "token n7"],
            0,
        ),
        (
            "the leader and a follower removed: the follower first, the leader last",
            desired(&["n2", "n3", "n5"]),
            five(&[]),
            vec!["remove n4 2→1", "remove n1 1→1"],
            0,
        ),
        (
            "a dead standby before a dead voter, a healthy spare before healthy voters",
            desired(&["n1", "n2", "n3"]),
            observed(vec![
                member("n1", "voter", true),
                member("n2", "voter", true),
                member("n3", "voter", true),
                member("n4", "voter", false),
                member("n5", "voter", true),
                member("s1", "standby", false),
                member("s2", "spare", true),
            ]),
            vec![
                "remove s1 1→1",
                "remove n4 1→1",
                "remove s2 1→1",
                "remove n5 1→1",
            ],
            0,
        ),
        (
            "removing healthy voters stops at quorum",
            desired(&["n1"]),
            observed(vec![
                member("n1", "voter", true),
                member("n2", "voter", true),
                member("n3", "voter", false),
            ]),
            vec!["remove n3 0→0", "remove n2 0→0"],
            0,
        ),
        (
            "a removal that would lose the quorum is refused",
            desired(&["n1", "n2"]),
            observed(vec![
                member("n1", "voter", true),
                member("n2", "voter", false),
                member("n3", "voter", true),
                member("n4", "voter", true),
                member("n5", "voter", false),
            ]),
            vec!["remove n5 0→0", "remove n3 0→0"],
            2,
        ),
        (
            "a file that keeps no current member is refused whole",
            desired(&["x1", "x2", "x3"]),
            five(&[]),
            vec!["token x1", "token x2", "token x3"],
            1,
        ),
    ];
    for (what, want, have, expected, blocked) in cases {
        let p = plan(&want, &have);
        assert_eq!(actions(&p), expected, "{what}");
        assert_eq!(p.blocked.len(), blocked, "{what}: {:?}", p.blocked);
        assert!(p.quorum_lost.is_none(), "{what}");
        assert_eq!(
            p.has_changes(),
            !expected.is_empty() || blocked > 0,
            "{what}"
        );
    }
}

#[test]
fn a_lost_quorum_changes_nothing_and_names_the_restore_machine() {
    let mut have = observed(vec![
        member("n1", "voter", false),
        member("n2", "voter", true),
        member("n3", "voter", false),
    ]);
    have.leader = None;
    let p = plan(&desired(&["n1", "n2", "n3", "n4"]), &have);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    let r = p.quorum_lost.expect("quorum lost");
    assert_eq!(r.reachable_voters, vec!["n2"]);
    assert_eq!(r.quorum, 2);
    assert_eq!(r.restore_on.name, "n2");
    let rejoin: Vec<&str> = r.rejoin.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(rejoin, vec!["n1", "n3", "n4"]);
    // The backup is newer than what n2 applied (index 10): rebuild from it.
    let backup = FoundBackup {
        file: "/b/last.backup",
        applied_index: 11,
    };
    let steps = recovery_steps(&r, "c1", Some(backup), "cluster.toml").join("\n");
    // The file gives no data dir: n2's own report of its --data-dir is used.
    assert!(
        steps.contains(
            "muster restore /b/last.backup --name n2 --advertise n2:7000 --data-dir /srv/n2"
        ),
        "{steps}"
    );
    assert!(
        steps.contains("muster apply -f cluster.toml --data-dir /srv/n2"),
        "{steps}"
    );
}

#[test]
fn a_survivor_newer_than_the_backup_is_recovered_rather_than_restored() {
    let mut have = observed(vec![
        member("n1", "voter", false),
        member("n2", "voter", true),
        member("n3", "voter", false),
        member("n4", "standby", true),
    ]);
    have.leader = None;
    let r = plan(&desired(&["n1", "n2", "n3", "n4"]), &have)
        .quorum_lost
        .expect("quorum lost");
    // (the newest backup's index, or none) → recover on n2 (it applied 10), else restore
    let table = [
        (None, true),
        (Some(9), true),
        (Some(10), true),
        (Some(11), false),
    ];
    for (index, recover) in table {
        let backup = index.map(|applied_index| FoundBackup {
            file: "/b/last.backup",
            applied_index,
        });
        let steps = recovery_steps(&r, "c1", backup, "cluster.toml").join("\n");
        let says_recover = steps.contains("muster recover --lost n1,n3 --data-dir /srv/n2 --yes");
        let says_restore = steps.contains("muster restore /b/last.backup")
            || steps.contains("muster restore BACKUP");
        assert_eq!(
            (says_recover, says_restore),
            (recover, !recover),
            "{index:?}\n{steps}"
        );
        if recover {
            assert!(steps.contains("then on n4, unchanged"), "{steps}");
        }
    }
    // No survivor answers: only a backup can help.
    let mut dark = have.clone();
    for m in &mut dark.members {
        m.reachable = false;
    }
    let r = plan(&desired(&["n1", "n2", "n3", "n4"]), &dark)
        .quorum_lost
        .expect("quorum lost");
    let steps = recovery_steps(&r, "c1", None, "cluster.toml").join("\n");
    assert!(steps.contains("muster restore BACKUP"), "{steps}");
}

#[test]
fn recovery_steps_use_the_file_s_data_dir_else_the_member_s_own() {
    let names = ["n1", "n2", "n3"];
    let mut plain = String::new();
    for n in names {
        plain.push_str(&format!(
            "[[member]]\nname = \"{n}\"\naddress = \"{n}:7000\"\n"
        ));
    }
    let with_defaults = format!("[defaults]\ndata_dir = \"/data/m\"\n{plain}");
    // (file, n2's report of its data dir) → the data dir printed for n2
    let table = [
        (plain.clone(), Some("/srv/n2"), "/srv/n2"),
        (plain.clone(), None, DEFAULT_DATA_DIR),
        // A path the file could not hold is not printed into a shell command.
        (plain.clone(), Some("/srv/my dir"), DEFAULT_DATA_DIR),
        (with_defaults.clone(), Some("/srv/n2"), "/data/m"),
    ];
    for (file, reported, want) in table {
        let mut survivor = member("n2", "voter", true);
        if let Some(report) = survivor.report.as_mut() {
            report.data_dir_path = reported.map(String::from);
        }
        let mut have = observed(vec![
            member("n1", "voter", false),
            survivor,
            member("n3", "voter", false),
        ]);
        have.leader = None;
        let want_file = Manifest::parse(&file).expect("file");
        let r = plan(&want_file, &have).quorum_lost.expect("quorum lost");
        assert_eq!(r.restore_on.data_dir, want, "{file}\n{reported:?}");
    }
}

#[test]
fn an_election_is_waited_for_not_mistaken_for_a_lost_quorum() {
    let mut have = observed(vec![
        member("n1", "voter", false),
        member("n2", "voter", true),
        member("n3", "voter", true),
    ]);
    have.leader = None;
    let p = plan(&desired(&["n2", "n3"]), &have);
    assert!(p.quorum_lost.is_none());
    assert!(p.steps.is_empty());
    assert!(p.blocked[0].contains("election"), "{:?}", p.blocked);
}

#[test]
fn settings_and_fleetlock_drift() {
    let mut want = desired(&["n1"]);
    want.settings.standbys = Some(0);
    let file = "[fleetlock]\nunknown_groups = \"reject\"\n[[fleetlock.group]]\nname = \"default\"\nslots = 1\n[[fleetlock.group]]\nname = \"workers\"\nslots = 3\n";
    want.fleetlock = Manifest::parse(&format!(
        "{file}[[member]]\nname = \"n1\"\naddress = \"n1:7000\"\n"
    ))
    .expect("file")
    .fleetlock;
    let mut have = observed(vec![member("n1", "voter", true)]);
    if let Some(f) = have.fleetlock.as_mut() {
        f.groups.push(GroupStatus {
            name: "workers".into(),
            slots: 1,
            configured: true,
            holders: Vec::new(),
            windows: Vec::new(),
            open: true,
            next_open_ms: None,
            gates: Vec::new(),
        });
        f.groups.push(GroupStatus {
            name: "old".into(),
            slots: 1,
            configured: true,
            holders: Vec::new(),
            windows: Vec::new(),
            open: true,
            next_open_ms: None,
            gates: Vec::new(),
        });
    }
    let p = plan(&want, &have);
    assert_eq!(
        actions(&p),
        vec![
            "settings",
            "unknown reject",
            "group default=1",
            "group workers=3",
            "delete old"
        ]
    );
    // Settings the file leaves out keep the cluster's values.
    let Action::SetSettings { to, .. } = &p.steps[0].action else {
        panic!("settings first");
    };
    assert_eq!(to.standbys, 0);
    assert_eq!(to.replace_after_ms, settings().replace_after_ms);
}

#[test]
fn address_changes_are_refused_not_applied() {
    let want =
        Manifest::parse("[[member]]\nname = \"n1\"\naddress = \"10.9.9.9:7000\"\n").expect("file");
    let p = plan(&want, &observed(vec![member("n1", "voter", true)]));
    assert!(p.steps.is_empty());
    assert!(
        p.blocked[0].contains("apply does not move members"),
        "{:?}",
        p.blocked
    );
}

#[test]
fn upgrades_go_nonvoters_first_then_followers_then_the_leader() {
    let mut members = vec![
        member("n1", "voter", true),
        member("n2", "voter", true),
        member("n3", "voter", true),
        member("s1", "standby", true),
    ];
    for m in &mut members {
        if let Some(r) = m.report.as_mut() {
            r.version = if m.name == "n3" { "0.10.0" } else { "0.9.2" }.into();
        }
    }
    let p = plan(&desired(&["n1", "n2", "n3", "s1"]), &observed(members));
    assert_eq!(actions(&p), vec!["upgrade s1", "upgrade n2", "upgrade n1"]);
    assert!(p.steps.iter().all(|s| !s.action.automatic()));
}

#[test]
fn probes_that_disagree_with_a_leader_block_instead_of_advising_a_restore() {
    // The leader says it has a quorum; from the member asked, two voters look dead.
    let mut have = observed(vec![
        member("n1", "voter", true),
        member("n2", "voter", false),
        member("n3", "voter", false),
    ]);
    have.leader = Some("n1".into());
    let p = plan(&desired(&["n1"]), &have);
    assert!(p.quorum_lost.is_none());
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert!(p.blocked[0].contains("views differ"), "{:?}", p.blocked);
}

#[test]
fn a_failing_data_dir_does_not_count_as_healthy() {
    let mut sick = member("n3", "voter", true);
    if let Some(r) = sick.report.as_mut() {
        r.data_dir.ok = false;
    }
    let have = observed(vec![
        member("n1", "voter", true),
        member("n2", "voter", true),
        sick,
    ]);
    assert_eq!(plan(&desired(&["n1", "n2", "n3"]), &have).healthy_voters, 2);
    // Removing a healthy voter now would leave 1 healthy of 2: refused.
    let p = plan(&desired(&["n1", "n3"]), &have);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert_eq!(p.blocked.len(), 1, "{:?}", p.blocked);
}

#[test]
fn a_dead_member_the_file_still_lists_is_drift() {
    let have = observed(vec![
        member("n1", "voter", true),
        member("n2", "voter", true),
        member("n3", "voter", false),
    ]);
    let p = plan(&desired(&["n1", "n2", "n3"]), &have);
    assert!(p.steps.is_empty());
    assert!(p.has_changes());
    assert!(
        p.blocked[0].contains("n3 is in the file but unreachable"),
        "{:?}",
        p.blocked
    );
}

#[test]
fn settings_are_compared_by_value_wherever_they_come_from() {
    let have_standbys = observed(vec![member("n1", "voter", true)])
        .settings
        .expect("settings")
        .standbys;
    // (file's standbys, settings written by apply) → a settings step
    let table = [
        // What `config export` wrote from the leader's flags: no change.
        (Some(have_standbys), false, false),
        (Some(have_standbys), true, false),
        (Some(have_standbys + 1), false, true),
        (Some(have_standbys + 1), true, true),
        // A file without the key leaves the value alone.
        (None, false, false),
    ];
    for (standbys, pinned, step) in table {
        let mut want = desired(&["n1"]);
        want.settings.standbys = standbys;
        let mut have = observed(vec![member("n1", "voter", true)]);
        have.settings_pinned = pinned;
        assert_eq!(
            actions(&plan(&want, &have)) == vec!["settings"],
            step,
            "standbys {standbys:?}, pinned {pinned}"
        );
    }
}

#[test]
fn older_agents_block_settings_and_are_upgraded_first() {
    let mut old = member("n2", "voter", true);
    old.report = None;
    let mut want = desired(&["n1", "n2"]);
    want.settings.standbys = Some(0);
    let p = plan(&want, &observed(vec![member("n1", "voter", true), old]));
    assert_eq!(actions(&p), vec!["upgrade n2"]);
    assert!(p.blocked[0].contains("older agents"), "{:?}", p.blocked);
}

#[test]
fn a_release_sorts_after_its_release_candidates() {
    let mut members = vec![member("n1", "voter", true), member("n2", "voter", true)];
    for (m, v) in members.iter_mut().zip(["0.2.0", "0.2.0-rc.1"]) {
        if let Some(r) = m.report.as_mut() {
            r.version = v.into();
        }
    }
    let p = plan(&desired(&["n1", "n2"]), &observed(members));
    assert_eq!(actions(&p), vec!["upgrade n2"]);
}

#[test]
fn data_dirs_that_are_not_plain_paths_are_refused() {
    for dir in [
        "/ ; rm -rf / #",
        "/srv/$(id)",
        "/srv/../etc",
        "relative/dir",
        "/a b",
    ] {
        let text =
            format!("[[member]]\nname = \"n1\"\naddress = \"n1:7000\"\ndata_dir = \"{dir}\"\n");
        let err = Manifest::parse(&text).expect_err(dir);
        assert_eq!(err.line, 4, "{dir}: {err}");
    }
}

#[test]
fn the_member_asked_is_never_removed_under_apply() {
    let mut have = observed(vec![
        member("n1", "voter", true),
        member("n2", "voter", true),
        member("n3", "voter", true),
    ]);
    have.asked = "n2".into();
    let p = plan(&desired(&["n1", "n3"]), &have);
    assert!(p.steps.is_empty(), "{:?}", p.steps);
    assert!(
        p.blocked[0].contains("n2 is the member asked"),
        "{:?}",
        p.blocked
    );
}

mod gates;
mod windows;
