//! The etcd v2 discovery contract, one test per row of the checklist in
//! shared/spec/etcd-v2-discovery.md §3.2, against a real `muster-discovery` process.

use std::time::{Duration, Instant};

use muster_tests::{Discovery, get, get_with, put_form, raw, register, token_of};

const ID1: &str = "858e6d970cdc98d7";
const ID2: &str = "463bd4b467dff5c6";
const ID3: &str = "10691415ef76abbf";
const V1: &str = "n1=http://10.0.0.1:2380";
const V2: &str = "n2=http://10.0.0.2:2380";
const V3: &str = "n3=http://10.0.0.3:2380";

const ETCD_GET: &str = "?quorum=false&recursive=false&sorted=false";

/// Waits until the service reports `n` watches held open.
async fn wait_held_watches(d: &Discovery, n: u32) {
    let metrics = format!("{}/metrics", d.base);
    let needle = format!("muster_discovery_held_watches {n}");
    muster_tests::wait_for("held watches", Duration::from_secs(5), || async {
        get(&metrics)
            .await
            .ok()?
            .body
            .contains(&needle)
            .then_some(())
    })
    .await
    .expect("held");
}

async fn service() -> Discovery {
    Discovery::start(&["--hold", "2s"])
        .await
        .expect("start muster-discovery")
}

#[tokio::test]
async fn row1_new_returns_a_plain_url_without_newline() {
    let d = service().await;
    let reply = get(&format!("{}/new?size=3", d.base)).await.expect("new");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "text/plain; charset=utf-8");
    assert!(!reply.body.ends_with('\n'));
    let token = token_of(&reply.body);
    assert!(reply.body.starts_with(&d.base), "{}", reply.body);
    assert_eq!(token.len(), 32);
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    // POST with a form body works too, and the default size is 3.
    let reply = raw(
        "POST",
        &format!("{}/new", d.base),
        &[("content-type", "application/x-www-form-urlencoded")],
        b"size=5".to_vec(),
    )
    .await
    .expect("post new");
    assert_eq!(reply.status, 200);
    let size = get(&format!("{}/_config/size", reply.body))
        .await
        .expect("size");
    assert_eq!(size.json()["node"]["value"], "5");
    let url = d.new_token(3).await.expect("default");
    let default = get(&format!("{}/new", d.base)).await.expect("new default");
    let size = get(&format!("{}/_config/size", default.body))
        .await
        .expect("size");
    assert_eq!(size.json()["node"]["value"], "3");
    assert_ne!(url, default.body, "tokens must differ");
}

#[tokio::test]
async fn row2_size_key() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let tok = token_of(&url);
    let reply = get(&format!("{url}/_config/size{ETCD_GET}"))
        .await
        .expect("get");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.index, Some(1));
    assert_eq!(
        reply.body,
        format!(
            r#"{{"action":"get","node":{{"key":"/{tok}/_config/size","value":"3","modifiedIndex":1,"createdIndex":1}}}}"#
        )
    );
}

#[tokio::test]
async fn row3_empty_directory() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let tok = token_of(&url);
    let reply = get(&format!("{url}{ETCD_GET}")).await.expect("get");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.index, Some(1));
    assert_eq!(reply.content_type, "application/json");
    assert_eq!(
        reply.body,
        format!(
            r#"{{"action":"get","node":{{"key":"/{tok}","dir":true,"modifiedIndex":1,"createdIndex":1}}}}"#
        )
    );
    // A trailing slash (etcd keeps it from the URL) names the same directory.
    let slash = get(&format!("{url}/{ETCD_GET}")).await.expect("get slash");
    assert_eq!(slash.body, reply.body);
}

#[tokio::test]
async fn row4_registration_creates_at_index_2() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let tok = token_of(&url);
    let reply = register(&url, ID1, V1).await.expect("put");
    assert_eq!(reply.status, 201);
    assert_eq!(reply.index, Some(2));
    assert_eq!(
        reply.body,
        format!(
            r#"{{"action":"create","node":{{"key":"/{tok}/{ID1}","value":"{V1}","modifiedIndex":2,"createdIndex":2}}}}"#
        )
    );
}

