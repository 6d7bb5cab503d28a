//! A network failure is said with its address and its cause, on a real agent: a discovery
//! service that is not running is "connection refused" at its host:port, with a rounded delay.

use std::time::Duration;

use muster_tests::*;

#[tokio::test]
async fn a_dead_discovery_service_is_named_refused_at_its_address() {
    let tmp = tempfile::tempdir().expect("tmp");
    // A port nothing listens on: bound, noted, closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port");
    let service = closed.to_string();
    let url = format!("http://{service}/x");
    let a = AgentProc::start(tmp.path(), "lost", &["--discovery", &url]).expect("start");
    let line = wait_for(
        "the agent to report the refusal",
        Duration::from_secs(30),
        || async {
            a.log()
                .lines()
                .find(|l| l.contains(&service) && l.contains("refused"))
                .map(str::to_string)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", a.log()));
    assert!(line.contains("connection refused"), "{line}");
    // Delays are rounded (`250ms`, `1.2s`), never `218.211773ms`.
    let delay = line
        .split("retrying in ")
        .nth(1)
        .expect("the next attempt is announced");
    let digits_after_point = delay
        .split_once('.')
        .map(|(_, rest)| rest.chars().take_while(char::is_ascii_digit).count())
        .unwrap_or(0);
    assert!(digits_after_point <= 1, "rounded: {line}");
}
