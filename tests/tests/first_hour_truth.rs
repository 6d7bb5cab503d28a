//! What a new user is told when things are not fine, on real processes: `status` after the
//! quorum is lost names no dead leader and counts the voters left (and `apply`'s recovery steps
//! name the data dirs the members run with); `/readyz` answers from the moment its port is
//! bound, while an agent still joins; a discovery URL that etcd formed is named as such, never
//! joined; no message names a member by its internal identity (`node-….muster`).

use std::time::Duration;

use muster_tests::*;

const FORM: Duration = Duration::from_secs(60);

/// The member table's rows of `muster status` text (after the blank line).
fn member_rows(out: &str) -> Vec<&str> {
    out.lines()
        .skip_while(|l| !l.starts_with("NAME"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

#[tokio::test]
async fn status_after_the_quorum_is_lost_names_no_dead_leader_and_counts_the_voters() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["m1", "m2", "m3"])
        .await
        .expect("formed");
    let status = agents[0].status().await.expect("status");
    let leader = status["leader"].as_str().expect("a leader").to_string();
    // The cluster as a file, while every member answers: it knows their data dirs.
    let (code, exported, err) = agents[0].cli(&["config", "export"]).await.expect("export");
    assert_eq!(code, 0, "{err}");
    for a in &agents {
        assert!(
            exported.contains(&format!("data_dir = \"{}\"", a.data_dir.display())),
            "export names each member's own data dir: {exported}"
        );
    }
    let file = tmp.path().join("cluster.toml");
    std::fs::write(&file, &exported).expect("write cluster.toml");
    let li = agents.iter().position(|a| a.name == leader).expect("ours");
    let (other, survivor) = match li {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    // The leader and one more voter die: the survivor cannot elect anyone, and its raft still
    // remembers the dead leader.
    agents[li].kill9().await.expect("kill leader");
    agents[other].kill9().await.expect("kill voter");
    let s = wait_for("the survivor to say the quorum is lost", FORM, || async {
        let s = agents[survivor].status().await?;
        (s["leader"].is_null() && s["quorum_lost"] == true).then_some(s)
    })
    .await
    .expect("quorum lost reported");
    assert_eq!(s["voters_reachable"], 1, "{s}");
    for m in s["members"].as_array().expect("members") {
        let alive = m["name"] == agents[survivor].name.as_str();
        assert_eq!(m["reachable"], alive, "{s}");
    }
    let (code, out, err) = agents[survivor].cli(&["status"]).await.expect("status");
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("leader"))
        .expect("a leader line");
    assert!(
        line.contains("no leader reachable")
            && line.contains("quorum lost (1 of 3 voters reachable)")
            && !line.contains(&leader),
        "{out}"
    );
    assert!(
        member_rows(&out).iter().all(|r| !r.contains('*')),
        "no member is starred as leader: {out}"
    );
    // Still so a while later: the answer does not flip back to the remembered leader.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s = agents[survivor].status().await.expect("status");
        assert!(s["leader"].is_null(), "{s}");
    }

    // apply refuses, and its recovery steps use the data dirs the members run with, not the
    // default one.
    let (code, out, err) = agents[survivor]
        .cli(&["apply", "-f", &file.display().to_string(), "--yes"])
        .await
        .expect("apply");
    assert_eq!(code, 1, "{out}{err}");
    let dir = agents[survivor].data_dir.display().to_string();
    let mut lost = [agents[li].name.clone(), agents[other].name.clone()];
    lost.sort();
    // No backup was given, so the steps recover from the survivor, in its own data dir.
    assert!(
        out.contains(&format!(
            "muster recover --lost {} --data-dir {dir} --yes",
            lost.join(",")
        )),
        "the survivor's data dir in the steps:\n{out}"
    );
    assert!(!out.contains("/var/lib/muster"), "{out}");

    // One voter back: a majority elects, and the survivor names the new leader again.
    agents[other].restart().expect("restart");
    let s = wait_for("a leader again, with 2 of 3 voters", FORM, || async {
        let s = agents[survivor].status().await?;
        (!s["leader"].is_null() && s["quorum_lost"] == false && s["voters_reachable"] == 2)
            .then_some(s)
    })
    .await
    .expect("a new leader");
    assert_ne!(s["leader"], leader.as_str(), "{s}");
}

