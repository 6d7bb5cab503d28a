//! `muster-discovery --store etcd`: stateless replicas on a real 3-member etcd v3 cluster.
//!
//! - real etcd 3.4 members bootstrap through three replicas that a round-robin proxy alternates
//!   between per request, while one replica is killed with -9 and one backing etcd member dies:
//!   the cluster forms once, with the right size;
//! - ten initiators racing through different replicas: one bootstrap record, one CAS winner;
//! - Muster agents form through the replicas.
//!
//! Without etcd on PATH these fail, unless `MUSTER_ALLOW_SKIP` names `etcd`.

use std::time::Duration;

use muster_tests::etcd_cluster::{EtcdCluster, RoundRobin, start_replicas};
use muster_tests::{
    AgentProc, Etcd, etcd_binary, get, put_form, register, tail, token_of, wait_for, wait_formed,
};

const FORM: Duration = Duration::from_secs(60);

/// Registrations listed in the token directory.
async fn listed(url: &str) -> usize {
    let r = get(url).await;
    if let Ok(r) = &r
        && r.status != 200
    {
        eprintln!("listing answered {}: {}", r.status, r.body);
    }
    r.ok()
        .and_then(|r| r.json()["node"]["nodes"].as_array().map(|a| a.len()))
        .unwrap_or(0)
}

#[tokio::test]
async fn etcd_members_form_through_replicas_despite_a_killed_replica_and_etcd_member() {
    let Some(bin) = etcd_binary("etcd_members_form_through_replicas") else {
        return;
    };
    let mut backing = EtcdCluster::start(&bin, 3).await.expect("backing etcd");
    let (mut replicas, _) = start_replicas(&backing, 3, &["--hold", "5s"])
        .await
        .expect("replicas");
    let proxy = RoundRobin::start(replicas.iter().map(|r| r.addr).collect())
        .await
        .expect("proxy");
    let url = get(&format!("{}/new?size=3", proxy.base))
        .await
        .expect("new")
        .body;
    // Minted by a replica for its own address: point the members at the proxy instead.
    let url = format!("{}/{}", proxy.base, token_of(&url));
    let root = tempfile::tempdir().expect("tmp");

    let m1 = Etcd::start_discovery(&bin, root.path(), "m1", &url).expect("m1");
    wait_for("m1 to register", FORM, || async {
        (listed(&url).await >= 1).then_some(())
    })
    .await
    .expect("m1 registered");
    replicas[0].kill9().await.expect("kill -9 replica 0");

    let m2 = Etcd::start_discovery(&bin, root.path(), "m2", &url).expect("m2");
    wait_for("m2 to register", FORM, || async {
        (listed(&url).await >= 2).then_some(())
    })
    .await
    .expect("m2 registered");
    backing.kill9(0).await.expect("kill -9 etcd member e0");

    let m3 = Etcd::start_discovery(&bin, root.path(), "m3", &url).expect("m3");
    let members = [&m1, &m2, &m3];
    let formed = wait_for("the etcd cluster to form with 3 members", FORM, || async {
        for m in members {
            if m.member_names().await? != ["m1", "m2", "m3"] {
                return None;
            }
        }
        Some(())
    })
    .await;
    if let Err(e) = formed {
        panic!(
            "{e:#}\n{}\n--- replicas\n{}\n--- m1\n{}\n--- m3\n{}",
            backing.logs(10),
            replicas
                .iter()
                .map(|r| tail(&r.log(), 400))
                .collect::<Vec<_>>()
                .join("\n--\n"),
            tail(&m1.log(), 20),
            tail(&m3.log(), 20)
        );
    }
    // Exactly three registrations, one cluster: nobody registered twice or fell back.
    assert_eq!(listed(&url).await, 3);
    let served: Vec<u64> = proxy
        .served
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    assert!(
        served.iter().all(|n| *n > 0),
        "every replica served requests: {served:?}"
    );
}

fn record(initiator: &str, cluster_id: &str, state: &str) -> String {
    format!(
        r#"{{"cluster_id":"{cluster_id}","ca_pin":"{}","initiator":"{initiator}","state":"{state}"}}"#,
        "c".repeat(64)
    )
}

