//! Server-side refusals, asserted one by one: every documented refusal of the node's HTTPS
//! routes (docs/security.md, "Connections") with its HTTP status and JSON `kind`, sent by a
//! client that speaks the routes directly (`muster_tests::peer_client`) against real agents.
//!
//! Each refusal is paired with an accepted request of the same shape where one exists, so a
//! refusal cannot pass merely because the request was malformed.

use std::path::Path;
use std::time::{Duration, Instant};

use muster_shared::bootstrap::{BootstrapRecord, RECORD_KEY, RecordState};
use muster_shared::tls::NodeKey;
use muster_tests::peer_client::{
    Credential, PeerApi, PeerReply, Target, ca_from_backup, member_id_hex,
    operator_token_authority, outsider_of_cluster, registrant_join_body, token_join_body,
    token_join_body_parts,
};
use muster_tests::{AgentProc, Discovery, get, register, tail, wait_for, wait_formed};
use serde_json::{Value, json};

const FORM: Duration = Duration::from_secs(60);
const WAIT: Duration = Duration::from_secs(20);

/// The raft routes that take a POST, and the forwarding route.
const RAFT_POSTS: [&str; 5] = [
    "/raft/append",
    "/raft/vote",
    "/raft/snapshot",
    "/raft/prevote",
    "/raft/client",
];
const MEMBER_CHECK: &str = "/raft/member";
/// The join-secret hello (unauthenticated: a joiner asks a member to prove the secret).
const SECRET_HELLO: &str = "/v1/join/hello";

/// Asserts an error answer: its status, its JSON `kind`, and a phrase of its message.
#[track_caller]
fn assert_refused(what: &str, reply: &PeerReply, status: u16, kind: &str, phrase: &str) {
    assert_eq!(
        reply.status_kind(),
        (status, Some(kind)),
        "{what}: expected {status} {kind}, got {reply}"
    );
    assert!(reply.is_json_error(), "{what}: not a JSON error: {reply}");
    assert!(
        reply.message().contains(phrase),
        "{what}: the message should say {phrase:?}: {reply}"
    );
}

/// Starts agent `name` forming a one-node cluster through a fresh URL of `d`.
async fn one_node(d: &Discovery, root: &Path, name: &str) -> (AgentProc, String) {
    let url = d.new_token(1).await.expect("url");
    let a = AgentProc::start(root, name, &["--discovery", &url]).expect("start");
    wait_formed(&[&a], 1, FORM).await.expect("formed");
    (a, url)
}

/// The agent's `refused_rpcs` counter.
async fn refused_rpcs(a: &AgentProc) -> u64 {
    let s = wait_for(&format!("status of {}", a.name), WAIT, || a.status())
        .await
        .expect("status");
    s["refused_rpcs"].as_u64().expect("refused_rpcs in status")
}

async fn status(a: &AgentProc) -> Value {
    wait_for(&format!("status of {}", a.name), WAIT, || a.status())
        .await
        .expect("status")
}

/// One refusal: the answer `status`/`kind`, or, for a removed node (410), a handshake refused
/// because the member has added it to the certificates it refuses by then (counted the same).
fn refused(
    what: &str,
    reply: anyhow::Result<muster_tests::peer_client::PeerReply>,
    status: u16,
    kind: &str,
    phrase: &str,
) {
    match reply {
        Ok(reply) => assert_refused(what, &reply, status, kind, phrase),
        Err(e) => assert!(
            status == 410,
            "{what}: no answer ({e:#}); only a removed node may be refused at the handshake"
        ),
    }
}

/// Sends every raft route (POSTs with `{}`, and the membership check) and asserts each refusal.
async fn assert_raft_routes_refuse(
    what: &str,
    api: &PeerApi,
    status: u16,
    kind: &str,
    phrase: &str,
) -> u64 {
    for path in RAFT_POSTS {
        let reply = api.post_json(path, &json!({})).await;
        refused(&format!("{what}: POST {path}"), reply, status, kind, phrase);
    }
    let reply = api.get(MEMBER_CHECK).await;
    refused(
        &format!("{what}: GET {MEMBER_CHECK}"),
        reply,
        status,
        kind,
        phrase,
    );
    RAFT_POSTS.len() as u64 + 1
}

