//! Hostile etcd v3 (gRPC) input to the real `muster-discovery`: keys outside a token, foreign
//! prefixes, unserved RPCs, oversized messages, many watches from one client and garbage
//! HTTP/2 frames. Each is refused with a gRPC status (or the connection is closed), nothing is
//! stored, every limit shows on /metrics, and memory stays bounded.

use std::time::Duration;

use muster_tests::{Discovery, get, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PERMISSION_DENIED: i32 = 7;
const RESOURCE_EXHAUSTED: i32 = 8;
const OUT_OF_RANGE: i32 = 11;
const UNIMPLEMENTED: i32 = 12;

fn code(e: &etcd_client::Error) -> Option<i32> {
    match e {
        etcd_client::Error::GRpcStatus(s) => Some(s.code() as i32),
        _ => None,
    }
}

async fn client(d: &Discovery) -> etcd_client::Client {
    d.v3_client().await.expect("connect")
}

/// Resident memory of the service, from /proc.
fn rss_kib(d: &Discovery) -> u64 {
    let pid = d.pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test]
async fn writes_outside_member_and_size_keys_are_denied_and_nothing_is_stored() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let token = muster_shared::token::new_discovery_token();
    let mut c = client(&d).await;
    let member = format!("/_etcd/registry/{token}/members/8e9e05c52164694d");
    // Unknown token: a member key is refused until the token exists.
    let e = c
        .put(member.as_str(), "m1=http://10.0.0.1:2380", None)
        .await
        .expect_err("denied");
    assert_eq!(code(&e), Some(PERMISSION_DENIED), "{e}");
    c.put(format!("/_etcd/registry/{token}/_config/size"), "3", None)
        .await
        .expect("size");
    for key in [
        "/foo".to_string(),
        format!("/_etcd/registry/{token}/other"),
        format!("/_etcd/registry/{token}/members/NOT-HEX"),
        format!("/_etcd/registry/{token}/_muster/record"),
    ] {
        let e = c.put(key.as_str(), "x", None).await.expect_err("denied");
        assert_eq!(code(&e), Some(PERMISSION_DENIED), "{key}: {e}");
    }
    let e = c
        .put(member.as_str(), "no-equals-sign", None)
        .await
        .expect_err("bad value");
    assert_eq!(code(&e), Some(3), "{e}");
    // A Range over everything is refused too: reads stay inside one token.
    let e = c
        .get("", Some(etcd_client::GetOptions::new().with_all_keys()))
        .await
        .expect_err("denied");
    assert_eq!(code(&e), Some(PERMISSION_DENIED), "{e}");
    let all = c
        .get(
            format!("/_etcd/registry/{token}/"),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .expect("range");
    let keys: Vec<_> = all
        .kvs()
        .iter()
        .map(|kv| kv.key_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(keys, vec![format!("/_etcd/registry/{token}/_config/size")]);
    // RPCs outside the subset answer Unimplemented, naming what is served.
    let e = c.delete("/foo", None).await.expect_err("unimplemented");
    assert_eq!(code(&e), Some(UNIMPLEMENTED), "{e}");
    assert!(e.to_string().contains("KV/Range"), "{e}");
    let e = c.compact(1, None).await.expect_err("unimplemented");
    assert_eq!(code(&e), Some(UNIMPLEMENTED), "{e}");
}

#[tokio::test]
async fn a_watch_outside_one_token_is_denied() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let mut c = client(&d).await;
    let mut stream = c
        .watch("/", Some(etcd_client::WatchOptions::new().with_prefix()))
        .await
        .map(Some)
        .or_else(|e| {
            if code(&e) == Some(PERMISSION_DENIED) {
                Ok(None)
            } else {
                Err(e)
            }
        })
        .expect("watch");
    if let Some(stream) = stream.as_mut() {
        let e = stream.message().await.expect_err("denied");
        assert_eq!(code(&e), Some(PERMISSION_DENIED), "{e}");
    }
}

#[tokio::test]
async fn huge_messages_and_many_watches_are_refused_and_counted() {
    let d = Discovery::start(&["--max-watches-per-client", "4"])
        .await
        .expect("discovery");
    let token = muster_shared::token::new_discovery_token();
    let mut c = client(&d).await;
    c.put(format!("/_etcd/registry/{token}/_config/size"), "3", None)
        .await
        .expect("size");
    let before = rss_kib(&d);
    let member = format!("/_etcd/registry/{token}/members/8e9e05c52164694d");
    let huge = format!(
        "m1=http://10.0.0.1:2380,{}",
        "m1=http://10.0.0.1:2380".repeat(50_000)
    );
    for _ in 0..20 {
        let e = c
            .put(member.as_str(), huge.as_str(), None)
            .await
            .expect_err("too large");
        // tonic's decoder answers a message over the limit with OutOfRange.
        assert_eq!(code(&e), Some(OUT_OF_RANGE), "{e}");
    }
    let got = c.get(member.as_str(), None).await.expect("range");
    assert!(got.kvs().is_empty(), "nothing stored");
    let too_large = d
        .metric(r#"muster_discovery_grpc_limited_total{reason="message_too_large"}"#)
        .await;
    assert!(too_large.is_some_and(|n| n >= 20.0), "{too_large:?}");

    // Four watches are the per-client cap; the fifth is refused.
    let prefix = format!("/_etcd/registry/{token}/members");
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = c
            .watch(
                prefix.as_str(),
                Some(etcd_client::WatchOptions::new().with_prefix()),
            )
            .await
            .expect("watch");
        let created = s.message().await.expect("created").expect("message");
        assert!(created.created());
        held.push(s);
    }
    wait_for("four open v3 watches", Duration::from_secs(10), || async {
        (d.metric("muster_discovery_v3_watches").await == Some(4.0)).then_some(())
    })
    .await
    .expect("gauge");
    let refused = match c
        .watch(
            prefix.as_str(),
            Some(etcd_client::WatchOptions::new().with_prefix()),
        )
        .await
    {
        Err(e) => e,
        Ok(mut s) => s.message().await.expect_err("fifth watch refused"),
    };
    assert_eq!(code(&refused), Some(RESOURCE_EXHAUSTED), "{refused}");
    let limited = d
        .metric(r#"muster_discovery_limited_total{kind="too_many_watches"}"#)
        .await;
    assert!(limited.is_some_and(|n| n >= 1.0), "{limited:?}");
    // Closing the streams gives every slot back.
    drop(held);
    drop(c);
    wait_for("no open watches", Duration::from_secs(10), || async {
        let v3 = d.metric("muster_discovery_v3_watches").await;
        let held = d.metric("muster_discovery_held_watches").await;
        (v3 == Some(0.0) && held == Some(0.0)).then_some(())
    })
    .await
    .expect("watch gauges back to 0");
    let after = rss_kib(&d);
    assert!(
        after < before + 64 * 1024,
        "memory grew from {before} KiB to {after} KiB"
    );
}

#[tokio::test]
async fn garbage_http2_frames_close_the_connection_and_the_service_lives_on() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let before = rss_kib(&d);
    for round in 0..50u32 {
        let mut s = tokio::net::TcpStream::connect(d.addr)
            .await
            .expect("connect");
        let mut junk = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // A frame header announcing 16 MiB of an unknown type, then noise.
        junk.extend_from_slice(&[0xff, 0xff, 0xff, 0x42, 0, 0, 0, 0, 1]);
        junk.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> (round % 24)) as u8));
        let _ = s.write_all(&junk).await;
        let mut buf = vec![0u8; 65536];
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "round {round}: the connection stayed open");
    }
    let health = get(&format!("{}/health", d.base)).await.expect("health");
    assert_eq!(health.status, 200);
    let after = rss_kib(&d);
    assert!(
        after < before + 64 * 1024,
        "memory grew from {before} KiB to {after} KiB"
    );
}