#[tokio::test]
async fn readyz_answers_503_with_a_kind_from_the_moment_its_port_is_bound() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(2).await.expect("url");
    let metrics: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let readyz = |i: usize| format!("http://{}/readyz", metrics[i]);
    // The first agent forms the cluster and waits for its peer: not ready, and from its very
    // first answer it says so with a kind a probe can match.
    let first = AgentProc::start(
        tmp.path(),
        "r1",
        &["--discovery", &url, "--metrics-listen", &metrics[0]],
    )
    .expect("start");
    let answer = wait_for("/readyz to answer at all", FORM, || async {
        get(&readyz(0)).await.ok()
    })
    .await
    .expect("an answer");
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(
        answer.json()["kind"],
        "cluster_uninitialized",
        "{}",
        answer.body
    );

    // A joiner whose member does not answer stays before its node runs: its metrics port
    // answers all the same, naming what it waits for.
    wait_formed(&[&first], 1, FORM).await.ok();
    let token = first.create_token(&[]).await.expect("token");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .to_string();
    let joiner = AgentProc::start(
        tmp.path(),
        "j1",
        &[
            "--join",
            &closed,
            "--token",
            &token,
            "--metrics-listen",
            &metrics[2],
        ],
    )
    .expect("start joiner");
    let joining = wait_for("/readyz of a joiner", FORM, || async {
        get(&readyz(2)).await.ok()
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&joiner.log(), 20)));
    assert_eq!(joining.status, 503, "{}", joining.body);
    let body = joining.json();
    assert_eq!(body["kind"], "cluster_uninitialized", "{body}");
    let says_why = wait_for("the joiner's step in /readyz", FORM, || async {
        let body = get(&readyz(2)).await.ok()?.json();
        let message = body["message"].as_str()?.to_string();
        message
            .contains(&format!("joining through {closed}"))
            .then_some(message)
    })
    .await;
    assert!(
        says_why.is_ok(),
        "{says_why:?}\n{}",
        tail(&joiner.log(), 20)
    );
    let healthz = get(&format!("http://{}/healthz", metrics[2]))
        .await
        .expect("healthz");
    assert_eq!(healthz.status, 200, "alive while joining: {}", healthz.body);

    // The peer arrives: the cluster forms, and both become ready on the same ports.
    let second = AgentProc::start(
        tmp.path(),
        "r2",
        &["--discovery", &url, "--metrics-listen", &metrics[1]],
    )
    .expect("start");
    wait_formed(&[&first, &second], 2, FORM)
        .await
        .expect("formed");
    for i in 0..2 {
        let reply = wait_for("/readyz 200 once formed", FORM, || async {
            let reply = get(&readyz(i)).await.ok()?;
            (reply.status == 200).then_some(reply)
        })
        .await
        .expect("ready");
        assert_eq!(reply.json()["ready"], true, "{}", reply.body);
    }
}