#[tokio::test]
async fn row5_self_watch_is_answered_from_history_at_once() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let created = register(&url, ID1, V1).await.expect("put");
    let started = Instant::now();
    let reply = get(&format!(
        "{url}/{ID1}?recursive=false&wait=true&waitIndex=2"
    ))
    .await
    .expect("watch");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "must not be held"
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.index, Some(2));
    assert_eq!(reply.body, created.body);
}

#[tokio::test]
async fn row6_listing_shows_the_member_and_current_index() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    register(&url, ID1, V1).await.expect("put");
    let size = get(&format!("{url}/_config/size{ETCD_GET}"))
        .await
        .expect("size");
    assert_eq!(size.json()["node"]["value"], "3");
    let dir = get(&format!("{url}{ETCD_GET}")).await.expect("dir");
    assert_eq!(dir.index, Some(2));
    let nodes = dir.json()["node"]["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["value"], V1);
    assert_eq!(nodes[0]["createdIndex"], 2);
}

#[tokio::test]
async fn row7_and_8_recursive_watch_waits_for_the_next_member() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    register(&url, ID1, V1).await.expect("put 1");
    // Watch in the future: held until member 2 registers.
    let watch_url = format!("{url}?recursive=true&wait=true&waitIndex=3");
    let watcher = tokio::spawn(async move { get(&watch_url).await });
    wait_held_watches(&d, 1).await;
    assert!(!watcher.is_finished(), "a watch in the future must be held");
    register(&url, ID2, V2).await.expect("put 2");
    let event = watcher.await.expect("join").expect("watch");
    assert_eq!(event.status, 200);
    assert_eq!(event.json()["action"], "create");
    assert_eq!(event.json()["node"]["value"], V2);
    assert_eq!(event.json()["node"]["modifiedIndex"], 3);
    // Row 8: the next index, for member 3.
    let watch_url = format!("{url}?recursive=true&wait=true&waitIndex=4");
    let watcher = tokio::spawn(async move { get(&watch_url).await });
    register(&url, ID3, V3).await.expect("put 3");
    let event = watcher.await.expect("join").expect("watch");
    assert_eq!(event.json()["node"]["value"], V3);
    assert_eq!(event.json()["node"]["createdIndex"], 4);
}

#[tokio::test]
async fn watch_from_the_past_returns_the_first_later_event() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    register(&url, ID1, V1).await.expect("1");
    register(&url, ID2, V2).await.expect("2");
    register(&url, ID3, V3).await.expect("3");
    for (from, value) in [
        (0u64, None),
        (1, Some(V1)),
        (2, Some(V1)),
        (3, Some(V2)),
        (4, Some(V3)),
    ] {
        let watch = format!("{url}?recursive=true&wait=true&waitIndex={from}");
        let started = Instant::now();
        let reply = get(&watch).await.expect("watch");
        match value {
            Some(v) => {
                assert!(started.elapsed() < Duration::from_secs(1));
                assert_eq!(reply.json()["node"]["value"], v, "waitIndex={from}");
            }
            // waitIndex=0 means "from now": nothing new arrives, so the hold ends it empty.
            None => assert_eq!(reply.body, "", "waitIndex=0 must wait for a new event"),
        }
    }
}

#[tokio::test]
async fn hold_timeout_ends_a_watch_with_200_and_an_empty_body() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let started = Instant::now();
    let reply = get(&format!("{url}?recursive=true&wait=true&waitIndex=2"))
        .await
        .expect("watch");
    let held = started.elapsed();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, "");
    assert!(
        held >= Duration::from_millis(1900) && held < Duration::from_secs(10),
        "held {held:?}"
    );
    assert_eq!(reply.index, Some(1));
}

