//! Tests of configuration merging, expansion and validation.

use super::env_file::parse_env_file;
use super::*;
use std::path::Path;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn flags() -> AgentFlags {
    AgentFlags {
        // An empty config file, so the host's /etc/muster/agent.toml never leaks in.
        config: Some(PathBuf::from("/dev/null")),
        ..Default::default()
    }
}

#[test]
fn flag_beats_env_beats_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        "name = \"from-file\"\nadvertise = \"10.0.0.9:7000\"\nlisten = \"127.0.0.1:7100\"\n",
    )
    .expect("write");
    let mut f = AgentFlags {
        config: Some(file),
        ..Default::default()
    };
    let c = resolve(&f, &env(&[])).expect("file only");
    assert_eq!(
        (c.name.as_str(), c.advertise.as_str()),
        ("from-file", "10.0.0.9:7000")
    );
    assert_eq!(c.listen.to_string(), "127.0.0.1:7100");
    let c = resolve(&f, &env(&[("MUSTER_NAME", "from-env")])).expect("env");
    assert_eq!(c.name, "from-env");
    f.name = Some("from-flag".into());
    let c = resolve(&f, &env(&[("MUSTER_NAME", "from-env")])).expect("flag");
    assert_eq!(c.name, "from-flag");
    assert_eq!(c.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    assert_eq!(c.heartbeat, Duration::from_millis(50));
    assert_eq!(c.election_timeout, Duration::from_millis(200));
}

#[test]
fn env_file_values_expand_and_real_env_wins() {
    let dir = tempfile::tempdir().expect("tmp");
    let ef = dir.path().join("flatcar");
    std::fs::write(
        &ef,
        "# written by coreos-metadata\nCOREOS_EC2_IPV4_LOCAL=10.1.2.3\nCOREOS_EC2_HOSTNAME=\"ip-10-1-2-3\"\n",
    )
    .expect("write");
    let mut f = flags();
    f.env_file = Some(ef);
    f.advertise = Some("${COREOS_EC2_IPV4_LOCAL}:7000".into());
    f.name = Some("$COREOS_EC2_HOSTNAME".into());
    let c = resolve(&f, &env(&[])).expect("resolve");
    assert_eq!(c.advertise, "10.1.2.3:7000");
    assert_eq!(c.name, "ip-10-1-2-3");
    let c = resolve(&f, &env(&[("COREOS_EC2_IPV4_LOCAL", "10.9.9.9")])).expect("resolve");
    assert_eq!(c.advertise, "10.9.9.9:7000");
    let c = resolve(&f, &env(&[("MUSTER_DISCOVERY", "")])).expect("empty is unset");
    assert_eq!(c.discovery, None);
}

#[test]
fn clear_errors_for_missing_and_bad_values() {
    let mut f = flags();
    let e = resolve(&f, &env(&[])).expect_err("no name");
    assert!(e.to_string().contains("MUSTER_NAME"), "{e}");
    f.name = Some("n1".into());
    f.advertise = Some("${NOPE}:7000".into());
    let e = resolve(&f, &env(&[])).expect_err("unset var");
    assert!(
        e.to_string().contains("NOPE") && e.to_string().contains("env-file"),
        "{e}"
    );
    f.advertise = Some("0.0.0.0:7000".into());
    assert!(
        resolve(&f, &env(&[]))
            .expect_err("unroutable")
            .to_string()
            .contains("routable")
    );
    f.advertise = Some("10.0.0.1".into());
    let e = resolve(&f, &env(&[])).expect_err("no port");
    assert!(
        e.to_string().starts_with("advertise:") && e.to_string().contains("host:port"),
        "{e}"
    );
    f.advertise = Some("10.0.0.1:7000".into());
    f.name = Some("bad name".into());
    let e = resolve(&f, &env(&[])).expect_err("space in the name");
    assert!(
        e.to_string().starts_with("name:") && e.to_string().contains("[A-Za-z0-9._-]"),
        "{e}"
    );
    f.name = Some("n1".into());
    f.discovery = Some("discovery.example.com/abc".into());
    let e = resolve(&f, &env(&[])).expect_err("no scheme");
    assert!(e.to_string().contains("not a discovery URL"), "{e}");
    f.discovery = None;
    f.heartbeat = Some("200ms".into());
    f.election_timeout = Some("300ms".into());
    assert!(
        resolve(&f, &env(&[]))
            .expect_err("flappy")
            .to_string()
            .contains("twice")
    );
}