#[tokio::test]
async fn raft_routes_refuse_a_missing_certificate_with_401_and_a_foreign_one_at_the_handshake() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let ((a, _), (b, _)) = tokio::join!(
        one_node(&d, tmp.path(), "a1"),
        one_node(&d, tmp.path(), "b1")
    );
    let target = Target::of(&a).await.expect("target");
    let other = Target::of(&b).await.expect("other cluster");
    assert_ne!(target.cluster_id, other.cluster_id);

    // Controls: each member's own certificate passes on its own node.
    for (t, agent) in [(&target, &a), (&other, &b)] {
        let own =
            PeerApi::new(t, &Credential::member(&agent.data_dir).expect("files")).expect("client");
        let reply = own.get(MEMBER_CHECK).await.expect("member check");
        assert_eq!(
            (reply.status, &reply.json["member"]),
            (200, &json!(true)),
            "{reply}"
        );
    }

    // No client certificate: the handshake works (joiners have none), every raft route
    // answers 401, and each refusal is counted once.
    let no_cert = PeerApi::new(
        &target,
        &Credential::no_certificate(&a.data_dir).expect("pin"),
    )
    .expect("client");
    let before = refused_rpcs(&a).await;
    let sent = assert_raft_routes_refuse(
        "no certificate",
        &no_cert,
        401,
        "unauthorized",
        "a client certificate issued by this cluster's CA is required",
    )
    .await;
    assert_eq!(
        refused_rpcs(&a).await - before,
        sent,
        "each refused request counts once"
    );
    assert!(
        a.log().contains("refused a raft request"),
        "refusals are logged at WARN: {}",
        tail(&a.log(), 20)
    );

    // Another cluster's member certificate (the client trusts a1's CA, so only the server's
    // check of the client certificate can fail): no answer at all, the handshake is refused,
    // and each attempt counts once.
    let foreign = PeerApi::new(
        &target,
        &Credential::foreign(&b.data_dir, &a.data_dir).expect("files"),
    )
    .expect("client");
    let before = refused_rpcs(&a).await;
    let attempts = ["/raft/append", "/raft/vote", "/raft/client"];
    for path in attempts {
        match foreign.post_json(path, &json!({})).await {
            // The server's verifier rejects the chain with a fatal TLS alert.
            Err(e) => assert!(
                format!("{e:#}").contains("UnknownCA"),
                "{path}: want the handshake refused with an UnknownCA alert, got {e:#}"
            ),
            Ok(reply) => panic!("{path}: a foreign certificate got an answer: {reply}"),
        }
    }
    let want = before + attempts.len() as u64;
    let counted = wait_for("the refused handshakes to be counted", WAIT, || async {
        let n = refused_rpcs(&a).await;
        (n >= want).then_some(n)
    })
    .await
    .expect("counted");
    assert_eq!(
        counted - before,
        attempts.len() as u64,
        "each refused handshake counts once"
    );
    // The node serves on.
    let reply = no_cert.get("/v1/health").await.expect("health");
    assert_eq!((reply.status, &reply.json), (200, &json!({"status": "ok"})));
}

