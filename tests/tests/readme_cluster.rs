//! The README's "A cluster of your own", run as written by real `muster` processes: the
//! block is read from README.md, its /tmp paths and the discovery service's 8087 swapped for
//! the test's own (the nodes keep the README's 7001–7004 when they are free), and each command that needs the cluster
//! ready polled with a deadline. Every agent keeps its default FleetLock and metrics listeners,
//! so a default that collides with the README's node ports fails this test.

use std::time::Duration;

use muster_tests::readme_script::{commands, polling_script, sh_block, workspace_root};
use muster_tests::*;

/// How long one README command may take to succeed (formation, a join, a promotion).
const STEP: u64 = 90;

/// Whether ports `P1`…`P4` (as the README's `700$i`) are all free on loopback.
fn block_free(prefix: u32) -> bool {
    (1..=4).all(|i| {
        u16::try_from(prefix * 10 + i)
            .is_ok_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
    })
}

/// The README's own node ports (700x) when they are free, as they are on a CI machine: the
/// harness hands out ports from 20000 up, so only this test uses them. Otherwise (someone runs
/// the README by hand beside the test) a free block elsewhere, said on stderr; the check that
/// the defaults stay clear of 7001–7004 is then made from `muster agent --help` alone.
fn node_port_prefix() -> u32 {
    if block_free(700) {
        return 700;
    }
    for _ in 0..200 {
        let prefix = u32::from(free_port()) / 10;
        if block_free(prefix) {
            eprintln!(
                "127.0.0.1:7001-7004 are taken here: the README's nodes run on {prefix}1-{prefix}4"
            );
            return prefix;
        }
    }
    panic!("no four free ports in a row on 127.0.0.1")
}

/// The default addresses `muster agent --help` gives for FleetLock and metrics.
async fn default_listeners() -> Vec<String> {
    let (code, help, err) = run_muster(&["agent", "--help"], &[])
        .await
        .expect("agent --help");
    assert_eq!(code, 0, "{err}");
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    ["--fleetlock-listen", "--metrics-listen"]
        .iter()
        .map(|flag| {
            let after = flat.split_once(flag).expect("the flag is documented").1;
            let default = after
                .split_once("[default: ")
                .and_then(|(_, rest)| rest.split([',', ']', ';']).next())
                .unwrap_or_else(|| panic!("{flag} names its default in --help"));
            default.trim().to_string()
        })
        .collect()
}

#[tokio::test]
async fn the_readme_cluster_of_your_own_runs_as_written() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).expect("README.md");
    let block = sh_block(&readme, "## A cluster of your own").expect("the README's block");
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    // The README's node ports never meet the defaults of the other listeners.
    let defaults = default_listeners().await;
    for port in 7001..=7004 {
        assert!(
            !defaults.iter().any(|d| d.ends_with(&format!(":{port}"))),
            "a default listener {defaults:?} takes the README's node port {port}"
        );
    }
    let prefix = node_port_prefix();
    let local = block
        .replace("http://127.0.0.1:8087", &d.base)
        .replace("127.0.0.1:700", &format!("127.0.0.1:{prefix}"))
        .replace("/tmp/", &format!("{}/", tmp.path().display()));
    assert_ne!(
        local, block,
        "the README block uses /tmp, 8087 and 700x as this test expects"
    );
    let lines = commands(&local);
    assert!(
        lines.iter().any(|l| l.contains("--discovery"))
            && lines.iter().any(|l| l.contains("--join")),
        "the block forms through discovery and joins a node: {lines:?}"
    );
    let script = polling_script(&lines, STEP);
    let bin_dir = bin_path("muster").parent().expect("bin dir").to_path_buf();
    let mut shell = tokio::process::Command::new("/bin/bash");
    shell
        .args(["--noprofile", "--norc", "-c", &script])
        .current_dir(tmp.path())
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display()),
        )
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        // Its own process group, so the agents it starts are ended with it on a failure.
        .process_group(0);
    clear_muster_env(&mut shell);
    let child = shell
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bash");
    let pgid = child.id().expect("pid");
    let out = tokio::time::timeout(Duration::from_secs(STEP * 8), child.wait_with_output()).await;
    // Whatever happened, nothing the script started outlives the test.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status();
    let out = out
        .expect("the README block finished in time")
        .expect("bash ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("script:\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out.status.success(), "{all}");
    // A listener that could not be bound stops its agent with an error (the defaults being
    // taken by the host's first agent is said at INFO and is fine).
    assert!(
        !stderr.contains("cannot open its node port") && !stderr.contains(" ERROR "),
        "no listener clash: {all}"
    );
    assert!(stdout.lines().any(|l| l.trim() == "hello"), "kv get: {all}");
    assert!(
        tmp.path().join("cluster.backup").is_file(),
        "backup written: {all}"
    );
}
