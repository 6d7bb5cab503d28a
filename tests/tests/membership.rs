//! Static membership after formation, with real `muster agent` processes on loopback: join
//! tokens (single-use, expiring, revocable, CA-pinned), the autoscaling recipe, removal (of the
//! leader too, and quorum-safety), operator tokens over TCP, and backup/restore.

use std::path::Path;
use std::time::Duration;

use muster_tests::{
    AgentProc, Discovery, form, refs, run_muster, tail, voter_target, wait_for, wait_formed,
};

const FORM: Duration = Duration::from_secs(60);
/// Tests shorten the 3 s default so that growing a cluster step by step stays quick.
const PROMOTE_AFTER: &str = "500ms";

/// Starts `name` joining through `via` with `token`.
fn join(root: &Path, name: &str, via: &AgentProc, token: &str) -> AgentProc {
    AgentProc::start(
        root,
        name,
        &[
            "--join",
            &via.addr,
            "--token",
            token,
            "--promote-after",
            PROMOTE_AFTER,
        ],
    )
    .expect("start joiner")
}

async fn status(a: &AgentProc) -> serde_json::Value {
    wait_for(&format!("status of {}", a.name), FORM, || a.status())
        .await
        .expect("status")
}

fn member_names(status: &serde_json::Value) -> Vec<String> {
    let mut names: Vec<String> = status["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

async fn leader_of(agents: &[AgentProc]) -> String {
    status(&agents[0]).await["leader"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits until `leader`'s status shows member `name` as reachable (or not).
async fn wait_reachable(leader: &AgentProc, name: &str, reachable: bool) {
    let what = format!("{} to see {name} reachable={reachable}", leader.name);
    wait_for(&what, FORM, || async {
        let s = leader.status().await?;
        s["members"]
            .as_array()?
            .iter()
            .any(|m| m["name"] == name && m["reachable"] == reachable)
            .then_some(())
    })
    .await
    .expect("reachability");
}

/// The token list as JSON (it must never change when a join is refused).
async fn token_list(a: &AgentProc) -> serde_json::Value {
    let (code, out, err) = a.cli(&["token", "list", "--json"]).await.expect("list");
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("json")
}

/// Every file under `dir`, for the plaintext-secret check.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

fn assert_nowhere_in(dirs: &[&Path], secret: &str, what: &str) {
    let mut checked = 0;
    for dir in dirs {
        for file in files_under(dir) {
            let bytes = std::fs::read(&file).unwrap_or_default();
            checked += bytes.len();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{what} in plaintext in {}",
                file.display()
            );
        }
    }
    assert!(checked > 0, "nothing was checked");
}

#[tokio::test]
async fn grow_3_to_8_with_tokens_then_shrink_to_5_following_the_voter_table() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = form(&d, tmp.path(), "g", 3).await;
    let mut secrets = Vec::new();
    for i in 4..=8 {
        let token = agents[0]
            .create_token(&["--ttl", "10m", "--description", &format!("for g{i}")])
            .await
            .expect("token");
        secrets.push(token.rsplit('.').next().unwrap_or_default().to_string());
        // Through a different member each time: followers pass the join to the leader.
        let via = &agents[i % agents.len()];
        let joiner = join(tmp.path(), &format!("g{i}"), via, &token);
        agents.push(joiner);
        wait_formed(&refs(&agents), i, FORM)
            .await
            .unwrap_or_else(|e| panic!("{i} members: {e:#}"));
        assert_eq!(voter_target(i), [0, 1, 1, 3, 3, 5, 5, 7, 7][i]);
    }
    // wait_formed counted 8 members; they are the 8 we started, by name.
    let s = status(&agents[7]).await;
    let expected: Vec<String> = (1..=8).map(|i| format!("g{i}")).collect();
    assert_eq!(member_names(&s), expected);
    let tokens = token_list(&agents[3]).await;
    let used: Vec<&str> = tokens
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|t| (t["state"] == "consumed").then(|| t["last_used_by"].as_str())?)
        .collect();
    assert_eq!(used.len(), 5, "{tokens}");

    // Shrink 8 → 5: the nonvoter, a voter, then whoever leads.
    for step in 0..3 {
        let s = status(&agents[0]).await;
        let members = s["members"].as_array().cloned().unwrap_or_default();
        let leader = s["leader"].as_str().unwrap_or_default().to_string();
        let pick = |suffrage: &str| {
            members
                .iter()
                .filter(|m| m["suffrage"] == suffrage && m["name"] != leader.as_str())
                .filter_map(|m| m["name"].as_str())
                .find(|n| *n != agents[0].name)
                .map(str::to_string)
        };
        let victim = match step {
            0 => pick("nonvoter").expect("a nonvoter"),
            1 => pick("voter").expect("a voter"),
            _ => leader.clone(),
        };
        let caller = agents
            .iter()
            .find(|a| a.name != victim)
            .expect("someone else");
        let (code, out, err) = caller
            .cli(&["node", "remove", &victim])
            .await
            .expect("remove");
        assert_eq!(code, 0, "removing {victim}: {out}{err}");
        let i = agents.iter().position(|a| a.name == victim).expect("known");
        let mut gone = agents.remove(i);
        let exit = gone.wait_exit(FORM).await.expect("the removed node stops");
        assert_eq!(exit, Some(0), "{}", tail(&gone.log(), 20));
        assert!(
            gone.log().contains("removed from cluster"),
            "{}",
            gone.log()
        );
        let n = agents.len();
        wait_formed(&refs(&agents), n, FORM)
            .await
            .unwrap_or_else(|e| panic!("{n} members after removing {victim}: {e:#}"));
        if step == 2 {
            let new_leader = leader_of(&agents).await;
            assert_ne!(new_leader, victim, "leadership moved on");
        }
    }
    // wait_formed counted 5 members; they are the 5 still running, by name.
    let s = status(&agents[0]).await;
    let mut running: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
    running.sort();
    assert_eq!(member_names(&s), running);

    // Secrets at rest are hashes: neither the join-token secrets nor the operator token appear
    // anywhere under any data dir.
    // The initiator (whichever of g1..g3 registered first) printed it.
    let operator = (1..=3)
        .filter_map(|i| std::fs::read_to_string(tmp.path().join(format!("g{i}.log"))).ok())
        .find_map(|log| {
            log.lines()
                .find(|l| l.starts_with("OP1."))
                .map(str::to_string)
        })
        .expect("the initiator printed an operator token");
    let operator_secret = operator.rsplit('.').next().unwrap_or_default().to_string();
    for a in agents.iter_mut() {
        a.terminate().await.expect("stop");
    }
    let dirs: Vec<std::path::PathBuf> = (1..=8).map(|i| tmp.path().join(format!("g{i}"))).collect();
    let dirs: Vec<&Path> = dirs.iter().map(|p| p.as_path()).collect();
    for secret in &secrets {
        assert_nowhere_in(&dirs, secret, "a join-token secret");
    }
    assert_nowhere_in(&dirs, &operator_secret, "the operator token's secret");
}

/// Starts a joiner and expects a permanent refusal naming `kind`.
async fn expect_refused(root: &Path, name: &str, via: &AgentProc, token: &str, kind: &str) {
    let mut joiner = join(root, name, via, token);
    let code = joiner.wait_exit(FORM).await.expect("joiner exits");
    let log = joiner.log();
    assert_eq!(code, Some(2), "{name}: {log}");
    assert!(log.contains(kind), "{name} should say {kind}: {log}");
    assert!(
        !joiner.data_dir.join("cluster.json").exists(),
        "a refused joiner holds no cluster"
    );
}

#[tokio::test]
async fn consumed_expired_revoked_and_wrong_pin_tokens_are_refused_and_change_nothing() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = form(&d, tmp.path(), "t", 1).await;
    let leader = &agents[0];

    let single = leader.create_token(&[]).await.expect("token");
    let expiring = leader.create_token(&["--ttl", "1s"]).await.expect("token");
    let revoked = leader.create_token(&[]).await.expect("token");
    let revoked_id = revoked.split('.').nth(2).expect("id").to_string();
    let (code, _, err) = leader
        .cli(&["token", "revoke", &revoked_id])
        .await
        .expect("revoke");
    assert_eq!(code, 0, "{err}");
    let first = join(tmp.path(), "t2", leader, &single);
    let mut members = refs(&agents);
    members.push(&first);
    wait_formed(&members, 2, FORM).await.expect("t2 joined");
    wait_for("the short token to expire", FORM, || async {
        let list = token_list(leader).await;
        list.as_array()?
            .iter()
            .any(|t| expiring.contains(t["id"].as_str().unwrap_or("-")) && t["state"] == "expired")
            .then_some(())
    })
    .await
    .expect("expired");

    let before_tokens = token_list(leader).await;
    let before_members = member_names(&status(leader).await);
    expect_refused(tmp.path(), "x1", leader, &single, "token_consumed").await;
    expect_refused(tmp.path(), "x2", leader, &expiring, "token_expired").await;
    expect_refused(tmp.path(), "x3", leader, &revoked, "token_revoked").await;
    // The right secret, but the pin of another CA: the joiner never talks to this cluster.
    let other_pin = "ab".repeat(32);
    let mut parts: Vec<&str> = single.split('.').collect();
    parts[1] = &other_pin;
    expect_refused(
        tmp.path(),
        "x4",
        leader,
        &parts.join("."),
        "ca_pin_mismatch",
    )
    .await;
    // A guessed secret for a real id says nothing but unauthorized.
    let mut parts: Vec<String> = revoked.split('.').map(str::to_string).collect();
    parts[3] = "0".repeat(64);
    expect_refused(tmp.path(), "x5", leader, &parts.join("."), "unauthorized").await;
    // A taken name (another machine, so another data dir, called t2 too).
    let fresh = leader.create_token(&[]).await.expect("token");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    expect_refused(&elsewhere, "t2", leader, &fresh, "name_taken").await;

    assert_eq!(member_names(&status(leader).await), before_members);
    let after_tokens = token_list(leader).await;
    let without_fresh: Vec<&serde_json::Value> = after_tokens
        .as_array()
        .expect("array")
        .iter()
        .filter(|t| !fresh.contains(t["id"].as_str().unwrap_or("-")))
        .collect();
    assert_eq!(
        serde_json::to_value(&without_fresh).expect("json"),
        before_tokens,
        "refused joins leave every token as it was"
    );
}

