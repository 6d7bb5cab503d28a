//! Handing the leadership over, with real `muster agent` processes on loopback: `muster leader
//! transfer NAME` (asked of a follower, so the request is forwarded to the leader) makes NAME
//! the leader, and a leader stopped with SIGTERM hands over before it exits, so the survivors
//! name the new leader the moment the old one is gone (no election left to wait out), while
//! a client keeps writing and every acknowledged write reads back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muster_tests::{AgentProc, OperatorApi, init_and_join, wait_for};

const NAMES: [&str; 3] = ["h1", "h2", "h3"];

/// The leader the agent at `addr` reports, if it names one.
async fn leader_of(api: &OperatorApi, addr: &str) -> Option<String> {
    let r = api.status(addr).await.ok()?;
    r.body["leader"].as_str().map(str::to_string)
}

#[tokio::test]
async fn a_transfer_moves_the_leader_and_a_stopped_leader_hands_over_first() {
    let _alone = muster_tests::exclusive::heavy().await;
    let tmp = tempfile::tempdir().expect("tmp");
    let mut agents = init_and_join(tmp.path(), &NAMES).await.expect("3 members");
    let token = agents[0]
        .printed_operator_token()
        .await
        .expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(5)).expect("client");
    let addrs: Vec<String> = agents.iter().map(|a| a.addr.clone()).collect();
    let first = wait_for("a leader", Duration::from_secs(30), || {
        leader_of(&api, &addrs[0])
    })
    .await
    .expect("leader");

    // A writer through every member in turn, keeping what was acknowledged and when.
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
    let writer = tokio::spawn({
        let (api, addrs, stop, acked) = (api.clone(), addrs.clone(), stop.clone(), acked.clone());
        async move {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let addr = &addrs[i % addrs.len()];
                if let Ok(r) = api.put(addr, &format!("h/{i}"), &i.to_string()).await
                    && r.ok()
                    && let Ok(mut list) = acked.lock()
                {
                    list.push((i, Instant::now()));
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let acked_since = |t: Instant| {
        acked
            .lock()
            .map(|l| l.iter().filter(|(_, at)| *at > t).count())
            .unwrap_or(0)
    };
    let began = Instant::now();
    wait_for(
        "writes before the transfer",
        Duration::from_secs(30),
        || async { (acked_since(began) >= 5).then_some(()) },
    )
    .await
    .expect("writes");

    // Transfer to a named follower, asked of the other follower.
    let target = NAMES
        .iter()
        .find(|n| **n != first)
        .expect("a follower")
        .to_string();
    let asker = agents
        .iter()
        .find(|a| a.name != first && a.name != target)
        .expect("the other follower");
    let (code, out, err) = asker
        .cli(&["leader", "transfer", &target])
        .await
        .expect("transfer");
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{target} leads now (was {first})")),
        "{out}"
    );
    // The old leader knew when it answered; the others hear of it with the next heartbeat.
    for addr in &addrs {
        wait_for(
            &format!("{addr} to name {target} as leader"),
            Duration::from_secs(5),
            || async {
                (leader_of(&api, addr).await.as_deref() == Some(target.as_str())).then_some(())
            },
        )
        .await
        .expect("the new leader named");
    }
    // A transfer to a name that is no voter is refused and changes nothing.
    let (code, _, err) = asker
        .cli(&["leader", "transfer", "nobody"])
        .await
        .expect("transfer");
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("nobody is not a voter"), "{err}");

    // SIGTERM the leader: it hands over before it exits.
    let leader = agents
        .iter_mut()
        .find(|a| a.name == target)
        .expect("the leader");
    let code = leader.terminate().await.expect("stop");
    assert_eq!(code, Some(0), "{}", leader.last_log());
    let log = leader.log();
    assert!(
        log.contains("handed the leadership over before stopping"),
        "{}",
        leader.last_log()
    );
    // At once, without waiting for an election: a survivor names a survivor as its leader.
    let survivors: Vec<&AgentProc> = agents.iter().filter(|a| a.name != target).collect();
    let named = leader_of(&api, &survivors[0].addr).await;
    assert!(
        named
            .as_deref()
            .is_some_and(|n| n != target && NAMES.contains(&n)),
        "right after the old leader exited, {} named {named:?}",
        survivors[0].name
    );

    // Writes go on through the survivors.
    let exited = Instant::now();
    wait_for(
        "writes after the old leader exited",
        Duration::from_secs(30),
        || async { (acked_since(exited) >= 5).then_some(()) },
    )
    .await
    .expect("writes after the hand-over");
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    let acked: Vec<usize> = acked
        .lock()
        .map(|l| l.iter().map(|(i, _)| *i).collect())
        .unwrap_or_default();
    for i in &acked {
        let r = api
            .get(&survivors[0].addr, &format!("h/{i}"))
            .await
            .expect("read");
        assert!(
            r.ok() && r.body["value"].as_str() == Some(i.to_string().as_str()),
            "acknowledged write h/{i} reads back as {} {}",
            r.status,
            r.body
        );
    }
}
