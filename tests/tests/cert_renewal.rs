//! Node certificates renew themselves: three members with 20-second certificates keep serving
//! writes through every member while each renews its certificate (twice) and the first ones
//! expire, with no error seen by the client; a member whose certificate expired while it was
//! down is refused a plain restart with the command that fixes it, and rejoins with a join
//! token as the same member.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use muster_tests::{AgentProc, OperatorApi, Writer, init_and_join_with, tail, wait_for};

const WAIT: Duration = Duration::from_secs(90);

fn cert_of(agent: &AgentProc) -> String {
    std::fs::read_to_string(agent.data_dir.join("tls/node.pem")).unwrap_or_default()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn expires_ms(cert_pem: &str) -> u64 {
    muster_shared::tls::cert_expires_ms(cert_pem).expect("a certificate")
}

#[tokio::test(flavor = "multi_thread")]
async fn certificates_renew_under_writes_and_an_expired_member_rejoins_with_a_token() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents =
        init_and_join_with(tmp.path(), &["c1", "c2", "c3"], &["--cert-validity", "20s"])
            .await
            .expect("three members");
    let operator = agents[0].operator_token().await.expect("operator token");
    let first: Vec<String> = agents.iter().map(cert_of).collect();
    let first_expiry = first.iter().map(|c| expires_ms(c)).max().expect("three");
    assert!(
        first_expiry < now_ms() + 25_000,
        "the certificates last about 20 s"
    );

    // A writer through every member in turn, for the whole renewal phase.
    let api = OperatorApi::new(&operator, Duration::from_secs(10)).expect("api");
    let writer = Writer::start(api.clone(), agents.iter().map(|a| a.addr.clone()).collect());

    // Every member renews twice (a new certificate each time, on disk), and the certificates
    // they started with expire.
    let mut seen: Vec<BTreeSet<String>> =
        first.iter().map(|c| BTreeSet::from([c.clone()])).collect();
    wait_for("every member to renew its certificate twice", WAIT, || {
        for (agent, seen) in agents.iter().zip(seen.iter_mut()) {
            seen.insert(cert_of(agent));
        }
        let done = seen.iter().all(|s| s.len() >= 3) && now_ms() > first_expiry + 2_000;
        async move { done.then_some(()) }
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e:#}\n{}",
            agents
                .iter()
                .map(|a| format!("--- {}\n{}", a.name, tail(&a.log(), 15)))
                .collect::<String>()
        )
    });
    let (ok, errors) = writer.stop().await;
    assert!(ok > 100, "the writer kept writing: {ok} writes");
    assert!(
        errors.is_empty(),
        "no write failed while certificates renewed: {:?}",
        &errors[..errors.len().min(5)]
    );

    // New connections (the first certificates have expired) between members and from
    // operators: every member answers and agrees on the leader; the certificates are fresh.
    for agent in &agents {
        let reply = api.put(&agent.addr, "after", "renewal").await.expect("put");
        assert!(reply.ok(), "{}: {reply:?}", agent.name);
        let cert = cert_of(agent);
        assert!(
            expires_ms(&cert) > now_ms(),
            "{} holds a valid certificate",
            agent.name
        );
        assert!(agent.log().contains("renewed this node's certificate"));
    }
    // Every connection to c1 is new after it restarts: the leader's replication reaches it
    // only with a client certificate c1 accepts, so a member still presenting its first
    // (expired) certificate would leave c1 behind and unreachable.
    agents[0].terminate().await.expect("stop c1");
    agents[0].restart_without_init().expect("restart c1");
    let fresh = OperatorApi::new(&operator, Duration::from_secs(10)).expect("api");
    wait_for("c1 to be reached by the leader again", WAIT, || async {
        let s = agents[1].status().await?;
        let c1 = s["members"]
            .as_array()?
            .iter()
            .find(|m| m["name"] == "c1")?
            .clone();
        let written = fresh.put(&agents[0].addr, "via", "c1").await.ok()?;
        (c1["reachable"] == true && written.ok()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&agents[0].log(), 20)));
    let (code, out, err) = agents[1]
        .cli(&["cert", "status"])
        .await
        .expect("cert status");
    assert_eq!(code, 0, "{out}{err}");
    for agent in &agents {
        assert!(out.contains(&agent.name), "{out}");
    }

    // c3 goes down and stays down until its certificate has expired.
    let mut c3 = agents.pop().expect("c3");
    c3.terminate().await.expect("stop c3");
    let expiry = expires_ms(&cert_of(&c3));
    let written_while_down = api
        .put(&agents[0].addr, "while", "down")
        .await
        .expect("put");
    assert!(written_while_down.ok(), "{written_while_down:?}");
    wait_for("c3's certificate to expire", WAIT, || async {
        (now_ms() > expiry + 1_000).then_some(())
    })
    .await
    .expect("expired");

    // A plain restart (no token) is refused, saying what to do.
    c3.set_flag("--token", None);
    c3.set_flag("--join", None);
    c3.restart().expect("restart c3");
    let exit = c3.wait_exit(WAIT).await.expect("c3 stops");
    assert_ne!(exit, Some(0), "{}", tail(&c3.log(), 10));
    let said = c3.last_log();
    assert!(
        said.contains("certificate expired") && said.contains("--token"),
        "{said}"
    );

    // With a join token it renews, keeps its identity and data, and catches up.
    let token = agents[0].create_token(&[]).await.expect("token");
    c3.set_flag("--join", Some(&agents[0].addr));
    c3.set_flag("--token", Some(&token));
    c3.restart().expect("restart c3 with a token");
    wait_for(
        "c3 to serve again with a renewed certificate",
        WAIT,
        || async {
            let s = c3.status().await?;
            let members = s["members"].as_array()?;
            (members.len() == 3 && !s["leader"].is_null() && expires_ms(&cert_of(&c3)) > now_ms())
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&c3.log(), 20)));
    let read = api.get(&c3.addr, "while").await.expect("get");
    assert_eq!(read.body["value"], "down", "{read:?}");
    let reply = api.put(&c3.addr, "through", "c3").await.expect("put");
    assert!(reply.ok(), "{reply:?}");
}
