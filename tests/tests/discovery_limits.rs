//! Resource bounds, tried the way a hostile client would: one client (source address
//! 127.0.0.2) tries to exhaust tokens, bytes, writes, watches and connections, and dawdles over
//! its headers and bodies; every limit answers JSON with its stable kind and is counted in
//! /metrics, while another client (127.0.0.1) bootstraps a real etcd cluster through the same
//! service. The service's memory stays under a stated bound, read from /proc.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use muster_tests::etcd_cluster::{EtcdCluster, start_replicas};
use muster_tests::{Discovery, Etcd, Reply, etcd_binary, tail, token_of, wait_for};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const ATTACKER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
/// The most resident memory the service may use after the attack (it starts at ~10 MiB).
const RSS_BOUND_KIB: u64 = 96 * 1024;

const LIMITS: &[&str] = &[
    "--max-tokens-per-client",
    "20",
    "--max-token-bytes",
    "16KiB",
    "--write-rate",
    "5",
    "--write-burst",
    "40",
    "--max-watches-per-client",
    "4",
    "--max-connections-per-client",
    "8",
    "--header-timeout",
    "1s",
    "--body-timeout",
    "1s",
    "--cache-bytes",
    "4MiB",
    "--hold",
    "20s",
];

/// An HTTP client whose connections come from the attacker's address.
fn attacker() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .local_address(ATTACKER)
        .timeout(Duration::from_secs(30))
        .no_proxy()
        .build()
        .expect("client")
}

async fn send(req: reqwest::RequestBuilder) -> Reply {
    try_send(req).await.expect("an answer")
}

async fn try_send(req: reqwest::RequestBuilder) -> Option<Reply> {
    Some(try_send_with_headers(req).await?.0)
}

/// [`try_send`], also returning the answer's headers (for `Retry-After`).
async fn try_send_with_headers(
    req: reqwest::RequestBuilder,
) -> Option<(Reply, reqwest::header::HeaderMap)> {
    let resp = req.send().await.ok()?;
    let headers = resp.headers().clone();
    let status = resp.status().as_u16();
    let index = resp
        .headers()
        .get("x-etcd-index")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = resp.text().await.unwrap_or_default();
    Some((
        Reply {
            status,
            index,
            content_type,
            body,
        },
        headers,
    ))
}

fn kind(r: &Reply) -> String {
    r.json()["kind"].as_str().unwrap_or("").to_string()
}

/// The `kind` of a raw HTTP/1.1 answer's JSON body (from its first `{` to its last `}`, so a
/// chunked body reads too).
fn raw_kind(text: &str) -> String {
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let body = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) if a < b => &body[a..=b],
        _ => "",
    };
    serde_json::from_str::<serde_json::Value>(body).unwrap_or_default()["kind"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// A raw connection from the attacker's address.
async fn raw_conn(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(ATTACKER, 0))
        .expect("bind 127.0.0.2");
    socket.connect(addr).await.expect("connect")
}

