//! `muster-bench discovery --protocol v3`: etcd v3 discovery (the join sequence of etcd 3.6 and
//! 3.7, `muster_tests::v3_client` over the etcd-client crate) through `muster-discovery`, and
//! the same client and workload through etcd 3.4 itself as the discovery etcd.
//!
//! Workload: each of `--clients` closed-loop clients repeatedly creates a token (a Put of its
//! size key), then starts three members at once and waits until all three hold the same
//! three-member cluster. One formation = 1 size Put + 3 × (4 Ranges, 1 Put, 0–1 Watch).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_tests::Discovery;
use muster_tests::etcd_cluster::EtcdCluster;
use muster_tests::v3_client::Joiner;
use serde::Serialize;

use super::DiscoveryArgs;

/// Members per formation.
const SIZE: usize = 3;
/// A formation that takes longer than this counts as failed.
const FORMATION_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Serialize)]
struct Result3 {
    system: String,
    formations: u64,
    failed: u64,
    formations_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// Forms one 3-member cluster on a fresh token; returns how long it took.
async fn formation(endpoint: &str, client: &mut etcd_client::Client) -> Result<Duration> {
    let started = Instant::now();
    let token = muster_shared::token::new_discovery_token();
    client
        .put(
            format!("/_etcd/registry/{token}/_config/size"),
            SIZE.to_string(),
            None,
        )
        .await
        .context("size put")?;
    let joins: Vec<_> = (1..=SIZE)
        .map(|i| {
            let member = Joiner {
                endpoints: vec![endpoint.to_string()],
                tls: None,
                token: token.clone(),
                name: format!("m{i}"),
                peer_url: format!("http://10.9.0.{i}:2380"),
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
    Ok(started.elapsed())
}

/// `clients` closed loops of formations for `duration`.
async fn measure(
    system: &str,
    endpoint: &str,
    clients: u16,
    duration: Duration,
) -> Result<Result3> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let endpoint = endpoint.to_string();
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut failed = 0u64;
                let Ok(mut client) = etcd_client::Client::connect([endpoint.as_str()], None).await
                else {
                    return (times, 1);
                };
                while tokio::time::Instant::now() < deadline {
                    match formation(&endpoint, &mut client).await {
                        Ok(t) => times.push(t.as_micros() as u64),
                        Err(e) => {
                            eprintln!("formation failed: {e:#}");
                            failed += 1;
                        }
                    }
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
    times.sort_unstable();
    let pct = |p: f64| {
        if times.is_empty() {
            return 0.0;
        }
        let rank = ((p * times.len() as f64).ceil() as usize).clamp(1, times.len());
        times[rank - 1] as f64 / 1000.0
    };
    Ok(Result3 {
        system: system.to_string(),
        formations: times.len() as u64,
        failed,
        formations_per_sec: times.len() as f64 / wall,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    })
}

pub async fn run(args: &DiscoveryArgs, etcd_bin: Option<PathBuf>) -> Result<()> {
    if args.store != "fjall" {
        bail!(
            "--protocol v3 measures the embedded store only (v3 on --store etcd is not served yet)"
        );
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let discovery =
        Discovery::start_with(&tmp.path().join("data"), "127.0.0.1:0", BENCH_LIMITS).await?;
    let mut systems = vec![(
        "muster-discovery".to_string(),
        format!("http://{}", discovery.addr),
    )];
    let _etcd = match &etcd_bin {
        Some(bin) => {
            eprintln!(
                "starting etcd {} as the v3 discovery backend…",
                bin.display()
            );
            let cluster = EtcdCluster::start(bin, 1).await?;
            systems.push(("etcd 3.4 (v3 API)".to_string(), cluster.endpoints()));
            Some(cluster)
        }
        None => None,
    };
    let mut results = Vec::new();
    for (name, endpoint) in &systems {
        let mut rounds = Vec::new();
        for _ in 0..args.rounds {
            rounds.push(measure(name, endpoint, args.clients, args.duration).await?);
        }
        rounds.sort_by(|a, b| a.formations_per_sec.total_cmp(&b.formations_per_sec));
        results.push(rounds[rounds.len() / 2].clone());
    }
    if args.json {
        let report = serde_json::json!({
            "protocol": "v3",
            "clients": args.clients,
            "duration_s": args.duration.as_secs_f64(),
            "rounds": args.rounds,
            "members_per_formation": SIZE,
            "results": results,
        });
        println!("{report}");
    } else {
        println!(
            "etcd v3 discovery, {} clients × {:?}, median of {} rounds; one formation = {SIZE} members",
            args.clients, args.duration, args.rounds
        );
        println!(
            "{:<22} {:>11} {:>7} {:>14} {:>9} {:>9}",
            "system", "formations", "failed", "formations/s", "p50 ms", "p99 ms"
        );
        for r in &results {
            println!(
                "{:<22} {:>11} {:>7} {:>14.1} {:>9.1} {:>9.1}",
                r.system, r.formations, r.failed, r.formations_per_sec, r.p50_ms, r.p99_ms
            );
        }
    }
    Ok(())
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
