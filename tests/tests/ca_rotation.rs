//! The cluster CA is replaced while the cluster serves writes: `muster ca rotate` makes every
//! member trust the new CA next to the old, then renew its certificate from it; `--finish`
//! drops the old CA. No write fails on the way; afterwards members reach each other over new
//! connections, and join and operator tokens made before the rotation are refused
//! (`ca_pin_mismatch`) while new ones work.

use std::time::Duration;

use muster_shared::tls;
use muster_tests::peer_client::rustls_error;
use muster_tests::{AgentProc, OperatorApi, Writer, init_and_join, tail, wait_for};

const WAIT: Duration = Duration::from_secs(90);

fn tls_file(agent: &AgentProc, file: &str) -> String {
    std::fs::read_to_string(agent.data_dir.join("tls").join(file)).unwrap_or_default()
}

/// The id field of a token's text (`PREFIX.<pin>.<id>.<secret>`).
fn token_id(token: &str) -> &str {
    token.split('.').nth(2).unwrap_or_default()
}

/// The token's text with its pin field replaced: what a holder of an old token can write.
fn with_pin(token: &str, pin: &str) -> String {
    let mut fields: Vec<&str> = token.split('.').collect();
    fields[1] = pin;
    fields.join(".")
}

async fn ca_status(agent: &AgentProc) -> Option<serde_json::Value> {
    let (code, out, _) = agent.cli(&["ca", "status", "--json"]).await.ok()?;
    if code != 0 {
        return None;
    }
    serde_json::from_str(&out).ok()
}

