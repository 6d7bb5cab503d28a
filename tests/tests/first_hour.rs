//! What a new user meets in the first hour, as the user meets it: the listen/advertise rule, a
//! taken port found before anything is registered, a data dir of another cluster, an empty
//! `--discovery`, the demo's signals, `--json` errors, and the default log of a formation.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use muster_tests::*;
use tokio::io::{AsyncBufReadExt, BufReader};

const FORM: Duration = Duration::from_secs(30);

fn loopback() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A one-node cluster through a size-1 URL, its agent started with exactly `args` after
/// `--advertise addr --discovery URL`.
async fn one_node(
    d: &Discovery,
    root: &Path,
    name: &str,
    args: &[&str],
    log_filter: Option<&str>,
) -> AgentProc {
    let url = d.new_token(1).await.expect("url");
    let addr = loopback();
    let mut all = vec!["--advertise", &addr, "--discovery", &url];
    all.extend_from_slice(args);
    let a = AgentProc::start_bare(root, name, &addr, &all, log_filter).expect("start");
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    a
}

#[tokio::test]
async fn listen_follows_advertise_and_a_mismatch_is_a_warning() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    // No --listen: the node listens on the advertised loopback address, so the command it
    // prints works as printed.
    let a = one_node(&d, tmp.path(), "plain", &[], None).await;
    let token = a
        .printed_operator_token()
        .await
        .expect("operator token printed");
    let (code, out, err) = run_muster(
        &["status", "--json", "--server", &a.addr],
        &[("MUSTER_OPERATOR_TOKEN", &token)],
    )
    .await
    .expect("run");
    assert_eq!(
        code, 0,
        "status over TCP at the advertised address: {out}{err}"
    );
    let log = a.log();
    assert!(
        log.contains(&format!("listen={}", a.addr)) && !log.contains("0.0.0.0"),
        "listens where it advertises: {log}"
    );
    assert!(!log.contains("WARN"), "no warning without --listen: {log}");

    // An explicit --listen on another port than --advertise's: logged as a warning.
    let other = loopback();
    let b = one_node(&d, tmp.path(), "mismatch", &["--listen", &other], None).await;
    let log = b.log();
    assert!(
        log.contains("WARN") && log.contains(&format!("other members dial --advertise {}", b.addr)),
        "{log}"
    );
}

#[tokio::test]
async fn a_taken_port_stops_the_agent_before_it_registers() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let mut a = AgentProc::start_bare(
        tmp.path(),
        "clash",
        &addr,
        &["--advertise", &addr, "--discovery", &url],
        None,
    )
    .expect("start");
    let code = a.wait_exit(Duration::from_secs(20)).await.expect("exits");
    assert_eq!(code, Some(1), "{}", a.log());
    // The message names the agent, the listener and the flag that moves it.
    let log = a.log();
    assert!(
        log.contains("agent clash: cannot open its node port") && log.contains("--listen"),
        "{log}"
    );
    // The URL is untouched: nobody registered, so the same URL still forms a cluster.
    let listing = get(&url).await.expect("listing");
    assert_eq!(listing.status, 200);
    let nodes = listing.json()["node"]["nodes"].clone();
    assert!(
        nodes.as_array().is_none_or(|n| n.is_empty()),
        "nothing registered: {nodes}"
    );
    drop(taken);
}

#[tokio::test]
async fn a_data_dir_of_another_cluster_refuses_to_join_elsewhere() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut a = one_node(&d, tmp.path(), "a", &[], Some("info,openraft=error")).await;
    let b = one_node(&d, tmp.path(), "b", &[], Some("info,openraft=error")).await;
    let b_token = b.create_token(&[]).await.expect("token of b");
    let a_token = a.create_token(&[]).await.expect("token of a");
    a.terminate().await.expect("stop a");
    let restart = |extra: Vec<String>| {
        let mut args = vec![
            "agent".to_string(),
            "--name".into(),
            "a".into(),
            "--advertise".into(),
            a.addr.clone(),
            "--data-dir".into(),
            a.data_dir.display().to_string(),
            "--config".into(),
            "/dev/null".into(),
        ];
        args.extend(extra);
        args
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_muster(&args, &[]).await.expect("run")
    };
    // A token of cluster b on a data dir of cluster a.
    let (code, _, err) = run(restart(vec![
        "--join".into(),
        b.addr.clone(),
        "--token".into(),
        b_token.clone(),
    ]))
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("for another cluster"), "{err}");
    // A --join target of cluster b, without a token.
    let (code, _, err) = run(restart(vec!["--join".into(), b.addr.clone()])).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("member of another cluster"), "{err}");
    // A token of its own cluster is no reason to stop: the member restarts.
    let mut again = AgentProc::start_bare(
        tmp.path(),
        "a",
        &a.addr,
        &["--advertise", &a.addr, "--token", &a_token],
        Some("info,openraft=error"),
    )
    .expect("restart");
    wait_formed(&[&again], 1, FORM).await.expect("restarted");
    assert!(again.log().contains("ignored"), "{}", again.log());
    again.terminate().await.expect("stop");
}

