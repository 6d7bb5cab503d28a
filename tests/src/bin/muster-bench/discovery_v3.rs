//! `muster-bench discovery --protocol v3`: etcd v3 discovery through `muster-discovery`, and the
//! same client and workloads through etcd 3.4 itself as the discovery etcd (its v3 API), in the
//! same run. Every request is sent by the `etcd-client` crate, one HTTP/2 connection per client.
//!
//! Workloads, each `--duration` long with `--clients` closed-loop clients:
//! - **token creation**: a Put of a fresh token's `…/_config/size` = 3 (etcd's documented recipe;
//!   muster makes it a token with the limits of `/new`);
//! - **member registration**: a Put of `…/members/<id>` = `name=peerURL`, 3 per pre-made token;
//! - **member listing**: a Range of `…/members` (prefix) over 100 tokens of 3 members each, as
//!   etcd's discovery client sends it (linearizable, the client's default);
//! - **formation**: the whole v3 join of three members at once on a fresh token
//!   (`muster_tests::v3_client`: 1 size Put + 3 × (4 Ranges, 1 Put, 0–1 Watch)), timed until all
//!   three hold the same cluster: the join-to-cluster latency.
//!
//! Both servers stay up for the whole run; each round runs every workload on both systems (the
//! order alternates between rounds), and each figure is the median round. Server CPU per
//! operation is read from /proc for the server process only, so the load generator's own CPU
//! does not count.
//!
//! This file measures (starts the systems, drives the workloads, collects [`samples`]);
//! [`report`] summarises and prints.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{GetOptions, KvClient};
use muster_tests::Discovery;
use muster_tests::etcd_cluster::EtcdCluster;
use muster_tests::v3_client::Joiner;

use super::DiscoveryArgs;
use crate::discovery_cpu as cpu;
use samples::{Measurements, SIZE, Stats, WORKLOADS, Workload};

mod report;
mod samples;

/// A formation that takes longer than this counts as failed.
const FORMATION_TIMEOUT: Duration = Duration::from_secs(30);
/// Tokens the listing workload reads: enough to defeat a single-key cache, all of them hot.
const LIST_TOKENS: usize = 100;
/// The smallest registration pool (tokens), whatever the measured creation rate.
const MIN_POOL: usize = 1000;
/// Per-request ceiling: a hung server ends the benchmark instead of stalling it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A system under test: its gRPC endpoint and the server process whose CPU counts.
struct System {
    name: String,
    endpoint: String,
    pid: u32,
}

/// What the workers share in one measurement.
struct Plan {
    workload: Workload,
    endpoint: String,
    /// Registration: pre-made tokens, 3 registrations each, handed out in order.
    pool: Vec<String>,
    next: AtomicUsize,
    /// Listing: full tokens, read in turn.
    listed: Vec<String>,
}

fn size_key(token: &str) -> String {
    format!("/_etcd/registry/{token}/_config/size")
}

fn member_key(token: &str, n: usize) -> String {
    // A stable, distinct member id per (token, n), shaped as etcd's (hex, no leading zeros).
    format!("/_etcd/registry/{token}/members/{:x}", 0x1000 + n)
}

fn member_value(n: usize) -> String {
    format!("m{n}=http://10.9.0.{}:2380", n + 1)
}

async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, f).await {
        Ok(r) => Ok(r?),
        Err(_) => bail!("no answer within {REQUEST_TIMEOUT:?}"),
    }
}

/// One operation of the plan's workload. `Ok(false)`: the registration pool is used up.
async fn one_op(plan: &Plan, kv: &mut KvClient, client: usize, seq: usize) -> Result<bool> {
    match plan.workload {
        Workload::TokenCreation => {
            let token = muster_shared::token::new_discovery_token();
            timed(kv.put(size_key(&token), SIZE.to_string(), None)).await?;
        }
        Workload::MemberRegistration => {
            let n = plan.next.fetch_add(1, Ordering::Relaxed);
            let Some(token) = plan.pool.get(n / SIZE) else {
                return Ok(false);
            };
            let m = n % SIZE;
            timed(kv.put(member_key(token, m), member_value(m), None)).await?;
        }
        Workload::MemberListing => {
            let token = &plan.listed[(client * 7 + seq) % plan.listed.len()];
            let prefix = format!("/_etcd/registry/{token}/members");
            let resp = timed(kv.get(prefix, Some(GetOptions::new().with_prefix()))).await?;
            if resp.kvs().len() != SIZE {
                bail!("listing found {} members, not {SIZE}", resp.kvs().len());
            }
        }
        Workload::Formation => {
            formation(&plan.endpoint, kv).await?;
        }
    }
    Ok(true)
}

