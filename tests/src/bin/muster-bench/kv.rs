//! `muster-bench kv`: muster's key-value store against etcd 3.4's, a 3-member cluster of each on
//! loopback at the same raft timing, both fsyncing every acknowledged write (etcd's default;
//! muster has no other mode). For 1, 16 and 64 closed-loop clients (`--clients`): plain puts,
//! compare-and-set puts and linearizable gets, each system over its own client path (see
//! [`systems`]); then watch delivery latency. Per row: ops/s, p50/p99, the servers' CPU per
//! request, and the servers' `fsync`/`fdatasync` calls per acknowledged write (counted by the
//! kernel, see [`fsyncs`]) next to the rate the disk manages for one flushing writer.
//!
//! Both clusters stay up for the whole run, and each workload alternates between them (the
//! first system alternates by round), so a slow minute on a shared machine hits both; figures
//! are medians over `--rounds` with min and max.

mod fsyncs;
mod report;
mod systems;
mod workloads;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use muster_tests::Discovery;

use crate::KvArgs;
use crate::cluster::system::RaftTiming;
use crate::discovery_cpu::Sample;
use fsyncs::FsyncCounter;
use report::RoundFigures;
use systems::KvSystem;
use workloads::Workload;

pub async fn run(args: KvArgs) -> Result<()> {
    let timing = RaftTiming::new(args.heartbeat_ms, args.election_ms)?;
    if args.clients.is_empty() || args.clients.contains(&0) {
        bail!("--clients takes client counts of at least 1, e.g. --clients 1,16,64");
    }
    let etcd_bin = crate::find_etcd(args.skip_etcd)?;
    let tmp = tempfile::tempdir()?;
    let discovery = Discovery::start(&[]).await?;
    eprintln!("starting 3 muster agents ({timing})");
    let mut systems = vec![Arc::new(
        KvSystem::muster(tmp.path(), &discovery, timing).await?,
    )];
    if let Some(bin) = &etcd_bin {
        eprintln!("starting 3 etcd members ({timing})");
        systems.push(Arc::new(KvSystem::etcd(bin, timing).await?));
    }
    let counter = FsyncCounter::start();
    let mut figures = Vec::new();
    let mut disk_rates = Vec::new();
    let mut watch: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for round in 0..args.rounds {
        disk_rates.push(fsyncs::disk_rate(tmp.path(), Duration::from_secs(1))?);
        let order: Vec<&Arc<KvSystem>> = if round % 2 == 0 {
            systems.iter().collect()
        } else {
            systems.iter().rev().collect()
        };
        for &clients in &args.clients {
            for workload in Workload::ALL {
                for system in &order {
                    let f = measure(system, workload, clients, args.duration, &counter).await?;
                    eprintln!(
                        "round {}: {:<6} {:<20} {:>2} clients: {:.0}/s p99 {:.2} ms{}",
                        round + 1,
                        f.system,
                        workload.title(),
                        clients,
                        f.ops_per_sec,
                        f.p99_ms,
                        f.fsyncs_per_write
                            .map(|x| format!(", {x:.2} fsync/write"))
                            .unwrap_or_default()
                    );
                    figures.push(f);
                }
            }
        }
        for system in &order {
            let latencies = workloads::watch_delivery(
                (*system).clone(),
                args.duration,
                Duration::from_millis(10),
            )
            .await?;
            watch.entry(system.name()).or_default().extend(latencies);
        }
    }
    for system in &systems {
        eprintln!(
            "{} leader at the end: {:?}",
            system.name(),
            system.leader().await
        );
    }
    let report = report::report(
        args.rounds as usize,
        args.duration,
        timing.to_string(),
        disk_rates,
        &figures,
        &watch,
    );
    report::print(&report, args.json)
}

/// One workload on one system: run it, with the servers' CPU and fsyncs counted around it.
async fn measure(
    system: &Arc<KvSystem>,
    workload: Workload,
    clients: usize,
    duration: Duration,
    counter: &Option<FsyncCounter>,
) -> Result<RoundFigures> {
    let pids = system.pids();
    if pids.len() != system.member_count() {
        bail!("{}: a server process is gone", system.name());
    }
    let revisions = workloads::prepare(system, clients).await?;
    let fsyncs_before = counter.as_ref().map(|c| c.snapshot());
    let cpu = Sample::take(&pids);
    let run = workloads::closed_loop(system.clone(), workload, revisions, duration).await?;
    let cpu_us = cpu.elapsed_us();
    let fsyncs = match (counter, fsyncs_before) {
        (Some(c), Some(before)) => {
            let (ours, unattributed) = fsyncs::made_by(&before, &c.snapshot(), &pids);
            if unattributed > 0 {
                eprintln!("({unattributed} fsyncs by threads that ended are not counted)");
            }
            Some(ours)
        }
        _ => None,
    };
    if let Some(e) = &run.first_error {
        eprintln!(
            "{} {}: {} errors, the first: {e}",
            system.name(),
            workload.title(),
            run.errors
        );
    }
    Ok(RoundFigures::new(
        system.name(),
        workload,
        clients,
        run,
        cpu_us,
        fsyncs,
    ))
}
