//! FleetLock requests exactly as Zincati sends them (a POST with `fleet-lock-protocol: true`
//! and the JSON body, no Content-Type), over a plain TCP connection, for the suites that check
//! the answers a machine gets.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Zincati's lock path (`POST {base}/v1/pre-reboot`).
pub const PRE_REBOOT: &str = "/v1/pre-reboot";
/// Zincati's unlock path (`POST {base}/v1/steady-state`).
pub const STEADY_STATE: &str = "/v1/steady-state";

/// A FleetLock request as Zincati sends it; (status, kind, body), status 0 when none came
/// within 30 s (longer than any answer: a lock waits at most 2 s plus a health gate's 20 s).
pub async fn zincati(addr: &str, path: &str, id: &str, group: &str) -> (u16, String, String) {
    let body = serde_json::json!({"client_params": {"id": id, "group": group}}).to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nfleet-lock-protocol: true\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_secs(30), exchange).await else {
        return (0, String::new(), String::new());
    };
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let kind = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["kind"].as_str().map(String::from))
        .unwrap_or_default();
    (status, kind, body.to_string())
}
