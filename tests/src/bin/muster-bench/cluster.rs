//! `muster-bench cluster`: muster agent clusters against etcd 3.4 clusters bootstrapping through
//! the same discovery service: formation, failover, idle memory, and token joins.
//!
//! Measurement ([`system`], [`poll`], [`measure`], [`rounds`], [`resident`]) is apart from
//! reporting ([`report`], [`table`]); [`run`] joins them.

mod measure;
mod poll;
mod report;
mod resident;
mod rounds;
pub(crate) mod system;
mod table;

use anyhow::{Context, Result, bail};
use muster_tests::{bin_path, tail};

use crate::{ClusterArgs, find_etcd};

pub(crate) use measure::form;
use poll::POLL_PAUSE;
pub(crate) use poll::PollStats;
use report::{ClusterResults, cluster_goals};
pub(crate) use resident::resident_mib;
use rounds::run_cluster_rounds;
pub(crate) use system::{ClusterBench, ClusterSystem, Member, RaftTiming};
use table::{ClusterReport, print_cluster_table};

// =============================================================================================
// muster-bench cluster
//
// Each measurement starts a fresh cluster in its own temp dir on a freshly minted discovery URL,
// so no round inherits state (data dirs, registrations, warm caches) from the one before. The
// systems alternate step by step, as in the discovery benchmark, so a slow minute on a shared
// machine hurts both alike.

/// Starts the discovery service, runs every measurement, stops everything, then reports.
pub async fn run(args: ClusterArgs) -> Result<()> {
    let etcd_bin = find_etcd(args.skip_etcd)?;
    let agent_bin = bin_path("muster");
    if !agent_bin.exists() {
        bail!(
            "{} not found: run `cargo build{} -p muster-agent` first \
             (or set MUSTER_BIN_DIR to the directory holding it)",
            agent_bin.display(),
            crate::profile_flag()
        );
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let timing = RaftTiming::new(args.heartbeat_ms, args.election_ms)?;
    let etcd_timing = (!args.etcd_default_timing).then_some(timing);
    let etcd = etcd_bin.map(|bin| (bin, etcd_timing));
    let (mut bench, systems) = ClusterBench::start(tmp.path(), timing, etcd).await?;
    bench.etcdctl = args.etcdctl;
    let outcome = run_cluster_rounds(&systems, &bench, args.rounds).await;
    let discovery_log = tail(&bench.discovery.log(), 40);
    bench
        .discovery
        .terminate()
        .await
        .context("stopping muster-discovery")?;
    let samples = outcome.with_context(|| format!("muster-discovery log:\n{discovery_log}"))?;
    let mut results = samples.iter().map(ClusterResults::from_samples);
    let muster = results.next().context("no results")?;
    let etcd = results.next();
    let report = ClusterReport {
        rounds: args.rounds,
        muster_timing: timing.to_string(),
        etcd_timing: etcd_timing.map_or_else(
            || "etcd's defaults: heartbeat 100 ms, election timeout 1000 ms".to_string(),
            |t| t.to_string(),
        ),
        poll_pause_ms: u64::try_from(POLL_PAUSE.as_millis()).unwrap_or(u64::MAX),
        etcd_status_via: if args.etcdctl {
            "etcdctl endpoint status"
        } else {
            "the JSON gateway"
        },
        goals: cluster_goals(&muster, etcd.as_ref(), etcd_timing.is_some()),
        muster,
        etcd,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_cluster_table(&report);
    }
    Ok(())
}