#[tokio::test]
async fn row9_duplicate_registration_is_412_105() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let tok = token_of(&url);
    register(&url, ID1, V1).await.expect("1");
    register(&url, ID2, V2).await.expect("2");
    register(&url, ID3, V3).await.expect("3");
    let reply = register(&url, ID1, V1).await.expect("dup");
    assert_eq!(reply.status, 412);
    assert_eq!(reply.index, Some(4));
    assert_eq!(
        reply.body,
        format!(
            r#"{{"errorCode":105,"message":"Key already exists","cause":"/{tok}/{ID1}","index":4}}"#
        )
    );
}

#[tokio::test]
async fn identical_reregistration_below_size_succeeds_without_a_new_event() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let first = register(&url, ID1, V1).await.expect("1");
    let again = register(&url, ID1, V1).await.expect("again");
    assert_eq!(again.status, 200);
    assert_eq!(
        again.json()["node"]["createdIndex"],
        first.json()["node"]["createdIndex"]
    );
    let dir = get(&url).await.expect("dir");
    assert_eq!(dir.index, Some(2), "no new index for a retry");
    // A different value under the same id is still a duplicate.
    let other = register(&url, ID1, "n1=http://10.9.9.9:2380")
        .await
        .expect("other");
    assert_eq!(
        (other.status, other.json()["errorCode"].as_u64()),
        (412, Some(105))
    );
    // The next member gets index 3: the retry consumed nothing.
    let second = register(&url, ID2, V2).await.expect("2");
    assert_eq!(second.index, Some(3));
}

#[tokio::test]
async fn row10_full_token_lists_exactly_its_members() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    for (id, v) in [(ID1, V1), (ID2, V2), (ID3, V3)] {
        register(&url, id, v).await.expect("register");
    }
    let dir = get(&format!("{url}{ETCD_GET}")).await.expect("dir");
    let nodes = dir.json()["node"]["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let created: Vec<u64> = nodes
        .iter()
        .filter_map(|n| n["createdIndex"].as_u64())
        .collect();
    assert_eq!(created, vec![2, 3, 4]);
    assert_eq!(dir.index, Some(4));
}

#[tokio::test]
async fn row11_unknown_token_is_404_100_with_index_0() {
    let d = service().await;
    let reply = get(&format!(
        "{}/0123456789abcdef0123456789abcdef/_config/size{ETCD_GET}",
        d.base
    ))
    .await
    .expect("get");
    assert_eq!(reply.status, 404);
    assert_eq!(
        reply.body,
        r#"{"errorCode":100,"message":"Key not found","cause":"/0123456789abcdef0123456789abcdef","index":0}"#
    );
    assert_eq!(reply.index, Some(0));
}

#[tokio::test]
async fn row12_history_is_never_cleared() {
    // The service keeps a token's whole history, so etcd's 401 "event index cleared" cannot
    // happen: a watch from index 1 after many registrations still sees the first member.
    let d = service().await;
    let url = d.new_token(9).await.expect("token");
    for i in 1..=20u32 {
        register(
            &url,
            &format!("{i:x}"),
            &format!("n{i}=http://10.0.0.{i}:2380"),
        )
        .await
        .expect("register");
    }
    let reply = get(&format!("{url}?recursive=true&wait=true&waitIndex=1"))
        .await
        .expect("watch");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["node"]["value"], "n1=http://10.0.0.1:2380");
}

#[tokio::test]
async fn etcd_registry_alias_serves_the_same_token() {
    let d = service().await;
    let url = d.new_token(3).await.expect("token");
    let tok = token_of(&url);
    let alias = format!("{}/v2/keys/_etcd/registry/{tok}", d.base);
    let reply = register(&alias, ID1, V1).await.expect("put via alias");
    assert_eq!(reply.status, 201);
    let dir = get(&url).await.expect("dir");
    assert_eq!(dir.json()["node"]["nodes"][0]["value"], V1);
}

