//! Documented behaviours that no other test pinned down, each run against real processes:
//! `muster kv del`, the key and value limits at their exact edges (docs/lifecycle.md "Operator
//! commands", docs/security.md), the data-dir lock, a changed `--advertise` on restart
//! (docs/lifecycle.md "Restarts"), and a registrant restarted before it was admitted.

use std::path::Path;
use std::time::Duration;

use muster_tests::*;
use serde_json::Value;

const FORM: Duration = Duration::from_secs(60);
/// docs/lifecycle.md: keys are 1–1024 bytes, values at most 64 KiB.
const MAX_KEY: usize = 1024;
const MAX_VALUE: usize = 64 * 1024;

/// A one-node cluster through a size-1 URL.
async fn one_node(d: &Discovery, root: &Path, name: &str) -> AgentProc {
    let url = d.new_token(1).await.expect("url");
    let a = AgentProc::start(root, name, &["--discovery", &url]).expect("start");
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    a
}

/// `muster ARGS --json` on `a`: (exit code, the JSON on stdout).
async fn cli_json(a: &AgentProc, args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = a.cli(&all).await.expect("run muster");
    let json = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("muster {args:?} --json: {e}: {out}{err}"));
    (code, json)
}

/// `n` bytes of control characters that JSON escapes as `\u00XX` (6 bytes each): every one
/// below 0x20 except the five with a short escape (`\b`, `\t`, `\n`, `\f`, `\r`); NUL only if
/// `nul` (argv cannot carry it).
fn control_chars(n: usize, nul: bool) -> String {
    let set: Vec<char> = (0u8..0x20)
        .filter(|b| nul || *b != 0)
        .filter(|b| ![0x08, 0x09, 0x0a, 0x0c, 0x0d].contains(b))
        .map(char::from)
        .collect();
    let value: String = (0..n).map(|i| set[i % set.len()]).collect();
    assert_eq!(value.len(), n);
    // The worst case the limits are sized for: six bytes on the wire per byte of value.
    assert_eq!(
        serde_json::to_string(&value).expect("json").len(),
        6 * n + 2
    );
    value
}

#[tokio::test]
async fn kv_del_deletes_and_a_get_then_answers_not_found() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let a = one_node(&d, tmp.path(), "del").await;
    let (code, _, err) = a.cli(&["kv", "put", "doomed", "v1"]).await.expect("put");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = a.cli(&["kv", "put", "kept", "v2"]).await.expect("put");
    assert_eq!(code, 0, "{err}");

    let (code, answer) = cli_json(&a, &["kv", "del", "doomed"]).await;
    assert_eq!(
        (code, &answer["previous"]),
        (0, &Value::from("v1")),
        "{answer}"
    );
    let (code, answer) = cli_json(&a, &["kv", "get", "doomed"]).await;
    assert_eq!(
        (code, answer["kind"].as_str()),
        (1, Some("not_found")),
        "{answer}"
    );
    // Without --json: nothing on stdout for the delete, and the error on stderr.
    let (code, out, err) = a.cli(&["kv", "del", "kept"]).await.expect("del");
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, out, err) = a.cli(&["kv", "get", "kept"]).await.expect("get");
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("not_found") || err.contains("not found"),
        "{err}"
    );
    let (code, list) = cli_json(&a, &["kv", "list"]).await;
    assert_eq!((code, list), (0, serde_json::json!([])));
}