/// Forms one 3-member cluster on a fresh token with etcd's v3 join sequence.
async fn formation(endpoint: &str, kv: &mut KvClient) -> Result<()> {
    let token = muster_shared::token::new_discovery_token();
    timed(kv.put(size_key(&token), SIZE.to_string(), None)).await?;
    let joins: Vec<_> = (1..=SIZE)
        .map(|i| {
            let member = Joiner {
                endpoints: vec![endpoint.to_string()],
                tls: None,
                token: token.clone(),
                name: format!("m{i}"),
                peer_url: format!("http://10.9.0.{i}:2380"),
                user: None,
            };
            tokio::spawn(async move { member.join(FORMATION_TIMEOUT).await })
        })
        .collect();
    let mut clusters = Vec::new();
    for j in joins {
        match j.await.context("join task")?? {
            Ok(cluster) => clusters.push(cluster),
            Err(e) => bail!("a member failed: {e}"),
        }
    }
    if clusters.iter().any(|c| c != &clusters[0]) {
        bail!("members disagree: {clusters:?}");
    }
    Ok(())
}

/// Connects `clients` clients (one HTTP/2 connection each).
async fn connect(endpoint: &str, clients: u16) -> Result<Vec<KvClient>> {
    let mut out = Vec::new();
    for _ in 0..clients {
        let c = etcd_client::Client::connect([endpoint], None)
            .await
            .with_context(|| format!("connecting to {endpoint}"))?;
        out.push(c.kv_client());
    }
    Ok(out)
}

/// Runs the plan on every client until `duration` passes; latencies and CPU per operation.
async fn measure(sys: &System, plan: Arc<Plan>, clients: u16, duration: Duration) -> Result<Stats> {
    let kvs = connect(&sys.endpoint, clients).await?;
    let cpu = cpu::Sample::take(&[sys.pid]);
    let client_cpu = cpu::Sample::take(&[std::process::id()]);
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + duration;
    let tasks: Vec<_> = kvs
        .into_iter()
        .enumerate()
        .map(|(i, mut kv)| {
            let plan = plan.clone();
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut failed = 0u64;
                let mut seq = 0;
                while tokio::time::Instant::now() < deadline {
                    let t = Instant::now();
                    match one_op(&plan, &mut kv, i, seq).await {
                        Ok(true) => times.push(t.elapsed().as_micros() as u64),
                        Ok(false) => break,
                        Err(e) => {
                            if failed < 3 {
                                eprintln!("{:?} failed: {e:#}", plan.workload);
                            }
                            failed += 1;
                        }
                    }
                    seq += 1;
                }
                (times, failed)
            })
        })
        .collect();
    let mut times = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (mut ts, f) = t.await.context("client task")?;
        times.append(&mut ts);
        failed += f;
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu_us = cpu.elapsed_us();
    let client_cpu_us = client_cpu.elapsed_us();
    if plan.workload == Workload::MemberRegistration
        && plan.next.load(Ordering::Relaxed) > plan.pool.len() * SIZE
    {
        eprintln!(
            "note: the registration pool ran out before --duration ended on {}",
            sys.name
        );
    }
    times.sort_unstable();
    let pct = |p: f64| {
        if times.is_empty() {
            return 0.0;
        }
        let rank = ((p * times.len() as f64).ceil() as usize).clamp(1, times.len());
        times[rank - 1] as f64 / 1000.0
    };
    let ops = times.len() as u64;
    Ok(Stats {
        ops,
        failed,
        ops_per_sec: ops as f64 / wall,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        server_cpu_us_per_op: if ops == 0 { 0.0 } else { cpu_us / ops as f64 },
        client_cpu_us_per_op: if ops == 0 {
            0.0
        } else {
            client_cpu_us / ops as f64
        },
    })
}