#[tokio::test]
async fn expired_tokens_answer_like_unknown_ones_and_are_collected() {
    let d = Discovery::start(&["--token-ttl", "1s", "--hold", "30s"])
        .await
        .expect("start");
    let url = d.new_token(3).await.expect("token");
    register(&url, ID1, V1).await.expect("register");
    // A watch held across the expiry ends with 404 instead of a (member-looking) delete event.
    let watch_url = format!("{url}?recursive=true&wait=true&waitIndex=3");
    let watcher = tokio::spawn(async move { get(&watch_url).await });
    muster_tests::wait_for("token to expire", Duration::from_secs(10), || async {
        let r = get(&format!("{url}/_config/size")).await.ok()?;
        (r.status == 404).then_some(())
    })
    .await
    .expect("expiry");
    let reply = get(&url).await.expect("get");
    assert_eq!(reply.json()["errorCode"], 100);
    let ended = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("watch ends once GC deletes the token")
        .expect("join")
        .expect("watch");
    assert_eq!(ended.status, 404);
    if let Some(etcd) = d.backing_etcd() {
        // On etcd the token's keys carry a lease of its lifetime: etcd deletes them itself.
        muster_tests::wait_for(
            "etcd to drop the token's keys",
            Duration::from_secs(10),
            || async { (etcd.count_keys("/muster-discovery/t/").await? == 0).then_some(()) },
        )
        .await
        .expect("etcd lease expiry");
        return;
    }
    muster_tests::wait_for("GC to count the token", Duration::from_secs(10), || async {
        let m = get(&format!("{}/metrics", d.base)).await.ok()?;
        m.body
            .contains("muster_discovery_tokens_expired_total 1")
            .then_some(())
    })
    .await
    .expect("gc");
}

#[tokio::test]
async fn human_page_lists_registrations_and_escapes_names() {
    let d = service().await;
    let url = d.new_token(2).await.expect("token");
    register(&url, ID1, "<b>evil</b>=http://10.0.0.1:2380")
        .await
        .expect("register");
    let page = get_with(&url, &[("accept", "text/html,application/xhtml+xml")])
        .await
        .expect("page");
    assert_eq!(page.status, 200);
    assert!(
        page.content_type.starts_with("text/html"),
        "{}",
        page.content_type
    );
    assert!(
        page.body.contains("waiting for registrations (1 of 2)"),
        "{}",
        page.body
    );
    assert!(page.body.contains(ID1));
    assert!(page.body.contains("&lt;b&gt;evil&lt;/b&gt;") && !page.body.contains("<b>evil"));
    // Without the Accept header it is the etcd JSON.
    assert_eq!(get(&url).await.expect("json").json()["action"], "get");
    let index = get_with(&format!("{}/", d.base), &[("accept", "text/plain")])
        .await
        .expect("index");
    assert!(index.body.contains("/new?size=3"), "{}", index.body);
}

#[tokio::test]
async fn health_writes_nothing_and_metrics_count_requests() {
    let d = service().await;
    for _ in 0..5 {
        let h = get(&format!("{}/health", d.base)).await.expect("health");
        assert_eq!(h.status, 200);
        assert_eq!(h.json()["status"], "ok");
    }
    let m = get(&format!("{}/metrics", d.base)).await.expect("metrics");
    assert!(
        m.body.contains("muster_discovery_tokens 0"),
        "health must not create tokens:\n{}",
        m.body
    );
    let url = d.new_token(1).await.expect("token");
    register(&url, ID1, V1).await.expect("register");
    let m = get(&format!("{}/metrics", d.base)).await.expect("metrics");
    // On etcd a replica counts the registrations it accepted, not those of all replicas.
    let registrations = if muster_tests::discovery_store_is_etcd() {
        "muster_discovery_registrations_total 1"
    } else {
        "muster_discovery_registrations 1"
    };
    for needle in [
        "muster_discovery_tokens 1",
        registrations,
        "muster_discovery_held_watches 0",
        r#"muster_discovery_http_request_duration_seconds_count{route="new",status="200"} 1"#,
        r#"muster_discovery_http_request_duration_seconds_count{route="token_put",status="201"} 1"#,
        r#"muster_discovery_http_request_duration_seconds_count{route="health",status="200"} 5"#,
    ] {
        assert!(m.body.contains(needle), "missing {needle}:\n{}", m.body);
    }
}

