//! `muster-bench discovery`: measures a real `muster-discovery` against a real etcd 3.4 (v2 API)
//! used as a discovery backend, on the three request shapes that matter for `etcd --discovery`:
//! token creation, member registration and token directory reads.
//!
//! Both systems are driven by the same closed-loop clients (one keep-alive HTTP/1.1 connection
//! per client, next request sent when the previous one is answered), one system at a time so
//! they never compete for CPU. Workloads alternate between the systems and repeat for
//! `--rounds`; each figure is the median round, so a noisy minute on a shared machine does not
//! decide the comparison. The clients speak HTTP/1.1 directly on a `TcpStream` (see
//! [`Conn`]): on a 2-core machine a general-purpose HTTP client costs the load generator as much
//! CPU as the server under test spends, and that would measure the client, not the servers.
//!
//! `muster-bench cluster`: forms real `muster agent` clusters of 3 and 5 nodes, and the same
//! clusters of real etcd 3.4 members, all bootstrapping through one `muster-discovery`; measures
//! formation time, failover time after `kill -9` of the leader, and idle RSS per node; and, for
//! muster, the time a node joining with a token takes to become a nonvoter and then a voter.
//! See [`cluster`].
//!
//! `muster-bench stability`: both systems at the same raft timing under CPU saturation and a
//! writer; counts the elections that happen although nothing failed.
//!
//! Results go to stdout (a table, or one JSON object with `--json`); progress goes to stderr.

mod asg;
mod cluster;
mod discovery;
mod discovery_cpu;
mod discovery_v3;
mod fleetlock;
mod kv;
mod lease;
mod stability;
mod summary;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use muster_shared::duration::parse_duration;
use muster_tests::etcd_binary;

#[derive(Parser)]
#[command(name = "muster-bench", about = "Benchmarks for Muster")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compare muster-discovery with etcd 3.4 (--enable-v2) as a discovery backend.
    Discovery(DiscoveryArgs),
    /// Compare muster agent clusters with etcd 3.4 clusters: formation, failover, idle RSS.
    Cluster(ClusterArgs),
    /// Spurious elections under CPU saturation, muster and etcd at the same timing.
    Stability(StabilityArgs),
    /// FleetLock lock + unlock round trips through a member's endpoint: p50, p99, per second.
    Fleetlock(FleetlockArgs),
    /// Lease claim/renew latency, compare-and-set puts per second, hand-over after kill -9.
    Lease(LeaseArgs),
    /// An autoscaling group: N machines through one template (voters, standbys, spares), the
    /// leader's idle CPU at 10 and at N members, RSS per role, failed-voter replacement.
    Asg(AsgArgs),
    /// The key-value store against etcd 3.4's, 3 members each at the same raft timing: puts,
    /// compare-and-set, linearizable gets (1, 16, 64 clients), watch delivery; fsyncs per write.
    Kv(KvArgs),
}