#[test]
fn toml_rejects_unknown_keys() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, "nmae = \"typo\"\n").expect("write");
    let f = AgentFlags {
        config: Some(file),
        ..Default::default()
    };
    let e = resolve(&f, &env(&[])).expect_err("typo");
    assert!(e.to_string().contains("nmae"), "{e}");
}

#[test]
fn env_file_parser_handles_quotes_comments_and_errors() {
    let vars =
        parse_env_file("A=1\n; comment\nexport B='two words'\nC=\"x=y\"\n\n").expect("parse");
    assert_eq!(vars.get("A").map(String::as_str), Some("1"));
    assert_eq!(vars.get("B").map(String::as_str), Some("two words"));
    assert_eq!(vars.get("C").map(String::as_str), Some("x=y"));
    let e = parse_env_file("NOEQUALS\n").expect_err("no =");
    assert_eq!(
        e,
        super::env_file::EnvFileError::NotAssignment {
            line: 1,
            found: "NOEQUALS".into()
        }
    );
    assert_eq!(
        expand("$$A-${A}", &env(&[("A", "1")])).ok().as_deref(),
        Some("$A-1")
    );
    let e = expand("${A", &env(&[("A", "1")])).expect_err("unclosed");
    assert_eq!(e, super::env_file::EnvFileError::Unclosed("${A".into()));
}

fn named(advertise: &str) -> AgentFlags {
    AgentFlags {
        name: Some("n1".into()),
        advertise: Some(advertise.into()),
        ..flags()
    }
}

#[test]
fn listen_defaults_to_the_advertised_port() {
    // (advertise, explicit --listen, the address listened on, a warning must mention)
    let cases: [(&str, Option<&str>, &str, Option<&str>); 7] = [
        ("10.0.0.5:7005", None, "0.0.0.0:7005", None),
        ("node1.example.com:7100", None, "0.0.0.0:7100", None),
        ("127.0.0.1:7005", None, "127.0.0.1:7005", None),
        ("[fd00::5]:7005", None, "[::]:7005", None),
        ("10.0.0.5:7005", Some("0.0.0.0:7005"), "0.0.0.0:7005", None),
        (
            "127.0.0.1:7005",
            Some("0.0.0.0:7000"),
            "0.0.0.0:7000",
            Some("other members dial --advertise 127.0.0.1:7005"),
        ),
        (
            "10.0.0.5:7005",
            Some("127.0.0.1:7005"),
            "127.0.0.1:7005",
            Some("from this machine only"),
        ),
    ];
    for (advertise, listen, want, warning) in cases {
        let mut f = named(advertise);
        f.listen = listen.map(String::from);
        let c = resolve(&f, &env(&[])).expect("valid");
        assert_eq!(c.listen.to_string(), want, "{advertise} {listen:?}");
        match warning {
            None => assert!(c.warnings.is_empty(), "{:?}", c.warnings),
            Some(phrase) => assert!(
                c.warnings.len() == 1 && c.warnings[0].contains(phrase),
                "{advertise} {listen:?}: {:?}",
                c.warnings
            ),
        }
    }
}