#[tokio::test]
async fn held_watches_are_counted_and_end_cleanly_on_sigterm() {
    let mut d = Discovery::start(&["--hold", "60s"]).await.expect("start");
    let url = d.new_token(3).await.expect("token");
    let watch_url = format!("{url}?recursive=true&wait=true&waitIndex=2");
    let watcher = tokio::spawn(async move { get(&watch_url).await });
    wait_held_watches(&d, 1).await;
    let started = Instant::now();
    let code = d.terminate().await.expect("terminate");
    assert_eq!(code, Some(0), "log:\n{}", d.log());
    let ended = watcher.await.expect("join").expect("watch");
    assert_eq!((ended.status, ended.body.as_str()), (200, ""));
    assert!(started.elapsed() < Duration::from_secs(10));
    // Everything written before the stop is still there after a restart.
    d.restart().await.expect("restart");
    assert_eq!(
        get(&format!("{url}/_config/size"))
            .await
            .expect("size")
            .status,
        200
    );
}

#[tokio::test]
async fn rate_limit_on_new_answers_429_with_retry_after() {
    let d = Discovery::start(&["--new-rate", "1", "--new-burst", "3"])
        .await
        .expect("start");
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(get(&format!("{}/new", d.base)).await.expect("new").status);
    }
    assert_eq!(&statuses[..3], &[200, 200, 200]);
    let limited = muster_tests::http_client()
        .get(format!("{}/new", d.base))
        .send()
        .await
        .expect("new");
    assert_eq!(limited.status().as_u16(), 429);
    // Retry-After: when the next token fits the rate, in whole seconds. At --new-rate 1/s that
    // is 1 s (a 0 would invite an immediate retry; more than the 3-token burst's refill is
    // wrong).
    let retry_after = limited
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body: serde_json::Value = limited.json().await.expect("a JSON error");
    assert_eq!(body["kind"], "rate_limited", "{body}");
    assert!(
        matches!(retry_after, Some(1..=3)),
        "a /new 429 carries Retry-After in 1..=3 s: {retry_after:?} {body}"
    );
}

#[tokio::test]
async fn public_url_and_host_header_shape_minted_urls() {
    let d = Discovery::start(&["--public-url", "https://discovery.example.com/"])
        .await
        .expect("start");
    let url = d.new_token(3).await.expect("token");
    assert!(url.starts_with("https://discovery.example.com/"), "{url}");
    assert_eq!(url.matches("//").count(), 1, "{url}");
    let d = service().await;
    let reply = get_with(
        &format!("{}/new", d.base),
        &[("host", "disc.internal:8087")],
    )
    .await
    .expect("new");
    assert!(
        reply.body.starts_with("http://disc.internal:8087/"),
        "{}",
        reply.body
    );
    let reply = get_with(&format!("{}/new", d.base), &[("host", "evil\"<x>")])
        .await
        .expect("new");
    assert!(
        reply.body.starts_with(&d.base),
        "an odd Host header falls back to the listener: {}",
        reply.body
    );
}

fn record(initiator: &str, state: &str) -> String {
    format!(
        r#"{{"cluster_id":"00112233445566778899aabb","ca_pin":"{}","initiator":"{initiator}","state":"{state}","peers":["127.0.0.1:7000"]}}"#,
        "ab".repeat(32)
    )
}

