//! `muster-bench fleetlock`: lock + unlock round trips through a member's own FleetLock
//! endpoint (as a machine's Zincati would), on a 3-voter cluster on loopback; p50, p99 and
//! round trips per second. Each request is the bytes Zincati sends, on a fresh connection (as
//! Zincati's client does between its minutes-apart calls).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{AgentProc, Discovery, free_port, wait_formed};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::FleetlockArgs;
use crate::summary::percentile_ms;

#[derive(Debug, Serialize)]
struct Report {
    round_trips: usize,
    seconds: f64,
    per_second: f64,
    lock_p50_ms: f64,
    lock_p99_ms: f64,
    unlock_p50_ms: f64,
    unlock_p99_ms: f64,
    /// Through a follower (forwarded to the leader) or the leader itself.
    through: &'static str,
}

async fn request(addr: &str, path: &str, id: &str) -> Result<u16> {
    let body = serde_json::to_string_pretty(
        &serde_json::json!({"client_params": {"id": id, "group": "default"}}),
    )?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nfleet-lock-protocol: true\r\naccept: */*\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("no status line")
}

pub async fn run(args: FleetlockArgs) -> Result<()> {
    let tmp = tempfile::tempdir().context("temp dir")?;
    let discovery = Discovery::start(&[]).await?;
    let url = discovery.new_token(3).await?;
    let fleetlock: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let agents = fleetlock
        .iter()
        .enumerate()
        .map(|(i, f)| {
            AgentProc::start(
                tmp.path(),
                &format!("b{i}"),
                // One client from one address, as fast as it can: the per-source rate limit
                // would measure itself, not the decisions.
                &[
                    "--discovery",
                    &url,
                    "--fleetlock-listen",
                    f,
                    "--fleetlock-rate-limit",
                    "0",
                ],
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, Duration::from_secs(60)).await?;
    let status = agents[0].status().await.context("status")?;
    let leader = status["leader"].as_str().context("leader")?.to_string();
    // A follower's endpoint: the usual case (most machines are not the leader).
    let (index, through) = match agents.iter().position(|a| a.name != leader) {
        Some(i) => (i, "a follower"),
        None => (0, "the leader"),
    };
    let at = &fleetlock[index];
    let (mut locks, mut unlocks) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while started.elapsed() < args.duration {
        let t = Instant::now();
        if request(at, "/v1/pre-reboot", "bench").await? != 200 {
            bail!("lock refused");
        }
        locks.push(t.elapsed());
        let t = Instant::now();
        if request(at, "/v1/steady-state", "bench").await? != 200 {
            bail!("unlock refused");
        }
        unlocks.push(t.elapsed());
    }
    let seconds = started.elapsed().as_secs_f64();
    locks.sort();
    unlocks.sort();
    let report = Report {
        round_trips: locks.len(),
        seconds,
        per_second: locks.len() as f64 / seconds,
        lock_p50_ms: percentile_ms(&locks, 0.50),
        lock_p99_ms: percentile_ms(&locks, 0.99),
        unlock_p50_ms: percentile_ms(&unlocks, 0.50),
        unlock_p99_ms: percentile_ms(&unlocks, 0.99),
        through,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "muster-bench fleetlock: 3 voters on loopback, lock + unlock through {through}'s endpoint, {:.0} s",
            report.seconds
        );
        println!(
            "  {} round trips, {:.1}/s; lock p50 {:.2} ms p99 {:.2} ms; unlock p50 {:.2} ms p99 {:.2} ms",
            report.round_trips,
            report.per_second,
            report.lock_p50_ms,
            report.lock_p99_ms,
            report.unlock_p50_ms,
            report.unlock_p99_ms
        );
        println!(
            "  goal p99 <= 10 ms: {}",
            if report.lock_p99_ms.max(report.unlock_p99_ms) <= 10.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    Ok(())
}
