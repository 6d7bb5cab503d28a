//! `muster-bench fleetlock`: lock + unlock round trips through a member's own FleetLock
//! endpoint (as a machine's Zincati would), on a 3-voter cluster on loopback; p50, p99 and
//! round trips per second. Each request is the bytes Zincati sends, on a fresh connection (as
//! Zincati's client does between its minutes-apart calls).
//!
//! This file measures (starts the cluster, times the round trips); [`report`] summarises and
//! prints.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{AgentProc, Discovery, free_port, wait_formed};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::FleetlockArgs;
use report::Measurements;

mod report;

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
    let measured = measure(&args).await?;
    report::print(&report::report(&measured), args.json)
}

/// Forms the cluster, then sends lock + unlock round trips through one member's endpoint for
/// `--duration`, timing each request.
async fn measure(args: &FleetlockArgs) -> Result<Measurements> {
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
    Ok(Measurements {
        locks,
        unlocks,
        seconds: started.elapsed().as_secs_f64(),
        through,
    })
}
