//! `muster-bench discovery`: measures a real `muster-discovery` against a real etcd 3.4 (v2 API)
//! used as a discovery backend, on the three request shapes that matter for `etcd --discovery`:
//! token creation, member registration and token directory reads.
//!
//! Both systems are driven by the same closed-loop clients (one keep-alive HTTP/1.1 connection
//! per client, next request sent when the previous one is answered), one system at a time so
//! they never compete for CPU. Results go to stdout (a table, or one JSON object with `--json`);
//! progress goes to stderr.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use muster_shared::duration::{format_duration, parse_duration};
use muster_shared::token::{new_discovery_token, random_hex};
use muster_tests::{Discovery, Etcd, bin_path, etcd_binary, tail, token_of, wait_for};
use reqwest::{Client, StatusCode};
use serde::Serialize;

/// The target: at least this many times etcd's throughput on every workload...
const THROUGHPUT_GOAL: f64 = 2.0;
/// ...with a p99 latency no worse than etcd's.
const P99_GOAL: f64 = 1.0;
/// Members registered per token, as in a 3-node cluster bootstrap.
const MEMBERS_PER_TOKEN: u16 = 3;
/// Distinct tokens read in the directory-read workload: enough to defeat any single-key cache,
/// few enough that all of them are hot.
const READ_TOKENS: usize = 100;
/// The smallest registration pool, so a slow token-creation rate still leaves enough tokens.
const MIN_POOL: usize = 1000;
/// Per-request ceiling: a hung server must end the benchmark, not stall it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Measure muster-discovery only (no etcd needed).
    #[arg(long)]
    skip_etcd: bool,
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
    // reqwest is built with `rustls-no-provider`; even a plain-http client needs a provider
    // installed. An error only means one is installed already, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    match cli.command {
        Command::Discovery(args) => discovery(args).await,
    }
}

// ---------------------------------------------------------------------------------------------
// The systems under test

/// One discovery backend. The workloads differ between systems only in the URLs and in how a
/// token is created; registration and reads use the same etcd v2 keys-API requests on both.
#[derive(Clone)]
enum System {
    /// `base` is `http://127.0.0.1:PORT`; tokens live at `{base}/<token>`.
    Muster { base: String },
    /// `client_url` is etcd's client URL; tokens live under `/v2/keys/_etcd/registry/`.
    Etcd { client_url: String },
}

impl System {
    fn label(&self) -> &'static str {
        match self {
            System::Muster { .. } => "muster-discovery",
            System::Etcd { .. } => "etcd",
        }
    }

    /// The URL under which `/<token>` paths live.
    fn prefix(&self) -> String {
        match self {
            System::Muster { base } => base.clone(),
            System::Etcd { client_url } => format!("{client_url}/v2/keys/_etcd/registry"),
        }
    }

    /// Creates a size-3 token and returns it.
    async fn create_token(&self, http: &Client) -> Result<String> {
        match self {
            // muster mints the token itself and answers with the discovery URL.
            System::Muster { base } => {
                let resp = http.get(format!("{base}/new?size=3")).send().await?;
                let url = expect(resp, StatusCode::OK).await?;
                Ok(token_of(url.trim()).to_string())
            }
            // With a raw etcd backend the operator picks a token and writes its size key,
            // exactly what discovery.etcd.io's old proxy did.
            System::Etcd { .. } => {
                let token = new_discovery_token();
                let url = format!("{}/{token}/_config/size?prevExist=false", self.prefix());
                expect(form_put(http, url, "value=3").await?, StatusCode::CREATED).await?;
                Ok(token)
            }
        }
    }

    /// Registers member number `n` with a fresh random id, as `etcd --discovery` does.
    async fn register(&self, http: &Client, token: &str, n: u16) -> Result<()> {
        let id = random_hex(8);
        let url = format!("{}/{token}/{id}?prevExist=false", self.prefix());
        // `n<i>=http://127.0.0.1:<port>`, form-encoded the way etcd's Go client sends it.
        let body = format!("value=n{n}%3Dhttp%3A%2F%2F127.0.0.1%3A{}", 2380 + n);
        expect(form_put(http, url, &body).await?, StatusCode::CREATED).await?;
        Ok(())
    }

    /// Reads the token directory with the exact query etcd's discovery client sends.
    async fn read_dir(&self, http: &Client, token: &str) -> Result<()> {
        let url = format!(
            "{}/{token}?quorum=false&recursive=false&sorted=false",
            self.prefix()
        );
        expect(http.get(url).send().await?, StatusCode::OK).await?;
        Ok(())
    }
}