#[test]
fn an_empty_flag_is_an_error_but_an_empty_variable_is_unset() {
    let mut f = named("10.0.0.5:7000");
    f.discovery = Some(String::new());
    let e = resolve(&f, &env(&[])).expect_err("empty --discovery");
    assert!(
        e.to_string().contains("--discovery is empty") && e.to_string().contains("running"),
        "{e}"
    );
    f.discovery = None;
    f.token = Some(" ".into());
    let e = resolve(&f, &env(&[])).expect_err("empty --token");
    assert!(e.to_string().contains("--token is empty"), "{e}");
    f.token = None;
    f.join = Some(String::new());
    let e = resolve(&f, &env(&[])).expect_err("empty --join");
    assert!(e.to_string().contains("--join is empty"), "{e}");
    f.join = None;
    let c = resolve(
        &f,
        &env(&[("MUSTER_DISCOVERY", ""), ("MUSTER_JOIN_TOKEN", "")]),
    )
    .expect("empty variables count as unset");
    assert_eq!((c.discovery, c.token), (None, None));
}

#[test]
fn join_token_comes_from_its_own_variable_and_an_exported_operator_token_is_ignored() {
    let f = named("10.0.0.5:7000");
    let join = "K1.aa.bb.cc";
    let operator = "OP1.aa.bb.cc";
    // (environment, the token taken and from where, a warning must mention)
    type Case<'a> = (
        &'a [(&'a str, &'a str)],
        Option<(&'a str, &'a str)>,
        Option<&'a str>,
    );
    let cases: [Case; 5] = [
        (
            &[("MUSTER_JOIN_TOKEN", join)],
            Some(("MUSTER_JOIN_TOKEN", join)),
            None,
        ),
        (
            &[("MUSTER_TOKEN", join)],
            Some(("MUSTER_TOKEN", join)),
            Some("rename it MUSTER_JOIN_TOKEN"),
        ),
        (
            &[("MUSTER_TOKEN", operator)],
            None,
            Some("holds an operator token"),
        ),
        (
            &[("MUSTER_TOKEN", operator), ("MUSTER_JOIN_TOKEN", join)],
            Some(("MUSTER_JOIN_TOKEN", join)),
            None,
        ),
        (&[], None, None),
    ];
    for (vars, want, warning) in cases {
        let c = resolve(&f, &env(vars)).expect("valid");
        let got = c.token.as_ref().map(|t| (t.source, t.value.as_str()));
        assert_eq!(got, want, "{vars:?}");
        match warning {
            None => assert!(c.warnings.is_empty(), "{vars:?}: {:?}", c.warnings),
            Some(phrase) => assert!(
                c.warnings.iter().any(|w| w.contains(phrase)),
                "{vars:?}: {:?}",
                c.warnings
            ),
        }
    }
    let mut with_flag = named("10.0.0.5:7000");
    with_flag.token = Some(join.into());
    let c = resolve(&with_flag, &env(&[("MUSTER_JOIN_TOKEN", "K1.other")])).expect("valid");
    assert_eq!(c.token.map(|t| t.source), Some("--token"));
}

#[test]
fn initial_cluster_lists_this_machine_at_its_address_and_needs_the_secret() {
    let dir = tempfile::tempdir().expect("tmp");
    let secret_file = dir.path().join("secret");
    let secret = muster_shared::token::JoinSecret::generate();
    write_private(&secret_file, &format!("{}\n", secret.reveal()));
    let mut f = named("10.0.0.1:7000");
    f.initial_cluster = Some("n1=10.0.0.1:7000, n2=10.0.0.2:7000,n3=10.0.0.3:7000".into());
    let e = resolve(&f, &env(&[])).expect_err("no secret");
    assert!(e.to_string().contains("--join-secret-file"), "{e}");
    f.join_secret_file = Some(secret_file.clone());
    let c = resolve(&f, &env(&[])).expect("valid");
    let names: Vec<&str> = c.initial_cluster.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    assert_eq!(c.join_secret.map(|s| s.secret), Some(secret.clone()));
    // (list, a phrase the refusal must hold)
    let bad = [
        ("n2=10.0.0.2:7000,n3=10.0.0.3:7000", "not in the list"),
        ("n1=10.0.0.9:7000,n2=10.0.0.2:7000", "must match"),
        ("n1=10.0.0.1:7000,n1=10.0.0.2:7000", "repeats"),
        ("n1=10.0.0.1:7000,n2", "NAME=HOST:PORT"),
        ("n1=10.0.0.1:7000,bad name=10.0.0.2:7000", "[A-Za-z0-9._-]"),
    ];
    for (list, phrase) in bad {
        f.initial_cluster = Some(list.into());
        let e = resolve(&f, &env(&[])).expect_err(list);
        assert!(e.to_string().contains(phrase), "{list}: {e}");
    }
}