#[tokio::test]
async fn forwarded_operations_are_checked_again_by_the_leader() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let mut agents: Vec<AgentProc> = (1..=3)
        .map(|i| {
            AgentProc::start(tmp.path(), &format!("f{i}"), &["--discovery", &url]).expect("start")
        })
        .collect();
    wait_formed(&agents.iter().collect::<Vec<_>>(), 3, FORM)
        .await
        .expect("formed");
    // A fourth member joins with a token and stays a nonvoter (voter table: 4 → 3).
    let token = agents[0].create_token(&[]).await.expect("token");
    let joiner = AgentProc::start(
        tmp.path(),
        "f4",
        &["--join", &agents[0].addr, "--token", &token],
    )
    .expect("join");
    agents.push(joiner);
    wait_formed(&agents.iter().collect::<Vec<_>>(), 4, FORM)
        .await
        .expect("four members");
    let s = status(&agents[0]).await;
    let cluster_id = s["cluster_id"].as_str().expect("cluster id").to_string();
    let suffrage = |name: &str| {
        s["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == name))
            .map(|m| m["suffrage"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(suffrage("f4").as_deref(), Some("nonvoter"), "{s}");
    let leader_name = s["leader"].as_str().expect("leader").to_string();
    let leader = agents
        .iter()
        .find(|a| a.name == leader_name)
        .expect("leader");
    let voter = agents
        .iter()
        .find(|a| a.name != leader_name && suffrage(&a.name).as_deref() == Some("voter"))
        .expect("a voter that does not lead");
    let nonvoter = &agents[3];
    let to_leader = Target::of(leader).await.expect("leader");
    let as_voter = PeerApi::new(
        &to_leader,
        &Credential::member(&voter.data_dir).expect("files"),
    )
    .expect("client");
    let as_nonvoter = PeerApi::new(
        &to_leader,
        &Credential::member(&nonvoter.data_dir).expect("files"),
    )
    .expect("client");
    let socket = || Some(json!({"by": "local_socket"}));
    let node = || Some(json!({"by": "node"}));

    // `backup` holds the CA key: only from a voter, whatever authority the nonvoter claims
    // (and without one, as senders that predate `authority` send it).
    for authority in [socket(), None] {
        let reply = as_nonvoter
            .forward(json!({"op": "backup"}), authority.clone())
            .await
            .expect("backup");
        assert_refused(
            &format!("backup from a nonvoter ({authority:?})"),
            &reply,
            403,
            "unauthorized",
            "only a voter",
        );
        assert!(reply.json.get("state").is_none(), "no state in a refusal");
    }
    let reply = as_voter
        .forward(json!({"op": "backup"}), socket())
        .await
        .expect("backup");
    assert_eq!(reply.status, 200, "backup from a voter: {reply}");
    assert_eq!(reply.json["cluster_id"], cluster_id.as_str());
    assert!(
        reply.json["state"]["ca"]["key_pem"]
            .as_str()
            .is_some_and(|k| k.contains("PRIVATE KEY")),
        "a voter's backup holds the state with the CA: {reply}"
    );

    // Raw replicated writes: key-value puts and deletes only.
    let put = json!({"op": "write", "request": {"op": "kv_put", "key": "forwarded", "value": "1"}});
    let reply = as_voter.forward(put, socket()).await.expect("put");
    assert_eq!(reply.status, 200, "a forwarded kv_put: {reply}");
    let (code, out, err) = voter.cli(&["kv", "get", "forwarded"]).await.expect("get");
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    let fingerprint = "ab".repeat(32);
    let forbidden = [
        json!({"op": "init_cluster", "cluster_id": "0123456789abcdef0123456789abcdef",
               "ca": {"cert_pem": "x", "key_pem": "y"}}),
        json!({"op": "upsert_node", "id": 4242,
               "node": {"name": "evil", "addr": "127.0.0.1:1", "key_fingerprint": fingerprint,
                        "joined_ms": 0}}),
        json!({"op": "remove_node", "id": to_leader.node_id}),
        json!({"op": "create_operator_token", "id": "0123456789abcdef",
               "token": {"secret_sha256": fingerprint, "description": "evil", "created_ms": 0}}),
        json!({"op": "end_formation"}),
    ];
    for request in forbidden {
        let what = format!("a forwarded raw write {}", request["op"]);
        let reply = as_voter
            .forward(json!({"op": "write", "request": request}), socket())
            .await
            .expect("write");
        assert_refused(
            &what,
            &reply,
            403,
            "unauthorized",
            "only key-value writes can be forwarded",
        );
    }
    let after = status(leader).await;
    assert_eq!(
        after["members"].as_array().map(Vec::len),
        Some(4),
        "{after}"
    );
    let (_, tokens, _) = leader
        .cli(&["operator-token", "list", "--json"])
        .await
        .expect("list");
    assert!(
        !tokens.contains("0123456789abcdef"),
        "no forged operator token: {tokens}"
    );

    // On its own behalf a member forwards joins and status, nothing else.
    let reply = as_voter
        .forward(json!({"op": "status"}), node())
        .await
        .expect("status");
    assert_eq!(
        reply.status, 200,
        "status on a member's own behalf: {reply}"
    );
    assert_eq!(reply.json["cluster_id"], cluster_id.as_str());
    for op in [
        json!({"op": "kv_get", "key": "forwarded"}),
        json!({"op": "backup"}),
        json!({"op": "write", "request": {"op": "kv_put", "key": "forwarded", "value": "2"}}),
    ] {
        let reply = as_voter.forward(op.clone(), node()).await.expect("op");
        assert_refused(
            &format!("{} on the member's own behalf", op["op"]),
            &reply,
            403,
            "unauthorized",
            "only joins and status",
        );
    }

    // An operator token is checked against the leader's committed state.
    let (code, op_token, err) = voter
        .cli(&["operator-token", "create", "--description", "refusals"])
        .await
        .expect("create");
    assert_eq!(code, 0, "{err}");
    let by_token = operator_token_authority(&op_token).expect("authority");
    let get_op = json!({"op": "kv_get", "key": "forwarded"});
    let reply = as_voter
        .forward(get_op.clone(), Some(by_token.clone()))
        .await
        .expect("get");
    assert_eq!(
        (reply.status, &reply.json["value"]),
        (200, &json!("1")),
        "a live operator token: {reply}"
    );
    let mut wrong_secret = by_token.clone();
    wrong_secret["secret_sha256"] = json!("0".repeat(64));
    let reply = as_voter
        .forward(get_op.clone(), Some(wrong_secret))
        .await
        .expect("get");
    assert_refused(
        "an operator token with the wrong secret",
        &reply,
        401,
        "unauthorized",
        "",
    );
    let id = by_token["id"].as_str().expect("id").to_string();
    let (code, _, err) = voter
        .cli(&["operator-token", "revoke", &id])
        .await
        .expect("revoke");
    assert_eq!(code, 0, "{err}");
    let reply = as_voter.forward(get_op, Some(by_token)).await.expect("get");
    assert_refused(
        "a revoked operator token, forwarded",
        &reply,
        401,
        "unauthorized",
        "",
    );
}

#[tokio::test]
async fn certificates_of_this_cluster_get_403_for_non_members_and_410_once_removed() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (r1, _) = one_node(&d, tmp.path(), "r1").await;
    let token = r1.create_token(&[]).await.expect("token");
    let mut r2 =
        AgentProc::start(tmp.path(), "r2", &["--join", &r1.addr, "--token", &token]).expect("join");
    wait_formed(&[&r1, &r2], 2, FORM)
        .await
        .expect("two members");
    let target = Target::of(&r1).await.expect("target");

    // A certificate the cluster's own CA signed for a node that never joined.
    let backup = tmp.path().join("backup");
    let (code, _, err) = r1
        .cli(&["backup", &backup.display().to_string()])
        .await
        .expect("backup");
    assert_eq!(code, 0, "{err}");
    let ca = ca_from_backup(&std::fs::read(&backup).expect("read")).expect("ca");
    let outsider_key = NodeKey::generate().expect("key");
    let outsider = PeerApi::new(
        &target,
        &outsider_of_cluster(&ca, &target.cluster_id, &outsider_key).expect("cert"),
    )
    .expect("client");
    let before = refused_rpcs(&r1).await;
    let sent = assert_raft_routes_refuse(
        "a non-member of this cluster",
        &outsider,
        403,
        "unauthorized",
        &format!("node {} is not a member", member_id_hex(&outsider_key)),
    )
    .await;
    assert_eq!(refused_rpcs(&r1).await - before, sent, "counted");

    // r2's certificate passes while it is a member…
    let as_r2 =
        PeerApi::new(&target, &Credential::member(&r2.data_dir).expect("files")).expect("client");
    let reply = as_r2.get(MEMBER_CHECK).await.expect("member check");
    assert_eq!((reply.status, &reply.json["member"]), (200, &json!(true)));
    // The check-in answer names the leader and lists every member with its address.
    assert_eq!(
        reply.json["members"].as_array().map(Vec::len),
        Some(2),
        "{reply}"
    );
    assert!(reply.json["leader"]["addr"].is_string(), "{reply}");

    // …and once it is removed (and out of the configuration), every member route answers
    // 410 removed, counted like any other refusal.
    let (code, out, err) = r1.cli(&["node", "remove", "r2"]).await.expect("remove");
    assert_eq!(code, 0, "{out}{err}");
    // Refused from then on, in one of two ways: on the session `as_r2` opened while r2 was
    // a member, every route answers 410 `removed`; once that session is gone (the member
    // closes it, on a loaded machine sometimes before the first poll: seen in CI), a new
    // handshake with the removed member's certificate is refused at TLS as revoked
    // (revocation.rs covers that path on every route). Either is a refusal; a 200 is not.
    enum Refused {
        Answer(muster_tests::peer_client::PeerReply),
        Revoked,
    }
    let first = wait_for("r1 to stop serving r2", WAIT, || async {
        match as_r2.get(MEMBER_CHECK).await {
            Ok(reply) => (reply.status != 200).then_some(Refused::Answer(reply)),
            Err(e) => (muster_tests::peer_client::alert_received(&e)
                == Some(rustls::AlertDescription::CertificateRevoked))
            .then_some(Refused::Revoked),
        }
    })
    .await
    .expect("refused");
    let Refused::Answer(first) = first else {
        eprintln!("the removed member's session was closed: refused at the handshake as revoked");
        assert_eq!(r2.wait_exit(FORM).await.expect("r2 stops"), Some(0));
        return;
    };
    assert_refused(
        "the first refusal of a removed node",
        &first,
        410,
        "removed",
        "was removed from this cluster",
    );
    let before = refused_rpcs(&r1).await;
    let sent = assert_raft_routes_refuse(
        "a removed node",
        &as_r2,
        410,
        "removed",
        "was removed from this cluster",
    )
    .await;
    assert_eq!(refused_rpcs(&r1).await - before, sent, "counted");
    assert_eq!(r2.wait_exit(FORM).await.expect("r2 stops"), Some(0));
}

/// Waits for the bootstrap record of `url` and returns it.
async fn record(url: &str) -> BootstrapRecord {
    wait_for("the bootstrap record", WAIT, || async {
        let reply = get(&format!("{url}/{RECORD_KEY}")).await.ok()?;
        BootstrapRecord::parse(reply.json()["node"]["value"].as_str()?).ok()
    })
    .await
    .expect("record")
}

/// Registers `key`'s member id with the URL as `name` at `addr`.
async fn register_key(url: &str, key: &NodeKey, name: &str, addr: &str) {
    let reply = register(url, &member_id_hex(key), &format!("{name}=https://{addr}"))
        .await
        .expect("register");
    assert_eq!(reply.status, 201, "{}", reply.body);
}

/// A client for the initiator of `record` at `addr`, pinning the record's CA.
fn initiator_api(record: &BootstrapRecord, addr: &str) -> PeerApi {
    let target = Target {
        name: "initiator".into(),
        node_id: u64::from_str_radix(&record.initiator, 16).expect("initiator id"),
        cluster_id: record.cluster_id.clone(),
        addr: addr.to_string(),
    };
    let pinned = Credential::Pinned {
        ca_pin: record.ca_pin.clone(),
    };
    PeerApi::new(&target, &pinned).expect("client")
}

#[tokio::test]
async fn registrant_joins_need_a_first_n_registration_its_key_and_a_formation_in_progress() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("url");
    let g1 = AgentProc::start(tmp.path(), "g1", &["--discovery", &url]).expect("start");
    let rec = record(&url).await;
    let api = initiator_api(&rec, &g1.addr);
    // The cohort: g1, then g2 and g3 (which the test plays); g4 registers beyond the size.
    let keys: Vec<NodeKey> = (0..4).map(|_| NodeKey::generate().expect("key")).collect();
    let addr = |i: usize| format!("127.0.0.1:{}", 7990 + i);
    for (i, key) in keys.iter().enumerate().take(3) {
        register_key(&url, key, &format!("g{}", i + 2), &addr(i)).await;
    }
    let join = |member_id: String, key: &NodeKey, name: &str, addr: &str| {
        let body = registrant_join_body(&url, &member_id, key, name, addr).expect("body");
        let api = api.clone();
        async move { api.post_json("/v1/join", &body).await.expect("join") }
    };
    let (g2, g3, g4) = (&keys[0], &keys[1], &keys[2]);

    let reply = join(member_id_hex(g4), g4, "g4", &addr(2)).await;
    assert_refused(
        "a registrant beyond the first N",
        &reply,
        403,
        "unauthorized",
        "is not one of the first registrants",
    );
    let reply = join(member_id_hex(&keys[3]), &keys[3], "g5", &addr(3)).await;
    assert_refused(
        "an id that never registered",
        &reply,
        403,
        "unauthorized",
        "is not one of the first registrants",
    );
    let reply = join(format!("0{}", member_id_hex(g2)), g2, "g2", &addr(0)).await;
    assert_refused(
        "a non-canonical member id",
        &reply,
        400,
        "invalid_argument",
        "without leading zeros",
    );
    let reply = join(member_id_hex(g2), g3, "g2", &addr(0)).await;
    assert_refused(
        "a registrant's id with another key's CSR",
        &reply,
        403,
        "unauthorized",
        "another key",
    );
    let reply = join(member_id_hex(g2), g2, "not-g2", &addr(0)).await;
    assert_refused(
        "a registrant under another name",
        &reply,
        403,
        "unauthorized",
        "registration says",
    );
    // Control: the registrant itself, with its key, name and address, is admitted.
    let reply = join(member_id_hex(g2), g2, "g2", &addr(0)).await;
    assert_eq!(reply.status, 200, "{reply}");
    assert_eq!(reply.json["node_id"], member_id_hex(g2).as_str());

    // Once a cohort has formed, the URL admits nobody new.
    let (h1, url) = one_node(&d, tmp.path(), "h1").await;
    wait_for("the record to say formed", WAIT, || async {
        let rec = record(&url).await;
        (rec.state == RecordState::Formed).then_some(())
    })
    .await
    .expect("formed");
    let rec = record(&url).await;
    let late = NodeKey::generate().expect("key");
    register_key(&url, &late, "late", "127.0.0.1:7989").await;
    let body = registrant_join_body(&url, &member_id_hex(&late), &late, "late", "127.0.0.1:7989")
        .expect("body");
    let reply = initiator_api(&rec, &h1.addr)
        .post_json("/v1/join", &body)
        .await
        .expect("join");
    assert_refused(
        "a registrant after formation",
        &reply,
        403,
        "unauthorized",
        "not admitting discovery registrants",
    );
}

#[tokio::test]
async fn token_joins_are_refused_with_the_token_s_state_as_the_kind() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (k1, _) = one_node(&d, tmp.path(), "k1").await;
    let target = Target::of(&k1).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&k1.data_dir).expect("pin"),
    )
    .expect("client");
    // Joiners that never run: the leader admits them as nonvoters at an address nobody serves.
    let nowhere = "127.0.0.1:9";
    let join = |token: String, name: &'static str| {
        let api = api.clone();
        async move {
            let key = NodeKey::generate().expect("key");
            let body = token_join_body(&token, &key, name, nowhere).expect("body");
            api.post_json("/v1/join/token", &body).await.expect("join")
        }
    };
    let token_id = |token: &str| token.split('.').nth(2).expect("id").to_string();
    let token_state = |id: String| {
        let k1 = &k1;
        async move {
            let (_, out, _) = k1.cli(&["token", "list", "--json"]).await.ok()?;
            let list: Value = serde_json::from_str(&out).ok()?;
            list.as_array()?
                .iter()
                .find(|t| t["id"] == id.as_str())
                .cloned()
        }
    };

    // Control: a single-use token admits one node.
    let single = k1.create_token(&[]).await.expect("token");
    let reply = join(single.clone(), "joined-a").await;
    assert_eq!(reply.status, 200, "{reply}");
    assert!(
        reply.json["cert_pem"]
            .as_str()
            .is_some_and(|c| c.contains("CERTIFICATE"))
    );
    let reply = join(single.clone(), "joined-b").await;
    assert_refused(
        "a consumed token",
        &reply,
        403,
        "token_consumed",
        "has been used up",
    );

    // A wrong secret for a token this member knows: refused at once, whatever its state.
    let key = NodeKey::generate().expect("key");
    let body = token_join_body_parts(&token_id(&single), &"7".repeat(64), &key, "x", nowhere)
        .expect("body");
    let reply = api.post_json("/v1/join/token", &body).await.expect("join");
    assert_refused(
        "a known token with the wrong secret",
        &reply,
        403,
        "unauthorized",
        "not valid for this cluster",
    );
    let body = token_join_body_parts("0123456789abcdef", &"7".repeat(64), &key, "x", nowhere)
        .expect("body");
    let reply = api.post_json("/v1/join/token", &body).await.expect("join");
    assert_refused(
        "an unknown token",
        &reply,
        403,
        "unauthorized",
        "not valid for this cluster",
    );

    let revoked = k1.create_token(&[]).await.expect("token");
    let (code, _, err) = k1
        .cli(&["token", "revoke", &token_id(&revoked)])
        .await
        .expect("revoke");
    assert_eq!(code, 0, "{err}");
    let reply = join(revoked, "joined-c").await;
    assert_refused(
        "a revoked token",
        &reply,
        403,
        "token_revoked",
        "was revoked",
    );

    let expiring = k1.create_token(&["--ttl", "1s"]).await.expect("token");
    wait_for("the token to expire", WAIT, || async {
        let t = token_state(token_id(&expiring)).await?;
        (t["state"] == "expired").then_some(())
    })
    .await
    .expect("expired");
    let reply = join(expiring, "joined-d").await;
    assert_refused("an expired token", &reply, 403, "token_expired", "expired");

    // A name that a member has: 409, and the token keeps its use.
    let fresh = k1.create_token(&[]).await.expect("token");
    for name in ["k1", "joined-a"] {
        let reply = join(fresh.clone(), name).await;
        assert_refused(
            &format!("the taken name {name}"),
            &reply,
            409,
            "name_taken",
            name,
        );
    }
    let t = token_state(token_id(&fresh)).await.expect("listed");
    assert_eq!(t["uses_left"], 1, "a refused join takes no use: {t}");
    assert_eq!(
        status(&k1).await["members"].as_array().map(Vec::len),
        Some(2),
        "k1 and joined-a only"
    );
}