#[tokio::test]
async fn ten_initiators_racing_through_different_replicas_make_one_record() {
    let Some(bin) = etcd_binary("ten_initiators_racing_through_different_replicas") else {
        return;
    };
    let backing = EtcdCluster::start(&bin, 3).await.expect("backing etcd");
    let (replicas, _) = start_replicas(&backing, 3, &["--max-size", "10"])
        .await
        .expect("replicas");
    let token = token_of(&replicas[0].new_token(10).await.expect("token")).to_string();
    let url_on = |i: usize| format!("{}/{token}", replicas[i % replicas.len()].base);

    // Ten registrations at once, spread over the replicas: ten distinct, gap-free indexes.
    let ids: Vec<String> = (0..10).map(|i| format!("{:x}", 0xa0 + i)).collect();
    let regs = futures_join(ids.iter().enumerate().map(|(i, id)| {
        let (url, id) = (url_on(i), id.clone());
        async move { register(&url, &id, &format!("n{id}=http://10.0.0.{i}:2380")).await }
    }))
    .await;
    let mut indexes: Vec<u64> = regs
        .iter()
        .map(|r| {
            let r = r.as_ref().expect("register");
            assert_eq!(r.status, 201, "{}", r.body);
            r.json()["node"]["createdIndex"].as_u64().expect("index")
        })
        .collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (2..12).collect::<Vec<u64>>());
    let listing = get(&url_on(1)).await.expect("list").json();
    let first = listing["node"]["nodes"][0]["key"]
        .as_str()
        .and_then(|k| k.rsplit('/').next())
        .expect("first registrant")
        .to_string();

    // Ten initiators create the record at once, each through another replica: one wins.
    let creates = futures_join((0..10).map(|i| {
        let url = format!("{}/_muster/record?prevExist=false", url_on(i));
        let value = record(&first, &format!("{:024x}", i + 1), "open");
        async move { put_form(&url, &[("value", &value)]).await }
    }))
    .await;
    let statuses: Vec<u16> = creates
        .iter()
        .map(|r| r.as_ref().expect("create").status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 412).count(),
        9,
        "{statuses:?}"
    );
    let created = creates
        .iter()
        .flatten()
        .find(|r| r.status == 201)
        .expect("winner")
        .json();
    let winner_id = created["node"]["value"]
        .as_str()
        .expect("value")
        .to_string();
    let at = created["node"]["modifiedIndex"].as_u64().expect("index");

    // Ten compare-and-swaps from the same index, through different replicas: one wins.
    let cluster_id: serde_json::Value = serde_json::from_str(&winner_id).expect("record json");
    let cluster_id = cluster_id["cluster_id"].as_str().expect("id").to_string();
    let swaps = futures_join((0..10).map(|i| {
        let url = format!("{}/_muster/record?prevIndex={at}", url_on(i));
        let value = record(&first, &cluster_id, "formed");
        async move { put_form(&url, &[("value", &value)]).await }
    }))
    .await;
    let ok = swaps
        .iter()
        .filter(|r| r.as_ref().is_ok_and(|r| r.status == 200))
        .count();
    assert_eq!(ok, 1, "exactly one compare-and-swap wins");
    for r in swaps.iter().flatten().filter(|r| r.status != 200) {
        assert_eq!(r.json()["errorCode"], 101, "{}", r.body);
    }
    // Every replica now reads the same record.
    for i in 0..3 {
        let r = get(&format!("{}/_muster/record", url_on(i)))
            .await
            .expect("read");
        assert!(r.body.contains("formed"), "{}", r.body);
        assert_eq!(r.index, Some(at + 1));
    }
}

#[tokio::test]
async fn muster_agents_form_through_the_replicas() {
    let Some(bin) = etcd_binary("muster_agents_form_through_the_replicas") else {
        return;
    };
    let backing = EtcdCluster::start(&bin, 3).await.expect("backing etcd");
    let (replicas, _) = start_replicas(&backing, 3, &[]).await.expect("replicas");
    let proxy = RoundRobin::start(replicas.iter().map(|r| r.addr).collect())
        .await
        .expect("proxy");
    let minted = get(&format!("{}/new?size=3", proxy.base))
        .await
        .expect("new")
        .body;
    let url = format!("{}/{}", proxy.base, token_of(&minted));
    let root = tempfile::tempdir().expect("tmp");
    let agents: Vec<AgentProc> = ["a1", "a2", "a3"]
        .iter()
        .map(|n| AgentProc::start(root.path(), n, &["--discovery", &url]).expect("agent"))
        .collect();
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, FORM).await.expect("formed");
    let record = get(&format!("{url}/_muster/record")).await.expect("record");
    assert_eq!(record.status, 200, "{}", record.body);
    assert_eq!(listed(&url).await, 3, "three registrations, one cluster");
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join<F, T>(futures: impl IntoIterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}