#[tokio::test]
async fn keys_of_1024_bytes_are_taken_and_1025_refused_over_the_socket_and_tcp() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let a = one_node(&d, tmp.path(), "keys").await;
    let longest = "k".repeat(MAX_KEY);
    let too_long = "k".repeat(MAX_KEY + 1);

    // The unix socket (`muster kv …` with --data-dir).
    let (code, answer) = cli_json(&a, &["kv", "put", &longest, "socket"]).await;
    assert_eq!(code, 0, "{answer}");
    let (code, answer) = cli_json(&a, &["kv", "get", &longest]).await;
    assert_eq!(
        (code, &answer["value"]),
        (0, &Value::from("socket")),
        "{answer}"
    );
    for verb in ["put", "get", "del"] {
        let mut args = vec!["kv", verb, too_long.as_str()];
        if verb == "put" {
            args.push("x");
        }
        let (code, answer) = cli_json(&a, &args).await;
        assert_eq!(
            (code, answer["kind"].as_str()),
            (1, Some("invalid_argument")),
            "kv {verb} of a 1025-byte key: {answer}"
        );
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("1024")),
            "{answer}"
        );
    }

    // TCP with an operator token.
    let token = a.printed_operator_token().await.expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(10)).expect("client");
    let put = api.put(&a.addr, &longest, "tcp").await.expect("put");
    assert!(put.ok(), "{put:?}");
    let got = api.get(&a.addr, &longest).await.expect("get");
    assert_eq!(got.body["value"], "tcp", "{got:?}");
    let refused = api.put(&a.addr, &too_long, "x").await.expect("put");
    assert_eq!(
        (refused.status, refused.kind()),
        (400, Some("invalid_argument")),
        "{refused:?}"
    );
    let refused = api.get(&a.addr, &too_long).await.expect("get");
    assert_eq!(
        (refused.status, refused.kind()),
        (400, Some("invalid_argument")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn values_of_64_kib_of_control_characters_pass_both_ways_and_one_byte_more_is_refused() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let a = one_node(&d, tmp.path(), "values").await;

    // The unix socket, through `muster kv put KEY VALUE` (argv cannot carry NUL).
    let value = control_chars(MAX_VALUE, false);
    let (code, out, err) = a.cli(&["kv", "put", "sock", &value]).await.expect("put");
    assert_eq!(code, 0, "{out}{err}");
    let (code, answer) = cli_json(&a, &["kv", "get", "sock"]).await;
    assert_eq!(code, 0);
    assert!(
        answer["value"] == value.as_str(),
        "the value came back changed"
    );
    let over = control_chars(MAX_VALUE + 1, false);
    let (code, answer) = cli_json(&a, &["kv", "put", "sock-over", &over]).await;
    assert_eq!(
        (code, answer["kind"].as_str()),
        (1, Some("invalid_argument")),
        "{answer}"
    );
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("64 KiB")),
        "{answer}"
    );

    // TCP with an operator token, NUL included.
    let token = a.printed_operator_token().await.expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(20)).expect("client");
    let value = control_chars(MAX_VALUE, true);
    let put = api.put(&a.addr, "tcp", &value).await.expect("put");
    assert!(put.ok(), "{put:?}");
    let got = api.get(&a.addr, "tcp").await.expect("get");
    assert!(
        got.body["value"] == value.as_str(),
        "the value came back changed"
    );
    let over = control_chars(MAX_VALUE + 1, true);
    let refused = api.put(&a.addr, "tcp-over", &over).await.expect("put");
    assert_eq!(
        (refused.status, refused.kind()),
        (400, Some("invalid_argument")),
        "{refused:?}"
    );

    // Neither refused value was written.
    for key in ["sock-over", "tcp-over"] {
        let (code, answer) = cli_json(&a, &["kv", "get", key]).await;
        assert_eq!(
            (code, answer["kind"].as_str()),
            (1, Some("not_found")),
            "{key}"
        );
    }
}

/// `muster agent` on `a`'s data dir and name, with `advertise` (and listen) and no discovery.
async fn agent_on_the_same_dir(a: &AgentProc, advertise: &str) -> (i32, String, String) {
    let data_dir = a.data_dir.display().to_string();
    run_muster(
        &[
            "agent",
            "--name",
            &a.name,
            "--advertise",
            advertise,
            "--listen",
            advertise,
            "--data-dir",
            &data_dir,
            "--config",
            "/dev/null",
        ],
        &[],
    )
    .await
    .expect("run muster agent")
}

#[tokio::test]
async fn a_second_agent_on_the_same_data_dir_stops_with_a_clear_message() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let a = one_node(&d, tmp.path(), "locked").await;
    let pid = a.pid();
    // Another port, so that only the lock can stop it.
    let other = format!("127.0.0.1:{}", free_port());
    let (code, out, err) = agent_on_the_same_dir(&a, &other).await;
    // docs/lifecycle.md "Exit codes": a data dir error is 1.
    assert_eq!(code, 1, "{out}{err}");
    let expected = format!("another muster agent is using {}", a.data_dir.display());
    assert!(err.contains(&expected), "{out}{err}");
    // The first one is untouched.
    assert_eq!(a.pid(), pid);
    let (code, _, err) = a.cli(&["kv", "put", "still", "here"]).await.expect("put");
    assert_eq!(code, 0, "{err}");
}

#[tokio::test]
async fn a_changed_advertise_on_restart_is_refused_naming_the_recorded_address() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut a = one_node(&d, tmp.path(), "moved").await;
    let cluster = a.status().await.expect("status")["cluster_id"].clone();
    assert_eq!(a.terminate().await.expect("stop"), Some(0));
    let moved = format!("127.0.0.1:{}", free_port());
    let (code, out, err) = agent_on_the_same_dir(&a, &moved).await;
    // docs/lifecycle.md: a different --advertise is refused, and the error names the recorded
    // address; it is a usage error (64).
    assert_eq!(code, 64, "{out}{err}");
    assert!(
        err.contains(&format!("--advertise {moved} differs from {}", a.addr))
            && err.contains(&format!("start with --advertise {}", a.addr))
            && err.contains("--allow-address-change"),
        "{out}{err}"
    );
    // Nothing was changed: with its recorded address it comes back to the same cluster.
    a.restart().expect("restart");
    wait_formed(&[&a], 1, FORM).await.expect("back");
    assert_eq!(a.status().await.expect("status")["cluster_id"], cluster);
}

