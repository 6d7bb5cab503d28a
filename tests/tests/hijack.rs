//! The formation-slot hijack: someone holding the discovery URL sees a registration, writes
//! their own key under that member id before the real machine does, and asks the initiator to
//! admit them under it. A registrant's member id is derived from its key, so the initiator
//! refuses anyone whose CSR's key does not give that id, whatever the URL's hidden keys say;
//! the real machine is still admitted.

use std::time::Duration;

use muster_shared::bootstrap::{BootstrapRecord, NODES_DIR, RECORD_KEY};
use muster_shared::tls::{NodeKey, pinned_client_config};
use muster_tests::*;

const WAIT: Duration = Duration::from_secs(30);

/// POSTs a join request to the initiator, trusting only the record's CA.
async fn join(
    pin: &str,
    initiator: &str,
    url: &str,
    member_id: &str,
    key: &NodeKey,
) -> (u16, serde_json::Value) {
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured((*pinned_client_config(pin).expect("tls")).clone())
        .timeout(Duration::from_secs(15))
        .build()
        .expect("client");
    let body = serde_json::json!({
        "discovery_url": url,
        "member_id": member_id,
        "name": "victim",
        "addr": "127.0.0.1:7999",
        "csr_pem": key.csr_pem("victim", "127.0.0.1").expect("csr"),
    });
    let resp = http
        .post(format!("https://{initiator}/v1/join"))
        .json(&body)
        .send()
        .await
        .expect("the initiator answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(serde_json::Value::Null))
}

#[tokio::test]
async fn a_url_holder_cannot_take_a_registrant_s_place() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let initiator = AgentProc::start(tmp.path(), "first", &["--discovery", &url]).expect("start");
    let record: BootstrapRecord = wait_for("the bootstrap record", WAIT, || async {
        let reply = get(&format!("{url}/{RECORD_KEY}")).await.ok()?;
        BootstrapRecord::parse(reply.json()["node"]["value"].as_str()?).ok()
    })
    .await
    .expect("record");

    // The victim registers, as an agent would: its id comes from its key.
    let victim = NodeKey::generate().expect("key");
    let victim_id = format!("{:x}", victim.member_id());
    let reply = register(&url, &victim_id, "victim=https://127.0.0.1:7999")
        .await
        .expect("register");
    assert_eq!(reply.status, 201, "{}", reply.body);
    // The intruder wins the race for the victim's hidden key record…
    let intruder = NodeKey::generate().expect("key");
    let forged = serde_json::json!({"name": "victim", "key_fingerprint": intruder.fingerprint()});
    let reply = put_form(
        &format!("{url}/{NODES_DIR}/{victim_id}?prevExist=false"),
        &[("value", &forged.to_string())],
    )
    .await
    .expect("forge");
    assert_eq!(
        reply.status, 201,
        "the URL lets anyone write it: {}",
        reply.body
    );
    // …and asks to be admitted as the victim: refused, no certificate.
    let (status, body) = join(&record.ca_pin, &initiator.addr, &url, &victim_id, &intruder).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["kind"], "unauthorized", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("another key"),
        "{body}"
    );
    assert!(body.get("cert_pem").is_none() && body.get("ca_cert_pem").is_none());
    // Its own key's id is no registrant of the URL: refused too.
    let own_id = format!("{:x}", intruder.member_id());
    let (status, body) = join(&record.ca_pin, &initiator.addr, &url, &own_id, &intruder).await;
    assert_eq!(
        (status, body["kind"].as_str()),
        (403, Some("unauthorized")),
        "{body}"
    );
    // An id in a non-canonical spelling does not alias the victim's.
    let (status, body) = join(
        &record.ca_pin,
        &initiator.addr,
        &url,
        &format!("0{victim_id}"),
        &victim,
    )
    .await;
    assert_eq!(
        (status, body["kind"].as_str()),
        (400, Some("invalid_argument")),
        "{body}"
    );

    // The real victim, with its key, is admitted despite the forged record.
    let (status, body) = join(&record.ca_pin, &initiator.addr, &url, &victim_id, &victim).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["node_id"], victim_id.as_str(), "{body}");
    assert!(
        body["cert_pem"]
            .as_str()
            .is_some_and(|c| c.contains("CERTIFICATE"))
    );
    let status = wait_for("the victim to be a member", WAIT, || async {
        let s = initiator.status().await?;
        s["members"]
            .as_array()?
            .iter()
            .any(|m| m["name"] == "victim")
            .then_some(s)
    })
    .await
    .expect("member");
    assert!(
        !status["members"]
            .as_array()
            .expect("members")
            .iter()
            .any(|m| m["id"] == own_id.as_str()),
        "the intruder is no member: {status}"
    );
}