/// Creates `n` size-3 tokens with `clients` parallel clients (untimed setup).
async fn make_tokens(endpoint: &str, clients: u16, n: usize, members: bool) -> Result<Vec<String>> {
    let tokens: Arc<Vec<String>> = Arc::new(
        (0..n)
            .map(|_| muster_shared::token::new_discovery_token())
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for mut kv in connect(endpoint, clients).await? {
        let (tokens, next) = (tokens.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(token) = tokens.get(i) else {
                    return Ok::<_, anyhow::Error>(());
                };
                timed(kv.put(size_key(token), SIZE.to_string(), None)).await?;
                if members {
                    for m in 0..SIZE {
                        timed(kv.put(member_key(token, m), member_value(m), None)).await?;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.context("setup task")??;
    }
    Ok(Arc::try_unwrap(tokens).unwrap_or_else(|a| (*a).clone()))
}

pub async fn run(args: &DiscoveryArgs, etcd_bin: Option<PathBuf>) -> Result<()> {
    if args.store != "fjall" {
        bail!("--protocol v3 measures the embedded store only");
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let discovery =
        Discovery::start_with(&tmp.path().join("data"), "127.0.0.1:0", BENCH_LIMITS).await?;
    let mut systems = vec![System {
        name: "muster-discovery".to_string(),
        endpoint: format!("http://{}", discovery.addr),
        pid: discovery.pid().context("muster-discovery has no pid")?,
    }];
    // Held until the end of the run: dropping it stops etcd.
    let _etcd = match &etcd_bin {
        Some(bin) => {
            eprintln!(
                "starting etcd {} as the v3 discovery backend…",
                bin.display()
            );
            let cluster = EtcdCluster::start(bin, 1).await?;
            let member = &cluster.members[0];
            systems.push(System {
                name: "etcd 3.4".to_string(),
                endpoint: member.client_url.clone(),
                pid: member.pid().context("etcd has no pid")?,
            });
            Some(cluster)
        }
        None => None,
    };
    let measured = measure_rounds(&systems, args).await?;
    report::print(&report::summarize(&measured), args);
    Ok(())
}

/// Runs every workload on every system for `--rounds` rounds, the systems' order alternating
/// between rounds so neither always runs on a machine warmed (or tired) by the other.
async fn measure_rounds(systems: &[System], args: &DiscoveryArgs) -> Result<Measurements> {
    let mut listed = Vec::new();
    for sys in systems {
        listed.push(make_tokens(&sys.endpoint, args.clients, LIST_TOKENS, true).await?);
    }
    // rounds[workload][system] = one Stats per round.
    let mut rounds: Vec<Vec<Vec<Stats>>> = vec![vec![Vec::new(); systems.len()]; WORKLOADS.len()];
    for round in 0..args.rounds as usize {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..systems.len()).collect()
        } else {
            (0..systems.len()).rev().collect()
        };
        for (w, &workload) in WORKLOADS.iter().enumerate() {
            for &s in &order {
                let sys = &systems[s];
                let pool = if workload == Workload::MemberRegistration {
                    // Registrations run at about the creation rate just measured (both are
                    // one durable write); half again as many tokens as that would need.
                    let rate = rounds[0][s].last().map_or(0.0, |st| st.ops_per_sec);
                    let n = (rate * args.duration.as_secs_f64() / SIZE as f64 * 1.5) as usize;
                    make_tokens(&sys.endpoint, args.clients, n.max(MIN_POOL), false).await?
                } else {
                    Vec::new()
                };
                let plan = Arc::new(Plan {
                    workload,
                    endpoint: sys.endpoint.clone(),
                    pool,
                    next: AtomicUsize::new(0),
                    listed: listed[s].clone(),
                });
                eprintln!("round {}: {} on {}…", round + 1, workload.label(), sys.name);
                let stats = measure(sys, plan, args.clients, args.duration).await?;
                rounds[w][s].push(stats);
            }
        }
    }
    Ok(Measurements {
        systems: systems.iter().map(|s| s.name.clone()).collect(),
        rounds,
    })
}

/// What the throughput workloads need switched off: one client (the load generator) mints and
/// writes far beyond what the per-client limits allow a real client.
pub(super) const BENCH_LIMITS: &[&str] = &[
    "--write-rate",
    "0",
    "--max-tokens-per-client",
    "0",
    "--max-connections-per-client",
    "0",
    "--max-tokens",
    "0",
];