#[tokio::test]
async fn ten_joiners_racing_for_one_single_use_token_admit_exactly_one() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = form(&d, tmp.path(), "r", 1).await;
    let token = agents[0]
        .create_token(&["--uses", "1"])
        .await
        .expect("token");
    let mut racers: Vec<AgentProc> = (0..10)
        .map(|i| join(tmp.path(), &format!("racer{i}"), &agents[0], &token))
        .collect();
    let mut exits = Vec::new();
    let mut winner = None;
    for (i, racer) in racers.iter_mut().enumerate() {
        match racer.wait_exit(Duration::from_secs(20)).await {
            Ok(code) => exits.push((racer.name.clone(), code, racer.log())),
            Err(_) => {
                assert!(winner.is_none(), "two racers are still running");
                winner = Some(i);
            }
        }
    }
    let winner = winner.expect("one racer joined and keeps running");
    assert_eq!(exits.len(), 9);
    for (name, code, log) in &exits {
        assert_eq!(*code, Some(2), "{name}: {log}");
        assert!(log.contains("token_consumed"), "{name}: {log}");
    }
    let s = status(&agents[0]).await;
    let names = member_names(&s);
    assert_eq!(names.len(), 2, "{s}");
    assert!(names.contains(&racers[winner].name), "{s}");
}