#[tokio::test]
async fn a_url_that_etcd_formed_is_named_and_not_joined() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    // Registrations exactly as etcd members write them (member id, `name=peer URL`), and no
    // Muster key or record. `full`: both etcd members registered; else only the first, and the
    // agent registers second (it would then wait at `waiting for peers 2/2` forever).
    for (case, full) in [("full", true), ("half", false)] {
        let url = d.new_token(2).await.expect("url");
        let etcd = [
            ("8e9e05c52164694d", "etcd1=http://127.0.0.1:2380"),
            ("91bc3c398fb3c146", "etcd2=http://127.0.0.1:2382"),
        ];
        let n = if full { 2 } else { 1 };
        for (id, value) in &etcd[..n] {
            let reply = register(&url, id, value).await.expect("register");
            assert_eq!(reply.status, 201, "{}", reply.body);
        }
        let mut a = AgentProc::start(tmp.path(), &format!("x-{case}"), &["--discovery", &url])
            .expect("start");
        let code = a.wait_exit(FORM).await.expect("stops");
        let log = a.log();
        assert_eq!(code, Some(2), "{case}: a refusal\n{log}");
        assert!(
            log.contains("formed by something other than Muster")
                && log.contains("etcd1 (127.0.0.1:2380)")
                && log.contains("/new?size=2"),
            "{case}: names the URL's owner and the way forward\n{log}"
        );
        assert!(
            !log.contains("--join 127.0.0.1:238"),
            "{case}: never advises joining an etcd peer port\n{log}"
        );
    }
    // The same with real etcd members that formed through the URL.
    if let Some(bin) = etcd_binary("a_url_that_etcd_formed_is_named_and_not_joined") {
        let url = d.new_token(2).await.expect("url");
        let members: Vec<Etcd> = ["e1", "e2"]
            .iter()
            .map(|name| Etcd::start_discovery(&bin, tmp.path(), name, &url).expect("etcd"))
            .collect();
        wait_for("both etcd members to register", FORM, || async {
            let listing = get(&url).await.ok()?.json();
            (listing["node"]["nodes"].as_array()?.len() == 2).then_some(())
        })
        .await
        .expect("etcd registered");
        let mut a = AgentProc::start(tmp.path(), "x-etcd", &["--discovery", &url]).expect("start");
        let code = a.wait_exit(FORM).await.expect("stops");
        let log = a.log();
        assert_eq!(code, Some(2), "{log}");
        assert!(
            log.contains("formed by something other than Muster")
                && members.iter().all(|m| log.contains(&m.name)),
            "names the etcd members:\n{log}"
        );
    }

    // A Muster formation on a URL of its own is unaffected.
    let url = d.new_token(2).await.expect("url");
    let agents: Vec<AgentProc> = (1..=2)
        .map(|i| {
            AgentProc::start(tmp.path(), &format!("ok{i}"), &["--discovery", &url]).expect("start")
        })
        .collect();
    wait_formed(&refs(&agents), 2, FORM).await.expect("formed");
}

#[tokio::test]
async fn no_message_names_a_member_by_its_internal_identity() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["i1", "i2", "i3"])
        .await
        .expect("formed");
    let (code, exported, err) = agents[0].cli(&["config", "export"]).await.expect("export");
    assert_eq!(code, 0, "{err}");
    let file = tmp.path().join("cluster.toml");
    std::fs::write(&file, &exported).expect("write cluster.toml");
    // i2 comes back listening on i3's address: whoever dials i3 there meets i2's certificate,
    // a TLS failure whose cause quotes the identity name the dialer expected.
    agents[1].kill9().await.expect("kill i2");
    agents[2].kill9().await.expect("kill i3");
    let i3 = agents[2].addr.clone();
    agents[1].set_flag("--listen", Some(&i3));
    agents[1].restart().expect("restart i2 on i3's address");
    let file = file.display().to_string();
    let mut said = String::new();
    let (_, out, err) = agents[0].cli(&["plan", "-f", &file]).await.expect("plan");
    said.push_str(&out);
    said.push_str(&err);
    assert!(said.contains("i3"), "{said}");
    for a in &agents[..2] {
        let (_, out, err) = a.cli(&["kv", "put", "k", "v"]).await.expect("kv put");
        said.push_str(&out);
        said.push_str(&err);
    }
    // The dialer's own log, once its warning about i3 is out (after the grace for silence).
    let log = wait_for("i1 to warn about i3", FORM, || async {
        let log = agents[0].log();
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("i3"))
            .then_some(log)
    })
    .await
    .expect("a warning about i3");
    said.push_str(&log);
    assert!(
        !said.contains(".muster"),
        "an internal identity name in a message:\n{said}"
    );
    assert!(said.contains("certificate"), "the cause is named:\n{said}");
}
