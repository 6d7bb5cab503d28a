//! Agent error kinds on the wire: each triggered through a real agent, and its HTTP status and
//! JSON `kind` checked against [`WIRE`], a table written here from docs/api.md's contract and
//! not read from the agent's own table (`agent/src/api/error.rs`), so that a status changed in
//! the agent's table fails here instead of being encoded and decoded with itself.
//!
//! Each refusal is paired with an accepted request of the same shape, so it cannot pass merely
//! because the request was malformed.

use std::time::Duration;

use muster_tests::{
    AgentProc, ApiReply, Discovery, OperatorApi, form_through_discovery, free_port, init_and_join,
    raw, tail, wait_for,
};
use serde_json::json;

/// The kinds this file triggers, with the status each must have.
const WIRE: &[(&str, u16)] = &[
    ("method_not_allowed", 405),
    ("unavailable", 503),
    ("compacted", 410),
    ("not_found", 404),
    ("invalid_argument", 400),
    ("revision_mismatch", 409),
    ("lease_held", 409),
    ("no_leader", 503),
    ("quorum_lost", 503),
];

/// The KV history a watch can start from (`agent/src/state/kv.rs`, `HISTORY`): one more write
/// than this, and revision 1 is compacted away.
const HISTORY: u64 = 1_000;

const WAIT: Duration = Duration::from_secs(30);

/// Asserts a refusal: the status [`WIRE`] gives `kind`, and that kind in the JSON body.
#[track_caller]
fn assert_kind(what: &str, reply: &ApiReply, kind: &str) {
    let status = WIRE
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, s)| *s)
        .unwrap_or_else(|| panic!("{kind} is not in this test's WIRE table"));
    assert_eq!(
        (reply.status, reply.kind()),
        (status, Some(kind)),
        "{what}: {} {}",
        reply.status,
        reply.body
    );
    assert!(
        reply.body["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: a refusal says why: {}",
        reply.body
    );
}