#[tokio::test]
async fn an_autoscaling_node_with_the_discovery_url_and_a_group_token_joins_the_formed_cluster() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    // The launch template: the same flags on every machine. The first three form the cluster.
    let template = |token: &str| -> Vec<String> {
        let mut args = vec!["--discovery".to_string(), url.clone()];
        if !token.is_empty() {
            args.extend(["--token".to_string(), token.to_string()]);
        }
        args
    };
    let start = |name: &str, token: &str| {
        let args = template(token);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        AgentProc::start(tmp.path(), name, &args).expect("start")
    };
    let mut agents: Vec<AgentProc> = (1..=3).map(|i| start(&format!("asg{i}"), "")).collect();
    wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    wait_for("the record to say formed", FORM, || async {
        let r = muster_tests::get(&format!("{url}/_muster/record"))
            .await
            .ok()?;
        r.body.contains("formed").then_some(())
    })
    .await
    .expect("formed record");
    let group = agents[1]
        .create_token(&["--uses", "50", "--ttl", "30d", "--description", "asg"])
        .await
        .expect("group token");
    for i in 4..=5 {
        agents.push(start(&format!("asg{i}"), &group));
        wait_formed(&refs(&agents), i, FORM)
            .await
            .unwrap_or_else(|e| panic!("asg{i}: {e:#}"));
        assert!(
            agents[i - 1]
                .log()
                .contains("without this node; joining it with --token"),
            "{}",
            agents[i - 1].log()
        );
    }
    let tokens = token_list(&agents[0]).await;
    assert_eq!(tokens[0]["uses_left"], 48, "{tokens}");
    // A restart of a joined machine uses only its data dir.
    agents[4].kill9().await.expect("kill");
    agents[4].restart().expect("restart");
    wait_formed(&refs(&agents), 5, FORM).await.expect("back");
    assert_eq!(token_list(&agents[0]).await[0]["uses_left"], 48);
}

