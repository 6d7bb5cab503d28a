//! Tests of configuration merging, expansion and validation.

use super::env_file::parse_env_file;
use super::*;

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
    assert!(resolve(&f, &env(&[])).is_err());
    f.advertise = Some("10.0.0.1:7000".into());
    f.name = Some("bad name".into());
    assert!(resolve(&f, &env(&[])).is_err());
    f.name = Some("n1".into());
    f.discovery = Some("discovery.example.com/abc".into());
    assert!(resolve(&f, &env(&[])).is_err());
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
    assert!(parse_env_file("NOEQUALS\n").is_err());
    assert_eq!(
        expand("$$A-${A}", &env(&[("A", "1")])).ok().as_deref(),
        Some("$A-1")
    );
    assert!(expand("${A", &env(&[("A", "1")])).is_err());
}