#[tokio::test]
async fn more_than_twenty_quick_join_requests_from_one_address_get_429() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, _) = one_node(&d, tmp.path(), "q1").await;
    let target = Target::of(&a).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&a.data_dir).expect("pin"),
    )
    .expect("client");
    let started = Instant::now();
    // The burst: 20 requests pass the limit (and are refused for their empty body).
    for i in 0..20 {
        let reply = api
            .post_json("/v1/join/token", &json!({}))
            .await
            .expect("join");
        assert_refused(
            &format!("request {i} of the burst"),
            &reply,
            400,
            "invalid_argument",
            "token join request",
        );
    }
    // Then, at 5 per second, at most a few more pass before the limit answers 429.
    let mut limited = None;
    for _ in 0..20 {
        let reply = api
            .post_json("/v1/join/token", &json!({}))
            .await
            .expect("join");
        if reply.status == 429 {
            limited = Some(reply);
            break;
        }
    }
    let elapsed = started.elapsed();
    let limited = limited.unwrap_or_else(|| {
        panic!("no 429 in 40 join requests sent within {elapsed:?} (burst 20, 5/s)")
    });
    assert_refused(
        "over the rate",
        &limited,
        429,
        "rate_limited",
        "too many join requests",
    );
    // Both join routes share the limit; other routes have none.
    let key = NodeKey::generate().expect("key");
    let body = registrant_join_body("http://x/y", &member_id_hex(&key), &key, "x", "127.0.0.1:9")
        .expect("body");
    let reply = api.post_json("/v1/join", &body).await.expect("join");
    assert_refused(
        "a registrant join over the rate",
        &reply,
        429,
        "rate_limited",
        "too many join requests",
    );
    let reply = api.get("/v1/health").await.expect("health");
    assert_eq!(reply.status, 200, "{reply}");
    // The limit refills: a join request gets through again.
    wait_for("the limit to refill", WAIT, || async {
        let reply = api.post_json("/v1/join/token", &json!({})).await.ok()?;
        (reply.status == 400).then_some(())
    })
    .await
    .expect("refilled");
}

