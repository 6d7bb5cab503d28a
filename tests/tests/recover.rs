//! `muster recover`, with real `muster agent` processes on loopback: a majority of the voters
//! is killed for good, a survivor (agent stopped) is made the only voter, and the cluster
//! serves again with every write the survivors held, including those the last backup lacks.
//! The lost members, started again afterwards, are refused by the survivors and stop without
//! ever calling an election among themselves (three of five could otherwise elect a second
//! leader). The plan is printed first and nothing is written without `--yes`; the refusals
//! (a majority left, the survivor named lost, an unknown name, an agent still running) change
//! nothing.

use std::time::Duration;

use muster_tests::{AgentProc, OperatorApi, init_and_join, run_muster, wait_for};

/// `muster recover ARGS --data-dir DIR`: (exit code, stdout, stderr).
async fn recover(agent: &AgentProc, args: &[&str]) -> (i32, String, String) {
    let dir = agent.data_dir.display().to_string();
    let mut all = vec!["recover"];
    all.extend_from_slice(args);
    all.extend(["--data-dir", &dir]);
    run_muster(&all, &[]).await.expect("muster recover runs")
}

/// What the survivor holds, as `recover --json` reports it: (the last index it knows
/// committed, its last log entry's term and index, the highest term it has seen): the order
/// in which survivors are compared.
async fn holds(agent: &AgentProc, lost: &str) -> (u64, u64, u64, u64) {
    let (code, out, err) = recover(agent, &["--lost", lost, "--json"]).await;
    assert_eq!(code, 0, "dry run on {}: {err}", agent.name);
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["carried_out"], false, "a dry run writes nothing");
    let pair = &report["last_log"];
    (
        report["committed_index"].as_u64().expect("committed"),
        pair[0].as_u64().expect("term"),
        pair[1].as_u64().expect("index"),
        report["term"].as_u64().expect("term seen"),
    )
}