#[tokio::test]
async fn a_removed_node_stops_never_rejoins_and_its_name_can_join_again_with_a_new_token() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = form(&d, tmp.path(), "l", 3).await;
    let leader = leader_of(&agents).await;
    let li = agents
        .iter()
        .position(|a| a.name == leader)
        .expect("leader");
    let other = (li + 1) % 3;
    let (code, out, err) = agents[other]
        .cli(&["node", "remove", &leader, "--json"])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let answer: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(answer["was_voter"], true);
    let mut old = agents.remove(li);
    assert_eq!(old.wait_exit(FORM).await.expect("stops"), Some(0));
    assert!(old.log().contains("removed from cluster"), "{}", old.log());
    wait_formed(&refs(&agents), 2, FORM)
        .await
        .expect("two members, one voter");
    let new_leader = leader_of(&agents).await;
    assert_ne!(new_leader, leader);
    let (code, _, err) = agents[0]
        .cli(&["kv", "put", "after", "1"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");

    // Restarted as it was, it refuses: removed nodes never rejoin.
    old.restart().expect("restart");
    assert_eq!(old.wait_exit(FORM).await.expect("exits"), Some(2));
    assert!(
        old.last_log().contains("was removed from cluster"),
        "{}",
        old.last_log()
    );
    assert_eq!(member_names(&status(&agents[0]).await).len(), 2);

    // The same name on a wiped machine joins again with a new token, as a new node.
    let old_id = std::fs::read_to_string(old.data_dir.join("identity.json")).expect("id");
    std::fs::remove_dir_all(&old.data_dir).expect("wipe");
    let token = agents[0].create_token(&[]).await.expect("token");
    let again = join(tmp.path(), &leader, &agents[0], &token);
    agents.push(again);
    wait_formed(&refs(&agents), 3, FORM)
        .await
        .expect("back as a new node");
    let new_id = std::fs::read_to_string(agents[2].data_dir.join("identity.json")).expect("id");
    assert_ne!(old_id, new_id, "a new node id");
}

#[tokio::test]
async fn a_removal_that_would_lose_quorum_is_refused_unless_forced() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = form(&d, tmp.path(), "q", 3).await;
    // Stop a voter that does not lead; the leader must notice it is unreachable.
    let leader = leader_of(&agents).await;
    let down = agents
        .iter()
        .position(|a| a.name != leader)
        .expect("a follower");
    agents[down].kill9().await.expect("kill");
    let healthy = agents
        .iter()
        .position(|a| a.name != leader && a.name != agents[down].name)
        .expect("another follower");
    let healthy_name = agents[healthy].name.clone();
    let li = agents
        .iter()
        .position(|a| a.name == leader)
        .expect("leader");
    let down_name = agents[down].name.clone();
    wait_reachable(&agents[li], &down_name, false).await;
    let (code, out, err) = agents[li]
        .cli(&["node", "remove", &healthy_name])
        .await
        .expect("remove");
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("would_lose_quorum"), "{err}");
    let refused = err;
    assert!(
        refused.contains(&agents[down].name),
        "names the missing voter: {refused}"
    );
    assert!(refused.contains("--force"), "{refused}");
    let s = status(&agents[li]).await;
    assert_eq!(member_names(&s).len(), 3, "nothing changed: {s}");

    // Forced, the removal is recorded; it completes once the missing voter is back.
    let (code, out, err) = agents[li]
        .cli(&["node", "remove", &healthy_name, "--force"])
        .await
        .expect("forced");
    assert_eq!(code, 0, "{out}{err}");
    agents[down].restart().expect("restart");
    let mut gone = agents.remove(healthy);
    assert_eq!(gone.wait_exit(FORM).await.expect("stops"), Some(0));
    wait_formed(&refs(&agents), 2, FORM)
        .await
        .expect("recovered");

    // Removing the only other member of a two-member cluster leaves a working one-member one.
    let victim = agents
        .iter()
        .position(|a| a.name != agents[0].name)
        .expect("other");
    let victim_name = agents[victim].name.clone();
    let (code, out, err) = agents[0]
        .cli(&["node", "remove", &victim_name])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let mut gone = agents.remove(victim);
    assert_eq!(gone.wait_exit(FORM).await.expect("stops"), Some(0));
    wait_formed(&refs(&agents), 1, FORM)
        .await
        .expect("one member");
    let (code, _, err) = agents[0]
        .cli(&["node", "remove", &agents[0].name])
        .await
        .expect("remove last");
    assert_eq!(code, 1);
    assert!(err.contains("only member"), "{err}");
}

