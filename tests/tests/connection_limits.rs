//! Connection limits on the node port (`--max-connections`, `--max-connections-per-source`)
//! against a real agent: a source over its limit is closed before the TLS handshake, another
//! source still gets in, a closed connection frees its place, and the refusals are counted.

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

use muster_tests::{AgentProc, free_port, get, wait_for, wait_formed};

const WAIT: Duration = Duration::from_secs(30);

/// True if the agent closed `conn` at once (EOF or reset); false if it is still open.
fn closed_at_once(conn: &mut TcpStream) -> bool {
    conn.set_read_timeout(Some(Duration::from_millis(700)))
        .expect("read timeout");
    let mut buf = [0u8; 16];
    match conn.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_over_its_limit_is_closed_before_the_handshake_and_others_still_get_in() {
    let tmp = tempfile::tempdir().expect("tmp");
    let metrics = format!("127.0.0.1:{}", free_port());
    let agent = AgentProc::start(
        tmp.path(),
        "c1",
        &[
            "--init",
            "--max-connections",
            "16",
            "--max-connections-per-source",
            "4",
            "--metrics-listen",
            &metrics,
        ],
    )
    .expect("start");
    wait_formed(&[&agent], 1, WAIT).await.expect("formed");
    let addr = agent.addr.clone();
    let (held, mut over) = tokio::task::spawn_blocking(move || {
        let mut held: Vec<TcpStream> = (0..4)
            .map(|_| TcpStream::connect(&addr).expect("connect"))
            .collect();
        for c in &mut held {
            assert!(!closed_at_once(c), "within the per-source limit: kept open");
        }
        let over = TcpStream::connect(&addr).expect("connect");
        (held, over)
    })
    .await
    .expect("connections");
    // Another source address on loopback has a limit of its own.
    let mut other = socket_from("127.0.0.2", &agent.addr).await;
    let (over_closed, other_closed) = tokio::task::spawn_blocking(move || {
        (closed_at_once(&mut over), closed_at_once(&mut other))
    })
    .await
    .expect("reads");
    assert!(over_closed, "the 5th from one source is closed at once");
    assert!(!other_closed, "another source still gets in");
    let reply = get(&format!("http://{metrics}/metrics"))
        .await
        .expect("metrics");
    assert!(
        reply.body.lines().any(|l| l
            .starts_with("muster_refused_total{reason=\"connection_limit\"}")
            && !l.ends_with(" 0")),
        "the refusal is counted:\n{}",
        reply.body
    );
    // The operator socket is not the node port: the agent serves on.
    let (code, _, err) = agent.cli(&["kv", "put", "k", "v"]).await.expect("put");
    assert_eq!(code, 0, "{err}");
    // Closing the held connections gives their places back.
    drop(held);
    let addr = agent.addr.clone();
    wait_for("a place for the first source again", WAIT, || {
        let addr = addr.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut c = TcpStream::connect(&addr).ok()?;
                (!closed_at_once(&mut c)).then_some(())
            })
            .await
            .ok()
            .flatten()
        }
    })
    .await
    .expect("admitted again");
}

/// A TCP connection to `to` from the local address `from` (any port), as a blocking stream.
async fn socket_from(from: &str, to: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    let local: std::net::SocketAddr = format!("{from}:0").parse().expect("local address");
    socket.bind(local).expect("bind the source address");
    let remote: std::net::SocketAddr = to.parse().expect("agent address");
    let stream = socket.connect(remote).await.expect("connect");
    let stream = stream.into_std().expect("std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream
}