#[test]
fn join_secret_and_ca_pin_are_checked_where_they_come_from() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut f = named("10.0.0.1:7000");
    f.join_secret_file = Some(dir.path().join("missing"));
    let e = resolve(&f, &env(&[])).expect_err("missing file");
    assert!(
        e.to_string().contains("cannot read") && e.to_string().contains("muster secret generate"),
        "{e}"
    );
    let garbage = dir.path().join("garbage");
    write_private(&garbage, "K1.not-a-secret");
    f.join_secret_file = Some(garbage);
    let e = resolve(&f, &env(&[])).expect_err("not a secret");
    assert!(e.to_string().contains("JS1"), "{e}");
    f.join_secret_file = None;
    let secret = muster_shared::token::JoinSecret::generate();
    let c = resolve(&f, &env(&[("MUSTER_JOIN_SECRET", &secret.reveal())])).expect("from env");
    assert_eq!(
        c.join_secret.map(|s| s.source),
        Some("MUSTER_JOIN_SECRET".to_string())
    );
    f.ca_pin = Some("AB".repeat(32));
    assert_eq!(
        resolve(&f, &env(&[])).expect("pin").ca_pin,
        Some("ab".repeat(32))
    );
    f.ca_pin = Some("ab".repeat(31));
    let e = resolve(&f, &env(&[])).expect_err("short pin");
    assert!(e.to_string().starts_with("ca-pin:"), "{e}");
}

#[test]
fn init_forms_alone() {
    let mut f = named("10.0.0.1:7000");
    f.init = true;
    assert!(resolve(&f, &env(&[])).expect("init").init);
    assert!(
        resolve(&named("10.0.0.1:7000"), &env(&[("MUSTER_INIT", "yes")]))
            .expect("env")
            .init
    );
    f.discovery = Some("http://d:8087/0123456789abcdef0123456789abcdef".into());
    let e = resolve(&f, &env(&[])).expect_err("init with discovery");
    assert!(
        e.to_string().starts_with("init:") && e.to_string().contains("alone"),
        "{e}"
    );
}

#[test]
fn repair_settings_default_turn_off_with_zero_and_refuse_nonsense() {
    let mut f = flags();
    f.name = Some("n1".into());
    f.advertise = Some("127.0.0.1:7000".into());
    let c = resolve(&f, &env(&[])).expect("defaults");
    assert_eq!(c.automation, crate::policy::Automation::default());
    assert_eq!(c.automation.replace_after, Some(Duration::from_secs(30)));
    assert_eq!(
        c.automation.cleanup_dead_after,
        Some(Duration::from_secs(600))
    );
    assert_eq!(c.automation.min_voters, 3);

    f.replace_after = Some("0".into());
    let c = resolve(
        &f,
        &env(&[
            ("MUSTER_CLEANUP_DEAD_AFTER", "2h"),
            ("MUSTER_MIN_VOTERS", "5"),
        ]),
    )
    .expect("off and env");
    assert_eq!(c.automation.replace_after, None);
    assert_eq!(
        c.automation.cleanup_dead_after,
        Some(Duration::from_secs(7200))
    );
    assert_eq!(c.automation.min_voters, 5);

    for (setting, value) in [
        ("replace-after", "soon"),
        ("replace-after", "10ms"),
        ("cleanup-dead-after", "400d"),
        ("min-voters", "0"),
        ("min-voters", "many"),
    ] {
        let mut bad = f.clone();
        match setting {
            "replace-after" => bad.replace_after = Some(value.into()),
            "cleanup-dead-after" => bad.cleanup_dead_after = Some(value.into()),
            _ => bad.min_voters = Some(value.into()),
        }
        match resolve(&bad, &env(&[])) {
            Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting, "{value}"),
            other => panic!("{setting}={value}: {other:?}"),
        }
    }
}