#[tokio::test]
async fn operator_routes_over_tcp_answer_401_without_a_valid_operator_token() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (o1, _) = one_node(&d, tmp.path(), "o1").await;
    let operator_token = o1
        .printed_operator_token()
        .await
        .expect("printed at formation");
    let join_token = o1.create_token(&[]).await.expect("join token");
    let target = Target::of(&o1).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&o1.data_dir).expect("pin"),
    )
    .expect("client");
    let op_id = operator_token.split('.').nth(2).expect("id");
    let mut wrong_secret: Vec<&str> = operator_token.split('.').collect();
    let ones = "1".repeat(64);
    wrong_secret[3] = &ones;
    let wrong_secret = format!("Bearer {}", wrong_secret.join("."));
    let revoke_op = format!("/v1/operator-tokens/{op_id}");
    let routes: Vec<(&str, &str, Option<Value>)> = vec![
        ("GET", "/v1/status", None),
        ("GET", "/v1/kv?key=k", None),
        ("PUT", "/v1/kv?key=k", Some(json!({"value": "x"}))),
        ("DELETE", "/v1/kv?key=k", None),
        ("GET", "/v1/kv/list?prefix=", None),
        ("GET", "/v1/tokens", None),
        ("POST", "/v1/tokens", Some(json!({"ttl_ms": 60_000}))),
        ("DELETE", "/v1/tokens/0123456789abcdef", None),
        ("GET", "/v1/operator-tokens", None),
        ("POST", "/v1/operator-tokens", Some(json!({}))),
        ("DELETE", revoke_op.as_str(), None),
        ("DELETE", "/v1/members/o1", None),
        ("GET", "/v1/backup", None),
    ];
    let join_bearer = format!("Bearer {join_token}");
    let authorizations: [(&str, Option<&str>); 5] = [
        ("no bearer", None),
        ("a join token", Some(join_bearer.as_str())),
        ("garbage", Some("Bearer garbage")),
        (
            "an operator token with the wrong secret",
            Some(wrong_secret.as_str()),
        ),
        ("basic auth", Some("Basic b3BlcmF0b3I6c2VjcmV0")),
    ];
    for (method, path, body) in &routes {
        for (what, authorization) in &authorizations {
            let mut headers = vec![("content-type", "application/json")];
            if let Some(value) = authorization {
                headers.push(("authorization", *value));
            }
            let body = body
                .as_ref()
                .map(|b| serde_json::to_vec(b).expect("json"))
                .unwrap_or_default();
            let reply = api.raw(method, path, &headers, body).await.expect("answer");
            assert_refused(
                &format!("{method} {path} with {what}"),
                &reply,
                401,
                "unauthorized",
                "",
            );
        }
    }
    // Nothing happened, and the right token works.
    let bearer = format!("Bearer {operator_token}");
    let reply = api
        .raw("GET", "/v1/kv?key=k", &[("authorization", &bearer)], vec![])
        .await
        .expect("get");
    assert_eq!(reply.status_kind(), (404, Some("not_found")), "{reply}");
    let reply = api
        .raw("GET", "/v1/status", &[("authorization", &bearer)], vec![])
        .await
        .expect("status");
    assert_eq!(reply.status, 200, "{reply}");
    assert_eq!(
        reply.json["members"].as_array().map(Vec::len),
        Some(1),
        "{reply}"
    );
    let reply = api
        .raw("GET", "/v1/tokens", &[("authorization", &bearer)], vec![])
        .await
        .expect("tokens");
    assert_eq!(
        reply.json.as_array().map(Vec::len),
        Some(1),
        "only the join token: {reply}"
    );
}