/// The registrations of a discovery URL, by name.
async fn registered(url: &str) -> Option<Vec<String>> {
    let dir = get(url).await.ok()?;
    let mut names: Vec<String> = dir.json()["node"]["nodes"]
        .as_array()?
        .iter()
        .filter_map(|n| {
            n["value"]
                .as_str()?
                .split_once('=')
                .map(|(n, _)| n.to_string())
        })
        .collect();
    names.sort();
    Some(names)
}

#[tokio::test]
async fn a_registrant_killed_before_it_was_admitted_joins_after_a_restart() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let start =
        |name: &str| AgentProc::start(tmp.path(), name, &["--discovery", &url]).expect("start");
    let r1 = start("r1");
    wait_for("r1 to publish the bootstrap record", FORM, || async {
        let record = get(&format!("{url}/_muster/record")).await.ok()?;
        (record.status == 200).then_some(())
    })
    .await
    .expect("record");
    // The initiator cannot answer for now: r2 registers, finds the record and asks to join,
    // but is not admitted.
    let r1_pid = r1.pid().expect("pid");
    signal(r1_pid, "STOP").expect("SIGSTOP r1");
    let mut r2 = start("r2");
    let asked = wait_for("r2 to register and ask r1 to admit it", FORM, || async {
        let names = registered(&url).await?;
        (names == ["r1", "r2"] && r2.log().contains("joining cluster")).then_some(())
    })
    .await;
    if let Err(e) = asked {
        let _ = signal(r1_pid, "CONT");
        panic!("{e:#}\n{}", tail(&r2.log(), 20));
    }
    assert!(
        !r2.data_dir.join("cluster.json").exists(),
        "r2 must not be admitted yet"
    );
    r2.kill9().await.expect("kill -9 r2");
    r2.restart().expect("restart r2");
    signal(r1_pid, "CONT").expect("SIGCONT r1");
    let r3 = start("r3");
    let cluster = wait_formed(&[&r1, &r2, &r3], 3, FORM)
        .await
        .expect("one cluster of 3");
    // r2 went through the URL again (no cluster.json yet), with its registration kept: no
    // second entry for it, and the record names the same cluster.
    let second = r2.last_log();
    assert!(
        second.contains("joining cluster") && !second.contains("restarting on static membership"),
        "{second}"
    );
    assert_eq!(
        registered(&url).await.as_deref(),
        Some(&["r1".to_string(), "r2".into(), "r3".into()][..])
    );
    let record = get(&format!("{url}/_muster/record")).await.expect("record");
    let record: Value =
        serde_json::from_str(record.json()["node"]["value"].as_str().unwrap_or("{}"))
            .expect("json");
    assert_eq!(record["cluster_id"], cluster.as_str());
}

#[tokio::test]
async fn an_initiator_killed_mid_formation_finishes_it_after_a_restart() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let start =
        |name: &str| AgentProc::start(tmp.path(), name, &["--discovery", &url]).expect("start");
    // First crash: as soon as the initiator has written its cluster file, whether or not the
    // bootstrap record is out yet.
    let mut r1 = start("r1");
    let cluster_file = r1.data_dir.join("cluster.json");
    wait_for("r1 to create its cluster", FORM, || async {
        cluster_file.exists().then_some(())
    })
    .await
    .expect("cluster.json");
    r1.kill9().await.expect("kill -9 r1");
    let created = std::fs::read_to_string(&cluster_file).expect("read cluster.json");
    r1.restart().expect("restart r1");
    // Second crash: with a registrant admitted as nonvoter and the formation half done (r1 is
    // the only voter, and the leader).
    let r2 = start("r2");
    wait_for("r2 admitted", FORM, || async {
        r2.data_dir.join("cluster.json").exists().then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}\n{}", r1.last_log(), r2.last_log()));
    r1.kill9().await.expect("kill -9 r1 again");
    r1.restart().expect("restart r1 again");
    let r3 = start("r3");
    let cluster = wait_formed(&[&r1, &r2, &r3], 3, FORM)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}\n{}\n{}", r1.log(), r2.last_log(), r3.last_log()));
    // One cluster: the one r1 created before its first crash, named by the record, with
    // exactly three registrations.
    assert!(created.contains(&cluster), "{created} vs {cluster}");
    let record = get(&format!("{url}/_muster/record")).await.expect("record");
    let record: Value =
        serde_json::from_str(record.json()["node"]["value"].as_str().unwrap_or("{}"))
            .expect("json");
    assert_eq!(record["cluster_id"], cluster.as_str());
    assert_eq!(
        registered(&url).await.as_deref(),
        Some(&["r1".to_string(), "r2".into(), "r3".into()][..])
    );
    // Just formed, the voter table may still be moving leadership: a write that meets that is
    // answered "outcome unknown" and, being the same put, is simply made again.
    wait_for("a write to the formed cluster", FORM, || async {
        let (code, _, _) = r3.cli(&["kv", "put", "formed", "yes"]).await.ok()?;
        (code == 0).then_some(())
    })
    .await
    .expect("put");
    let (code, out, err) = r1.cli(&["kv", "get", "formed"]).await.expect("get");
    assert_eq!((code, out.trim()), (0, "yes"), "{err}");
}