#[test]
fn snapshots_are_off_by_default_and_default_to_the_data_dir() {
    let mut f = flags();
    f.name = Some("n1".into());
    f.advertise = Some("127.0.0.1:7000".into());
    f.data_dir = Some("/srv/m".into());
    assert_eq!(resolve(&f, &env(&[])).expect("defaults").snapshots, None);
    let on = resolve(&f, &env(&[("MUSTER_SNAPSHOT_EVERY", "1h")])).expect("on");
    assert_eq!(
        on.snapshots,
        Some(crate::config::SnapshotSchedule {
            every: Duration::from_secs(3600),
            keep: 24,
            dir: "/srv/m/snapshots".into(),
        })
    );
    f.snapshot_every = Some("0".into());
    let off = resolve(&f, &env(&[("MUSTER_SNAPSHOT_EVERY", "1h")])).expect("flag wins");
    assert_eq!(off.snapshots, None);
    f.snapshot_every = Some("30m".into());
    f.snapshot_keep = Some("48".into());
    f.snapshot_dir = Some("/backups".into());
    let all = resolve(&f, &env(&[])).expect("all three");
    assert_eq!(
        all.snapshots,
        Some(crate::config::SnapshotSchedule {
            every: Duration::from_secs(1800),
            keep: 48,
            dir: "/backups".into(),
        })
    );
    for (setting, value) in [
        ("snapshot-every", "500ms"),
        ("snapshot-every", "31d"),
        ("snapshot-every", "hourly"),
        ("snapshot-keep", "0"),
        ("snapshot-keep", "10001"),
    ] {
        let mut bad = f.clone();
        match setting {
            "snapshot-every" => bad.snapshot_every = Some(value.into()),
            _ => bad.snapshot_keep = Some(value.into()),
        }
        match resolve(&bad, &env(&[])) {
            Err(ConfigError::Invalid { setting: s, .. }) => assert_eq!(s, setting, "{value}"),
            other => panic!("{setting}={value}: {other:?}"),
        }
    }
}

#[test]
fn default_fleetlock_and_metrics_ports_stay_clear_of_node_ports() {
    // The README's one-host cluster: nodes on 127.0.0.1:7001…7004, every listener default.
    for port in 7001..=7009 {
        let mut f = flags();
        f.name = Some("n1".into());
        f.advertise = Some(format!("127.0.0.1:{port}"));
        let c = resolve(&f, &env(&[])).expect("defaults resolve");
        let fleetlock = c.fleetlock_listen.expect("FleetLock on by default");
        let metrics = c.metrics_listen.expect("metrics on by default");
        assert!(fleetlock.ip().is_loopback() && metrics.ip().is_loopback());
        assert_ne!(fleetlock.port(), metrics.port());
        assert!(!(7000..7900).contains(&fleetlock.port()), "{fleetlock}");
        assert!(!(7000..7900).contains(&metrics.port()), "{metrics}");
    }
}

#[test]
fn a_listener_on_the_node_port_is_refused_by_name() {
    let mut f = flags();
    f.name = Some("n1".into());
    f.advertise = Some("127.0.0.1:7001".into());
    f.metrics_listen = Some("127.0.0.1:7001".into());
    let e = resolve(&f, &env(&[])).expect_err("same port");
    let text = e.to_string();
    assert!(
        text.contains("node port") && text.contains("--metrics-listen"),
        "{text}"
    );
    f.metrics_listen = Some("127.0.0.1:7950".into());
    f.fleetlock_listen = Some("0.0.0.0:7950".into());
    let e = resolve(&f, &env(&[])).expect_err("FleetLock and metrics on one port");
    assert!(e.to_string().contains("FleetLock"), "{e}");
}