/// Waits until `agent` leads a cluster of exactly `members` (by name) and reports recovery
/// epoch 1 with `lost`.
async fn wait_recovered(api: &OperatorApi, agent: &AgentProc, members: &[&str], lost: &[&str]) {
    let want: Vec<String> = members.iter().map(|s| s.to_string()).collect();
    let lost: Vec<String> = lost.iter().map(|s| s.to_string()).collect();
    wait_for(
        &format!("{} to lead {want:?} after the recovery", agent.name),
        Duration::from_secs(30),
        || async {
            let s = api.status(&agent.addr).await.ok()?.body;
            let mut names: Vec<String> = s["members"]
                .as_array()?
                .iter()
                .filter_map(|m| m["name"].as_str().map(str::to_string))
                .collect();
            names.sort();
            let r = &s["recovered"];
            let said: Vec<String> = r["lost"]
                .as_array()?
                .iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect();
            (s["leader"] == agent.name.as_str() && names == want && r["epoch"] == 1 && said == lost)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", agent.last_log()));
}

/// Every key `prefix/0..n` reads back with its value through `addr`.
async fn all_read_back(api: &OperatorApi, addr: &str, prefix: &str, n: usize) {
    for i in 0..n {
        let key = format!("{prefix}/{i}");
        let r = api.get(addr, &key).await.expect("get");
        assert!(r.ok(), "{key}: {:?}", r.body);
        assert_eq!(r.body["value"], i.to_string(), "{key}");
    }
}

/// Starts the lost members again and waits for each to stop by itself, refused: its data dir
/// marked removed, and no election called on the way.
async fn lost_come_back_and_stop(lost: &mut [AgentProc]) {
    for agent in lost.iter_mut() {
        agent.restart().expect("restart a lost member");
    }
    for agent in lost.iter_mut() {
        let code = agent
            .wait_exit(Duration::from_secs(45))
            .await
            .unwrap_or_else(|e| panic!("{} did not stop: {e:#}\n{}", agent.name, agent.last_log()));
        let log = agent.last_log();
        assert!(
            log.contains("removed from cluster"),
            "{} exited {code:?} without learning it was removed:\n{log}",
            agent.name
        );
        assert!(
            !log.contains("calling an election"),
            "{} called an election after the recovery:\n{log}",
            agent.name
        );
        let cluster_json =
            std::fs::read_to_string(agent.data_dir.join("cluster.json")).expect("cluster.json");
        assert!(
            cluster_json.contains("removed_ms"),
            "{}: {cluster_json}",
            agent.name
        );
    }
}

#[tokio::test]
async fn one_of_three_recovers_with_the_writes_the_backup_lacks() {
    let _alone = muster_tests::exclusive::heavy().await;
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["r1", "r2", "r3"])
        .await
        .expect("3 members");
    let token = agents[0].printed_operator_token().await.expect("token");
    let api = OperatorApi::new(&token, Duration::from_secs(5)).expect("client");
    let backup = tmp.path().join("before.backup");
    let (code, _, err) = agents[0]
        .cli(&["backup", &backup.display().to_string()])
        .await
        .expect("backup");
    assert_eq!(code, 0, "backup: {err}");
    for i in 0..20 {
        let r = api
            .put(&agents[i % 3].addr, &format!("after/{i}"), &i.to_string())
            .await
            .expect("put");
        assert!(r.ok(), "put {i}: {:?}", r.body);
    }

    // r1's agent still runs: recover refuses to touch its store.
    let (code, _, err) = recover(&agents[0], &["--lost", "r2,r3", "--yes"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("an agent is running"), "{err}");

    // r1 stops, but r2 and r3 are alive (as behind a partition): they are not lost.
    agents[0].kill9().await.expect("kill -9 r1");
    let (code, out, err) = recover(&agents[0], &["--lost", "r2,r3", "--yes"]).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("accept connections"), "{err}");
    assert!(out.contains("WARNING: r2"), "{out}");

    for agent in agents.iter_mut().skip(1) {
        agent.kill9().await.expect("kill -9");
    }
    let (r1, lost) = agents.split_at_mut(1);
    let r1 = &mut r1[0];

    // Refusals write nothing.
    let before = holds(r1, "r2,r3").await;
    for (lost, says) in [
        ("r2", "2 of 3 voters would survive"),
        ("r1,r2", "\"r1\" is this machine"),
        ("r2,nope", "\"nope\" is not a member"),
    ] {
        let (code, _, err) = recover(r1, &["--lost", lost, "--yes"]).await;
        assert_ne!(code, 0, "--lost {lost}");
        assert!(err.contains(says), "--lost {lost}: {err}");
    }
    // Without --yes: the plan, and nothing written.
    let (code, out, err) = recover(r1, &["--lost", "r2,r3"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("remove r2") && out.contains("remove r3"),
        "{out}"
    );
    assert!(out.contains("Nothing was written"), "{out}");
    assert_eq!(
        holds(r1, "r2,r3").await,
        before,
        "a refusal or dry run wrote"
    );

    let (code, out, err) = recover(r1, &["--lost", "r2,r3", "--yes"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("recovered: r1 is the only voter"), "{out}");
    // Run again before the agent started: it says so rather than treating r2 as unknown.
    let (code, _, err) = recover(r1, &["--lost", "r2,r3", "--yes"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("already recovered (epoch 1"), "{err}");
    r1.restart_without_init().expect("restart r1");
    wait_recovered(&api, r1, &["r1"], &["r2", "r3"]).await;
    all_read_back(&api, &r1.addr, "after", 20).await;
    let r = api.put(&r1.addr, "later", "1").await.expect("put");
    assert!(r.ok(), "a write after the recovery: {:?}", r.body);

    lost_come_back_and_stop(lost).await;
    let r = api.put(&r1.addr, "later", "2").await.expect("put");
    assert!(r.ok(), "a write after the lost came back: {:?}", r.body);
    wait_recovered(&api, r1, &["r1"], &["r2", "r3"]).await;
}

#[tokio::test]
async fn two_of_five_recover_and_the_three_lost_are_refused_together() {
    let _alone = muster_tests::exclusive::heavy().await;
    let tmp = tempfile::tempdir().expect("tmp");
    let names = ["f1", "f2", "f3", "f4", "f5"];
    let mut agents = init_and_join(tmp.path(), &names).await.expect("5 members");
    let token = agents[0].printed_operator_token().await.expect("token");
    let api = OperatorApi::new(&token, Duration::from_secs(5)).expect("client");
    for i in 0..30 {
        let r = api
            .put(&agents[i % 5].addr, &format!("k/{i}"), &i.to_string())
            .await
            .expect("put");
        assert!(r.ok(), "put {i}: {:?}", r.body);
    }
    // The three lost first (the survivors keep running a moment without quorum), then the two.
    for agent in agents.iter_mut().rev() {
        agent.kill9().await.expect("kill -9");
    }
    let (survivors, lost) = agents.split_at_mut(2);

    // Recover on the survivor that knows the most committed (then holds the latest log), as
    // the help says.
    let lost_names = "f3,f4,f5";
    let first = holds(&survivors[0], lost_names).await;
    let second = holds(&survivors[1], lost_names).await;
    let (chosen, other) = if second > first { (1, 0) } else { (0, 1) };
    let (code, out, err) = recover(&survivors[chosen], &["--lost", lost_names, "--yes"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let other_name = survivors[other].name.clone();
    assert!(
        out.contains(&format!("keep   {other_name}")),
        "the other survivor is kept: {out}"
    );
    survivors[chosen]
        .restart_without_init()
        .expect("restart the chosen survivor");
    survivors[other]
        .restart_without_init()
        .expect("restart the other survivor");
    let mut members = vec![survivors[0].name.as_str(), survivors[1].name.as_str()];
    members.sort();
    wait_recovered(&api, &survivors[chosen], &members, &["f3", "f4", "f5"]).await;
    // The other survivor follows the recovered one and serves every write.
    let leader = survivors[chosen].name.clone();
    wait_for(
        &format!("{other_name} to follow {leader}"),
        Duration::from_secs(30),
        || async {
            let s = api.status(&survivors[other].addr).await.ok()?.body;
            (s["leader"] == leader.as_str()).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", survivors[other].last_log()));
    all_read_back(&api, &survivors[other].addr, "k", 30).await;

    lost_come_back_and_stop(lost).await;
    let r = api
        .put(&survivors[other].addr, "after", "1")
        .await
        .expect("put");
    assert!(r.ok(), "a write after the lost came back: {:?}", r.body);
    let s = api
        .status(&survivors[chosen].addr)
        .await
        .expect("status")
        .body;
    assert_eq!(s["leader"], leader.as_str(), "{s}");
}