#[tokio::test]
async fn operator_commands_over_tcp_need_a_valid_operator_token() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = form(&d, tmp.path(), "o", 1).await;
    let a = &agents[0];
    let formation_token = a
        .printed_operator_token()
        .await
        .expect("printed at formation");
    let server = a.addr.as_str();
    let with = |token: &str| vec![("MUSTER_OPERATOR_TOKEN", token.to_string())];
    let run = |args: Vec<&'static str>, env: Vec<(&'static str, String)>| async move {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut all = args.clone();
        all.extend(["--server", server]);
        run_muster(&all, &env).await.expect("run")
    };

    let (code, out, err) = run(vec!["kv", "put", "k", "v"], with(&formation_token)).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(vec!["kv", "get", "k"], with(&formation_token)).await;
    assert_eq!((code, out.trim()), (0, "v"));

    let (code, _, err) = run(vec!["status"], vec![]).await;
    assert_eq!(code, 1);
    assert!(err.contains("MUSTER_OPERATOR_TOKEN"), "{err}");
    let mut wrong: Vec<String> = formation_token.split('.').map(str::to_string).collect();
    wrong[3] = "1".repeat(64);
    let (code, _, err) = run(vec!["status"], with(&wrong.join("."))).await;
    assert_eq!(code, 1);
    assert!(err.contains("unauthorized"), "{err}");
    let join_token = a.create_token(&[]).await.expect("join token");
    let (code, _, err) = run(vec!["status"], with(&join_token)).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("join token"),
        "a join token is not an operator token: {err}"
    );
    // Without a bearer at all, straight at the API.
    let pin = formation_token.split('.').nth(1).expect("pin");
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(
            (*muster_shared::tls::pinned_client_config(pin).expect("tls")).clone(),
        )
        .build()
        .expect("client");
    let resp = http
        .get(format!("https://{server}/v1/kv?key=k"))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 401);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["kind"], "unauthorized");

    // A second operator token works until it is revoked.
    let (code, second, err) = run(
        vec!["operator-token", "create", "--description", "ci"],
        with(&formation_token),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let second = second.trim().to_string();
    let (code, _, err) = run(vec!["members"], with(&second)).await;
    assert_eq!(code, 0, "{err}");
    let id = second.split('.').nth(2).expect("id");
    let (code, _, err) = a
        .cli(&["operator-token", "revoke", id])
        .await
        .expect("revoke");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(vec!["members"], with(&second)).await;
    assert_eq!(code, 1);
    assert!(err.contains("unauthorized"), "{err}");
    let (code, out, _) = a
        .cli(&["operator-token", "list", "--json"])
        .await
        .expect("list");
    assert_eq!(code, 0);
    assert!(
        !out.contains(second.rsplit('.').next().unwrap_or("-")),
        "no secrets: {out}"
    );
}