/// Writes a file only its owner can read, as a join-secret file must be.
fn write_private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn a_join_secret_file_others_can_read_is_refused_with_the_chmod_to_run() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("join-secret");
    let secret = muster_shared::token::JoinSecret::generate();
    write_private(&file, &secret.reveal());
    let mut f = named("10.0.0.1:7000");
    f.join_secret_file = Some(file.clone());
    resolve(&f, &env(&[])).expect("0600 is accepted");
    for mode in [0o644, 0o640, 0o604, 0o660, 0o602] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let e = resolve(&f, &env(&[])).expect_err("readable by others");
        let text = e.to_string();
        assert!(
            text.starts_with("join-secret-file:")
                && text.contains(&format!("chmod 600 {}", file.display()))
                && text.contains(&format!("{mode:04o}")),
            "{mode:o}: {text}"
        );
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).expect("chmod");
    resolve(&f, &env(&[])).expect("0400 is accepted");
}

#[test]
fn fleetlock_gates_come_from_the_repeated_flag_else_the_variable_else_the_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("agent.toml");
    std::fs::write(
        &file,
        "fleetlock_gate = [\"f=command:/usr/bin/f\", \"g=prometheus:http://p/q\"]\n\
         fleetlock_gate_timeout = \"3s\"\n",
    )
    .expect("write");
    let mut f = named("10.0.0.1:7000");
    f.config = Some(file);
    let names = |c: &AgentConfig| -> Vec<String> {
        c.fleetlock_gates
            .gates
            .iter()
            .map(|g| format!("{}={}", g.name, g.check))
            .collect()
    };
    let c = resolve(&f, &env(&[])).expect("file");
    assert_eq!(
        names(&c),
        ["f=command /usr/bin/f", "g=prometheus http://p/q"]
    );
    assert_eq!(c.fleetlock_gates.timeout, Duration::from_secs(3));
    // The variable is comma-separated; a comma inside a query stays in its URL.
    let var = "a=prometheus:http://p/q?query=ALERTS{x=\"1\",y=\"2\"},b=command:/b";
    let c = resolve(&f, &env(&[("MUSTER_FLEETLOCK_GATE", var)])).expect("env");
    assert_eq!(names(&c).len(), 2, "{:?}", names(&c));
    assert_eq!(names(&c)[1], "b=command /b");
    f.fleetlock_gate = vec!["c=command:/c".into(), "d=command:/d".into()];
    let c = resolve(&f, &env(&[("MUSTER_FLEETLOCK_GATE", var)])).expect("flags");
    assert_eq!(names(&c), ["c=command /c", "d=command /d"]);
    // Unset: none, 10 s.
    let c = resolve(&named("10.0.0.1:7000"), &env(&[])).expect("none");
    assert!(c.fleetlock_gates.gates.is_empty());
    assert_eq!(c.fleetlock_gates.timeout, DEFAULT_GATE_TIMEOUT);
    for (gate, timeout, says) in [
        ("c=command:/c,c=command:/d", "1s", "defined twice"),
        ("c=command:c", "1s", "absolute path"),
        ("c=command:/c", "60s", "between 100ms and 20s"),
    ] {
        let mut f = named("10.0.0.1:7000");
        f.fleetlock_gate = vec![gate.into()];
        f.fleetlock_gate_timeout = Some(timeout.into());
        let e = resolve(&f, &env(&[])).expect_err(gate).to_string();
        assert!(
            e.contains("fleetlock-gate") && e.contains(says),
            "{gate}: {e}"
        );
    }
}