#[tokio::test]
async fn an_empty_discovery_flag_is_named() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("n");
    let addr = loopback();
    let (code, _, err) = run_muster(
        &[
            "agent",
            "--name",
            "n",
            "--advertise",
            &addr,
            "--data-dir",
            dir.to_str().expect("utf-8"),
            "--config",
            "/dev/null",
            "--discovery",
            "",
        ],
        &[],
    )
    .await
    .expect("run");
    assert_eq!(code, 64, "{err}");
    assert!(
        err.contains("--discovery is empty") && !err.contains("nothing to start from"),
        "{err}"
    );
}

#[tokio::test]
async fn json_errors_are_one_json_object_on_stdout() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let a = one_node(&d, tmp.path(), "j", &[], Some("info,openraft=error")).await;
    let nowhere = tmp.path().join("nowhere");
    let nowhere = nowhere.to_str().expect("utf-8");
    let live = a.data_dir.to_str().expect("utf-8");
    // (arguments, the kind, the exit code)
    let cases: Vec<(Vec<&str>, &str, i32)> = vec![
        (vec!["status", "--data-dir", nowhere], "unreachable", 1),
        (vec!["members", "--data-dir", nowhere], "unreachable", 1),
        (
            vec!["token", "list", "--data-dir", nowhere],
            "unreachable",
            1,
        ),
        (
            vec!["kv", "get", "k", "--data-dir", nowhere],
            "unreachable",
            1,
        ),
        (
            vec!["kv", "get", "nope", "--data-dir", live],
            "not_found",
            1,
        ),
        (
            vec!["node", "remove", "nobody", "--data-dir", live],
            "not_found",
            1,
        ),
        (
            vec!["token", "revoke", "0000000000000000", "--data-dir", live],
            "not_found",
            1,
        ),
        (
            vec!["token", "create", "--ttl", "400d", "--data-dir", live],
            "invalid_argument",
            64,
        ),
        (vec!["status", "--bogus"], "invalid_argument", 64),
        (vec!["status", "--server", "127.0.0.1:1"], "failed", 1),
    ];
    for (args, kind, exit) in cases {
        let mut all = args.clone();
        all.push("--json");
        let (code, out, _) = run_muster(&all, &[]).await.expect("run");
        let v: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {out}"));
        assert_eq!(
            (code, v["kind"].as_str()),
            (exit, Some(kind)),
            "{args:?}: {out}"
        );
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{out}"
        );
    }
}

#[tokio::test]
async fn the_default_log_of_a_formation_is_quiet_and_shows_the_operator_token_once() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let agents = start_bare_through(tmp.path(), "q", &url, 3).expect("start");
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, FORM).await.expect("formed");
    let logs: Vec<String> = agents.iter().map(AgentProc::log).collect();
    let all = logs.join("\n");
    assert!(!all.contains("ERROR"), "{all}");
    assert!(!all.contains("openraft") && !all.contains("fjall"), "{all}");
    assert!(
        !all.contains('\u{1b}'),
        "no colour codes in a log file: {all}"
    );
    let tokens = all.lines().filter(|l| l.starts_with("OP1.")).count();
    assert_eq!(tokens, 1, "{all}");
    for (a, log) in agents.iter().zip(&logs) {
        assert!(
            log.lines().count() <= 25,
            "{} logs too much:\n{log}",
            a.name
        );
    }
}

#[tokio::test]
async fn the_demo_reports_a_dying_agent_and_stops_on_sigterm() {
    let mut demo = tokio::process::Command::new(bin_path("muster"));
    clear_muster_env(&mut demo);
    let mut demo = demo
        .args(["demo", "--nodes", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("demo");
    let pid = demo.id().expect("pid");
    let mut lines = BufReader::new(demo.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    let mut read_until = async |needle: &str, seen: &mut String| {
        tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.push_str(&line);
                seen.push('\n');
                if line.contains(needle) {
                    return Some(line);
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
    };
    let dir_line = read_until("demo directory:", &mut seen)
        .await
        .expect("demo directory");
    let dir = dir_line.rsplit(' ').next().expect("dir").to_string();
    read_until("press Ctrl-C", &mut seen)
        .await
        .unwrap_or_else(|| panic!("demo formed: {seen}"));
    assert!(
        !seen.contains("try:  muster ") || which_muster_is_this(),
        "hints name a muster that is on the PATH, or the full path: {seen}"
    );
    // Kill one of the demo's agents (a child of the demo, found by its data dir).
    let node2 = agent_pid(pid, &format!("{dir}/node2")).expect("node2's pid");
    signal(node2, "KILL").expect("kill -9 node2");
    read_until("node2 exited", &mut seen)
        .await
        .unwrap_or_else(|| panic!("the demo reports node2: {seen}"));
    signal(pid, "TERM").expect("SIGTERM");
    let status = tokio::time::timeout(Duration::from_secs(30), demo.wait())
        .await
        .expect("the demo stops on SIGTERM")
        .expect("wait");
    assert!(status.success(), "{status}");
    for node in ["node1", "node3"] {
        assert!(
            agent_pid(pid, &format!("{dir}/{node}")).is_none(),
            "{node} stopped with the demo"
        );
    }
}

/// True when `muster` on this process's PATH is the binary under test.
fn which_muster_is_this() -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::canonicalize(d.join("muster")).ok()
                == std::fs::canonicalize(bin_path("muster")).ok()
        })
    })
}

/// The pid of a child of `parent` whose command line holds `data_dir`.
fn agent_pid(parent: u32, data_dir: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Field 4 (after the parenthesised command) is the parent pid.
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        (ppid == parent && cmdline.contains(data_dir)).then_some(pid)
    })
}
