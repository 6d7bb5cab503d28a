//! Group commit, end to end: concurrent writers through every member of a real 3-voter cluster
//! get their writes batched into shared log entries by the leader (its `/metrics` says so),
//! and each write is still answered on its own: every compare-and-set chain holds (each answer's
//! revision is the next write's condition, and is above the last), no two writes share a
//! revision, and every final value reads back.

use std::collections::BTreeSet;
use std::time::Duration;

use muster_tests::{AgentProc, Discovery, OperatorApi, form_through_discovery, free_port, get};

const WRITERS: usize = 48;
const WRITES_EACH: usize = 25;

/// The value of the unlabelled sample `name` on the agent's `/metrics` at `addr`.
async fn metric(addr: &str, name: &str) -> Option<f64> {
    let reply = get(&format!("http://{addr}/metrics")).await.ok()?;
    reply
        .body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_entries_and_each_is_answered_on_its_own() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let metrics: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let agents = form_through_discovery(&d, tmp.path(), "gc", 3, |i| {
        vec!["--metrics-listen".into(), metrics[i as usize - 1].clone()]
    })
    .await
    .expect("formed");
    let token = AgentProc::operator_token_of(&agents)
        .await
        .expect("the initiator printed an operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(10)).expect("client");

    // Batches start once every member has reported a version that reads them.
    muster_tests::wait_for(
        "every member to report its version",
        Duration::from_secs(30),
        || async {
            let s = agents[0].status().await?;
            let members = s["members"].as_array()?;
            (members.len() == 3 && members.iter().all(|m| m["version"].is_string())).then_some(())
        },
    )
    .await
    .expect("versions reported");

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let api = api.clone();
            let addr = agents[w % agents.len()].addr.clone();
            tokio::spawn(async move {
                let key = format!("gc/{w}");
                let first = api.put(&addr, &key, "0").await.expect("first put");
                assert!(first.ok(), "first put of {key}: {first:?}");
                let mut revision = first.body["revision"].as_u64().expect("revision");
                let mut revisions = vec![revision];
                for i in 1..=WRITES_EACH {
                    let reply = api
                        .call(
                            &addr,
                            "PUT",
                            &format!("/v1/kv?key={key}"),
                            Some(serde_json::json!({"value": i.to_string(), "if_revision": revision})),
                        )
                        .await
                        .expect("an answer");
                    assert!(reply.ok(), "write {i} of {key} at revision {revision}: {reply:?}");
                    let next = reply.body["revision"].as_u64().expect("revision");
                    assert!(next > revision, "{key}: revision {next} after {revision}");
                    revision = next;
                    revisions.push(revision);
                }
                (key, revisions)
            })
        })
        .collect();
    let mut all_revisions = BTreeSet::new();
    let mut writes = 0;
    for writer in writers {
        let (key, revisions) = writer.await.expect("writer");
        for r in &revisions {
            assert!(
                all_revisions.insert(*r),
                "revision {r} answered twice ({key})"
            );
        }
        writes += revisions.len();
        let read = api.get(&agents[0].addr, &key).await.expect("read");
        assert_eq!(
            read.body["value"],
            WRITES_EACH.to_string(),
            "{key}: {read:?}"
        );
        assert_eq!(read.body["mod_revision"], revisions[revisions.len() - 1]);
    }
    assert_eq!(writes, WRITERS * (WRITES_EACH + 1));

    let status = agents[0].status().await.expect("status");
    let leader = status["leader"].as_str().expect("a leader");
    let i = agents
        .iter()
        .position(|a| a.name == leader)
        .expect("the leader is one of the agents");
    let batched = metric(&metrics[i], "muster_raft_batched_writes_total")
        .await
        .expect("muster_raft_batched_writes_total");
    let entries = metric(&metrics[i], "muster_raft_write_entries_total")
        .await
        .expect("muster_raft_write_entries_total");
    assert!(
        batched > 0.0,
        "{WRITERS} concurrent writers, and no write shared an entry"
    );
    assert!(
        entries < writes as f64,
        "{writes} writes took {entries} entries: nothing was batched"
    );
}
