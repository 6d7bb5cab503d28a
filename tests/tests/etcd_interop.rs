//! Real etcd members (Debian's etcd-server, 3.4.23) bootstrap through `muster-discovery`
//! unchanged. Without etcd installed these tests fail, unless `MUSTER_ALLOW_SKIP` names `etcd`
//! (then they say so loudly and pass); a truthy `MUSTER_REQUIRE_ETCD` (set by CI) makes a missing
//! etcd a failure even then.

use std::path::Path;
use std::time::Duration;

use muster_tests::{Discovery, Etcd, etcd_binary, get, tail};

const FORM_TIMEOUT: Duration = Duration::from_secs(45);
/// etcd's exit code for a fatal error (`lg.Fatal`: discovery refusals included).
const ETCD_FATAL: Option<i32> = Some(1);

/// Watches the service ended with `200` so far: hold timeouts (an empty answer, which etcd
/// re-issues) and events.
async fn answered_watches(d: &Discovery) -> Option<f64> {
    d.metric(
        r#"muster_discovery_http_request_duration_seconds_count{route="token_watch",status="200"}"#,
    )
    .await
}

/// Waits until every member reports exactly `names` as the started members.
async fn wait_formed(members: &[Etcd], names: &[&str]) {
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    for m in members {
        let seen = muster_tests::wait_for(
            &format!("{} to see {want:?}", m.name),
            FORM_TIMEOUT,
            || async {
                let got = m.member_names().await?;
                (got == want).then_some(got)
            },
        )
        .await;
        if let Err(e) = seen {
            let logs: Vec<String> = members
                .iter()
                .map(|m| format!("--- {}\n{}", m.name, tail(&m.log(), 25)))
                .collect();
            panic!("{e}\n{}", logs.join("\n"));
        }
    }
}

async fn registrations(url: &str) -> usize {
    get(url)
        .await
        .ok()
        .and_then(|r| r.json()["node"]["nodes"].as_array().map(|a| a.len()))
        .unwrap_or(0)
}

fn start(bin: &Path, root: &Path, name: &str, url: &str) -> Etcd {
    Etcd::start_discovery(bin, root, name, url).expect("start etcd")
}

#[tokio::test]
async fn size_1_forms_alone() {
    let Some(bin) = etcd_binary("size_1_forms_alone") else {
        return;
    };
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(1).await.expect("token");
    let e1 = start(&bin, tmp.path(), "e1", &url);
    wait_formed(std::slice::from_ref(&e1), &["e1"]).await;
    assert_eq!(registrations(&url).await, 1);
}

#[tokio::test]
async fn size_3_staggered_then_full_token_and_wiped_member_are_refused() {
    let Some(bin) = etcd_binary("size_3_staggered") else {
        return;
    };
    // A short hold makes the waiting members go through several empty-200 re-issues.
    let d = Discovery::start(&["--hold", "1s"])
        .await
        .expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let e1 = start(&bin, tmp.path(), "e1", &url);
    muster_tests::wait_for("e1 to register", FORM_TIMEOUT, || async {
        (registrations(&url).await == 1).then_some(())
    })
    .await
    .expect("e1 registered");
    let e2 = start(&bin, tmp.path(), "e2", &url);
    muster_tests::wait_for("e2 to register", FORM_TIMEOUT, || async {
        (registrations(&url).await == 2).then_some(())
    })
    .await
    .expect("e2 registered");
    // Both wait through a few hold timeouts before the last member shows up: the service ends
    // at least two more watches of each of them (empty answers, re-issued by etcd).
    let before = answered_watches(&d).await.unwrap_or(0.0);
    muster_tests::wait_for(
        "e1 and e2 to re-issue watches after hold timeouts",
        FORM_TIMEOUT,
        || async { (answered_watches(&d).await? >= before + 4.0).then_some(()) },
    )
    .await
    .expect("held watches re-issued");
    let e3 = start(&bin, tmp.path(), "e3", &url);
    let mut members = vec![e1, e2, e3];
    wait_formed(&members, &["e1", "e2", "e3"]).await;

    // A 4th member on the full token: "cluster is full", exit, and no registration.
    let mut e4 = start(&bin, tmp.path(), "e4", &url);
    let code = e4.wait_exit(FORM_TIMEOUT).await.expect("e4 exits");
    assert_eq!(code, ETCD_FATAL, "{}", tail(&e4.log(), 20));
    assert!(
        e4.log().contains("discovery: cluster is full"),
        "{}",
        tail(&e4.log(), 20)
    );
    assert_eq!(
        registrations(&url).await,
        3,
        "a refused member must not register"
    );

    // A member whose data dir was wiped gets the duplicate-id error instead of re-bootstrapping.
    let e1 = &mut members[0];
    e1.kill_and_wipe().await.expect("wipe");
    e1.restart().expect("restart");
    let code = e1.wait_exit(FORM_TIMEOUT).await.expect("wiped e1 exits");
    assert_eq!(code, ETCD_FATAL, "{}", tail(&e1.last_log(), 20));
    // etcd 3.4 prints ErrDuplicateID as "member … has previously registered with discovery
    // service token" (in the log of this start, not the first one).
    assert!(
        e1.last_log()
            .contains("has previously registered with discovery service token"),
        "{}",
        tail(&e1.last_log(), 20)
    );
    assert_eq!(registrations(&url).await, 3);
}

