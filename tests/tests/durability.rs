//! kill -9 while registrations stream in: no acknowledged registration lost, no index reused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use muster_tests::{Discovery, get, register};

#[tokio::test]
async fn kill9_loses_no_acknowledged_registration_and_reuses_no_index() {
    let mut d = Discovery::start(&[]).await.expect("start");
    let size = 9u32;
    const WRITERS: u64 = 8;
    const TOKENS_PER_WRITER: u64 = 40;
    let per_token = u64::from(size) + 16;
    let total = WRITERS * TOKENS_PER_WRITER * per_token;
    // (url, member id) -> acknowledged createdIndex
    let acked: Arc<Mutex<BTreeMap<(String, String), u64>>> = Arc::default();
    let urls: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let acked = acked.clone();
        let urls = urls.clone();
        let base = d.base.clone();
        writers.push(tokio::spawn(async move {
            for t in 0..TOKENS_PER_WRITER {
                let Ok(r) = get(&format!("{base}/new?size={size}")).await else {
                    return;
                };
                if r.status != 200 {
                    return;
                }
                let url = r.body;
                if let Ok(mut u) = urls.lock() {
                    u.push(url.clone());
                }
                for i in 0..per_token {
                    let id = format!("{:x}", ((w + 1) * 1_000_000) + t * 1000 + i);
                    match register(&url, &id, &format!("n{id}=http://127.0.0.1:{}", 2000 + i)).await
                    {
                        Ok(r) if r.status == 201 => {
                            let index = r.json()["node"]["createdIndex"].as_u64().unwrap_or(0);
                            if let Ok(mut map) = acked.lock() {
                                map.insert((url.clone(), id), index);
                            }
                        }
                        // The service died under us: stop writing to it.
                        _ => return,
                    }
                }
            }
        }));
    }
    // Kill in the middle of the stream.
    muster_tests::wait_for("some registrations", Duration::from_secs(20), || async {
        (acked.lock().map(|m| m.len()).unwrap_or(0) >= 30).then_some(())
    })
    .await
    .expect("progress");
    d.kill9().await.expect("kill -9");
    for w in writers {
        let _ = w.await;
    }
    let acked = acked.lock().map(|m| m.clone()).unwrap_or_default();
    let urls = urls.lock().map(|u| u.clone()).unwrap_or_default();
    assert!(
        (acked.len() as u64) < total,
        "the kill must land while registrations still stream in"
    );

    d.restart().await.expect("restart");
    let mut lost = Vec::new();
    for ((url, id), index) in &acked {
        let r = get(&format!("{url}/{id}")).await.expect("get");
        if r.status != 200 || r.json()["node"]["createdIndex"].as_u64() != Some(*index) {
            lost.push(format!("{id}@{index}: {} {}", r.status, r.body));
        }
    }
    assert!(
        lost.is_empty(),
        "acknowledged registrations lost after kill -9: {lost:?}"
    );

    // Every acknowledged token is still there (a lost one answers 404), with its size; its
    // indexes continue after the highest one ever handed out, and stay unique.
    let mut lost_tokens = Vec::new();
    for url in &urls {
        let size_key = get(&format!("{url}/_config/size")).await.expect("size");
        let recorded = size_key.json()["node"]["value"]
            .as_str()
            .map(str::to_string);
        if size_key.status != 200 || recorded != Some(size.to_string()) {
            lost_tokens.push(format!("{url}: {} {}", size_key.status, size_key.body));
        }
    }
    assert!(
        lost_tokens.is_empty(),
        "acknowledged tokens (/new answered 200) lost after kill -9: {lost_tokens:?}"
    );
    for url in &urls {
        let dir = get(url).await.expect("dir");
        assert_eq!(dir.status, 200, "{url}: {}", dir.body);
        let listed: Vec<u64> = dir.json()["node"]["nodes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n["createdIndex"].as_u64())
                    .collect()
            })
            .unwrap_or_default();
        let mut unique = listed.clone();
        unique.dedup();
        assert_eq!(unique.len(), listed.len(), "duplicate index in {listed:?}");
        let current = dir.index.expect("index");
        assert!(listed.iter().all(|i| *i <= current));
        let next = register(url, "fffffff", "late=http://127.0.0.1:9")
            .await
            .expect("register");
        if listed.len() as u64 == per_token {
            // A token that got every registration is at its cap (size + 16): refused, as
            // before the kill.
            assert_eq!(
                (next.status, next.json()["errorCode"].as_u64()),
                (403, Some(1001)),
                "{url}: {}",
                next.body
            );
            continue;
        }
        assert_eq!(next.status, 201, "{url}: {}", next.body);
        let i = next.json()["node"]["createdIndex"].as_u64().expect("index");
        assert!(
            i > current && !listed.contains(&i),
            "index {i} reused (had {listed:?})"
        );
    }
}

#[tokio::test]
async fn restart_keeps_tokens_registrations_indexes_and_events() {
    let mut d = Discovery::start(&[]).await.expect("start");
    let url = d.new_token(3).await.expect("token");
    register(&url, "a1", "n1=http://127.0.0.1:1")
        .await
        .expect("1");
    register(&url, "b2", "n2=http://127.0.0.1:2")
        .await
        .expect("2");
    let before = get(&url).await.expect("dir");
    d.terminate().await.expect("stop");
    d.restart().await.expect("restart");
    let after = get(&url).await.expect("dir");
    assert_eq!(before.body, after.body);
    assert_eq!(before.index, after.index);
    // Watches from the past are still answered from the replayed history.
    let event = get(&format!("{url}?recursive=true&wait=true&waitIndex=3"))
        .await
        .expect("watch");
    assert_eq!(
        event.json()["node"]["key"]
            .as_str()
            .map(|k| k.ends_with("/b2")),
        Some(true)
    );
    assert_eq!(
        register(&url, "c3", "n3=http://127.0.0.1:3")
            .await
            .expect("3")
            .index,
        Some(4)
    );
}
