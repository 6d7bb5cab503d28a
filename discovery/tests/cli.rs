//! The `muster-discovery` command line as an operator meets it. (Also makes `cargo test` build the
//! binary that the multi-process tests in `tests/` start.)

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_muster-discovery"))
}

#[test]
fn serve_help_names_every_flag_and_its_env_var() {
    let out = bin()
        .args(["serve", "--help"])
        .output()
        .expect("run --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--listen", "MUSTER_DISCOVERY_LISTEN"),
        ("--data-dir", "MUSTER_DISCOVERY_DATA_DIR"),
        ("--public-url", "MUSTER_DISCOVERY_PUBLIC_URL"),
        ("--max-size", "MUSTER_DISCOVERY_MAX_SIZE"),
        ("--token-ttl", "MUSTER_DISCOVERY_TOKEN_TTL"),
        ("--hold", "MUSTER_DISCOVERY_HOLD"),
        ("--tls-cert", "MUSTER_DISCOVERY_TLS_CERT"),
        ("--tls-key", "MUSTER_DISCOVERY_TLS_KEY"),
    ] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
        assert!(help.contains(env), "help lacks {env}:\n{help}");
    }
}

#[test]
fn bad_flag_values_fail_with_a_useful_message() {
    let out = bin()
        .args(["serve", "--token-ttl", "7"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("examples: 30s, 24h, 7d"), "{err}");

    let out = bin()
        .args(["serve", "--max-size", "0"])
        .output()
        .expect("run");
    assert!(!out.status.success());

    let out = bin()
        .args(["serve", "--tls-cert", "/nonexistent"])
        .output()
        .expect("run");
    assert!(
        !out.status.success(),
        "--tls-cert without --tls-key must be refused"
    );
}

#[test]
fn env_vars_configure_the_service() {
    let out = bin()
        .args(["serve"])
        .env("MUSTER_DISCOVERY_HOLD", "soon")
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("soon"));
}

#[test]
fn a_busy_port_is_reported_with_a_next_step() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = bin()
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot listen on") && err.contains("--listen"),
        "{err}"
    );
}
