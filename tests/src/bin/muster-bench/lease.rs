//! `muster-bench lease`: on a 3-voter cluster on loopback, through a follower's TLS port with an
//! operator token (as a worker machine's `lease run` with `--server` would):
//! - claim (the first) and renew (every later claim by the holder) latency, p50 and p99;
//! - compare-and-set puts per second, one writer, each `--if-revision` the previous answer's;
//! - hand-over after kill -9 of the holder's agent: two `muster lease run` on two machines, the
//!   holder's agent killed, time until the other machine's CMD runs (goal: ttl + 1 s at most).
//!
//! This file measures (starts the clusters, sends the calls, collects the samples); [`report`]
//! summarises and prints.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::{
    AgentProc, Discovery, OperatorApi, bin_path, clear_muster_env, wait_for, wait_formed,
};

use crate::LeaseArgs;
use report::Measurements;

mod report;

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
    let measured = measure(&args).await?;
    report::print(&report::report(&measured), args.json)
}

/// Every part of the benchmark, each on its own cluster: claims and compare-and-set puts on one,
/// the hand-over rounds on fresh ones.
async fn measure(args: &LeaseArgs) -> Result<Measurements> {
    let tmp = tempfile::tempdir().context("temp dir")?;
    let discovery = Discovery::start(&[]).await?;
    let (agents, token) = formed(tmp.path(), &discovery, "l").await?;
    let api = OperatorApi::new(&token, Duration::from_secs(10))?;
    let at = follower(&agents).await?.addr.clone();
    let claims = measure_claims(&api, &at, args).await?;
    let (puts, cas_seconds) = measure_cas(&api, &at, args.duration).await?;
    // The hand-over rounds start clusters of their own: this one would only compete for CPU.
    drop(agents);
    let mut handover_s = Vec::new();
    for round in 0..args.rounds {
        handover_s.push(measure_handover(tmp.path(), &discovery, round, args.ttl).await?);
    }
    Ok(Measurements {
        ttl_s: args.ttl.as_secs(),
        claims,
        puts,
        cas_seconds,
        handover_s,
    })
}

/// Claims and renewals of one lease for `--duration`: their latencies.
async fn measure_claims(api: &OperatorApi, at: &str, args: &LeaseArgs) -> Result<Vec<Duration>> {
    let ttl_ms = args.ttl.as_millis() as u64;
    let mut claims = Vec::new();
    let mut key: Option<String> = None;
    let until = Instant::now() + args.duration;
    while Instant::now() < until {
        let started = Instant::now();
        let reply = api
            .call(
                at,
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
    Ok(claims)
}

/// Compare-and-set puts by one writer for `duration`: their latencies and the wall time taken.
async fn measure_cas(
    api: &OperatorApi,
    at: &str,
    duration: Duration,
) -> Result<(Vec<Duration>, f64)> {
    let first = api.put(at, "cas", "0").await?;
    let mut revision = first.body["revision"].as_u64().context("revision")?;
    let mut puts = Vec::new();
    let started_all = Instant::now();
    let until = Instant::now() + duration;
    while Instant::now() < until {
        let started = Instant::now();
        let reply = api
            .call(
                at,
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
    Ok((puts, started_all.elapsed().as_secs_f64()))
}

/// One hand-over round on a fresh cluster: seconds from kill -9 of the holder's agent to the
/// other machine's CMD starting.
async fn measure_handover(
    tmp: &Path,
    discovery: &Discovery,
    round: usize,
    ttl: Duration,
) -> Result<f64> {
    let root = tmp.join(format!("round{round}"));
    std::fs::create_dir_all(&root)?;
    let (mut agents, _) = formed(&root, discovery, &format!("h{round}_")).await?;
    let record = root.join("record");
    let runs = agents
        .iter()
        .take(2)
        .enumerate()
        .map(|(i, agent)| lease_run(agent, i, &record, ttl))
        .collect::<Result<Vec<_>>>()?;
    let lines = |n: usize| {
        let record = record.clone();
        async move {
            let text = std::fs::read_to_string(&record).unwrap_or_default();
            (text.lines().count() >= n).then(|| text.lines().map(String::from).collect::<Vec<_>>())
        }
    };
    let first = wait_for("a first holder", Duration::from_secs(30), || lines(1)).await?;
    let holder: usize = first[0].trim_start_matches('m').parse()?;
    let killed = Instant::now();
    agents
        .get_mut(holder)
        .with_context(|| format!("holder m{holder} is not one of the machines"))?
        .kill9()
        .await?;
    wait_for(
        "the other machine to take over",
        Duration::from_secs(60),
        || lines(2),
    )
    .await?;
    let handover = killed.elapsed().as_secs_f64();
    for mut r in runs {
        let _ = r.start_kill();
        let _ = r.wait().await;
    }
    Ok(handover)
}

/// `muster lease run job` as machine `m{i}` next to `agent`; its CMD appends the holder's name
/// to `record` once it starts, so the file's lines tell who held the lease when.
fn lease_run(
    agent: &AgentProc,
    i: usize,
    record: &Path,
    ttl: Duration,
) -> Result<tokio::process::Child> {
    let script = format!(
        "echo \"$MUSTER_LEASE_HOLDER\" >> {}; while :; do sleep 0.05; done",
        record.display()
    );
    let mut command = tokio::process::Command::new(bin_path("muster"));
    clear_muster_env(&mut command);
    Ok(command
        .args(["lease", "run", "job", "--ttl"])
        .arg(format!("{}s", ttl.as_secs()))
        .args(["--grace", "1s", "--holder", &format!("m{i}"), "--data-dir"])
        .arg(&agent.data_dir)
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}
