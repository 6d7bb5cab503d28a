//! Defaults a new user meets without choosing them, on real processes: `lease run`'s grace
//! follows a short TTL, a join-secret file others can read is refused with the chmod to run,
//! and a healthy formation's logs (agents' and the discovery service's, with their default
//! filters, written to files) hold no warning, no colour codes and no library chatter.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use muster_tests::*;

const FORM: Duration = Duration::from_secs(60);

fn loopback() -> String {
    format!("127.0.0.1:{}", free_port())
}

#[tokio::test]
async fn lease_run_with_a_short_ttl_works_with_the_default_grace() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(1).await.expect("url");
    let a = AgentProc::start(tmp.path(), "g1", &["--discovery", &url]).expect("start");
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    let dir = a.data_dir.display().to_string();
    let out_file = tmp.path().join("ran");
    let script = format!("echo \"$MUSTER_LEASE_TOKEN\" > {}", out_file.display());
    for ttl in ["3s", "1s"] {
        let (code, out, err) = run_muster(
            &[
                "lease",
                "run",
                "job",
                "--ttl",
                ttl,
                "--data-dir",
                &dir,
                "--",
                "sh",
                "-c",
                &script,
            ],
            &[],
        )
        .await
        .expect("lease run");
        assert_eq!(code, 0, "--ttl {ttl} without --grace: {out}{err}");
        let token = std::fs::read_to_string(&out_file).expect("CMD ran");
        assert!(!token.trim().is_empty(), "CMD got its fencing token");
        std::fs::remove_file(&out_file).expect("rm");
    }
    // A grace given explicitly is still checked against the TTL.
    let (code, out, err) = run_muster(
        &[
            "lease",
            "run",
            "job",
            "--ttl",
            "3s",
            "--grace",
            "3s",
            "--data-dir",
            &dir,
            "--",
            "true",
        ],
        &[],
    )
    .await
    .expect("lease run");
    assert_eq!(code, 64, "{out}{err}");
    assert!(err.contains("--grace") && err.contains("too long"), "{err}");
}

#[tokio::test]
async fn a_join_secret_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let (code, secret, err) = run_muster(&["secret", "generate"], &[])
        .await
        .expect("secret generate");
    assert_eq!(code, 0, "{err}");
    let file = tmp.path().join("join-secret");
    std::fs::write(&file, secret).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let addr = loopback();
    let mut a = AgentProc::start_bare(
        tmp.path(),
        "s1",
        &addr,
        &[
            "--advertise",
            &addr,
            "--init",
            "--join-secret-file",
            &file.display().to_string(),
        ],
        None,
    )
    .expect("start");
    let code = a.wait_exit(Duration::from_secs(30)).await.expect("exits");
    let log = a.log();
    assert_eq!(code, Some(64), "{log}");
    assert!(
        log.contains(&format!("chmod 600 {}", file.display())) && log.contains("0644"),
        "the refusal says what to run: {log}"
    );
    // After the fix it names, the same command starts.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    a.restart().expect("restart");
    wait_formed(&[&a], 1, FORM)
        .await
        .expect("formed with a 0600 secret");
}

/// `muster-discovery serve` with its default log filter, its stderr in `log`.
async fn discovery_with_default_logs(root: &Path, log: &Path) -> (tokio::process::Child, String) {
    let port = free_port();
    let mut command = tokio::process::Command::new(bin_path("muster-discovery"));
    clear_muster_env(&mut command);
    let child = command
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--new-rate",
            "0",
        ])
        .arg("--data-dir")
        .arg(root.join("discovery"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).expect("log file")))
        .kill_on_drop(true)
        .spawn()
        .expect("muster-discovery");
    let base = format!("http://127.0.0.1:{port}");
    let new = format!("{base}/new?size=3");
    let url = wait_for("discovery to answer", Duration::from_secs(30), || async {
        get(&new)
            .await
            .ok()
            .filter(|r| r.status == 200)
            .map(|r| r.body.trim().to_string())
    })
    .await
    .expect("a discovery URL");
    (child, url)
}

#[tokio::test]
async fn a_healthy_formation_logs_no_warning_and_no_colour() {
    let tmp = tempfile::tempdir().expect("tmp");
    let discovery_log = tmp.path().join("discovery.log");
    let (mut discovery, url) = discovery_with_default_logs(tmp.path(), &discovery_log).await;
    // The agents' own default filter (no RUST_LOG), stderr to a file (not a terminal).
    let agents = start_bare_through(tmp.path(), "h", &url, 3).expect("start");
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, FORM).await.expect("formed");
    let _ = discovery.start_kill();
    let _ = discovery.wait().await;
    let mut logs: Vec<(String, String)> =
        agents.iter().map(|a| (a.name.clone(), a.log())).collect();
    logs.push((
        "muster-discovery".into(),
        std::fs::read_to_string(&discovery_log).expect("discovery log"),
    ));
    for (name, log) in &logs {
        assert!(
            !log.contains("WARN"),
            "{name} warns in a healthy formation:\n{log}"
        );
        assert!(
            !log.contains("\x1b["),
            "{name} writes colour codes into a file:\n{log}"
        );
        for library in ["fjall", "lsm_tree", "openraft", "hyper", "h2", "tonic"] {
            assert!(
                !log.lines()
                    .any(|l| l.contains(&format!(" INFO {library}:"))),
                "{name} logs {library}'s INFO lines:\n{log}"
            );
        }
    }
}
