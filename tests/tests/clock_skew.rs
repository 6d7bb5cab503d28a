//! A leader whose clock lags: a member run under libfaketime, four minutes behind (inside the
//! five minutes of skew certificates absorb), takes over leadership and must not revive a join
//! token that the previous leader saw expire.

use std::path::Path;
use std::time::Duration;

use muster_shared::tls::NodeKey;
use muster_tests::peer_client::{Credential, PeerApi, Target, token_join_body};
use muster_tests::{AgentProc, missing_prerequisite, wait_for, wait_formed};

const WAIT: Duration = Duration::from_secs(60);
const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The state of join token `id` in `a`'s `muster token list --json`.
async fn token_state(a: &AgentProc, id: &str) -> Option<String> {
    let (code, out, _) = a.cli(&["token", "list", "--json"]).await.ok()?;
    if code != 0 {
        return None;
    }
    let list: serde_json::Value = serde_json::from_str(&out).ok()?;
    list.as_array()?
        .iter()
        .find(|t| t["id"] == id)
        .and_then(|t| t["state"].as_str())
        .map(String::from)
}

fn token_id(token: &str) -> String {
    token.split('.').nth(2).unwrap_or_default().to_string()
}

#[tokio::test]
async fn a_leader_with_a_lagging_clock_does_not_revive_an_expired_join_token() {
    if !Path::new(FAKETIME).exists() {
        missing_prerequisite(
            "clock_skew",
            "faketime",
            "MUSTER_REQUIRE_FAKETIME",
            "libfaketime is not installed",
            "apt-get install faketime",
        );
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let n1 = AgentProc::start(tmp.path(), "n1", &["--init", "--promote-after", "500ms"])
        .expect("start n1");
    wait_formed(&[&n1], 1, WAIT).await.expect("n1 formed");
    let join = n1.create_token(&["--ttl", "1h"]).await.expect("token");
    let lagging = AgentProc::start_with_env(
        tmp.path(),
        "lagging",
        &[
            "--join",
            &n1.addr,
            "--token",
            &join,
            "--promote-after",
            "500ms",
        ],
        &[
            ("LD_PRELOAD", FAKETIME),
            ("FAKETIME", "-4m"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    )
    .expect("start the lagging member");
    wait_formed(&[&n1, &lagging], 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", lagging.log()));

    // A 2-second token, seen expired by the leader with the right clock; then another write
    // commits a clock reading past its expiry.
    let short = n1
        .create_token(&["--ttl", "2s"])
        .await
        .expect("short token");
    wait_for("the short token to expire", WAIT, || async {
        (token_state(&n1, &token_id(&short)).await.as_deref() == Some("expired")).then_some(())
    })
    .await
    .expect("expired");
    n1.create_token(&["--ttl", "1h"])
        .await
        .expect("a later write");

    // n1 leaves; the lagging member, the only one left, becomes the voter and the leader.
    let (code, out, err) = n1.cli(&["node", "remove", "n1"]).await.expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    wait_for("the lagging member to lead", WAIT, || async {
        let s = lagging.status().await?;
        (s["leader"] == "lagging").then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", lagging.log()));

    // Its own clock says the token has 4 minutes left; the cluster's clock says it expired.
    assert_eq!(
        token_state(&lagging, &token_id(&short)).await.as_deref(),
        Some("expired")
    );
    let target = Target::of(&lagging).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&lagging.data_dir).expect("pin"),
    )
    .expect("client");
    let key = NodeKey::generate().expect("key");
    let body = token_join_body(&short, &key, "late", "127.0.0.1:9").expect("body");
    let reply = api.post_json("/v1/join/token", &body).await.expect("join");
    assert_eq!(reply.status_kind(), (403, Some("token_expired")), "{reply}");
    // Control: a live token is admitted by the same leader.
    let live = lagging.create_token(&[]).await.expect("live token");
    let key = NodeKey::generate().expect("key");
    let body = token_join_body(&live, &key, "on-time", "127.0.0.1:9").expect("body");
    let reply = api.post_json("/v1/join/token", &body).await.expect("join");
    assert_eq!(reply.status, 200, "{reply}");
}
