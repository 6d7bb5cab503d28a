//! `muster-bench stability`: a 3-node cluster of each system at the same raft timing, with the
//! CPU saturated by busy-looping processes and a writer going, for `--duration`. Counts the
//! elections that happen anyway (term changes: spurious elections, since no member fails) and
//! the writes that failed. A faster failover must not be bought with leaders that flap under
//! load.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cluster::{ClusterBench, ClusterSystem, Member, PollStats, RaftTiming, form};
use crate::{StabilityArgs, find_etcd};

/// Pause between the cluster forming and the clock starting: formation's own elections and
/// promotions are not what is measured.
const SETTLE: Duration = Duration::from_secs(2);
/// Pause between two writes of the writer.
const WRITE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Serialize)]
struct StabilityResult {
    system: &'static str,
    timing: String,
    duration_s: f64,
    hogs: usize,
    /// Term at the start and at the end (highest any member reports).
    term_start: u64,
    term_end: u64,
    /// Elections during the run: `term_end - term_start`.
    elections: u64,
    writes_ok: u64,
    writes_failed: u64,
}

pub async fn run(args: StabilityArgs) -> Result<()> {
    let etcd_bin = find_etcd(args.skip_etcd)?;
    let timing = RaftTiming::new(args.heartbeat_ms, args.election_ms)?;
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let etcd = etcd_bin.map(|bin| (bin, Some(timing)));
    let (mut bench, systems) = ClusterBench::start(tmp.path(), timing, etcd).await?;
    let mut results = Vec::new();
    for system in &systems {
        eprintln!(
            "{}: 3 nodes, {timing}, {} CPU hogs, a writer, {:?}",
            system.label(),
            args.hogs,
            args.duration
        );
        results.push(run_one(system, &bench, &args, timing).await?);
    }
    bench
        .discovery
        .terminate()
        .await
        .context("stopping muster-discovery")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        println!(
            "muster-bench stability: 3 nodes per system, {} busy-loop processes on {} cores, one writer every {} ms, {:?}",
            args.hogs,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            WRITE_EVERY.as_millis(),
            args.duration
        );
        println!(
            "{:<10} {:<44} {:>10} {:>10} {:>10}",
            "system", "timing", "elections", "writes ok", "failed"
        );
        for r in &results {
            println!(
                "{:<10} {:<44} {:>10} {:>10} {:>10}",
                r.system, r.timing, r.elections, r.writes_ok, r.writes_failed
            );
        }
    }
    Ok(())
}

async fn run_one(
    system: &ClusterSystem,
    bench: &ClusterBench,
    args: &StabilityArgs,
    timing: RaftTiming,
) -> Result<StabilityResult> {
    let mut polls = PollStats::default();
    let (cluster, _) = form(system, bench, 3, &mut polls).await?;
    tokio::time::sleep(SETTLE).await;
    let term_start = highest_term(&cluster.members, &bench.http)
        .await
        .context("no member reports a term")?;
    let hogs = (0..args.hogs)
        .map(|_| {
            tokio::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting a CPU hog")
        })
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut n = 0u64;
    while started.elapsed() < args.duration {
        let member = &cluster.members[(n % 3) as usize];
        if member.write(&bench.http, &format!("bench/{n}"), "x").await {
            ok += 1;
        } else {
            failed += 1;
        }
        n += 1;
        tokio::time::sleep(WRITE_EVERY).await;
    }
    drop(hogs);
    let term_end = highest_term(&cluster.members, &bench.http)
        .await
        .context("no member reports a term at the end")?;
    let logs = cluster.logs();
    cluster.stop().await.context(logs)?;
    let result = StabilityResult {
        system: system.label(),
        timing: timing.to_string(),
        duration_s: args.duration.as_secs_f64(),
        hogs: args.hogs,
        term_start,
        term_end,
        elections: term_end.saturating_sub(term_start),
        writes_ok: ok,
        writes_failed: failed,
    };
    eprintln!(
        "  {}: {} elections (term {} → {}), {} writes ok, {} failed",
        result.system, result.elections, term_start, term_end, ok, failed
    );
    Ok(result)
}

async fn highest_term(members: &[Member], http: &reqwest::Client) -> Option<u64> {
    let mut best = None;
    for m in members {
        if let Some(t) = m.term(http).await {
            best = best.max(Some(t));
        }
    }
    best
}
