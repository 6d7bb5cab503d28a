//! A member's address changes while the cluster serves writes, without a remove and rejoin:
//! the member restarted on a new address with `--allow-address-change` asks the leader to
//! record it; an operator moves another with `muster node set-address`. Either way the peers
//! dial the new address, the member renews its certificate for the new host, and its next
//! start expects the new --advertise.

use std::time::Duration;

use muster_tests::{AgentProc, OperatorApi, Writer, free_port, init_and_join, tail, wait_for};

const WAIT: Duration = Duration::from_secs(60);

fn cert_hosts(agent: &AgentProc) -> Vec<String> {
    let pem = std::fs::read_to_string(agent.data_dir.join("tls/node.pem")).unwrap_or_default();
    muster_shared::tls::cert_hosts(&pem).unwrap_or_default()
}

fn recorded_advertise(agent: &AgentProc) -> String {
    let text = std::fs::read_to_string(agent.data_dir.join("cluster.json")).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    json["advertise"].as_str().unwrap_or_default().to_string()
}

/// Waits until `observer`'s status lists `name` at `addr`, reachable, and `moved` holds a
/// certificate for the new host and expects it in cluster.json.
async fn wait_moved(observer: &AgentProc, moved: &AgentProc, addr: &str) {
    let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr);
    wait_for(
        &format!("{} to be served at {addr}", moved.name),
        WAIT,
        || async {
            let s = observer.status().await?;
            let member = s["members"]
                .as_array()?
                .iter()
                .find(|m| m["name"] == moved.name.as_str())?
                .clone();
            (member["address"] == addr
                && member["reachable"] == true
                && cert_hosts(moved) == vec![host.to_string()]
                && recorded_advertise(moved) == addr)
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n--- {}\n{}\n--- {}\n{}",
            moved.name,
            tail(&moved.log(), 20),
            observer.name,
            tail(&observer.log(), 20)
        )
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_moves_to_a_new_address_while_the_cluster_serves_writes() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["m1", "m2", "m3"])
        .await
        .expect("three members");
    let operator = agents[0].operator_token().await.expect("operator token");
    let api = OperatorApi::new(&operator, Duration::from_secs(10)).expect("api");

    // A writer through m1 for the whole test.
    let writer = Writer::start(api.clone(), vec![agents[0].addr.clone()]);

    // m3's machine comes back on another address. Without the flag the start is refused.
    let moved_to = format!("127.0.0.5:{}", free_port());
    let m3 = &mut agents[2];
    m3.terminate().await.expect("stop m3");
    m3.set_flag("--listen", Some(&moved_to));
    m3.set_flag("--advertise", Some(&moved_to));
    m3.restart().expect("start m3 moved");
    let exit = m3.wait_exit(WAIT).await.expect("refused");
    assert_eq!(exit, Some(64), "{}", tail(&m3.log(), 10));
    assert!(
        m3.last_log().contains("--allow-address-change"),
        "{}",
        m3.last_log()
    );
    m3.args_push("--allow-address-change");
    m3.addr = moved_to.clone();
    m3.restart().expect("start m3 with --allow-address-change");
    wait_moved(&agents[0], &agents[2], &moved_to).await;
    // It serves there (operators reach it at the new address) and holds every write.
    let reply = api.put(&moved_to, "moved", "m3").await.expect("put via m3");
    assert!(reply.ok(), "{reply:?}");

    // An operator moves m2: it already listens on every address of its port.
    let m2_port = agents[1]
        .addr
        .rsplit_once(':')
        .map(|(_, p)| p.to_string())
        .expect("port");
    let m2 = &mut agents[1];
    m2.terminate().await.expect("stop m2");
    m2.set_flag("--listen", Some(&format!("0.0.0.0:{m2_port}")));
    m2.restart().expect("m2 on every address");
    wait_for("m2 to be back", WAIT, || async {
        let s = agents[0].status().await?;
        s["members"]
            .as_array()?
            .iter()
            .any(|m| m["name"] == "m2" && m["reachable"] == true)
            .then_some(())
    })
    .await
    .expect("m2 back");
    // Reachable above may still be the leader's memory of m2 from before the restart: wait
    // until m2 itself serves, on the address it is about to be moved to.
    let m2_to = format!("127.0.0.6:{m2_port}");
    wait_for("m2 to listen on every address", WAIT, || async {
        agents[1].status().await?;
        tokio::net::TcpStream::connect(&m2_to)
            .await
            .ok()
            .map(|_| ())
    })
    .await
    .expect("m2 listens");
    let (code, out, err) = agents[0]
        .cli(&["node", "set-address", "m2", &m2_to])
        .await
        .expect("set-address");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("moved from"), "{out}");
    wait_moved(&agents[0], &agents[1], &m2_to).await;
    // Again: nothing to change. Another member's address: refused with a stable kind.
    let (code, out, _) = agents[0]
        .cli(&["node", "set-address", "m2", &m2_to])
        .await
        .expect("again");
    assert_eq!(code, 0);
    assert!(out.contains("nothing changed"), "{out}");
    // An address where the member does not answer: refused, nothing changes (a member moved
    // there would be cut off).
    let status = agents[0].status().await.expect("status");
    let follower = ["m2", "m3"]
        .into_iter()
        .find(|n| status["leader"] != *n)
        .expect("a follower");
    let nowhere = format!("127.0.0.7:{}", free_port());
    let (code, out, err) = agents[0]
        .cli(&["node", "set-address", follower, &nowhere])
        .await
        .expect("nowhere");
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("does not answer"), "{out}{err}");
    let status = agents[0].status().await.expect("status");
    assert!(
        !status.to_string().contains(&nowhere),
        "nothing changed: {status}"
    );
    let (code, out, err) = agents[0]
        .cli(&["node", "set-address", "m1", &moved_to, "--json"])
        .await
        .expect("taken");
    assert_ne!(code, 0, "{out}");
    assert!(
        format!("{out}{err}").contains("address_taken"),
        "{out}{err}"
    );

    // m2's next start uses the new --advertise, with no flag.
    let m2 = &mut agents[1];
    m2.terminate().await.expect("stop m2");
    m2.set_flag("--advertise", Some(&m2_to));
    m2.set_flag("--listen", Some(&m2_to));
    m2.addr = m2_to.clone();
    m2.restart().expect("m2 at its new address");
    wait_moved(&agents[0], &agents[1], &m2_to).await;

    let (ok, errors) = writer.stop().await;
    assert!(ok > 50, "the writer kept writing: {ok}");
    assert!(
        errors.is_empty(),
        "no write failed: {:?}",
        &errors[..errors.len().min(5)]
    );
    // Every member holds the last write. m2 has just restarted: the leader's "reachable" above
    // may predate that, so ask each member until it answers (a reset while m2 starts is no
    // answer), then check what it holds.
    for agent in &agents {
        let reply = wait_for(
            &format!("{} to answer a read", agent.name),
            WAIT,
            || async { api.get(&agent.addr, "moved").await.ok() },
        )
        .await
        .expect("get");
        assert_eq!(reply.body["value"], "m3", "{}: {reply:?}", agent.name);
    }
}
