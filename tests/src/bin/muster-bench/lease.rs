//! `muster-bench lease`: on a 3-voter cluster on loopback, through a follower's TLS port with an
//! operator token (as a worker machine's `lease run` with `--server` would):
//! - claim (the first) and renew (every later claim by the holder) latency, p50 and p99;
//! - compare-and-set puts per second, one writer, each `--if-revision` the previous answer's;
//! - hand-over after kill -9 of the holder's agent: two `muster lease run` on two machines, the
//!   holder's agent killed, time until the other machine's CMD runs (goal: ttl + 1 s at most).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{
    AgentProc, Discovery, OperatorApi, bin_path, clear_muster_env, wait_for, wait_formed,
};
use serde::Serialize;

use crate::LeaseArgs;

#[derive(Debug, Serialize)]
struct Report {
    ttl_s: u64,
    claims: usize,
    claim_p50_ms: f64,
    claim_p99_ms: f64,
    cas_puts: usize,
    cas_puts_per_second: f64,
    cas_p50_ms: f64,
    cas_p99_ms: f64,
    /// Kill -9 of the holder's agent to the other machine's CMD starting, per round.
    handover_s: Vec<f64>,
    handover_median_s: f64,
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

async fn formed(root: &Path, d: &Discovery, prefix: &str) -> Result<(Vec<AgentProc>, String)> {
    let url = d.new_token(3).await?;
    let agents = (0..3)
        .map(|i| AgentProc::start(root, &format!("{prefix}{i}"), &["--discovery", &url]))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&AgentProc> = agents.iter().collect();
    wait_formed(&refs, 3, Duration::from_secs(60)).await?;
    let token = AgentProc::operator_token_of(&agents)
        .await
        .context("operator token")?;
    Ok((agents, token))
}

/// A follower's address (most clients talk to a follower).
async fn follower(agents: &[AgentProc]) -> Result<&AgentProc> {
    let status = agents[0].status().await.context("status")?;
    let leader = status["leader"].as_str().context("leader")?.to_string();
    agents
        .iter()
        .find(|a| a.name != leader)
        .context("a follower")
}

pub async fn run(args: LeaseArgs) -> Result<()> {
    let tmp = tempfile::tempdir().context("temp dir")?;
    let discovery = Discovery::start(&[]).await?;
    let (agents, token) = formed(tmp.path(), &discovery, "l").await?;
    let api = OperatorApi::new(&token, Duration::from_secs(10))?;
    let at = follower(&agents).await?.addr.clone();

    // Claims and renewals.
    let ttl_ms = args.ttl.as_millis() as u64;
    let mut claims = Vec::new();
    let mut key: Option<String> = None;
    let until = Instant::now() + args.duration;
    while Instant::now() < until {
        let started = Instant::now();
        let reply = api
            .call(
                &at,
                "POST",
                "/v1/leases/bench",
                Some(serde_json::json!({"holder": "bench", "ttl_ms": ttl_ms, "key": key})),
            )
            .await?;
        if !reply.ok() {
            bail!("claim: {reply:?}");
        }
        // The first claim is a grant with its key; every later one renews it.
        if let Some(k) = reply.body["key"].as_str() {
            key = Some(k.to_string());
        }
        claims.push(started.elapsed());
    }

    // Compare-and-set puts.
    let first = api.put(&at, "cas", "0").await?;
    let mut revision = first.body["revision"].as_u64().context("revision")?;
    let mut puts = Vec::new();
    let started_all = Instant::now();
    let until = Instant::now() + args.duration;
    while Instant::now() < until {
        let started = Instant::now();
        let reply = api
            .call(
                &at,
                "PUT",
                "/v1/kv?key=cas",
                Some(serde_json::json!({"value": puts.len().to_string(), "if_revision": revision})),
            )
            .await?;
        if !reply.ok() {
            bail!("cas put: {reply:?}");
        }
        revision = reply.body["revision"].as_u64().context("revision")?;
        puts.push(started.elapsed());
    }
    let cas_seconds = started_all.elapsed().as_secs_f64();
    drop(agents);

    // Hand-over after kill -9 of the holder's agent, on a fresh cluster per round.
    let mut handover = Vec::new();
    for round in 0..args.rounds {
        let root = tmp.path().join(format!("round{round}"));
        std::fs::create_dir_all(&root)?;
        let (mut agents, _) = formed(&root, &discovery, &format!("h{round}_")).await?;
        let record = root.join("record");
        let mut runs = Vec::new();
        for (i, agent) in agents.iter().take(2).enumerate() {
            let script = format!(
                "echo \"$MUSTER_LEASE_HOLDER\" >> {}; while :; do sleep 0.05; done",
                record.display()
            );
            let mut command = tokio::process::Command::new(bin_path("muster"));
            clear_muster_env(&mut command);
            runs.push(
                command
                    .args(["lease", "run", "job", "--ttl"])
                    .arg(format!("{}s", args.ttl.as_secs()))
                    .args(["--grace", "1s", "--holder", &format!("m{i}"), "--data-dir"])
                    .arg(&agent.data_dir)
                    .args(["--", "sh", "-c", &script])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()?,
            );
        }
        let lines = |n: usize| {
            let record = record.clone();
            async move {
                let text = std::fs::read_to_string(&record).unwrap_or_default();
                (text.lines().count() >= n)
                    .then(|| text.lines().map(String::from).collect::<Vec<_>>())
            }
        };
        let first = wait_for("a first holder", Duration::from_secs(30), || lines(1)).await?;
        let holder: usize = first[0].trim_start_matches('m').parse()?;
        let killed = Instant::now();
        agents[holder].kill9().await?;
        wait_for(
            "the other machine to take over",
            Duration::from_secs(60),
            || lines(2),
        )
        .await?;
        handover.push(killed.elapsed().as_secs_f64());
        for mut r in runs {
            let _ = r.start_kill();
            let _ = r.wait().await;
        }
    }

    claims.sort();
    puts.sort();
    let mut sorted = handover.clone();
    let report = Report {
        ttl_s: args.ttl.as_secs(),
        claims: claims.len(),
        claim_p50_ms: percentile_ms(&claims, 0.50),
        claim_p99_ms: percentile_ms(&claims, 0.99),
        cas_puts: puts.len(),
        cas_puts_per_second: puts.len() as f64 / cas_seconds,
        cas_p50_ms: percentile_ms(&puts, 0.50),
        cas_p99_ms: percentile_ms(&puts, 0.99),
        handover_median_s: median(&mut sorted),
        handover_s: handover,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "lease claim/renew through a follower: {} calls, p50 {:.2} ms, p99 {:.2} ms",
            report.claims, report.claim_p50_ms, report.claim_p99_ms
        );
        println!(
            "compare-and-set puts: {:.0}/s (p50 {:.2} ms, p99 {:.2} ms)",
            report.cas_puts_per_second, report.cas_p50_ms, report.cas_p99_ms
        );
        println!(
            "hand-over after kill -9 of the holder's agent (ttl {} s): median {:.2} s over {:?}",
            report.ttl_s, report.handover_median_s, report.handover_s
        );
    }
    Ok(())
}