#[tokio::test]
async fn size_5_started_at_once() {
    let Some(bin) = etcd_binary("size_5_started_at_once") else {
        return;
    };
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(5).await.expect("token");
    let names = ["e1", "e2", "e3", "e4", "e5"];
    let members: Vec<Etcd> = names
        .iter()
        .map(|n| start(&bin, tmp.path(), n, &url))
        .collect();
    wait_formed(&members, &names).await;
    assert_eq!(registrations(&url).await, 5);
}

#[tokio::test]
async fn two_members_with_one_name_get_duplicate_name() {
    let Some(bin) = etcd_binary("duplicate_name") else {
        return;
    };
    let d = Discovery::start(&[]).await.expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(2).await.expect("token");
    for sub in ["a", "b"] {
        std::fs::create_dir_all(tmp.path().join(sub)).expect("dir");
    }
    let mut a = Etcd::start_discovery(&bin, &tmp.path().join("a"), "dup", &url).expect("a");
    let mut b = Etcd::start_discovery(&bin, &tmp.path().join("b"), "dup", &url).expect("b");
    for m in [&mut a, &mut b] {
        let code = m.wait_exit(FORM_TIMEOUT).await.expect("exits");
        assert_eq!(code, ETCD_FATAL, "{}", tail(&m.log(), 20));
        // etcd 3.4 prints ErrDuplicateName as "member with duplicated name has registered …".
        assert!(
            m.log()
                .contains("member with duplicated name has registered"),
            "{}",
            tail(&m.log(), 20)
        );
    }
}

#[tokio::test]
async fn discovery_restart_mid_bootstrap_still_forms_the_cluster() {
    let Some(bin) = etcd_binary("discovery_restart_mid_bootstrap") else {
        return;
    };
    let mut d = Discovery::start(&["--hold", "5s"])
        .await
        .expect("discovery");
    let tmp = tempfile::tempdir().expect("tmp");
    let url = d.new_token(3).await.expect("token");
    let e1 = start(&bin, tmp.path(), "e1", &url);
    let e2 = start(&bin, tmp.path(), "e2", &url);
    muster_tests::wait_for("two registrations", FORM_TIMEOUT, || async {
        (registrations(&url).await == 2).then_some(())
    })
    .await
    .expect("registered");
    // Kill the service hard while both members hold watches on it, and bring it back.
    muster_tests::wait_for("e1 and e2 to hold watches", FORM_TIMEOUT, || async {
        (d.metric("muster_discovery_held_watches").await? >= 2.0).then_some(())
    })
    .await
    .expect("held watches");
    d.kill9().await.expect("kill");
    d.restart().await.expect("restart");
    assert_eq!(
        registrations(&url).await,
        2,
        "registrations survive the kill"
    );
    let e3 = start(&bin, tmp.path(), "e3", &url);
    wait_formed(&[e1, e2, e3], &["e1", "e2", "e3"]).await;
}