/// Sends `bytes` over a TLS connection that pins `pin` and returns what comes back before the
/// server closes (bounded by [`WAIT`]).
fn tls_exchange(pin: &str, addr: &str, bytes: &[u8]) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = muster_shared::tls::pinned_client_config(pin)?;
    let name = rustls::pki_types::ServerName::try_from("muster.invalid")?.to_owned();
    let conn = rustls::ClientConnection::new(config, name)?;
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(WAIT))?;
    tcp.set_write_timeout(Some(WAIT))?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(bytes)?;
    tls.flush()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                anyhow::bail!("no answer and no close within {WAIT:?}")
            }
            // A reset or an unclean close after the answer.
            Err(_) => break,
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn hostile_input_to_open_routes_gets_json_errors_and_the_node_serves_on() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (x1, _) = one_node(&d, tmp.path(), "x1").await;
    let target = Target::of(&x1).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&x1.data_dir).expect("pin"),
    )
    .expect("client");
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    let over_limit = format!("{{\"name\":\"{}\"}}", "a".repeat(70 * 1024)).into_bytes();
    let bodies: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "malformed JSON",
            b"{\"name\":".to_vec(),
            400,
            "invalid_argument",
        ),
        ("an empty body", Vec::new(), 400, "invalid_argument"),
        ("binary garbage", garbage.clone(), 400, "invalid_argument"),
        (
            "JSON of another shape",
            b"[1,2,3]".to_vec(),
            400,
            "invalid_argument",
        ),
        ("a body over 64 KiB", over_limit, 413, "payload_too_large"),
    ];
    for route in ["/v1/join", "/v1/join/token"] {
        for (what, body, status, kind) in &bodies {
            let reply = api
                .raw(
                    "POST",
                    route,
                    &[("content-type", "application/json")],
                    body.clone(),
                )
                .await
                .expect("answer");
            assert_refused(&format!("{route} with {what}"), &reply, *status, kind, "");
        }
    }
    // Health ignores what it is sent.
    let reply = api
        .raw("GET", "/v1/health", &[], garbage.clone())
        .await
        .expect("health");
    assert_eq!((reply.status, &reply.json), (200, &json!({"status": "ok"})));
    // A huge header: refused by the HTTP layer (`431`, which cannot carry our JSON), never
    // served.
    let big = "a".repeat(1024 * 1024);
    match api
        .raw("GET", "/v1/health", &[("x-big", big.as_str())], vec![])
        .await
    {
        Err(e) => assert!(
            !e.to_string().contains("timed out"),
            "a 1 MiB header: {e:#}"
        ),
        Ok(reply) => assert_eq!(reply.status, 431, "a 1 MiB header: {reply}"),
    }
    // TLS, then bytes that are not HTTP: a bare `400` from the HTTP layer (no JSON possible:
    // there is no request to answer), then the connection is closed; never a hang.
    let pin = muster_tests::peer_client::MemberFiles::read(&x1.data_dir)
        .expect("files")
        .ca_pin()
        .expect("pin");
    let addr = x1.addr.clone();
    let junk = garbage.clone();
    let answer = tokio::task::spawn_blocking(move || tls_exchange(&pin, &addr, &junk))
        .await
        .expect("join")
        .expect("TLS exchange");
    assert!(
        answer.starts_with("HTTP/1.1 400 ") && answer.contains("connection: close"),
        "garbage over TLS: {answer:?}"
    );
    // Not TLS at all: the connection is closed.
    let closed = tokio::time::timeout(WAIT, async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&x1.addr).await?;
        let _ = stream.write_all(&garbage).await;
        let mut buf = vec![0u8; 4096];
        let mut total = 0;
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return Ok::<usize, std::io::Error>(total),
                Ok(n) => total += n,
            }
        }
    })
    .await
    .expect("the connection is closed, not held open")
    .expect("connect");
    assert!(
        closed < 4096,
        "a short TLS alert at most, got {closed} bytes"
    );

    // Afterwards the node answers as before, and nothing panicked.
    let reply = api.get("/v1/health").await.expect("health");
    assert_eq!(reply.status, 200, "{reply}");
    assert!(x1.status().await.is_some(), "muster status answers");
    assert!(!x1.log().contains("panicked"), "{}", tail(&x1.log(), 40));
}