fn logs(agents: &[AgentProc]) -> String {
    agents
        .iter()
        .map(|a| format!("--- {}\n{}", a.name, tail(&a.log(), 15)))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ca_is_rotated_under_writes_and_old_tokens_stop_working() {
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &["r1", "r2", "r3"])
        .await
        .expect("three members");
    // A rotation waits for every member: with one down it does not start.
    agents[2].terminate().await.expect("stop r3");
    let (code, out, err) = agents[0].cli(&["ca", "rotate"]).await.expect("rotate");
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("r3 does not answer"), "{out}{err}");
    agents[2].restart().expect("restart r3");
    let refs: Vec<&AgentProc> = agents.iter().collect();
    muster_tests::wait_formed(&refs, 3, WAIT)
        .await
        .expect("r3 back");
    wait_for("r3 to answer probes", WAIT, || async {
        let (code, out, _) = agents[0].cli(&["cert", "status", "--json"]).await.ok()?;
        (code == 0 && !out.contains("\"error\": \"")).then_some(())
    })
    .await
    .expect("probes");
    let backup = tmp.path().join("before-rotation.backup");
    let (code, out, err) = agents[0]
        .cli(&["backup", &backup.display().to_string()])
        .await
        .expect("backup");
    assert_eq!(code, 0, "{out}{err}");
    let old_ca = tls_file(&agents[0], "ca.pem");
    let old_pin = tls::spki_pin(&old_ca).expect("pin");
    let old_operator = agents[0].operator_token().await.expect("operator token");
    let old_join = agents[0].create_token(&[]).await.expect("join token");
    // Every write a new connection: what a new client meets at each moment of the rotation.
    let api = OperatorApi::unpooled(&old_operator, Duration::from_secs(10)).expect("api");
    let writer = Writer::start(api.clone(), agents.iter().map(|a| a.addr.clone()).collect());

    let (code, out, err) = agents[0].cli(&["ca", "rotate"]).await.expect("rotate");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("CA rotation started"), "{out}");
    // A second rotation while one is in progress is refused with a stable kind.
    let (code, out, err) = agents[1].cli(&["ca", "rotate"]).await.expect("again");
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("ca_rotation_pending"), "{out}{err}");

    // Every member trusts the new CA and renews from it; the phase comes to `ready`.
    let next_pin = wait_for("the rotation to be ready", WAIT, || async {
        let s = ca_status(&agents[0]).await?;
        let moved = agents
            .iter()
            .all(|a| !tls::issued_by(&tls_file(a, "node.pem"), &old_ca));
        (s["phase"] == "ready" && moved).then(|| s["next_pin"].as_str().map(String::from))?
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&agents)));
    assert_ne!(next_pin, old_pin);
    for a in &agents {
        // Both CAs, then the two cross-certificates (the new key under the old CA, the old
        // key under the new).
        let pins = tls::bundle_pins(&tls_file(a, "ca.pem")).expect("bundle");
        assert_eq!(
            pins,
            vec![
                old_pin.clone(),
                next_pin.clone(),
                next_pin.clone(),
                old_pin.clone()
            ],
            "{}",
            a.name
        );
    }

    // A machine that joins during the rotation (its token pins the new CA) is admitted with
    // both CAs to trust, and the rotation waits for it too.
    let token = agents[1].create_token(&[]).await.expect("join token");
    assert!(token.contains(&next_pin), "new join tokens pin the new CA");
    let via = agents[1].addr.clone();
    agents.push(
        AgentProc::start(tmp.path(), "r4", &["--join", &via, "--token", &token]).expect("start r4"),
    );
    wait_for("r4 to join and move to the new CA", WAIT, || async {
        // Members first: once r4 counts, its record is committed, so a "ready" read after it
        // includes r4's acknowledgements (read the other way round, "ready" may predate r4).
        let members = agents[0].status().await?["members"].as_array()?.len();
        let s = ca_status(&agents[0]).await?;
        let r4 = tls_file(&agents[3], "node.pem");
        (s["phase"] == "ready" && members == 4 && !r4.is_empty() && !tls::issued_by(&r4, &old_ca))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&agents)));

    // Operator tokens pin a CA: the one made before the rotation works until --finish (members
    // present cross-certificates meanwhile), a new one (it pins the new CA) from now on.
    // Writes go on across the finish with the new one.
    let (ok, errors) = writer.stop().await;
    assert!(ok > 20, "the writer kept writing: {ok}");
    assert!(
        errors.is_empty(),
        "no write failed while members moved to the new CA: {:?}",
        &errors[..errors.len().min(5)]
    );
    let operator = agents[1]
        .operator_token()
        .await
        .expect("a new operator token");
    assert!(operator.contains(&next_pin), "new tokens pin the new CA");
    let fresh = OperatorApi::unpooled(&operator, Duration::from_secs(10)).expect("api");
    let writer = Writer::start(
        fresh.clone(),
        agents.iter().map(|a| a.addr.clone()).collect(),
    );
    let (code, out, err) = agents[2]
        .cli(&["ca", "rotate", "--finish"])
        .await
        .expect("finish");
    assert_eq!(code, 0, "{out}{err}");
    // The finish names the tokens it retired: those made under the old CA.
    for (what, token) in [("join", &old_join), ("operator", &old_operator)] {
        let id = token_id(token);
        assert!(
            out.contains(id),
            "the finish lists the old {what} token {id}: {out}"
        );
    }
    assert!(
        !out.contains(token_id(&operator)),
        "a token pinned to the new CA is not retired: {out}"
    );
    wait_for("every member to trust the new CA only", WAIT, || async {
        agents
            .iter()
            .all(|a| tls::bundle_pins(&tls_file(a, "ca.pem")).ok() == Some(vec![next_pin.clone()]))
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&agents)));
    let (ok, errors) = writer.stop().await;
    assert!(ok > 5, "the writer kept writing: {ok}");
    assert!(
        errors.is_empty(),
        "no write failed across the finish: {:?}",
        &errors[..errors.len().min(5)]
    );
    let s = ca_status(&agents[1]).await.expect("status");
    assert_eq!(s["pin"], next_pin.as_str());
    assert_eq!(s["phase"], "none");

    // New connections only: r1 restarts, and the leader must reach it with a certificate from
    // the new CA, which is all r1 trusts now.
    agents[0].terminate().await.expect("stop r1");
    agents[0].restart_without_init().expect("restart r1");
    wait_for("r1 to be reached again", WAIT, || async {
        let s = agents[1].status().await?;
        let r1 = s["members"]
            .as_array()?
            .iter()
            .find(|m| m["name"] == "r1")?
            .clone();
        let written = fresh.put(&agents[0].addr, "after", "rotation").await.ok()?;
        (r1["reachable"] == true && written.ok()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&agents)));

    // The operator token made before the rotation no longer reaches the cluster.
    let refused = OperatorApi::new(&old_operator, Duration::from_secs(5))
        .expect("api")
        .status(&agents[1].addr)
        .await;
    // Refused by the client itself: the token pins the old CA, and no member's chain offers it
    // any more (not a timeout or a member that is down).
    match &refused {
        Ok(r) => panic!("an old operator token reached the cluster: {r:?}"),
        Err(e) => assert!(
            matches!(
                rustls_error(e),
                Some(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)))
                    if other.0.downcast_ref::<tls::CaPinMismatch>().is_some()
            ),
            "an old operator token must fail on its CA pin: {e:#}"
        ),
    }

    // Rewriting the pin field of an old token to the new CA's pin (readable from any member's
    // TLS chain) gets it past the handshake, but not past its record: the finish revoked it.
    let forged_operator = with_pin(&old_operator, &next_pin);
    let forged = OperatorApi::new(&forged_operator, Duration::from_secs(5)).expect("api");
    for path in ["/v1/status", "/v1/backup"] {
        let reply = forged
            .call(&agents[1].addr, "GET", path, None)
            .await
            .expect("the handshake passes with the forged pin");
        assert_eq!(
            (reply.status, reply.kind()),
            (401, Some("unauthorized")),
            "{path} with an old token and a forged pin: {} {}",
            reply.status,
            reply.body
        );
    }
    let mut forged_join = AgentProc::start(
        tmp.path(),
        "r5f",
        &["--join", &via, "--token", &with_pin(&old_join, &next_pin)],
    )
    .expect("start r5f");
    let exit = forged_join.wait_exit(WAIT).await.expect("r5f stops");
    assert_eq!(exit, Some(2), "{}", tail(&forged_join.log(), 10));
    assert!(
        forged_join.log().contains("token_revoked"),
        "an old join token with a forged pin is refused as revoked: {}",
        tail(&forged_join.log(), 10)
    );

    // A backup from before the rotation would bring the retired CA back: refused, since the
    // members it lists now present another CA.
    let file_arg = backup.display().to_string();
    let mut restored =
        AgentProc::start_command(tmp.path(), "restored", &["restore", &file_arg], &[])
            .expect("start restore");
    let exit = restored.wait_exit(WAIT).await.expect("the restore stops");
    assert_eq!(exit, Some(2), "{}", tail(&restored.log(), 10));
    assert!(
        restored.log().contains("--allow-retired-ca"),
        "the refusal names the way out: {}",
        tail(&restored.log(), 10)
    );
    assert!(
        !restored.data_dir.join("cluster.json").exists(),
        "a refused restore writes no cluster"
    );

    // A join token made before the rotation is refused with ca_pin_mismatch; a new one works.
    let mut stale = AgentProc::start(tmp.path(), "r5", &["--join", &via, "--token", &old_join])
        .expect("start r5");
    let exit = stale.wait_exit(WAIT).await.expect("r5 stops");
    assert_eq!(exit, Some(2), "{}", tail(&stale.log(), 10));
    assert!(
        stale.log().contains("ca_pin_mismatch"),
        "{}",
        tail(&stale.log(), 10)
    );
    let token = agents[1].create_token(&[]).await.expect("new join token");
    let joined =
        AgentProc::start(tmp.path(), "r6", &["--join", &via, "--token", &token]).expect("start r6");
    wait_for("r6 to join", WAIT, || async {
        let s = joined.status().await?;
        (s["members"].as_array()?.len() == 5 && !s["leader"].is_null()).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&joined.log(), 20)));
    assert!(!tls::issued_by(&tls_file(&joined, "node.pem"), &old_ca));
}