#[tokio::test]
async fn backup_then_restore_keeps_every_value_and_a_corrupt_backup_is_refused() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = form(&d, tmp.path(), "b", 3).await;
    for i in 0..50 {
        let (code, _, err) = agents[i % 3]
            .cli(&["kv", "put", &format!("key/{i:02}"), &format!("value {i}")])
            .await
            .expect("put");
        assert_eq!(code, 0, "{err}");
    }
    // Join tokens in the backup: one active, one revoked before the backup was taken.
    let active = agents[0]
        .create_token(&["--description", "active at backup"])
        .await
        .expect("token");
    let revoked = agents[0]
        .create_token(&["--description", "revoked before backup"])
        .await
        .expect("token");
    let id_of = |token: &str| token.split('.').nth(2).expect("token id").to_string();
    let (code, _, err) = agents[2]
        .cli(&["token", "revoke", &id_of(&revoked)])
        .await
        .expect("revoke");
    assert_eq!(code, 0, "{err}");
    let file = tmp.path().join("cluster.backup");
    let file_arg = file.display().to_string();
    let (code, out, err) = agents[1].cli(&["backup", &file_arg]).await.expect("backup");
    assert_eq!(code, 0, "{out}{err}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "a backup holds the CA key");
    // Written after the backup: must not be in the restored cluster.
    let (code, _, err) = agents[0]
        .cli(&["kv", "put", "late", "x"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    let (_, expected, _) = agents[0].cli(&["kv", "list", "key/"]).await.expect("list");

    // Corrupt copies are refused before anything is written.
    let bytes = std::fs::read(&file).expect("read");
    let mut flipped = bytes.clone();
    let last = flipped.len() - 2;
    flipped[last] ^= 0x20;
    for (name, content) in [
        ("flipped", flipped),
        ("truncated", bytes[..bytes.len() / 2].to_vec()),
        ("foreign", b"not a backup\n{}".to_vec()),
    ] {
        let bad = tmp.path().join(name);
        std::fs::write(&bad, content).expect("write");
        let dir = tmp.path().join(format!("restore-{name}"));
        let (code, _, err) = run_muster(
            &[
                "restore",
                &bad.display().to_string(),
                "--name",
                "r",
                "--advertise",
                "127.0.0.1:1",
                "--data-dir",
                &dir.display().to_string(),
                "--config",
                "/dev/null",
            ],
            &[],
        )
        .await
        .expect("run");
        assert_eq!(code, 1, "{name}: {err}");
        assert!(
            err.contains("corrupt") || err.contains("not a muster backup"),
            "{name}: {err}"
        );
        assert!(!dir.exists(), "{name}: nothing was written");
    }

    // The real one: a one-node cluster with every value, a new id, and revoked join tokens.
    let old = agents[0].status().await.expect("status");
    let restored = AgentProc::start_command(tmp.path(), "restored", &["restore", &file_arg], &[])
        .expect("restore");
    wait_formed(&[&restored], 1, FORM)
        .await
        .expect("restored cluster");
    let s = restored.status().await.expect("status");
    assert_ne!(
        s["cluster_id"], old["cluster_id"],
        "a restored cluster has a new id"
    );
    let (_, got, err) = restored.cli(&["kv", "list", "key/"]).await.expect("list");
    assert_eq!(got, expected, "{err}");
    assert_eq!(got.lines().count(), 50);
    // Written after the backup: the restored node answers, and the key is not there (exit 1
    // alone would also be an unreachable agent).
    let (code, out, err) = restored
        .cli(&["kv", "get", "late", "--json"])
        .await
        .expect("get");
    let answer: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kv get --json: {e}: {out}{err}"));
    assert_eq!(
        (code, answer["kind"].as_str()),
        (1, Some("not_found")),
        "written after the backup: {out}{err}"
    );
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.contains("late")),
        "{answer}"
    );
    // Both join tokens are listed, both revoked: the one revoked before the backup, and the one
    // that was active (a restore revokes every join token of the backup).
    let tokens = token_list(&restored).await;
    let state_of = |token: &str| {
        let id = id_of(token);
        tokens
            .as_array()
            .and_then(|list| list.iter().find(|t| t["id"] == id.as_str()))
            .map(|t| t["state"].clone())
    };
    assert_eq!(
        (state_of(&revoked), state_of(&active)),
        (Some("revoked".into()), Some("revoked".into())),
        "{tokens}"
    );
    // And the formerly active one admits nobody.
    expect_refused(
        tmp.path(),
        "with-old-token",
        &restored,
        &active,
        "token_revoked",
    )
    .await;
    // The operator token restore printed works over TCP, on this cluster.
    let operator = restored
        .printed_operator_token()
        .await
        .expect("restore printed an operator token");
    let api = muster_tests::OperatorApi::new(&operator, Duration::from_secs(10)).expect("client");
    let over_tcp = api.status(&restored.addr).await.expect("status over TCP");
    assert_eq!(
        (over_tcp.status, &over_tcp.body["cluster_id"]),
        (200, &s["cluster_id"]),
        "{over_tcp:?}"
    );
    // It takes writes and new members.
    let (code, _, err) = restored.cli(&["kv", "put", "new", "1"]).await.expect("put");
    assert_eq!(code, 0, "{err}");
    let token = restored.create_token(&[]).await.expect("token");
    let joiner = join(tmp.path(), "after-restore", &restored, &token);
    wait_formed(&[&restored, &joiner], 2, FORM)
        .await
        .expect("joined the restored cluster");
}