async fn form_put(http: &Client, url: String, body: &str) -> Result<reqwest::Response> {
    // reqwest's `form` feature is off in this workspace; the body is already encoded.
    Ok(http
        .put(url)
        .header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body.to_string())
        .send()
        .await?)
}

/// Reads the whole body (so the connection can be reused) and fails unless the status is `want`.
async fn expect(resp: reqwest::Response, want: StatusCode) -> Result<String> {
    let status = resp.status();
    let body = resp.text().await?;
    if status != want {
        bail!(
            "expected {want}, got {status}: {}",
            body.chars().take(200).collect::<String>()
        );
    }
    Ok(body)
}

/// One keep-alive HTTP/1.1 client per benchmark task, so every task has its own connection
/// like an independent etcd member would.
fn http_client() -> Result<Client> {
    Client::builder()
        .http1_only()
        // Loopback traffic must never go through an HTTP_PROXY from the environment.
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("building HTTP client")
}

// ---------------------------------------------------------------------------------------------
// Measurement

/// Latencies of successful requests and the count of failed ones, for one task.
#[derive(Default)]
struct Recorder {
    latencies_us: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Recorder {
    /// Runs `op`, recording its latency if it succeeded and counting it as an error otherwise
    /// (failed requests stay out of the percentiles: a fast 500 is not a fast answer).
    async fn time<T>(&mut self, op: impl Future<Output = Result<T>>) -> Option<T> {
        let started = Instant::now();
        match op.await {
            Ok(v) => {
                let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.latencies_us.push(us);
                Some(v)
            }
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| format!("{e:#}"));
                None
            }
        }
    }

    fn merge(&mut self, other: Recorder) {
        self.latencies_us.extend(other.latencies_us);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// What the report shows for one workload on one system.
#[derive(Debug, Clone, Copy, Serialize)]
struct Stats {
    ops: u64,
    ops_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    elapsed_secs: f64,
}

impl Stats {
    fn from_recorder(mut rec: Recorder, elapsed: Duration) -> Self {
        rec.latencies_us.sort_unstable();
        let ops = rec.latencies_us.len() as u64;
        let secs = elapsed.as_secs_f64();
        Stats {
            ops,
            ops_per_sec: if secs > 0.0 { ops as f64 / secs } else { 0.0 },
            p50_ms: percentile_us(&rec.latencies_us, 0.50) as f64 / 1000.0,
            p99_ms: percentile_us(&rec.latencies_us, 0.99) as f64 / 1000.0,
            errors: rec.errors,
            elapsed_secs: secs,
        }
    }
}

/// Nearest-rank percentile of sorted samples (0 when there are none).
fn percentile_us(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs `task` on `clients` tokio tasks, each with its own HTTP client, and returns their
/// outputs and the wall time until the last one finished. Clients are built before the clock
/// starts; `task` gets that start instant to compute its deadline from.
async fn run_clients<T, F, Fut>(clients: u16, mut task: F) -> Result<(Vec<T>, Duration)>
where
    F: FnMut(usize, Client, Instant) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let https = (0..clients)
        .map(|_| http_client())
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    let handles: Vec<_> = https
        .into_iter()
        .enumerate()
        .map(|(i, http)| tokio::spawn(task(i, http, started)))
        .collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.await.context("benchmark task panicked")?);
    }
    Ok((outputs, started.elapsed()))
}

fn merged(recorders: impl IntoIterator<Item = Recorder>) -> Recorder {
    let mut all = Recorder::default();
    for rec in recorders {
        all.merge(rec);
    }
    all
}