#[tokio::test]
async fn bootstrap_record_is_hidden_created_once_and_changed_by_cas() {
    let d = service().await;
    let url = d.new_token(2).await.expect("token");
    register(&url, ID1, V1).await.expect("1");
    register(&url, ID2, V2).await.expect("2");
    let meta = format!(r#"{{"name":"n1","key_fingerprint":"{}"}}"#, "cd".repeat(32));
    let r = put_form(
        &format!("{url}/_muster/nodes/{ID1}?prevExist=false"),
        &[("value", &meta)],
    )
    .await
    .expect("meta");
    assert_eq!(r.status, 201, "{}", r.body);
    // Metadata for a member that never registered is refused.
    let r = put_form(
        &format!("{url}/_muster/nodes/abc?prevExist=false"),
        &[("value", &meta)],
    )
    .await
    .expect("meta");
    assert_eq!(r.json()["errorCode"], 100);

    // Only the first registrant may initiate.
    let r = put_form(
        &format!("{url}/_muster/record?prevExist=false"),
        &[("value", &record(ID2, "open"))],
    )
    .await
    .expect("record");
    assert_eq!(
        (r.status, r.json()["errorCode"].as_u64()),
        (412, Some(101)),
        "{}",
        r.body
    );
    let created = put_form(
        &format!("{url}/_muster/record?prevExist=false"),
        &[("value", &record(ID1, "open"))],
    )
    .await
    .expect("record");
    assert_eq!(created.status, 201, "{}", created.body);
    let at = created.json()["node"]["modifiedIndex"]
        .as_u64()
        .expect("index");
    let again = put_form(
        &format!("{url}/_muster/record?prevExist=false"),
        &[("value", &record(ID1, "open"))],
    )
    .await
    .expect("again");
    assert_eq!(again.json()["errorCode"], 105);

    // A watcher on the record sees the CAS to formed.
    let watch_url = format!("{url}/_muster/record?wait=true&waitIndex={}", at + 1);
    let watcher = tokio::spawn(async move { get(&watch_url).await });
    let stale = put_form(
        &format!("{url}/_muster/record?prevIndex={}", at - 1),
        &[("value", &record(ID1, "formed"))],
    )
    .await
    .expect("stale cas");
    assert_eq!(
        (stale.status, stale.json()["errorCode"].as_u64()),
        (412, Some(101))
    );
    let formed = put_form(
        &format!("{url}/_muster/record?prevIndex={at}"),
        &[("value", &record(ID1, "formed"))],
    )
    .await
    .expect("cas");
    assert_eq!(formed.status, 200, "{}", formed.body);
    assert_eq!(formed.json()["action"], "compareAndSwap");
    assert_eq!(formed.json()["prevNode"]["modifiedIndex"], at);
    let seen = watcher.await.expect("join").expect("watch");
    assert!(
        seen.json()["node"]["value"]
            .as_str()
            .unwrap_or("")
            .contains("formed")
    );

    // Hidden keys never show in listings or in watches on the token directory.
    let dir = get(&format!("{url}?recursive=true")).await.expect("dir");
    assert!(!dir.body.contains("_muster"), "{}", dir.body);
    let all = get(&format!("{url}?recursive=true&wait=true&waitIndex=4"))
        .await
        .expect("watch");
    assert_eq!(
        all.body, "",
        "no member event after index 3: hidden writes must not wake etcd"
    );
    let rec = get(&format!("{url}/_muster/record"))
        .await
        .expect("record get");
    assert!(
        rec.json()["node"]["value"]
            .as_str()
            .unwrap_or("")
            .contains("formed")
    );
}

#[tokio::test]
async fn two_racing_initiators_never_both_win() {
    let d = service().await;
    for _ in 0..10 {
        let url = d.new_token(2).await.expect("token");
        register(&url, ID1, V1).await.expect("1");
        register(&url, ID2, V2).await.expect("2");
        let mut tasks = Vec::new();
        for pin in ["aa", "bb", "cc", "dd"] {
            let url = url.clone();
            let value = record(ID1, "open").replace(&"ab".repeat(32), &pin.repeat(32));
            tasks.push(tokio::spawn(async move {
                put_form(
                    &format!("{url}/_muster/record?prevExist=false"),
                    &[("value", &value)],
                )
                .await
            }));
        }
        let mut winners = 0;
        for t in tasks {
            let r = t.await.expect("join").expect("put");
            match r.status {
                201 => winners += 1,
                412 => assert_eq!(r.json()["errorCode"], 105),
                other => panic!("unexpected {other}: {}", r.body),
            }
        }
        assert_eq!(winners, 1);
    }
}

#[tokio::test]
async fn serves_https_with_the_given_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tmp = tempfile::tempdir().expect("tmp");
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
    let cert = params.self_signed(&key).expect("cert");
    let d = Discovery::start_tls(tmp.path(), &cert.pem(), &key.serialize_pem(), &[])
        .await
        .expect("start");
    assert!(d.base.starts_with("https://"), "{}", d.base);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).expect("root");
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("client");
    let url = client
        .get(format!("{}/new?size=1", d.base))
        .send()
        .await
        .expect("new")
        .text()
        .await
        .expect("body");
    assert!(url.starts_with("https://"), "{url}");
    let size = client
        .get(format!("{url}/_config/size"))
        .send()
        .await
        .expect("size");
    assert_eq!(size.status(), 200);
    // Plain HTTP to the TLS port gets no HTTP answer: the connection is taken (so the port is
    // open and the service alive), and what comes back is a TLS alert record (content type 21),
    // not a timeout and not an HTTP status line.
    let plain = muster_tests::http_client()
        .get(format!("http://{}/health", d.addr))
        .send()
        .await
        .expect_err("plain HTTP to the TLS port must not get an HTTP answer");
    assert!(
        !plain.is_timeout() && !plain.is_connect() && plain.is_request(),
        "{plain:?}"
    );
    let mut conn = tokio::net::TcpStream::connect(d.addr)
        .await
        .expect("the TLS port takes connections");
    tokio::io::AsyncWriteExt::write_all(
        &mut conn,
        b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await
    .expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_end(&mut conn, &mut answer),
    )
    .await
    .expect("the service answers and closes at once")
    .ok();
    assert_eq!(
        answer.first(),
        Some(&21),
        "a TLS alert, not {:?}",
        String::from_utf8_lossy(&answer)
    );
    // And it still serves TLS afterwards.
    let again = client
        .get(format!("{}/health", d.base))
        .send()
        .await
        .expect("health over TLS");
    assert_eq!(again.status(), 200);
}

