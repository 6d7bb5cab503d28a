//! `muster-bench discovery`: muster-discovery against etcd 3.4 (`--enable-v2`) as a discovery
//! backend, on token creation, member registration and directory reads.
//!
//! With `--against discovery.etcd.io` the anchor is the service operators run instead
//! (Debian's `etcd-discovery`, the server of discovery.etcd.io) in front of that etcd member,
//! rather than the member's v2 keys API used directly.
//!
//! With `--store etcd --replicas N` it also measures `muster-discovery --store etcd` on a
//! 3-member etcd v3 cluster, with 1, 2, … N replicas (the clients spread over the replicas, as a
//! load balancer would spread them). Each figure comes with the servers' CPU time per operation,
//! read from /proc for every process of the system under test, so that a comparison does not
//! depend on the load generator's own CPU.
//!
//! Layout: [`system`] starts the servers and says how each system is spoken to, [`conn`] is the
//! load generator's HTTP/1.1 client, [`workloads`] measures, [`samples`] is what it collects,
//! and [`report`] summarises and prints; [`run`] joins them.

mod conn;
mod report;
mod samples;
mod system;
mod workloads;

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::{DiscoveryArgs, find_etcd};
use samples::Measurements;
use system::Servers;
pub(crate) use system::start_muster;
use workloads::run_rounds;

pub async fn run(args: DiscoveryArgs) -> Result<()> {
    if args.against != "etcd" {
        if args.skip_etcd || args.protocol == "v3" {
            bail!(
                "--against discovery.etcd.io runs the v2 workloads on an etcd member: drop --skip-etcd and --protocol v3"
            );
        }
        muster_tests::etcd_discovery::etcd_discovery_binary()?;
    }
    let etcd_bin = find_etcd(args.skip_etcd)?;
    if args.protocol == "v3" {
        return super::discovery_v3::run(&args, etcd_bin).await;
    }
    let measured = measure(&args, etcd_bin.as_deref()).await?;
    report::print(&report::summarize(measured, &args)?, args.json)
}

/// Starts every server, runs every round on them, stops them.
async fn measure(args: &DiscoveryArgs, etcd_bin: Option<&Path>) -> Result<Measurements> {
    if args.store == "etcd" && etcd_bin.is_none() {
        bail!("--store etcd needs etcd (a 3-member etcd v3 cluster is started); drop --skip-etcd");
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let mut servers = Servers::start(args, etcd_bin, tmp.path()).await?;
    let outcome = run_rounds(&servers.systems, args).await;
    let (muster_log, etcd_log) = servers.stop().await?;
    let per_system = outcome
        .with_context(|| format!("muster-discovery log:\n{muster_log}\netcd log:\n{etcd_log}"))?;
    Ok(Measurements {
        per_system,
        with_etcd: servers.etcd.is_some(),
    })
}