fn logs(agents: &[AgentProc]) -> String {
    agents
        .iter()
        .map(|a| format!("--- {}\n{}", a.name, tail(&a.log(), 30)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn error_kinds_are_answered_with_the_documented_status() {
    let tmp = tempfile::tempdir().expect("tmp");
    let agents = init_and_join(tmp.path(), &["k1", "k2"])
        .await
        .expect("two members");
    let token = agents[0].operator_token().await.expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(20)).expect("api");
    let at = agents[0].addr.as_str();

    // not_found and method_not_allowed: an unknown route, and a known one with another method.
    let reply = api.call(at, "GET", "/v1/nope", None).await.expect("answer");
    assert_kind("GET /v1/nope", &reply, "not_found");
    let reply = api
        .call(at, "DELETE", "/v1/status", None)
        .await
        .expect("answer");
    assert_kind("DELETE /v1/status", &reply, "method_not_allowed");
    let reply = api
        .call(at, "GET", "/v1/status", None)
        .await
        .expect("answer");
    assert_eq!(reply.status, 200, "GET /v1/status: {}", reply.body);

    // invalid_argument: a compare-and-set that names both conditions.
    let reply = api
        .call(
            at,
            "PUT",
            "/v1/kv?key=k",
            Some(json!({"value": "v", "if_revision": 1, "if_absent": true})),
        )
        .await
        .expect("answer");
    assert_kind(
        "PUT with if_revision and if_absent",
        &reply,
        "invalid_argument",
    );

    // revision_mismatch: a second create of the same key.
    let create = json!({"value": "v", "if_absent": true});
    let reply = api
        .call(at, "PUT", "/v1/kv?key=cas", Some(create.clone()))
        .await
        .expect("answer");
    assert_eq!(reply.status, 200, "the first create: {}", reply.body);
    let reply = api
        .call(at, "PUT", "/v1/kv?key=cas", Some(create))
        .await
        .expect("answer");
    assert_kind("a second create", &reply, "revision_mismatch");

    // lease_held: a claim by another holder while the lease is held.
    let claim = |holder: &str| json!({"holder": holder, "ttl_ms": 60_000});
    let reply = api
        .call(at, "POST", "/v1/leases/job", Some(claim("a")))
        .await
        .expect("answer");
    assert_eq!(reply.status, 200, "the first claim: {}", reply.body);
    let reply = api
        .call(at, "POST", "/v1/leases/job", Some(claim("b")))
        .await
        .expect("answer");
    assert_kind("a claim by another holder", &reply, "lease_held");

    // unavailable: moving the follower to an address where nothing listens (the leader dials
    // it there first). Moving it to where it is answers.
    let follower = wait_for("a leader and its follower", WAIT, || async {
        let s = agents[0].status().await?;
        let leader = s["leader"].as_str()?;
        agents
            .iter()
            .find(|a| a.name != leader)
            .map(|a| a.name.clone())
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&agents)));
    let follower_addr = &agents
        .iter()
        .find(|a| a.name == follower)
        .expect("follower")
        .addr;
    let path = format!("/v1/members/{follower}/address");
    let nowhere = format!("127.0.0.1:{}", free_port());
    let reply = api
        .call(at, "PUT", &path, Some(json!({ "address": nowhere })))
        .await
        .expect("answer");
    assert_kind(
        &format!("moving {follower} to {nowhere}"),
        &reply,
        "unavailable",
    );
    let reply = api
        .call(at, "PUT", &path, Some(json!({ "address": follower_addr })))
        .await
        .expect("answer");
    assert_eq!(
        reply.status, 200,
        "moving {follower} where it is: {}",
        reply.body
    );

    // compacted: once more than HISTORY writes happened, a watch from revision 1 is refused;
    // one from the latest revision is not.
    let mut writers = Vec::new();
    for w in 0..8u64 {
        let api = api.clone();
        let at = at.to_string();
        writers.push(tokio::spawn(async move {
            let mut last = 0;
            for i in 0..=(HISTORY / 8) {
                let reply = api.put(&at, &format!("c/{w}/{i}"), "x").await.expect("put");
                assert_eq!(reply.status, 200, "put: {}", reply.body);
                last = last.max(reply.body["revision"].as_u64().unwrap_or(0));
            }
            last
        }));
    }
    let mut latest = 0;
    for w in writers {
        latest = latest.max(w.await.expect("writer"));
    }
    assert!(latest > HISTORY + 1, "revision after the writes: {latest}");
    let reply = api
        .call(at, "GET", "/v1/kv/watch?from_revision=1&wait_ms=0", None)
        .await
        .expect("answer");
    assert_kind("a watch from revision 1", &reply, "compacted");
    let reply = api
        .call(
            at,
            "GET",
            &format!("/v1/kv/watch?from_revision={latest}&wait_ms=0"),
            None,
        )
        .await
        .expect("answer");
    assert_eq!(
        reply.status, 200,
        "a watch from revision {latest}: {}",
        reply.body
    );
}

/// A FleetLock lock (as Zincati sends it) on the FleetLock listener `addr`: (status, kind).
async fn fleetlock_lock(addr: &str, id: &str) -> (u16, String) {
    let body = serde_json::json!({"client_params": {"id": id, "group": "default"}});
    match raw(
        "POST",
        &format!("http://{addr}/v1/pre-reboot"),
        &[("fleet-lock-protocol", "true")],
        body.to_string().into_bytes(),
    )
    .await
    {
        Ok(r) => (
            r.status,
            r.json()["kind"].as_str().unwrap_or("").to_string(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

/// The index among `agents` of the leader named by the first of `alive` whose status names one.
async fn leader_of(agents: &[AgentProc], alive: &[usize]) -> Option<usize> {
    for &i in alive {
        if let Some(s) = agents[i].status().await
            && let Some(name) = s["leader"].as_str()
        {
            return agents.iter().position(|a| a.name == name);
        }
    }
    None
}

/// `no_leader` and `quorum_lost` (FleetLock: `no_leader` and `no_quorum`) told apart, each
/// brought about on purpose with `kill -9`. Once two of three voters are dead, nobody can win
/// an election, so the survivor's role is frozen: a leader stays a leader that hears no
/// majority (`quorum_lost`), a follower stays a follower that hears no leader (`no_leader`).
#[tokio::test(flavor = "multi_thread")]
async fn the_survivor_of_two_dead_voters_says_quorum_lost_if_it_leads_and_no_leader_if_not() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let fleetlock: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let fl = fleetlock.clone();
    let mut agents = form_through_discovery(&d, tmp.path(), "q", 3, move |i| {
        vec!["--fleetlock-listen".into(), fl[i as usize - 1].clone()]
    })
    .await
    .expect("formed");
    let token = AgentProc::operator_token_of(&agents)
        .await
        .expect("operator token");
    // Longer than a follower's wait for an election (5 s) before it answers `no_leader`.
    let api = OperatorApi::new(&token, Duration::from_secs(20)).expect("api");

    // 1. The leader survives: it still leads (nobody can unseat it), hears no majority.
    let leader = wait_for("a leader", WAIT, || leader_of(&agents, &[0, 1, 2]))
        .await
        .expect("leader");
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for &i in &followers {
        agents[i].kill9().await.expect("kill");
    }
    wait_for("the leader to report quorum_lost", WAIT, || async {
        agents[leader].status().await?["quorum_lost"]
            .as_bool()?
            .then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&agents)));
    let reply = api
        .put(&agents[leader].addr, "k", "v")
        .await
        .expect("an answer");
    assert_kind(
        "a write on the leader without a majority",
        &reply,
        "quorum_lost",
    );
    // FleetLock spells it `no_quorum`; its status is 503 as well.
    assert_eq!(
        fleetlock_lock(&fleetlock[leader], "m-leader").await,
        (503, "no_quorum".to_string()),
        "a lock on the leader without a majority"
    );

    // 2. Back to three; then a follower survives: its leader is dead, and it cannot elect one.
    for &i in &followers {
        agents[i].restart().expect("restart");
    }
    let refs: Vec<&AgentProc> = agents.iter().collect();
    muster_tests::wait_formed(&refs, 3, WAIT)
        .await
        .expect("three again");
    let leader = wait_for("a leader", WAIT, || leader_of(&agents, &[0, 1, 2]))
        .await
        .expect("leader");
    let survivor = (leader + 1) % 3;
    let third = (leader + 2) % 3;
    agents[leader].kill9().await.expect("kill the leader");
    agents[third].kill9().await.expect("kill a follower");
    // Its status names no leader once the dead one does not answer.
    wait_for("the survivor to name no leader", WAIT, || async {
        let s = agents[survivor].status().await?;
        (s["leader"].is_null() && s["quorum_lost"] == true).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs(&agents)));
    let reply = api
        .put(&agents[survivor].addr, "k", "v")
        .await
        .expect("an answer");
    assert_kind(
        "a write on a follower whose leader is dead",
        &reply,
        "no_leader",
    );
    // FleetLock: no decision within its 2 s, and this member hears no leader: `no_leader`.
    assert_eq!(
        fleetlock_lock(&fleetlock[survivor], "m-follower").await,
        (503, "no_leader".to_string()),
        "a lock on a follower whose leader is dead"
    );
}