#[tokio::test]
async fn watch_limit_never_refuses_a_watch_that_history_answers() {
    let d = Discovery::start(&["--max-watches", "1", "--hold", "30s"])
        .await
        .expect("start");
    let url = d.new_token(3).await.expect("token");
    register(&url, ID1, V1).await.expect("1");
    let held_url = format!("{url}?recursive=true&wait=true&waitIndex=3");
    let held = tokio::spawn(async move { get(&held_url).await });
    wait_held_watches(&d, 1).await;
    // etcd's self-watch right after its PUT: answered from history despite the limit.
    let own = get(&format!(
        "{url}/{ID1}?recursive=false&wait=true&waitIndex=2"
    ))
    .await
    .expect("self watch");
    assert_eq!(own.status, 200);
    assert_eq!(own.json()["node"]["value"], V1);
    // A second watch that would have to wait is refused with a 5xx, which etcd retries.
    let refused = get(&format!("{url}?recursive=true&wait=true&waitIndex=3"))
        .await
        .expect("refused");
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["errorCode"], 300);
    register(&url, ID2, V2).await.expect("2");
    let event = held.await.expect("join").expect("held watch");
    assert_eq!(event.json()["node"]["value"], V2);
}

#[tokio::test]
async fn unknown_token_page_and_fixed_routes_answer_json_or_html_errors() {
    let d = service().await;
    let page = get_with(
        &format!("{}/0123456789abcdef0123456789abcdef", d.base),
        &[("accept", "text/html")],
    )
    .await
    .expect("page");
    assert_eq!(page.status, 404);
    assert!(
        page.body.contains("Unknown or expired discovery token"),
        "{}",
        page.body
    );
    for path in ["/health", "/metrics", "/", "/robots.txt"] {
        let r = raw("POST", &format!("{}{path}", d.base), &[], vec![])
            .await
            .expect("post");
        assert_eq!(r.status, 405, "{path}");
        assert_eq!(r.json()["kind"], "method_not_allowed", "{path}: {}", r.body);
    }
}
