//! A rolling upgrade from an older muster to this build, with real processes on loopback: three
//! members formed by the old binary are stopped with SIGTERM and started on this build one at a
//! time while a client writes; after each, the three are members again with a leader and writes
//! go on; in the end every member reports this build's version and every acknowledged write
//! reads back. The old binary's log and
//! snapshots are read by the new one, and the new one's entries by the members still old.
//!
//! Building an older release takes minutes, so the test runs only when `MUSTER_UPGRADE_FROM`
//! names an older `muster` binary: `scripts/upgrade-test REV` builds REV's and runs it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_tests::{OperatorApi, init_and_join_binary, refs, wait_for, wait_formed};

const NAMES: [&str; 3] = ["u1", "u2", "u3"];
const FORM: Duration = Duration::from_secs(60);

/// The member `name` as the leader reports it, once a leader answers through `addr`.
async fn member_version(api: &OperatorApi, addr: &str, name: &str) -> Option<String> {
    let s = api.status(addr).await.ok()?.body;
    s["leader"].as_str()?;
    s["members"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)?["version"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn a_rolling_upgrade_from_an_older_muster_keeps_every_write() {
    let Some(old) = std::env::var_os("MUSTER_UPGRADE_FROM").map(PathBuf::from) else {
        eprintln!(
            "skipped: set MUSTER_UPGRADE_FROM to an older muster binary (scripts/upgrade-test REV)"
        );
        return;
    };
    assert!(
        old.exists(),
        "MUSTER_UPGRADE_FROM={} is missing",
        old.display()
    );
    let _alone = muster_tests::exclusive::heavy().await;
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();

    // Formed by the old binary: --init, then token joins (tokens made by this build's CLI on the
    // old agent's socket).
    let mut agents = init_and_join_binary(root, &NAMES, &old)
        .await
        .expect("3 old members");
    let token = agents[0]
        .printed_operator_token()
        .await
        .expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(5)).expect("client");
    let addrs: Vec<String> = agents.iter().map(|a| a.addr.clone()).collect();

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<usize>>> = Arc::default();
    let writer = tokio::spawn({
        let (api, addrs, stop, acked) = (api.clone(), addrs.clone(), stop.clone(), acked.clone());
        async move {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(r) = api
                    .put(&addrs[i % addrs.len()], &format!("u/{i}"), &i.to_string())
                    .await
                    && r.ok()
                    && let Ok(mut list) = acked.lock()
                {
                    list.push(i);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let acked_count = || acked.lock().map(|l| l.len()).unwrap_or(0);

    for i in 0..agents.len() {
        let before = acked_count();
        let name = agents[i].name.clone();
        let code = agents[i].terminate().await.expect("SIGTERM");
        assert_eq!(code, Some(0), "old {name} stopped cleanly");
        agents[i].use_binary(None);
        if i == 0 {
            agents[i].restart_without_init().expect("u1 on this build");
        } else {
            agents[i].restart().expect("joiner on this build");
        }
        wait_formed(&refs(&agents), 3, FORM)
            .await
            .unwrap_or_else(|e| panic!("after upgrading {name}: {e:#}"));
        wait_for(
            &format!("writes acknowledged after upgrading {name}"),
            FORM,
            || async { (acked_count() >= before + 5).then_some(()) },
        )
        .await
        .expect("writes go on");
    }
    // Reports reach the record once a leader on this build takes them (an old leader does
    // not know the operation; the member keeps trying).
    for name in NAMES {
        let version = wait_for(&format!("{name} to report its version"), FORM, || {
            member_version(&api, &addrs[0], name)
        })
        .await
        .expect("every member reports");
        assert_eq!(version, env!("CARGO_PKG_VERSION"), "{name}");
    }
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");

    let acked = acked.lock().map(|l| l.clone()).unwrap_or_default();
    assert!(
        acked.len() >= 15,
        "only {} writes acknowledged",
        acked.len()
    );
    for i in acked {
        let r = api.get(&addrs[0], &format!("u/{i}")).await.expect("get");
        assert!(r.ok(), "u/{i}: {:?}", r.body);
        assert_eq!(r.body["value"], i.to_string(), "u/{i}");
    }
}