/// Prints the first failure of a workload, so errors in the table can be diagnosed.
fn report_errors(system: &System, workload: Workload, rec: &Recorder) {
    if let Some(first) = &rec.first_error {
        eprintln!(
            "  {} {}: {} errors; first: {first}",
            system.label(),
            workload.title(),
            rec.errors
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Workloads

#[derive(Debug, Clone, Copy)]
enum Workload {
    Create,
    Register,
    Read,
}

impl Workload {
    const ALL: [Workload; 3] = [Workload::Create, Workload::Register, Workload::Read];

    fn title(self) -> &'static str {
        match self {
            Workload::Create => "token creation",
            Workload::Register => "member registration",
            Workload::Read => "directory read",
        }
    }
}

/// Workload 1: closed-loop token creation for `duration`.
async fn bench_create(system: &System, clients: u16, duration: Duration) -> Result<Stats> {
    eprintln!(
        "creating tokens on {} for {}…",
        system.label(),
        format_duration(duration)
    );
    let (recs, elapsed) = run_clients(clients, |_, http, started| {
        let system = system.clone();
        async move {
            let deadline = started + duration;
            let mut rec = Recorder::default();
            while Instant::now() < deadline {
                rec.time(system.create_token(&http)).await;
            }
            rec
        }
    })
    .await?;
    let rec = merged(recs);
    report_errors(system, Workload::Create, &rec);
    Ok(Stats::from_recorder(rec, elapsed))
}

/// Untimed: creates `count` tokens with `clients` concurrent tasks for the registration
/// workload. Any failure here is fatal, since the timed phase would measure a broken pool.
async fn create_pool(system: &System, clients: u16, count: usize) -> Result<Vec<String>> {
    eprintln!(
        "pre-creating {count} tokens on {} (untimed)…",
        system.label()
    );
    let remaining = Arc::new(AtomicUsize::new(count));
    let (results, _) = run_clients(clients, |_, http, _| {
        let system = system.clone();
        let remaining = remaining.clone();
        async move {
            let mut tokens = Vec::new();
            while claim(&remaining) {
                tokens.push(system.create_token(&http).await?);
            }
            anyhow::Ok(tokens)
        }
    })
    .await?;
    let mut pool = Vec::with_capacity(count);
    for tokens in results {
        pool.extend(tokens.context("pre-creating the token pool")?);
    }
    Ok(pool)
}

/// Takes one unit from a shared countdown; false once it is exhausted.
fn claim(remaining: &AtomicUsize) -> bool {
    remaining
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// Workload 2: each task takes tokens from the shared pool and registers three members on
/// each, until `duration` passes or the pool is empty. Returns the stats and the tokens that
/// got all three members (the read workload needs full directories).
async fn bench_register(
    system: &System,
    clients: u16,
    duration: Duration,
    pool: Vec<String>,
) -> Result<(Stats, Vec<String>)> {
    eprintln!(
        "registering {MEMBERS_PER_TOKEN} members per token on {} for {}…",
        system.label(),
        format_duration(duration)
    );
    let pool = Arc::new(pool);
    // An index into the pool instead of a locked Vec: each token is handed out exactly once.
    let next = Arc::new(AtomicUsize::new(0));
    let (results, elapsed) = run_clients(clients, |_, http, started| {
        let (system, pool, next) = (system.clone(), pool.clone(), next.clone());
        async move {
            let deadline = started + duration;
            let mut rec = Recorder::default();
            let mut full = Vec::new();
            while Instant::now() < deadline {
                let Some(token) = pool.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    break; // pool empty: the workload ends early, elapsed time says when
                };
                let mut all_ok = true;
                for n in 1..=MEMBERS_PER_TOKEN {
                    all_ok &= rec.time(system.register(&http, token, n)).await.is_some();
                }
                if all_ok {
                    full.push(token.clone());
                }
            }
            (rec, full)
        }
    })
    .await?;
    let exhausted = next.load(Ordering::Relaxed) >= pool.len();
    let (recs, fulls): (Vec<_>, Vec<_>) = results.into_iter().unzip();
    let rec = merged(recs);
    report_errors(system, Workload::Register, &rec);
    if exhausted {
        eprintln!(
            "  token pool of {} ran out after {:.1}s",
            pool.len(),
            elapsed.as_secs_f64()
        );
    }
    Ok((
        Stats::from_recorder(rec, elapsed),
        fulls.into_iter().flatten().collect(),
    ))
}

/// Workload 3: closed-loop directory reads spread over up to [`READ_TOKENS`] full tokens.
async fn bench_read(
    system: &System,
    clients: u16,
    duration: Duration,
    full_tokens: &[String],
) -> Result<Stats> {
    if full_tokens.is_empty() {
        bail!(
            "no token on {} got all {MEMBERS_PER_TOKEN} members; cannot run the read workload",
            system.label()
        );
    }
    let tokens: Arc<Vec<String>> =
        Arc::new(full_tokens.iter().take(READ_TOKENS).cloned().collect());
    eprintln!(
        "reading {} token directories on {} for {}…",
        tokens.len(),
        system.label(),
        format_duration(duration)
    );
    let (recs, elapsed) = run_clients(clients, |i, http, started| {
        let (system, tokens) = (system.clone(), tokens.clone());
        async move {
            let deadline = started + duration;
            let mut rec = Recorder::default();
            // Each task starts at a different token and walks the list, so reads are spread
            // evenly over all of them.
            let mut k = i;
            while Instant::now() < deadline {
                let token = &tokens[k % tokens.len()];
                rec.time(system.read_dir(&http, token)).await;
                k += 1;
            }
            rec
        }
    })
    .await?;
    let rec = merged(recs);
    report_errors(system, Workload::Read, &rec);
    Ok(Stats::from_recorder(rec, elapsed))
}

/// Results of the three workloads on one system.
#[derive(Debug, Clone, Copy, Serialize)]
struct SystemResults {
    token_creation: Stats,
    member_registration: Stats,
    directory_read: Stats,
}

impl SystemResults {
    fn get(&self, workload: Workload) -> &Stats {
        match workload {
            Workload::Create => &self.token_creation,
            Workload::Register => &self.member_registration,
            Workload::Read => &self.directory_read,
        }
    }
}

/// Runs the three workloads in order on one system.
async fn bench_system(system: &System, clients: u16, duration: Duration) -> Result<SystemResults> {
    let token_creation = bench_create(system, clients, duration).await?;
    // Enough tokens to keep registration busy for the whole duration even if it runs as fast
    // as creation did.
    let pool_size = ((token_creation.ops_per_sec * duration.as_secs_f64()) as usize).max(MIN_POOL);
    let pool = create_pool(system, clients, pool_size).await?;
    let (member_registration, full) = bench_register(system, clients, duration, pool).await?;
    let directory_read = bench_read(system, clients, duration, &full).await?;
    Ok(SystemResults {
        token_creation,
        member_registration,
        directory_read,
    })
}

// ---------------------------------------------------------------------------------------------
// Starting the systems

async fn bench_muster(tmp: &Path, clients: u16, duration: Duration) -> Result<SystemResults> {
    // The harness errors too, but its hint lacks `--release`, which is what the bench needs.
    let bin = bin_path("muster-discovery");
    if !bin.exists() {
        bail!(
            "{} not found: run `cargo build --release -p muster-discovery` first \
             (or set MUSTER_BIN_DIR to the directory holding it)",
            bin.display()
        );
    }
    eprintln!("starting {}…", bin.display());
    let mut discovery = Discovery::start_with(&tmp.join("data"), "127.0.0.1:0", &[]).await?;
    let system = System::Muster {
        base: discovery.base.clone(),
    };
    let results = bench_system(&system, clients, duration).await;
    // Stop it before etcd starts so the two never share the CPUs; on error, Drop kills it.
    discovery
        .terminate()
        .await
        .context("stopping muster-discovery")?;
    results.with_context(|| format!("muster-discovery log:\n{}", tail(&discovery.log(), 40)))
}

async fn bench_etcd(
    etcd_bin: &Path,
    tmp: &Path,
    clients: u16,
    duration: Duration,
) -> Result<SystemResults> {
    eprintln!("starting {} --enable-v2…", etcd_bin.display());
    let mut etcd = Etcd::start_v2(etcd_bin, tmp)?;
    // On an early return, Drop kills etcd.
    wait_v2_ready(&etcd).await?;
    let system = System::Etcd {
        client_url: etcd.client_url.clone(),
    };
    let results = bench_system(&system, clients, duration).await;
    // Keep the log for the error message, then stop etcd and reap it.
    let log = tail(&etcd.log(), 40);
    etcd.kill_and_wipe().await.context("stopping etcd")?;
    results.with_context(|| format!("etcd log:\n{log}"))
}

/// Waits until etcd serves the v2 keys API (it answers only once it has elected itself leader).
async fn wait_v2_ready(etcd: &Etcd) -> Result<()> {
    let http = http_client()?;
    let url = format!("{}/v2/keys/", etcd.client_url);
    wait_for(
        "etcd's v2 API to answer 200",
        Duration::from_secs(20),
        || {
            let request = http.get(&url).timeout(Duration::from_secs(1)).send();
            async move {
                let resp = request.await.ok()?;
                (resp.status() == StatusCode::OK).then_some(())
            }
        },
    )
    .await
    .with_context(|| format!("etcd log:\n{}", tail(&etcd.log(), 40)))
}

// ---------------------------------------------------------------------------------------------
// Report

/// muster compared with etcd on one workload.
#[derive(Debug, Serialize)]
struct Comparison {
    workload: &'static str,
    /// muster ops/s divided by etcd ops/s; the goal is at least 2.
    throughput_ratio: f64,
    /// muster p99 divided by etcd p99; the goal is at most 1.
    p99_ratio: f64,
    goal_met: bool,
}

fn compare(muster: &SystemResults, etcd: &SystemResults) -> Vec<Comparison> {
    Workload::ALL
        .iter()
        .map(|&w| {
            let (m, e) = (muster.get(w), etcd.get(w));
            let throughput_ratio = m.ops_per_sec / e.ops_per_sec;
            let p99_ratio = m.p99_ms / e.p99_ms;
            Comparison {
                workload: w.title(),
                throughput_ratio,
                p99_ratio,
                // Errors on muster's side would make its numbers meaningless.
                goal_met: m.errors == 0
                    && throughput_ratio >= THROUGHPUT_GOAL
                    && p99_ratio <= P99_GOAL,
            }
        })
        .collect()
}

#[derive(Serialize)]
struct Report {
    clients: u16,
    duration: String,
    duration_secs: f64,
    muster: SystemResults,
    etcd: Option<SystemResults>,
    comparison: Option<Vec<Comparison>>,
}

fn print_table(report: &Report) {
    println!(
        "muster-bench discovery: {} clients, {} per workload\n",
        report.clients, report.duration
    );
    println!(
        "{:<20} {:<17} {:>9} {:>11} {:>9} {:>9} {:>7}",
        "workload", "system", "ops", "ops/s", "p50 ms", "p99 ms", "errors"
    );
    for (i, &w) in Workload::ALL.iter().enumerate() {
        print_row(w.title(), "muster-discovery", report.muster.get(w));
        if let Some(etcd) = &report.etcd {
            print_row("", "etcd 3.4 (v2)", etcd.get(w));
        }
        if let Some(c) = report.comparison.as_ref().and_then(|c| c.get(i)) {
            println!(
                "{:<20} {:<17} {:>9} {:>10.2}x {:>9} {:>8.2}x",
                "", "muster/etcd", "", c.throughput_ratio, "", c.p99_ratio
            );
        }
    }
    if let Some(comparison) = &report.comparison {
        println!();
        for c in comparison {
            println!(
                "{}: goal {} (throughput {:.2}x, want >= {THROUGHPUT_GOAL}x; p99 {:.2}x, want <= {P99_GOAL}x)",
                c.workload,
                if c.goal_met { "met" } else { "NOT met" },
                c.throughput_ratio,
                c.p99_ratio
            );
        }
    }
}

fn print_row(workload: &str, system: &str, s: &Stats) {
    println!(
        "{:<20} {:<17} {:>9} {:>11.1} {:>9.3} {:>9.3} {:>7}",
        workload, system, s.ops, s.ops_per_sec, s.p50_ms, s.p99_ms, s.errors
    );
}

// ---------------------------------------------------------------------------------------------

async fn discovery(args: DiscoveryArgs) -> Result<()> {
    // Look for etcd before spending minutes on muster: a missing etcd should fail at once.
    let etcd_bin = if args.skip_etcd {
        None
    } else {
        Some(etcd_binary("muster-bench").context(
            "etcd is not on PATH: install etcd 3.4 (apt-get install etcd-server) \
             or pass --skip-etcd to measure muster-discovery alone",
        )?)
    };
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let muster = bench_muster(tmp.path(), args.clients, args.duration).await?;
    let etcd = match &etcd_bin {
        Some(bin) => Some(bench_etcd(bin, tmp.path(), args.clients, args.duration).await?),
        None => None,
    };
    let report = Report {
        clients: args.clients,
        duration: format_duration(args.duration),
        duration_secs: args.duration.as_secs_f64(),
        comparison: etcd.as_ref().map(|e| compare(&muster, e)),
        muster,
        etcd,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile_us(&samples, 0.50), 50);
        assert_eq!(percentile_us(&samples, 0.99), 99);
        assert_eq!(percentile_us(&[7], 0.99), 7);
        assert_eq!(percentile_us(&[], 0.5), 0);
    }

    #[test]
    fn claim_counts_down_to_zero_and_stops() {
        let remaining = AtomicUsize::new(2);
        assert!(claim(&remaining));
        assert!(claim(&remaining));
        assert!(!claim(&remaining));
        assert_eq!(remaining.load(Ordering::Relaxed), 0);
    }
}
