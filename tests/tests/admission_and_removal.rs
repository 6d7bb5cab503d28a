//! A membership rule at its edge, with real agents: a joiner may not claim another member's
//! address; the refusal takes no use of its token, and the joiner waits for the address to be
//! freed instead of exiting.

use std::time::Duration;

use muster_tests::{AgentProc, free_port, init_and_join, tail, wait_for};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_joiner_may_not_claim_a_member_s_address() {
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = init_and_join(tmp.path(), &["d1"])
        .await
        .expect("one member");
    let token = agents[0].create_token(&[]).await.expect("token");
    let taken = agents[0].addr.clone();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut joiner = AgentProc::start_bare(
        tmp.path(),
        "d2",
        &taken,
        &[
            "--advertise",
            &taken,
            "--listen",
            &listen,
            "--metrics-listen",
            "off",
            "--join",
            &taken,
            "--token",
            &token,
        ],
        None,
    )
    .expect("start d2");
    // Refused, and waiting (a supervisor must not give up: the leader frees the address when
    // it removes the dead member it belonged to).
    wait_for("the refusal to be logged", WAIT, || async {
        let log = joiner.log();
        (log.contains("address_taken") && log.contains("d1")).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}: {}", tail(&joiner.log(), 10)));
    assert_eq!(
        joiner
            .wait_exit(Duration::from_secs(1))
            .await
            .ok()
            .flatten(),
        None,
        "it waits instead of exiting: {}",
        tail(&joiner.log(), 10)
    );
    joiner.terminate().await.expect("stop d2");
    let (code, out, err) = agents[0]
        .cli(&["token", "list", "--json"])
        .await
        .expect("token list");
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).expect("json");
    let used = list
        .as_array()
        .expect("a list")
        .iter()
        .find(|t| token.contains(t["id"].as_str().unwrap_or("-")))
        .expect("the token is listed");
    assert_eq!(used["uses_left"], 1, "the refusal took no use: {used}");
    let members = agents[0].status().await.expect("status")["members"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(members, 1, "nobody was admitted");
}