/// Reads until the server closes (bounded); returns what it sent.
async fn read_all(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// The attack, against one service at `base`/`addr`. Returns the kinds it was refused with.
async fn attack(base: &str, addr: SocketAddr) -> Vec<String> {
    let c = attacker();
    let mut kinds = Vec::new();

    // Tokens: the per-client quota stops it.
    let mut tokens = Vec::new();
    let refused = loop {
        let r = send(c.get(format!("{base}/new?size=9"))).await;
        if r.status != 200 {
            break r;
        }
        tokens.push(token_of(&r.body).to_string());
        assert!(
            tokens.len() <= 20,
            "the per-client token quota did not hold"
        );
    };
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(kind(&refused), "client_token_quota", "{}", refused.body);
    kinds.push(kind(&refused));

    // Bytes: 4 KiB registrations fill one token to --max-token-bytes (403, etcd-shaped).
    let big = format!("n=http://{}.example:1", "h".repeat(60));
    let mut full = None;
    for i in 0..8 {
        let value = format!("{big}{}", ",n=http://a.example:1".repeat(150));
        let r = send(
            c.put(format!(
                "{base}/{}/{:x}?prevExist=false",
                tokens[0],
                0xb0 + i
            ))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("value={}", muster_tests::urlencode(&value))),
        )
        .await;
        if r.status != 201 {
            full = Some(r);
            break;
        }
    }
    let full = full.expect("--max-token-bytes must stop the writes");
    assert_eq!(
        (full.status, full.json()["errorCode"].as_u64()),
        (403, Some(1001)),
        "{}",
        full.body
    );
    assert_eq!(kind(&full), "token_full");
    kinds.push(kind(&full));

    // Writes: the per-client write rate stops a flood (etcd-shaped 429 with Retry-After).
    let mut limited = None;
    for i in 0..200u32 {
        let r = try_send_with_headers(
            c.put(format!(
                "{base}/{}/{:x}?prevExist=false",
                tokens[1 + (i as usize % 18)],
                0xc000 + i
            ))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("value=n%3Dhttp%3A%2F%2Fh%3A1"),
        )
        .await
        .expect("an answer");
        if r.0.status == 429 {
            limited = Some(r);
            break;
        }
    }
    let (limited, headers) = limited.expect("--write-rate must stop a write flood");
    assert_eq!(limited.json()["errorCode"], 1002, "{}", limited.body);
    // Retry-After says when the next write fits the rate: whole seconds, at least one (a 0
    // would invite an immediate retry), at most the time the whole burst takes to refill at
    // --write-rate 5/s (40 / 5 = 8 s).
    let retry_after = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        matches!(retry_after, Some(1..=8)),
        "a write-rate 429 carries Retry-After in 1..=8 s: {:?} {}",
        headers.get(reqwest::header::RETRY_AFTER),
        limited.body
    );
    assert_eq!(kind(&limited), "rate_limited");
    kinds.push(kind(&limited));

    // Watches: four held, the fifth refused with a 503 (etcd retries those).
    let mut held = Vec::new();
    for t in &tokens[..4] {
        let url = format!("{base}/{t}?wait=true&recursive=true&waitIndex=9999");
        let c = c.clone();
        held.push(tokio::spawn(async move { c.get(url).send().await }));
    }
    wait_for("four held watches", Duration::from_secs(10), || async {
        let m = muster_tests::get(&format!("{base}/metrics")).await.ok()?;
        m.body
            .contains("muster_discovery_held_watches 4")
            .then_some(())
    })
    .await
    .expect("four watches held");
    let url = format!("{base}/{}?wait=true&waitIndex=9999", tokens[5]);
    let fifth = send(c.get(url)).await;
    assert_eq!(fifth.status, 503, "{}", fifth.body);
    assert_eq!(kind(&fifth), "too_many_watches", "{}", fifth.body);
    kinds.push(kind(&fifth));
    for h in held {
        h.abort();
    }

    // Connections: eight idle ones, the ninth answered 503 and closed. The eight are opened
    // again on every try: the server closes idle ones after --header-timeout (1 s), and on a
    // busy machine a try can take longer than that.
    let ninth = wait_for(
        "a connection beyond the cap to be refused",
        Duration::from_secs(20),
        || async {
            let mut idle = Vec::new();
            for _ in 0..8 {
                idle.push(raw_conn(addr).await);
            }
            let mut conn = raw_conn(addr).await;
            let text = read_all(&mut conn).await;
            drop(idle);
            text.starts_with("HTTP/1.1 503").then_some(text)
        },
    )
    .await
    .expect("ninth connection refused");
    assert!(
        ninth.contains(r#""kind":"too_many_connections""#),
        "{ninth}"
    );
    kinds.push(raw_kind(&ninth));

    // Slow headers: 408 after --header-timeout. Slow body: 408 after --body-timeout. (Retried
    // while the connections dropped above still count.)
    let body_head = format!(
        "PUT /{}/d1?prevExist=false HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 100\r\n\r\nvalue=",
        tokens[2]
    );
    let mut timeouts = Vec::new();
    for partial in [
        b"GET /health HTTP/1.1\r\nhost: x\r\n".to_vec(),
        body_head.into_bytes(),
    ] {
        let text = wait_for(
            "a slow request to time out",
            Duration::from_secs(15),
            || {
                let partial = partial.clone();
                async move {
                    let mut conn = raw_conn(addr).await;
                    conn.write_all(&partial).await.ok()?;
                    let text = read_all(&mut conn).await;
                    (!text.contains("too_many_connections")).then_some(text)
                }
            },
        )
        .await
        .expect("an answer");
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert_eq!(raw_kind(&text), "request_timeout", "{text}");
        timeouts.push(raw_kind(&text));
    }
    timeouts.dedup();
    kinds.extend(timeouts);
    kinds
}

