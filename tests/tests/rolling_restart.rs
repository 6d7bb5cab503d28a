//! A rolling restart with the automatic repairs on, with real `muster agent` processes on
//! loopback: every member of a 4-member cluster (3 voters, 1 standby) is stopped in turn for
//! longer than `--replace-after` (so a stopped voter is replaced by the standby) and started
//! again, while a client writes. The cluster never loses its quorum (no status ever says so),
//! every acknowledged write reads back, and no member that came back was removed (Consul's
//! rolling-reboot failure, consul#8118).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_tests::{OperatorApi, init_and_join_with, wait_for};

const NAMES: [&str; 4] = ["r1", "r2", "r3", "r4"];
const REPLACE_AFTER: Duration = Duration::from_secs(4);
/// Longer than any member is down here (each is started again as soon as it was replaced, and
/// the test checks it was down for less than this), short enough that a member whose silence
/// were counted wrongly (not reset when it came back, or summed over its stops) is removed.
const CLEANUP_AFTER: Duration = Duration::from_secs(20);
const STEP: Duration = Duration::from_secs(60);

/// The leader's view from the first of `addrs` that answers with one.
async fn leader_view(api: &OperatorApi, addrs: &[String]) -> Option<serde_json::Value> {
    for addr in addrs {
        if let Ok(r) = api.status(addr).await
            && r.ok()
            && r.body["leader"].is_string()
            && r.body["members"][0]["reachable"].is_boolean()
        {
            return Some(r.body);
        }
    }
    None
}

/// (name, voter, reachable) of each member.
fn members(s: &serde_json::Value) -> Vec<(String, bool, bool)> {
    s["members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or_default().to_string(),
                m["suffrage"] == "voter",
                m["reachable"] == true,
            )
        })
        .collect()
}

#[tokio::test]
async fn a_rolling_restart_with_repairs_on_keeps_quorum_and_every_member() {
    let _alone = muster_tests::exclusive::heavy().await;
    let tmp = tempfile::tempdir().expect("tmp");
    let replace = format!("{}s", REPLACE_AFTER.as_secs());
    let cleanup = format!("{}s", CLEANUP_AFTER.as_secs());
    let repairs = [
        "--replace-after",
        replace.as_str(),
        "--cleanup-dead-after",
        cleanup.as_str(),
    ];
    let mut agents = init_and_join_with(tmp.path(), &NAMES, &repairs)
        .await
        .expect("4 members");
    let token = agents[0]
        .printed_operator_token()
        .await
        .expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(3)).expect("client");
    let addrs: Vec<String> = agents.iter().map(|a| a.addr.clone()).collect();
    let down: Arc<Mutex<Option<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    // A writer (w/<i> through the members that are up, in turn) and a watcher of every
    // member's status (any answer saying the quorum is lost is kept).
    let writer = tokio::spawn({
        let (api, addrs, down, stop) = (api.clone(), addrs.clone(), down.clone(), stop.clone());
        async move {
            let mut acked = Vec::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let addr = &addrs[i % addrs.len()];
                let skip = down
                    .lock()
                    .map(|d| d.as_deref() == Some(addr))
                    .unwrap_or(false);
                if !skip
                    && let Ok(r) = api.put(addr, &format!("w/{i}"), &i.to_string()).await
                    && r.ok()
                {
                    acked.push(i);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            acked
        }
    });
    let watcher = tokio::spawn({
        let (api, addrs, down, stop) = (api.clone(), addrs.clone(), down.clone(), stop.clone());
        async move {
            let (mut lost, mut answers) = (Vec::new(), 0u64);
            while !stop.load(Ordering::Relaxed) {
                for addr in &addrs {
                    if down
                        .lock()
                        .map(|d| d.as_deref() == Some(addr))
                        .unwrap_or(false)
                    {
                        continue;
                    }
                    if let Ok(r) = api.status(addr).await
                        && r.ok()
                    {
                        answers += 1;
                        if r.body["quorum_lost"] == true {
                            lost.push(format!("{addr}: {}", r.body));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (answers, lost)
        }
    });

    let mut replaced_voters = 0;
    for (i, agent) in agents.iter_mut().enumerate() {
        let name = agent.name.clone();
        let before = leader_view(&api, &addrs).await.expect("a leader");
        let was_voter = members(&before).iter().any(|m| m.0 == name && m.1);
        if let Ok(mut d) = down.lock() {
            *d = Some(agent.addr.clone());
        }
        let stopped = Instant::now();
        agent.terminate().await.expect("stop");
        let others: Vec<String> = addrs
            .iter()
            .filter(|a| **a != agent.addr)
            .cloned()
            .collect();
        // Down past --replace-after: a voter is replaced by the standby (3 voters again, all
        // reachable, and it is not one of them).
        let replaced = wait_for(&format!("{name} replaced"), STEP, || async {
            let s = leader_view(&api, &others).await?;
            let m = members(&s);
            let voters: Vec<_> = m.iter().filter(|x| x.1).collect();
            let done = voters.len() == 3 && voters.iter().all(|v| v.2 && v.0 != name);
            (done && stopped.elapsed() >= REPLACE_AFTER).then_some(s)
        })
        .await
        .expect("replaced");
        if was_voter {
            replaced_voters += 1;
            assert!(
                replaced["membership_events"]
                    .to_string()
                    .contains("--replace-after"),
                "{name}'s replacement is an event: {replaced}"
            );
        }
        if i == 0 {
            agent.restart_without_init().expect("start again");
        } else {
            agent.restart().expect("start again");
        }
        assert!(
            stopped.elapsed() < CLEANUP_AFTER,
            "{name} was down {:?}, longer than --cleanup-dead-after: the test proves nothing",
            stopped.elapsed()
        );
        if let Ok(mut d) = down.lock() {
            *d = None;
        }
        // Back: all four members, every one reachable, three voters.
        wait_for(&format!("{name} back"), STEP, || async {
            let s = leader_view(&api, &addrs).await?;
            let m = members(&s);
            (m.len() == 4 && m.iter().all(|x| x.2) && m.iter().filter(|x| x.1).count() == 3)
                .then_some(())
        })
        .await
        .expect("back");
    }
    stop.store(true, Ordering::Relaxed);
    let acked = writer.await.expect("writer");
    let (answers, lost) = watcher.await.expect("watcher");

    assert!(
        replaced_voters >= 3,
        "only {replaced_voters} voters were stopped and replaced"
    );
    let end = leader_view(&api, &addrs).await.expect("a leader");
    let names: BTreeSet<String> = members(&end).into_iter().map(|m| m.0).collect();
    assert_eq!(
        names,
        NAMES.iter().map(|n| n.to_string()).collect(),
        "a member that came back was removed: {end}"
    );
    assert!(answers > 50, "the watcher got only {answers} answers");
    assert!(
        lost.is_empty(),
        "quorum lost during the rolling restart: {lost:?}"
    );
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );
    for i in &acked {
        let r = api.get(&addrs[0], &format!("w/{i}")).await.expect("read");
        assert!(
            r.ok() && r.body["value"].as_str() == Some(i.to_string().as_str()),
            "acknowledged write w/{i} reads back as {} {}",
            r.status,
            r.body
        );
    }
}
