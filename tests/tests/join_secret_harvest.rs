//! Whoever holds the join secret's stored hash (any backup) can answer a machine's hello with a
//! valid proof. Such a fake member, with a CA of its own at an address a machine is told to
//! join through, must learn nothing of use: the machine sends a signature over its own key and
//! names, never the secret, and that signature admits nobody else to the real cluster. A real
//! machine with the same secret still joins the real cluster.

use std::time::Duration;

use muster_shared::tls::{ClusterCa, NodeKey};
use muster_shared::token::{JoinSecret, hash_secret, random_hex, secret_proof};
use muster_tests::peer_client::{Credential, PeerApi, Target, token_join_body_parts};
use muster_tests::{AgentProc, free_port, tail, wait_for, wait_formed};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(60);

/// A TLS server posing as a member: it proves the secret from its hash alone and keeps every
/// `POST /v1/join/token` body it is sent.
struct FakeMember {
    addr: String,
    captured: tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
}

impl FakeMember {
    async fn start(secret_sha256: String) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cluster_id = random_hex(16);
        let ca = ClusterCa::generate(&cluster_id).expect("fake CA");
        let key = NodeKey::generate().expect("fake key");
        let csr = key.csr_pem("fake", "127.0.0.1").expect("csr");
        let cert = ca
            .sign_node(
                &csr,
                key.member_id(),
                &cluster_id,
                &key.fingerprint(),
                "127.0.0.1",
                Duration::from_secs(3600),
            )
            .expect("fake certificate");
        let chain = format!("{cert}{}", ca.cert_pem());
        let tls = muster_shared::tls::plain_server_config(&chain, &key.to_pem()).expect("tls");
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let addr = format!("127.0.0.1:{}", free_port());
        let listener = TcpListener::bind(&addr).await.expect("bind");
        let (sender, captured) = tokio::sync::mpsc::unbounded_channel();
        let pin = ca.pin().to_string();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, sender, pin) = (acceptor.clone(), sender.clone(), pin.clone());
                let (cluster_id, hash) = (cluster_id.clone(), secret_sha256.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let Some((path, body)) = read_request(&mut tls).await else {
                        return;
                    };
                    let answer = if path.ends_with("/join/hello") {
                        let nonce = body["nonce"].as_str().unwrap_or_default();
                        serde_json::json!({
                            "cluster_id": cluster_id,
                            "ca_pin": pin,
                            "proof": secret_proof(&hash, nonce, &pin, &cluster_id),
                        })
                    } else {
                        let _ = sender.send(body);
                        serde_json::json!({"kind": "unavailable", "message": "try again"})
                    };
                    let status = if path.ends_with("/join/hello") {
                        "200 OK"
                    } else {
                        "503 Service Unavailable"
                    };
                    let text = answer.to_string();
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                        text.len()
                    );
                    let _ = tls.write_all(response.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        Self { addr, captured }
    }
}

/// One HTTP/1.1 request: its path and JSON body (bounded; enough for a join request).
async fn read_request<S: AsyncReadExt + Unpin>(
    stream: &mut S,
) -> Option<(String, serde_json::Value)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .ok()?
            .ok()?;
        if n == 0 || buf.len() > 256 * 1024 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        if body.len() < length {
            continue;
        }
        let path = head.split_whitespace().nth(1)?.to_string();
        return Some((path, serde_json::from_str(body).unwrap_or_default()));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fake_member_with_the_stored_hash_learns_nothing_of_use() {
    let tmp = tempfile::tempdir().expect("tmp");
    let secret = JoinSecret::generate();
    let file = tmp.path().join("join-secret");
    std::fs::write(&file, secret.reveal()).expect("secret file");
    // Only its owner may read a join-secret file (the agent refuses it otherwise).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    }
    let file = file.display().to_string();
    let real = AgentProc::start(tmp.path(), "s1", &["--init", "--join-secret-file", &file])
        .expect("start s1");
    wait_formed(&[&real], 1, WAIT).await.expect("formed");

    // What a backup holds of the secret: its hash.
    let mut fake = FakeMember::start(hash_secret(secret.secret())).await;
    let mut victim = AgentProc::start(
        tmp.path(),
        "victim",
        &["--join", &fake.addr, "--join-secret-file", &file],
    )
    .expect("start the victim");
    let body = tokio::time::timeout(WAIT, fake.captured.recv())
        .await
        .unwrap_or_else(|_| panic!("the victim never sent a join: {}", tail(&victim.log(), 10)))
        .expect("a join body");
    victim.terminate().await.expect("stop the victim");
    let text = body.to_string();
    assert!(
        !text.contains(secret.secret()),
        "the join secret itself reached the fake member: {text}"
    );
    assert_eq!(body["secret"].as_str().unwrap_or_default(), "", "{text}");
    let signature = body["secret_signature"]
        .as_str()
        .expect("a signed join")
        .to_string();

    // The signature admits only the victim's own key: the fake member cannot use it to join
    // the real cluster with a key of its own.
    let target = Target::of(&real).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&real.data_dir).expect("pin"),
    )
    .expect("client");
    let attacker = NodeKey::generate().expect("key");
    let mut forged =
        token_join_body_parts(&secret.id(), "", &attacker, "victim", "127.0.0.1:9").expect("body");
    forged["secret_signature"] = serde_json::Value::String(signature);
    let reply = api
        .post_json("/v1/join/token", &forged)
        .await
        .expect("join");
    assert_eq!(
        reply.status_kind(),
        (403, Some("unauthorized")),
        "a captured signature with another key: {reply}"
    );
    let members = real.status().await.expect("status")["members"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(members, 1, "nobody was admitted");

    // A machine with the secret joins the real cluster, signing instead of sending it.
    let joiner = AgentProc::start(
        tmp.path(),
        "s2",
        &["--join", &real.addr, "--join-secret-file", &file],
    )
    .expect("start s2");
    wait_for("s2 to join with the signed secret", WAIT, || async {
        let s = joiner.status().await?;
        (s["members"].as_array()?.len() == 2).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&joiner.log(), 20)));
}
