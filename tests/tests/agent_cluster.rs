//! Real `muster agent` processes forming clusters through a real `muster-discovery` on
//! loopback: formation, refusal of a second cluster, failover, static-membership restarts,
//! mutual-TLS enforcement, and the split-brain check.

use std::path::Path;
use std::time::Duration;

use muster_tests::peer_client::alert_received;
use muster_tests::{AgentProc, Discovery, get, refs, tail, wait_for, wait_formed};

const FORM: Duration = Duration::from_secs(60);

fn start(root: &Path, name: &str, url: &str) -> AgentProc {
    AgentProc::start(root, name, &["--discovery", url]).expect("start agent")
}

fn start_all(root: &Path, prefix: &str, n: usize, url: &str) -> Vec<AgentProc> {
    (1..=n)
        .map(|i| start(root, &format!("{prefix}{i}"), url))
        .collect()
}

async fn record_state(url: &str) -> Option<String> {
    let r = get(&format!("{url}/_muster/record")).await.ok()?;
    let value: serde_json::Value =
        serde_json::from_str(r.json()["node"]["value"].as_str()?).ok()?;
    value["state"].as_str().map(str::to_string)
}

#[tokio::test]
async fn size_1_forms_and_takes_writes() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(1).await.expect("token");
    let a = start(tmp.path(), "solo", &url);
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    let (code, _, err) = a.cli(&["kv", "put", "k", "v1"]).await.expect("put");
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = a.cli(&["kv", "get", "k"]).await.expect("get");
    assert_eq!(out.trim(), "v1");
    // Marking the record formed follows formation in the background.
    wait_for("record formed", FORM, || async {
        (record_state(&url).await.as_deref() == Some("formed")).then_some(())
    })
    .await
    .expect("record");
}

#[tokio::test]
async fn size_3_started_at_once_forms_one_cluster_and_refuses_a_4th() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let agents = start_all(tmp.path(), "n", 3, &url);
    let cluster = wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    wait_for("record formed", FORM, || async {
        (record_state(&url).await.as_deref() == Some("formed")).then_some(())
    })
    .await
    .expect("record");

    // A 4th machine with the same user-data never forms a second cluster.
    let mut extra = start(tmp.path(), "n4", &url);
    let code = extra.wait_exit(FORM).await.expect("exits");
    assert_eq!(code, Some(2), "{}", extra.log());
    let log = extra.log();
    assert!(log.contains("never forms a second cluster"), "{log}");
    assert!(
        log.contains("already formed a cluster"),
        "a stale (formed) URL says so: {log}"
    );
    assert!(
        log.contains("muster token create") && log.contains("--token"),
        "{log}"
    );
    for name in ["n1", "n2", "n3"] {
        assert!(log.contains(name), "the refusal lists the members: {log}");
    }
    let s = agents[0].status().await.expect("status");
    assert_eq!(s["cluster_id"], cluster.as_str());
    assert_eq!(
        s["members"].as_array().map(|m| m.len()),
        Some(3),
        "cluster unchanged"
    );
    // It never registered (checked before registering, like etcd).
    let dir = get(&url).await.expect("dir");
    assert_eq!(
        dir.json()["node"]["nodes"].as_array().map(|n| n.len()),
        Some(3)
    );
}

#[tokio::test]
async fn size_3_staggered_forms_and_prints_progress() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let a1 = start(tmp.path(), "s1", &url);
    wait_for("s1 to initiate", FORM, || async {
        a1.log().contains("initiates the cluster").then_some(())
    })
    .await
    .expect("initiator");
    let a2 = start(tmp.path(), "s2", &url);
    wait_for("s2 to wait", FORM, || async {
        a2.log().contains("waiting for peers 2/3").then_some(())
    })
    .await
    .expect("progress");
    // Staggered: the third starts only once the first two have got as far as they can without
    // it, s2 admitted (its cluster.json written) and s1 leading a cluster of two.
    wait_for("s2 to be admitted into s1's cluster", FORM, || async {
        let s = a1.status().await?;
        let admitted = a2.data_dir.join("cluster.json").exists();
        (admitted && s["members"].as_array()?.len() == 2).then_some(())
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n--- s1\n{}\n--- s2\n{}",
            tail(&a1.log(), 20),
            tail(&a2.log(), 20)
        )
    });
    let a3 = start(tmp.path(), "s3", &url);
    wait_formed(&[&a1, &a2, &a3], 3, FORM)
        .await
        .expect("formed");
}

#[tokio::test]
async fn size_5_at_once_forms_and_a_6th_is_refused() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(5).await.expect("token");
    let agents = start_all(tmp.path(), "f", 5, &url);
    let cluster = wait_formed(&refs(&agents), 5, FORM).await.expect("formed");
    let mut sixth = start(tmp.path(), "f6", &url);
    assert_eq!(
        sixth.wait_exit(FORM).await.expect("exit"),
        Some(2),
        "{}",
        sixth.log()
    );
    let s = agents[4].status().await.expect("status");
    assert_eq!(s["cluster_id"], cluster.as_str());
    assert_eq!(s["members"].as_array().map(|m| m.len()), Some(5));
}