#[derive(Args)]
struct KvArgs {
    /// Closed-loop client counts, comma-separated; each workload runs at each.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 16, 64])]
    clients: Vec<usize>,
    /// How long each workload runs on each system per round.
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    duration: Duration,
    /// Rounds (systems alternate which goes first); figures are medians with min and max.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    rounds: u64,
    /// Raft heartbeat interval in milliseconds, for both systems.
    #[arg(long = "heartbeat", default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    heartbeat_ms: u64,
    /// Election timeout in milliseconds, for both systems (etcd wants at least 5 heartbeats).
    #[arg(long = "election-timeout", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(20..=60_000))]
    election_ms: u64,
    /// Measure muster alone (no etcd needed).
    #[arg(long)]
    skip_etcd: bool,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AsgArgs {
    /// Machines in the group.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=300))]
    machines: u64,
    /// How long the leader's idle CPU is sampled, at 10 members and at N.
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    idle: Duration,
    /// `--replace-after` of every agent (the replacement goal is this plus 2 s).
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    replace_after: Duration,
    /// Write this many MiB into the KV (64 KiB values) once all N have settled, before the
    /// memory is read: voters and standbys hold the state in memory, spares do not.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=256))]
    kv_mib: u64,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct LeaseArgs {
    /// How long to run each of the latency and throughput parts.
    #[arg(long, default_value = "5s", value_parser = duration_arg)]
    duration: Duration,
    /// The lease's TTL for the hand-over part (whole seconds).
    #[arg(long, default_value = "3s", value_parser = duration_arg)]
    ttl: Duration,
    /// Hand-over rounds (each on a fresh cluster).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct FleetlockArgs {
    /// How long to run.
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    duration: Duration,
    /// Print one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct StabilityArgs {
    /// How long each system runs under load.
    #[arg(long, default_value = "60s", value_parser = duration_arg)]
    duration: Duration,
    /// Busy-looping processes started next to the cluster (2 per core saturates this machine).
    #[arg(long, default_value_t = 4)]
    hogs: usize,
    /// Raft heartbeat interval in milliseconds, for both systems (etcd wants the election
    /// timeout at least 5 times this).
    #[arg(long = "heartbeat", default_value_t = 40, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    heartbeat_ms: u64,
    /// Election timeout in milliseconds, for both systems.
    #[arg(long = "election-timeout", default_value_t = 200, value_parser = clap::value_parser!(u64).range(20..=60_000))]
    election_ms: u64,
    /// Print one JSON array on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Measure muster alone (no etcd needed).
    #[arg(long)]
    skip_etcd: bool,
}

#[derive(Args)]
struct DiscoveryArgs {
    /// Concurrent closed-loop clients, each with its own connection.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    clients: u16,
    /// How long each timed workload runs (e.g. 10s, 1m).
    #[arg(long, default_value = "10s", value_parser = duration_arg)]
    duration: Duration,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Repeat every workload this many times (alternating systems) and report the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Measure muster-discovery only (no etcd needed).
    #[arg(long)]
    skip_etcd: bool,
    /// Also measure `muster-discovery --store etcd` on a 3-member etcd v3 cluster (`etcd`), with
    /// 1 up to --replicas replicas; `fjall` measures the embedded store alone.
    #[arg(long, default_value = "fjall", value_parser = ["fjall", "etcd"])]
    store: String,
    /// With --store etcd: the most replicas to measure (each count from 1 up is measured).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=8))]
    replicas: u16,
    /// `v2`: the v2 keys-API workloads against etcd --enable-v2. `v3`: etcd 3.6/3.7's v3
    /// discovery join sequence (gRPC) against etcd 3.4's v3 API, same client.
    #[arg(long, default_value = "v2", value_parser = ["v2", "v3"])]
    protocol: String,
    /// What muster-discovery is compared with (v2): `etcd`, etcd 3.4's v2 keys API used as
    /// the backend directly; `discovery.etcd.io`, the public service's server (Debian's
    /// etcd-discovery) in front of one etcd 3.4 --enable-v2 member, both processes' CPU counted.
    #[arg(long, default_value = "etcd", value_parser = ["etcd", "discovery.etcd.io"])]
    against: String,
    /// Directory reads go to every token the registration filled (0, as many clusters'
    /// members would read theirs), or to the first N only (a hot set that stays in any cache;
    /// 100 is what figures before 2026-11-27 used).
    #[arg(long, default_value_t = 0)]
    read_tokens: usize,
    /// muster-discovery's --cache-bytes for this run (e.g. 256MiB; its default is 128MiB).
    #[arg(long)]
    cache_bytes: Option<String>,
}

#[derive(Args)]
struct ClusterArgs {
    /// Form each cluster size, and fail over, this many times per system; figures are medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Measure muster alone (no etcd needed; the RSS goal, relative to etcd, is not judged).
    #[arg(long)]
    skip_etcd: bool,
    /// Raft heartbeat interval in milliseconds, for both systems (muster --heartbeat, etcd
    /// --heartbeat-interval). etcd wants the election timeout at least 5 times this.
    #[arg(long = "heartbeat", default_value_t = 40, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    heartbeat_ms: u64,
    /// Election timeout in milliseconds, for both systems (muster and etcd --election-timeout):
    /// a follower campaigns after a silence drawn from [this, twice this).
    #[arg(long = "election-timeout", default_value_t = 200, value_parser = clap::value_parser!(u64).range(20..=60_000))]
    election_ms: u64,
    /// Leave etcd at its own defaults (heartbeat 100 ms, election timeout 1 s) instead of the
    /// timing given to muster: an unequal comparison, kept to compare with older figures.
    #[arg(long)]
    etcd_default_timing: bool,
    /// Ask etcd members for their leader with `etcdctl endpoint status -w json` (the operator's
    /// own tool, one process per poll, as muster's `muster status --json` is) instead of
    /// etcd's JSON gateway.
    #[arg(long)]
    etcdctl: bool,
}

/// The cargo flag (after a space) for the profile this bench was built with (its directory, `target/<profile>/`),
/// so a hint to build the binaries it needs names the same one.
fn profile_flag() -> String {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.file_name()?.to_string_lossy().into_owned()));
    match dir.as_deref() {
        Some("debug") => String::new(),
        Some("release") | None => " --release".into(),
        Some(profile) => format!(" --profile {profile}"),
    }
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    match parse_duration(s) {
        Ok(d) if d.is_zero() => Err("duration must be greater than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    // The harness's readiness checks use reqwest, built with `rustls-no-provider`; even a
    // plain-http client needs a provider installed. An error only means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    match cli.command {
        Command::Discovery(args) => discovery::run(args).await,
        Command::Cluster(args) => cluster::run(args).await,
        Command::Stability(args) => stability::run(args).await,
        Command::Fleetlock(args) => fleetlock::run(args).await,
        Command::Lease(args) => lease::run(args).await,
        Command::Asg(args) => asg::run(args).await,
        Command::Kv(args) => kv::run(args).await,
    }
}

/// The etcd binary unless `skip`. Called first thing, so a missing etcd fails at once instead
/// of after minutes spent on muster.
fn find_etcd(skip: bool) -> Result<Option<PathBuf>> {
    if skip {
        return Ok(None);
    }
    let bin = etcd_binary("muster-bench").context(
        "etcd is not on PATH: install etcd 3.4 (apt-get install etcd-server) \
         or pass --skip-etcd to measure muster alone",
    )?;
    Ok(Some(bin))
}