#[tokio::test]
async fn unknown_paths_and_methods_get_json_errors() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (u1, _) = one_node(&d, tmp.path(), "u1").await;
    let target = Target::of(&u1).await.expect("target");
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&u1.data_dir).expect("pin"),
    )
    .expect("client");
    // Every answer is collected first, so that a failure lists them all.
    let mut wrong = Vec::new();
    // An unknown path: `404 not_found`, like a missing key. A known path with another
    // method: `405 method_not_allowed`. (The statuses are written here, not read from the
    // agent's table.)
    for (method, path, want) in [
        ("GET", "/nope", (404, "not_found")),
        ("POST", "/v1/nope", (404, "not_found")),
        ("GET", "/raft/nope", (404, "not_found")),
        ("GET", "/v1/join", (405, "method_not_allowed")),
        ("DELETE", "/v1/health", (405, "method_not_allowed")),
    ] {
        let reply = api.raw(method, path, &[], vec![]).await.expect("answer");
        let fine = reply.status_kind() == (want.0, Some(want.1)) && reply.is_json_error();
        if !fine {
            wrong.push(format!("{method} {path}: {reply}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "want JSON errors with a kind, got:\n{}",
        wrong.join("\n")
    );
    assert!(!u1.log().contains("panicked"));
}

/// Finds `name`'s member id in `leader`'s status.
async fn member_id_of(leader: &AgentProc, name: &str) -> Option<String> {
    let s = leader.status().await?;
    s["members"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["id"].as_str())
        .map(String::from)
}

#[tokio::test]
async fn a_member_that_has_not_replicated_the_ca_answers_cluster_uninitialized() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let (k1, _) = one_node(&d, tmp.path(), "k1").await;
    let token = k1.create_token(&[]).await.expect("token");
    // The joiner listens on one port but advertises another that nobody serves: it is admitted
    // (it asks the leader), but the leader can never replicate to it, so it never applies the
    // cluster's CA. It still serves the open join routes on its listen port.
    let listen = format!("127.0.0.1:{}", muster_tests::free_port());
    let advertised = format!("127.0.0.1:{}", muster_tests::free_port());
    let joiner = AgentProc::start_bare(
        tmp.path(),
        "lagging",
        &listen,
        &[
            "--join",
            &k1.addr,
            "--token",
            &token,
            "--listen",
            &listen,
            "--advertise",
            &advertised,
        ],
        None,
    )
    .expect("start joiner");
    let id = wait_for("the joiner admitted", FORM, || member_id_of(&k1, "lagging"))
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", joiner.log()));
    let k1_target = Target::of(&k1).await.expect("k1");
    let target = Target {
        name: "lagging".into(),
        node_id: u64::from_str_radix(&id, 16).expect("id"),
        cluster_id: k1_target.cluster_id.clone(),
        addr: listen.clone(),
    };
    let api = PeerApi::new(
        &target,
        &Credential::no_certificate(&k1.data_dir).expect("pin"),
    )
    .expect("client");
    let hello = json!({ "secret_id": "0123456789abcdef", "nonce": "ab".repeat(16) });
    let reply = wait_for("the joiner to serve", FORM, || async {
        api.post_json(SECRET_HELLO, &hello).await.ok()
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", joiner.log()));
    assert_refused(
        "a hello to a member without the CA",
        &reply,
        503,
        "cluster_uninitialized",
        "still creating its cluster",
    );
    // Control: the same hello to k1, which has the CA, is answered on the merits.
    let api = PeerApi::new(
        &k1_target,
        &Credential::no_certificate(&k1.data_dir).expect("pin"),
    )
    .expect("client");
    let reply = api
        .post_json(SECRET_HELLO, &hello)
        .await
        .expect("hello to k1");
    assert_eq!(reply.status_kind(), (404, Some("not_found")), "{reply}");
}