#[tokio::test]
async fn killing_the_leader_elects_another_and_writes_continue() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let mut agents = start_all(tmp.path(), "k", 3, &url);
    wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    let (code, _, err) = agents[1]
        .cli(&["kv", "put", "before", "1"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    let before = agents[0].status().await.expect("status");
    let leader = before["leader"].as_str().unwrap_or_default().to_string();
    let term = before["term"].as_u64().expect("term");
    let li = agents
        .iter()
        .position(|a| a.name == leader)
        .expect("leader is one of ours");
    agents[li].kill9().await.expect("kill");
    let survivor = &agents[(li + 1) % 3];
    let (new_leader, new_term) = wait_for("a new leader", FORM, || async {
        let s = survivor.status().await?;
        let l = s["leader"].as_str()?.to_string();
        (l != leader).then_some((l, s["term"].as_u64()?))
    })
    .await
    .expect("failover");
    // The wait saw another name; that name must be one of the two survivors, elected in a
    // later term.
    let survivors: Vec<&str> = agents
        .iter()
        .filter(|a| a.name != leader)
        .map(|a| a.name.as_str())
        .collect();
    assert!(
        survivors.contains(&new_leader.as_str()),
        "{new_leader} is not one of {survivors:?}"
    );
    assert!(
        new_term > term,
        "elected in term {new_term}, not after {term}"
    );
    let (code, _, err) = survivor
        .cli(&["kv", "put", "after", "2"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = survivor.cli(&["kv", "get", "before"]).await.expect("get");
    assert_eq!(out.trim(), "1", "writes before the failover survive");
}

#[tokio::test]
async fn full_restart_without_the_discovery_service_keeps_the_cluster() {
    let mut d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let mut agents = start_all(tmp.path(), "r", 3, &url);
    let cluster = wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    wait_for("record formed", FORM, || async {
        (record_state(&url).await.as_deref() == Some("formed")).then_some(())
    })
    .await
    .expect("record");
    let (code, _, err) = agents[2]
        .cli(&["kv", "put", "kept", "yes"])
        .await
        .expect("put");
    assert_eq!(code, 0, "{err}");
    for a in agents.iter_mut() {
        assert_eq!(a.terminate().await.expect("stop"), Some(0), "{}", a.log());
    }
    // The discovery service is gone for good.
    d.terminate().await.expect("stop discovery");
    drop(d);
    for a in agents.iter_mut() {
        a.restart_without_discovery().expect("restart");
    }
    let again = wait_formed(&refs(&agents), 3, FORM)
        .await
        .expect("re-formed");
    assert_eq!(again, cluster, "the same cluster comes back");
    let (_, out, err) = agents[0].cli(&["kv", "get", "kept"]).await.expect("get");
    assert_eq!(out.trim(), "yes", "{err}");
    // Said by the second start of each (its own log), not the first.
    for a in &agents {
        assert!(
            a.last_log().contains("restarting on static membership"),
            "{}",
            tail(&a.last_log(), 10)
        );
    }
}

#[tokio::test]
async fn raft_endpoints_refuse_clients_without_a_cluster_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(1).await.expect("token");
    let a = start(tmp.path(), "m1", &url);
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    let ca_pem = std::fs::read_to_string(a.data_dir.join("tls/ca.pem")).expect("ca");
    let pin = muster_shared::tls::spki_pin(&ca_pem).expect("pin");

    // No client certificate: the TLS handshake works (joiners have none), the raft route refuses.
    let tls = muster_shared::tls::pinned_client_config(&pin).expect("pinned");
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .build()
        .expect("client");
    for path in [
        "/raft/vote",
        "/raft/append",
        "/raft/snapshot",
        "/raft/client",
    ] {
        let resp = http
            .post(format!("https://{}{path}", a.addr))
            .body("{}")
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 401, "{path}");
        let body: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(body["kind"], "unauthorized", "{path}");
    }

    // A certificate from another cluster's CA: refused at the handshake.
    let other =
        muster_shared::tls::ClusterCa::generate("0123456789abcdef0123456789abcdef").expect("ca");
    let key = muster_shared::tls::NodeKey::generate().expect("key");
    let csr = key.csr_pem("intruder", "127.0.0.1").expect("csr");
    let cert = other
        .sign_node(
            &csr,
            42,
            "0123456789abcdef0123456789abcdef",
            &key.fingerprint(),
            "127.0.0.1",
            Duration::from_secs(3600),
        )
        .expect("cert");
    let tls = muster_shared::tls::client_config(&ca_pem, &cert, &key.to_pem()).expect("client tls");
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured((*tls).clone())
        .build()
        .expect("client");
    let refused = http
        .post(format!("https://{}/raft/vote", a.addr))
        .body("{}")
        .send()
        .await;
    // Refused in the handshake by the node's client-certificate check (the issuer is unknown
    // to it), which is a different failure from a timeout or a node that is down.
    match refused {
        Ok(resp) => panic!(
            "a foreign certificate reached raft: {} {:?}",
            resp.status(),
            resp.text().await
        ),
        Err(e) => {
            let e = anyhow::Error::from(e);
            assert_eq!(
                alert_received(&e),
                Some(rustls::AlertDescription::UnknownCA),
                "a foreign certificate must be refused as from an unknown CA: {e:#}"
            );
        }
    }
    // The node is still healthy, and it counted the refusals.
    let s = a.status().await.expect("status");
    assert!(s["refused_rpcs"].as_u64().unwrap_or(0) >= 4, "{s}");
}

#[tokio::test]
async fn twenty_formations_never_yield_two_cluster_ids() {
    let d = Discovery::start(&[]).await.expect("discovery");
    for round in 0..20 {
        let tmp = tempfile::tempdir().expect("tmp");
        let url = d.new_token(3).await.expect("token");
        let agents = start_all(tmp.path(), &format!("z{round}-"), 3, &url);
        let cluster = wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
        let record = get(&format!("{url}/_muster/record")).await.expect("record");
        let value: serde_json::Value =
            serde_json::from_str(record.json()["node"]["value"].as_str().unwrap_or("{}"))
                .expect("record json");
        assert_eq!(
            value["cluster_id"],
            cluster.as_str(),
            "round {round}: record and members agree"
        );
        for a in &agents {
            let on_disk =
                std::fs::read_to_string(a.data_dir.join("cluster.json")).expect("cluster.json");
            assert!(
                on_disk.contains(&cluster),
                "round {round}: {} belongs to {on_disk}",
                a.name
            );
        }
    }
}

#[tokio::test]
async fn discovery_restart_during_formation_still_yields_one_cluster() {
    let mut d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let a1 = start(tmp.path(), "d1", &url);
    let a2 = start(tmp.path(), "d2", &url);
    wait_for("two registrations", FORM, || async {
        let dir = get(&url).await.ok()?;
        (dir.json()["node"]["nodes"].as_array()?.len() == 2).then_some(())
    })
    .await
    .expect("registered");
    d.kill9().await.expect("kill discovery");
    // Down for real (kill9 returns once the process is gone): nothing answers on its address.
    assert!(
        tokio::net::TcpStream::connect(d.addr)
            .await
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused),
        "the discovery service still answers on {}",
        d.addr
    );
    d.restart().await.expect("restart discovery");
    let dir = get(&url).await.expect("dir");
    assert_eq!(
        dir.json()["node"]["nodes"].as_array().map(Vec::len),
        Some(2),
        "the registrations survive the kill: {}",
        dir.body
    );
    let a3 = start(tmp.path(), "d3", &url);
    wait_formed(&[&a1, &a2, &a3], 3, FORM)
        .await
        .expect("formed");
}

