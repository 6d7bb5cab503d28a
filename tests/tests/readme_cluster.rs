//! The README's "A cluster of your own", run as written by real `muster` processes: the
//! block is read from README.md, its /tmp paths and the discovery service's 8087 swapped for
//! the test's own (the nodes keep the README's 7001–7004 when they are free), and each command that needs the cluster
//! ready polled with a deadline. Every agent keeps its default FleetLock and metrics listeners,
//! so a default that collides with the README's node ports fails this test.

use std::time::Duration;

use muster_tests::doc_blocks::sh_block;
use muster_tests::readme_script::{polling_script, run_script, steps, workspace_root};
use muster_tests::*;

/// How long one README command may take to succeed (formation, a join, a promotion).
const STEP: u64 = 90;

/// The README's own node ports (700x) when they are free, as they are on a CI machine (the
/// harness hands out ports from 20000 up, so only this test uses them); otherwise a free block
/// elsewhere, and the check that the defaults stay clear of 7001–7004 is then made from
/// `muster agent --help` alone.
fn node_port_prefix() -> u32 {
    muster_tests::ports::free_port_block(700)
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
    let lines = steps(&local);
    assert!(
        lines.iter().any(|l| l.text.contains("--discovery"))
            && lines.iter().any(|l| l.text.contains("--join")),
        "the block forms through discovery and joins a node: {lines:?}"
    );
    let script = polling_script(&lines, STEP);
    let bin_dir = bin_path("muster").parent().expect("bin dir").to_path_buf();
    let out = run_script(
        &script,
        tmp.path(),
        &bin_dir,
        &[],
        Duration::from_secs(STEP * 8),
    )
    .await
    .expect("the README block finished in time");
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
