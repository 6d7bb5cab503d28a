//! Idle connections to the FleetLock port cannot starve the leader. The leader runs with 1,024
//! file descriptors (`prlimit`), a local client opens 1,100 idle connections to its FleetLock
//! listener from 69 loopback addresses, and meanwhile: writes through a follower go on with no
//! failure, the leader's node port still takes a new TLS connection, its /healthz still
//! answers, and once the header deadline has closed the idle connections the FleetLock port
//! serves a lock again. Without a budget on that listener every accept in the process fails
//! with EMFILE.

use std::time::Duration;

use muster_tests::{AgentProc, OperatorApi, Writer, free_port, get, tail, wait_for, wait_formed};
use tokio::net::{TcpSocket, TcpStream};

const WAIT: Duration = Duration::from_secs(60);
const IDLE_CONNECTIONS: usize = 1_100;
/// Source addresses the idle connections come from (16 a source would pass the per-source
/// limit 69 times over: only the total budget stops them).
const SOURCES: u8 = 69;

struct Member {
    agent: AgentProc,
    fleetlock: String,
    metrics: String,
}

fn start(root: &std::path::Path, name: &str, extra: &[&str]) -> Member {
    let fleetlock = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut args = vec![
        "--promote-after",
        "500ms",
        "--fleetlock-listen",
        &fleetlock,
        "--metrics-listen",
        &metrics,
    ];
    args.extend(extra);
    let agent = AgentProc::start(root, name, &args).expect("start");
    Member {
        agent,
        fleetlock,
        metrics,
    }
}

/// Opens `n` connections to `addr`, spread over 127.0.0.2.. (as many sources as `SOURCES`).
async fn open_idle(addr: &str, n: usize) -> Vec<TcpStream> {
    let target: std::net::SocketAddr = addr.parse().expect("addr");
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let source = std::net::Ipv4Addr::new(127, 0, 0, 2 + (i % usize::from(SOURCES)) as u8);
        let socket = TcpSocket::new_v4().expect("socket");
        socket
            .bind((source, 0).into())
            .expect("bind a loopback source");
        // The kernel completes the handshake from its backlog even when the agent refuses to
        // accept: every connect succeeds or is reset, none hangs.
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_secs(2), socket.connect(target)).await
        {
            held.push(stream);
        }
    }
    held
}

/// `muster_refused_total{reason="connection_limit"}` of the agent whose metrics listen there.
async fn refused_over_limit(metrics: &str) -> f64 {
    let text = get(&format!("http://{metrics}/metrics"))
        .await
        .map(|r| r.body)
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("muster_refused_total{reason=\"connection_limit\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_fleetlock_connections_cannot_starve_the_leader() {
    assert!(
        muster_shared::limits::open_files().unwrap_or(0) > IDLE_CONNECTIONS + 500,
        "this test opens {IDLE_CONNECTIONS} connections: run it with `ulimit -n 4096` or more"
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let mut members = vec![start(tmp.path(), "b1", &["--init"])];
    wait_formed(&[&members[0].agent], 1, WAIT)
        .await
        .expect("b1 formed");
    for name in ["b2", "b3"] {
        let token = members[0].agent.create_token(&[]).await.expect("token");
        let via = members[0].agent.addr.clone();
        members.push(start(
            tmp.path(),
            name,
            &["--join", &via, "--token", &token],
        ));
    }
    let refs: Vec<&AgentProc> = members.iter().map(|m| &m.agent).collect();
    wait_formed(&refs, 3, WAIT).await.expect("formed");
    let leader_name = members[0].agent.status().await.expect("status")["leader"]
        .as_str()
        .expect("a leader")
        .to_string();
    let (leader, followers): (Vec<&Member>, Vec<&Member>) =
        members.iter().partition(|m| m.agent.name == leader_name);
    let leader = leader[0];
    let pid = leader.agent.pid().expect("leader pid").to_string();
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=1024:1024"])
        .status()
        .expect("prlimit (util-linux)");
    assert!(limited.success(), "prlimit --pid {pid} --nofile=1024:1024");

    let token = leader.agent.operator_token().await.expect("operator token");
    let api = OperatorApi::new(&token, Duration::from_secs(10)).expect("api");
    // A token made a moment ago reaches a follower once it has applied its record.
    for follower in &followers {
        wait_for("the new token to work on every follower", WAIT, || async {
            api.put(&follower.agent.addr, "ready", "1")
                .await
                .ok()?
                .ok()
                .then_some(())
        })
        .await
        .expect("token applied");
    }
    let writer = Writer::start(
        api.clone(),
        followers.iter().map(|m| m.agent.addr.clone()).collect(),
    );
    let held = open_idle(&leader.fleetlock, IDLE_CONNECTIONS).await;
    assert!(
        held.len() >= IDLE_CONNECTIONS / 2,
        "the kernel took the connections: {}",
        held.len()
    );

    // A new TLS connection to the leader's node port (a fresh client each time), its
    // /healthz, and a FleetLock lock from a source the flood did not use.
    let fresh = OperatorApi::unpooled(&token, Duration::from_secs(5)).expect("api");
    wait_for(
        "the leader's node port to take a new connection",
        WAIT,
        || async {
            fresh
                .status(&leader.agent.addr)
                .await
                .ok()?
                .ok()
                .then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", tail(&leader.agent.log(), 20)));
    let health = get(&format!("http://{}/healthz", leader.metrics))
        .await
        .expect("/healthz answers");
    assert_eq!(health.status, 200, "{}", health.body);
    // FleetLock's own budget is full of idle connections now; the header deadline closes them
    // (they never send a request), and a real client gets a slot again.
    wait_for(
        "FleetLock to serve a lock once the idle connections are closed",
        WAIT,
        || async {
            // Each try bounded: a connection the kernel queued while the budget was full may
            // be refused late; the next try is a new connection.
            let lock = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .ok()?
                .post(format!("http://{}/v1/pre-reboot", leader.fleetlock))
                .header("fleet-lock-protocol", "true")
                .body(r#"{"client_params":{"id":"machine-1","group":"default"}}"#)
                .send()
                .await
                .ok()?;
            (lock.status() == 200).then_some(())
        },
    )
    .await
    .expect("a lock after the header deadline");

    // Writes through the followers (forwarded to the leader) kept going throughout.
    let (ok, errors) = writer.stop().await;
    assert!(ok > 10, "the writer kept writing: {ok}");
    assert!(
        errors.is_empty(),
        "no write through a follower failed while {} idle connections were held: {:?}\n{}",
        held.len(),
        &errors[..errors.len().min(5)],
        tail(&leader.agent.log(), 20)
    );
    let refused = refused_over_limit(&leader.metrics).await;
    assert!(
        refused >= (IDLE_CONNECTIONS - 256) as f64,
        "connections over the FleetLock budget were refused and counted: {refused}"
    );
    assert!(
        !leader.agent.log().contains("out of file descriptors"),
        "the budget kept the leader from running out of descriptors:\n{}",
        tail(&leader.agent.log(), 20)
    );
    drop(held);
}