#[tokio::test]
async fn demo_forms_a_cluster_and_exits() {
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(muster_tests::bin_path("muster"))
            .args(["demo", "--nodes", "3", "--exit"])
            .output(),
    )
    .await
    .expect("demo finishes")
    .expect("run demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("formed in"), "{stdout}");
    // The member table's rows (NAME ID ADDRESS ROLE …): three voters. Counting " voter "
    // anywhere would also count the membership events printed under the table.
    let voter_rows = stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some("voter"))
        .count();
    assert_eq!(voter_rows, 3, "{stdout}");
    assert_eq!(stdout.matches("stopped node").count(), 3, "{stdout}");
}

#[tokio::test]
async fn a_wiped_member_restarted_with_the_same_user_data_is_refused() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let mut agents = start_all(tmp.path(), "w", 3, &url);
    let cluster = wait_formed(&refs(&agents), 3, FORM).await.expect("formed");
    // The machine is re-provisioned: same name, same flags, empty disk.
    agents[2].kill9().await.expect("kill");
    std::fs::remove_dir_all(&agents[2].data_dir).expect("wipe");
    let mut again = start(tmp.path(), "w3", &url);
    assert_eq!(
        again.wait_exit(FORM).await.expect("exit"),
        Some(2),
        "{}",
        again.log()
    );
    let log = again.log();
    assert!(
        log.contains("never forms a second cluster") && log.contains("muster token create"),
        "{log}"
    );
    let s = agents[0].status().await.expect("status");
    assert_eq!(s["cluster_id"], cluster.as_str());
    // A restart with the data dir intact and the same user-data ignores the URL entirely.
    agents[1].kill9().await.expect("kill");
    agents[1].restart().expect("restart");
    wait_for("w2 back", FORM, || async {
        agents[1].status().await.map(|_| ())
    })
    .await
    .expect("w2");
    assert!(
        agents[1].last_log().contains("--discovery is ignored"),
        "{}",
        tail(&agents[1].last_log(), 10)
    );
    assert_eq!(
        agents[1].status().await.expect("status")["cluster_id"],
        cluster.as_str()
    );
}