#[tokio::test]
async fn the_only_voter_hands_over_to_a_reachable_successor_before_it_leaves() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = form(&d, tmp.path(), "s", 1).await;
    let (code, _, err) = agents[0]
        .cli(&["kv", "put", "kept", "yes"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    let token = agents[0].create_token(&[]).await.expect("token");
    agents.push(join(tmp.path(), "s2", &agents[0], &token));
    wait_formed(&refs(&agents), 2, FORM)
        .await
        .expect("two members, one voter");

    // With its only possible successor down, the last voter refuses to leave.
    agents[1].kill9().await.expect("kill");
    wait_reachable(&agents[0], "s2", false).await;
    let (code, out, err) = agents[0]
        .cli(&["node", "remove", "s1"])
        .await
        .expect("remove");
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("would_lose_quorum") && err.contains("last voter"),
        "{err}"
    );
    assert_eq!(member_names(&status(&agents[0]).await), ["s1", "s2"]);

    // Back and caught up, s2 is voted in first; then s1 leaves and stops.
    agents[1].restart().expect("restart");
    wait_reachable(&agents[0], "s2", true).await;
    let (code, out, err) = agents[0]
        .cli(&["node", "remove", "s1"])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let mut old = agents.remove(0);
    assert_eq!(old.wait_exit(FORM).await.expect("stops"), Some(0));
    wait_formed(&refs(&agents), 1, FORM)
        .await
        .expect("s2 alone");
    let s = status(&agents[0]).await;
    assert_eq!(s["leader"], "s2", "{s}");
    let (code, out, err) = agents[0].cli(&["kv", "get", "kept"]).await.expect("get");
    assert_eq!((code, out.trim()), (0, "yes"), "{err}");
}