/// Another client's etcd bootstrap of 3 members through `base` (from 127.0.0.1).
async fn bootstrap(bin: &std::path::Path, d: &Discovery) {
    let url = d
        .new_token(3)
        .await
        .expect("the other client mints a token");
    let root = tempfile::tempdir().expect("tmp");
    let members: Vec<Etcd> = ["m1", "m2", "m3"]
        .iter()
        .map(|n| Etcd::start_discovery(bin, root.path(), n, &url).expect("member"))
        .collect();
    let formed = wait_for(
        "the other client's etcd cluster to form",
        Duration::from_secs(60),
        || async {
            for m in &members {
                if m.member_names().await? != ["m1", "m2", "m3"] {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    if let Err(e) = formed {
        panic!(
            "{e:#}\n{}\n{}",
            tail(&members[0].log(), 20),
            tail(&d.log(), 30)
        );
    }
}

async fn limited_counts(d: &Discovery, kinds: &[String]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for kind in kinds {
        let sample = format!("muster_discovery_limited_total{{kind=\"{kind}\"}}");
        out.push((kind.to_string(), d.metric(&sample).await.unwrap_or(0.0)));
    }
    out
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

async fn attack_while_another_client_bootstraps(bin: &std::path::Path, d: &Discovery) {
    let (kinds, ()) = tokio::join!(attack(&d.base, d.addr), bootstrap(bin, d));
    // Each refusal was seen on the wire with its own kind, in the attack's order, and each is
    // counted in /metrics under that kind.
    assert_eq!(
        kinds,
        [
            "client_token_quota",
            "token_full",
            "rate_limited",
            "too_many_watches",
            "too_many_connections",
            "request_timeout",
        ],
    );
    for (kind, count) in limited_counts(d, &kinds).await {
        assert!(count >= 1.0, "{kind} is not counted in /metrics");
    }
}

#[tokio::test]
async fn one_client_is_limited_while_another_bootstraps_fjall() {
    let Some(bin) = etcd_binary("one_client_is_limited_while_another_bootstraps_fjall") else {
        return;
    };
    let d = Discovery::start(LIMITS).await.expect("discovery");
    attack_while_another_client_bootstraps(&bin, &d).await;
    let rss = rss_kib(d.pid().expect("pid"));
    assert!(
        rss > 0 && rss < RSS_BOUND_KIB,
        "VmRSS {rss} KiB, bound {RSS_BOUND_KIB} KiB"
    );
}

#[tokio::test]
async fn one_client_is_limited_while_another_bootstraps_etcd() {
    let Some(bin) = etcd_binary("one_client_is_limited_while_another_bootstraps_etcd") else {
        return;
    };
    let backing = EtcdCluster::start(&bin, 1).await.expect("backing etcd");
    let (replicas, _) = start_replicas(&backing, 1, LIMITS).await.expect("replica");
    attack_while_another_client_bootstraps(&bin, &replicas[0]).await;
}

#[tokio::test]
async fn global_caps_answer_503_with_their_kind() {
    let d = Discovery::start(&["--max-tokens", "3", "--max-stored-bytes", "2KiB"])
        .await
        .expect("discovery");
    let mut urls = Vec::new();
    for _ in 0..3 {
        urls.push(d.new_token(3).await.expect("within the cap"));
    }
    let r = muster_tests::get(&format!("{}/new", d.base))
        .await
        .expect("new");
    assert_eq!((r.status, kind(&r)), (503, "too_many_tokens".into()));
    // 3 tokens are charged 384 bytes; ~1 KiB registrations fill the rest.
    let value = format!("n=http://{}.example:1", "h".repeat(60));
    let value = format!("{value}{}", ",n=http://a.example:1".repeat(40));
    let mut last = None;
    for i in 0..4 {
        let r = muster_tests::register(&urls[i % 3], &format!("{:x}", 0xa0 + i), &value)
            .await
            .expect("put");
        if r.status != 201 {
            last = Some(r);
            break;
        }
    }
    let r = last.expect("--max-stored-bytes must stop the writes");
    let json: Value = r.json();
    assert_eq!(
        (r.status, json["errorCode"].as_u64(), json["kind"].as_str()),
        (503, Some(300), Some("storage_full")),
        "{}",
        r.body
    );
    assert_eq!(
        d.metric(r#"muster_discovery_limited_total{kind="too_many_tokens"}"#)
            .await,
        Some(1.0)
    );
    assert_eq!(
        d.metric(r#"muster_discovery_limited_total{kind="storage_full"}"#)
            .await,
        Some(1.0)
    );
}

/// `/new` under a full store and with a slow body: 503 `storage_full` and 408
/// `request_timeout`, each with the status written here.
#[tokio::test]
async fn new_answers_storage_full_and_request_timeout_with_their_status() {
    let d = Discovery::start(&["--max-stored-bytes", "2KiB", "--body-timeout", "1s"])
        .await
        .expect("discovery");
    let url = d.new_token(3).await.expect("a token");
    // ~1 KiB registrations fill the store, then new tokens (128 bytes each) the rest.
    let value = format!("n=http://{}.example:1", "h".repeat(60));
    let value = format!("{value}{}", ",n=http://a.example:1".repeat(40));
    for i in 0..3 {
        let r = muster_tests::register(&url, &format!("{:x}", 0xa0 + i), &value)
            .await
            .expect("put");
        if r.status != 201 {
            break;
        }
    }
    let mut refused = None;
    for _ in 0..20 {
        let r = muster_tests::get(&format!("{}/new", d.base))
            .await
            .expect("new");
        if r.status != 200 {
            refused = Some(r);
            break;
        }
    }
    let r = refused.expect("a full store must stop /new");
    assert_eq!(
        (r.status, kind(&r)),
        (503, "storage_full".to_string()),
        "{}",
        r.body
    );

    // A /new body that never completes: 408 after --body-timeout.
    let mut conn = TcpStream::connect(d.addr).await.expect("connect");
    conn.write_all(
        b"POST /new HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: 100\r\n\r\nsize=",
    )
    .await
    .expect("write");
    let text = read_all(&mut conn).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert_eq!(raw_kind(&text), "request_timeout", "{text}");
}

#[tokio::test]
async fn values_must_be_utf8_and_peer_hosts_valid() {
    let d = Discovery::start(&[]).await.expect("discovery");
    let url = d.new_token(3).await.expect("token");
    // %FF is no UTF-8: refused, not rewritten with replacement characters.
    let r = muster_tests::raw(
        "PUT",
        &format!("{url}/a1?prevExist=false"),
        &[("content-type", "application/x-www-form-urlencoded")],
        b"value=n1%3Dhttp%3A%2F%2Fh%FF%3A1".to_vec(),
    )
    .await
    .expect("put");
    assert_eq!((r.status, r.json()["errorCode"].as_u64()), (400, Some(209)));
    assert!(r.body.contains("UTF-8"), "{}", r.body);
    for bad in [
        "n1=http://exa_mple:2380",
        "n1=http://10.0.0.300:2380",
        "n1=http://-x:2380",
    ] {
        let r = muster_tests::register(&url, "a1", bad).await.expect("put");
        assert_eq!((r.status, r.json()["errorCode"].as_u64()), (400, Some(209)));
        assert!(r.body.contains("not a valid host"), "{}", r.body);
    }
    let listing = muster_tests::get(&url).await.expect("list");
    assert!(listing.json()["node"]["nodes"].is_null(), "nothing stored");
}

/// A connection from `source` (any port) to `addr`.
async fn conn_from(source: Ipv4Addr, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(IpAddr::V4(source), 0))
        .expect("bind a loopback source");
    socket.connect(addr).await.expect("connect")
}

#[tokio::test]
async fn many_clients_together_cannot_open_more_than_the_total_cap() {
    // Two connections a client, six in all: three clients fill the service, a fourth is
    // refused although it has no connection of its own.
    let d = Discovery::start(&[
        "--max-connections",
        "6",
        "--max-connections-per-client",
        "2",
        "--header-timeout",
        "1s",
    ])
    .await
    .expect("discovery");
    let addr = d.addr;
    let refused = wait_for(
        "a connection beyond the total cap to be refused",
        Duration::from_secs(20),
        || async {
            // Opened again on every try: idle ones are closed after --header-timeout.
            let mut idle = Vec::new();
            for client in 2..5u8 {
                for _ in 0..2 {
                    idle.push(conn_from(Ipv4Addr::new(127, 0, 0, client), addr).await);
                }
            }
            let mut conn = conn_from(Ipv4Addr::new(127, 0, 0, 9), addr).await;
            let text = read_all(&mut conn).await;
            drop(idle);
            text.starts_with("HTTP/1.1 503").then_some(text)
        },
    )
    .await
    .expect("the seventh connection refused");
    assert!(
        refused.contains(r#""kind":"too_many_connections""#)
            && refused.contains("--max-connections"),
        "{refused}"
    );
    // Once they are closed, the fourth client is served.
    wait_for(
        "the service to take a connection again",
        Duration::from_secs(20),
        || async {
            let r = muster_tests::get(&format!("{}/health", d.base))
                .await
                .ok()?;
            (r.status == 200).then_some(())
        },
    )
    .await
    .expect("served again");
}
