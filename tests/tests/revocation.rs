//! A removed member's certificate is refused at the TLS handshake on every route of every
//! member (raft, join, operator), the removed machine learns it was removed from that refusal
//! and stops, and status counts the revoked certificates.

use std::time::Duration;

use muster_tests::peer_client::{Credential, PeerApi, Target, alert_received};
use muster_tests::{init_and_join, tail, wait_for};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_members_certificate_is_refused_at_the_handshake_on_every_route() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["r1", "r2", "r3", "r4"])
        .await
        .expect("four members");
    let operator = agents[0]
        .cli(&["operator-token", "create"])
        .await
        .expect("operator token")
        .1
        .trim()
        .to_string();
    let targets = [
        Target::of(&agents[0]).await.expect("r1"),
        Target::of(&agents[1]).await.expect("r2"),
    ];

    // Clients with r4's certificate that have connected before: a resumed TLS session must not
    // skip the check later.
    let revoked = Credential::member(&agents[3].data_dir).expect("r4's files");
    let mut before = Vec::new();
    for target in &targets {
        let api = PeerApi::new(target, &revoked).expect("client");
        let reply = api
            .get("/raft/member")
            .await
            .expect("answered before the removal");
        assert_eq!(reply.status, 200, "{}", reply.text);
        before.push(api);
    }

    // Remove r4; it learns it from the refusals and stops.
    let (code, out, err) = agents[0]
        .cli(&["node", "remove", "r4"])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let mut removed = agents.pop().expect("r4");
    let exit = removed
        .wait_exit(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&removed.log(), 20)));
    assert_eq!(
        exit,
        Some(0),
        "a removed agent stops: {}",
        tail(&removed.log(), 20)
    );
    for a in &agents {
        wait_for("the revocation to be counted", WAIT, || async {
            let s = a.status().await?;
            (s["revoked_certificates"] == 1).then_some(())
        })
        .await
        .expect("counted");
    }

    // Its certificate and key, still on its disk, open nothing: raft, join and operator routes,
    // from a fresh client or from one that had a session before.
    let bearer = format!("Bearer {operator}");
    let fresh: Vec<PeerApi> = targets
        .iter()
        .map(|t| PeerApi::new(t, &revoked).expect("client"))
        .collect();
    for (target, api) in targets
        .iter()
        .zip(&fresh)
        .chain(targets.iter().zip(&before))
    {
        for (method, path, headers) in [
            ("GET", "/raft/member", vec![]),
            ("POST", "/raft/append", vec![]),
            ("POST", "/v1/join/token", vec![]),
            (
                "GET",
                "/v1/status",
                vec![("authorization", bearer.as_str())],
            ),
        ] {
            assert_refused_as_revoked(api, &target.name, method, path, &headers).await;
        }
        // A member's own certificate still works: the refusal is r4's alone.
        let member = Credential::member(&agents[2].data_dir).expect("r3's files");
        let reply = PeerApi::new(target, &member)
            .expect("client")
            .get("/raft/member")
            .await
            .expect("a member is answered");
        assert_eq!(reply.status, 200, "{}", reply.text);
    }

    // Restarted on its old data dir, it is refused and stops again.
    removed.restart().expect("restart r4");
    let exit = removed
        .wait_exit(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&removed.log(), 20)));
    assert_ne!(exit, None, "{}", tail(&removed.log(), 20));
}

/// The node id and cluster of the member whose data dir is `dir`, from its own files.
fn target_of_dir(name: &str, dir: &std::path::Path, addr: &str) -> Target {
    let key = std::fs::read_to_string(dir.join("node.key")).expect("node key");
    let key = muster_shared::tls::NodeKey::from_pem(&key).expect("key");
    let cluster: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("cluster.json")).expect("cluster.json"),
    )
    .expect("json");
    Target {
        name: name.into(),
        node_id: key.member_id(),
        cluster_id: cluster["cluster_id"].as_str().expect("cluster id").into(),
        addr: addr.into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_joiner_refuses_a_removed_members_certificate_before_it_has_the_state() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["q1", "q2", "q3"])
        .await
        .expect("three members");
    let (code, out, err) = agents[0]
        .cli(&["node", "remove", "q3"])
        .await
        .expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    let mut removed = agents.pop().expect("q3");
    removed.wait_exit(WAIT).await.expect("q3 stops");
    let revoked = Credential::member(&removed.data_dir).expect("q3's files");

    // The joiner advertises an address nobody listens on, so the leader never reaches it:
    // it runs on its admission alone, with no replicated state yet.
    let token = agents[0].create_token(&[]).await.expect("token");
    let unreachable = format!("127.0.0.1:{}", muster_tests::free_port());
    let listen = format!("127.0.0.1:{}", muster_tests::free_port());
    let joiner = muster_tests::AgentProc::start_bare(
        tmp.path(),
        "fresh",
        &unreachable,
        &[
            "--advertise",
            &unreachable,
            "--listen",
            &listen,
            "--metrics-listen",
            "off",
            "--join",
            &agents[0].addr,
            "--token",
            &token,
        ],
        None,
    )
    .expect("start the joiner");
    wait_for("the joiner to be admitted", WAIT, || async {
        joiner.data_dir.join("cluster.json").exists().then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&joiner.log(), 20)));
    let target = target_of_dir("fresh", &joiner.data_dir, &listen);
    let member = Credential::member(&agents[1].data_dir).expect("q2's files");
    wait_for(
        "the joiner's node port to answer a member",
        WAIT,
        || async {
            let api = PeerApi::new(&target, &member).ok()?;
            api.get("/raft/member").await.ok().map(|_| ())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&joiner.log(), 20)));
    let api = PeerApi::new(&target, &revoked).expect("client");
    assert_refused_as_revoked(&api, "the new joiner", "POST", "/raft/append", &[]).await;
}

/// Asserts that `who` refuses `method path` from `api` at the TLS handshake as revoked, not
/// merely failed (a timeout or a crashed member would fail too).
///
/// The refusal may arrive after the client has finished its side of the TLS 1.3 handshake,
/// and a client that had a session before may first pick its pooled connection, which the
/// member has closed since: hyper then reports "connection was not ready" or "connection
/// closed", with no alert. The next request handshakes afresh and must be refused as revoked.
/// Three tries at most; an answer, or any other error, fails.
async fn assert_refused_as_revoked(
    api: &PeerApi,
    who: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) {
    for attempt in 1..=3 {
        match api.raw(method, path, headers, b"{}".to_vec()).await {
            Ok(r) => panic!(
                "{who} answered {method} {path} with a removed member's certificate: {} {}",
                r.status, r.text
            ),
            Err(e) => {
                let alert = alert_received(&e);
                let text = format!("{e:#}");
                let closed_without_alert = alert.is_none()
                    && (text.contains("connection was not ready")
                        || text.contains("connection closed"));
                if closed_without_alert && attempt < 3 {
                    continue;
                }
                assert_eq!(
                    alert,
                    Some(rustls::AlertDescription::CertificateRevoked),
                    "{who} refused {method} {path} with a removed member's certificate, but not \
                     as revoked (try {attempt}): {text}"
                );
                return;
            }
        }
    }
}
