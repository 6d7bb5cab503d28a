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
//! Results go to stdout (a table, or one JSON object with `--json`); progress goes to stderr.

use std::future::Future;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use muster_shared::duration::{format_duration, parse_duration};
use muster_shared::token::{new_discovery_token, random_hex};
use muster_tests::{
    AgentProc, Discovery, Etcd, bin_path, etcd_binary, http_client, signal, tail, token_of,
    voter_target, wait_for,
};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

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
    /// Compare muster agent clusters with etcd 3.4 clusters: formation, failover, idle RSS.
    Cluster(ClusterArgs),
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
        Command::Discovery(args) => discovery(args).await,
        Command::Cluster(args) => cluster(args).await,
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

    /// `host:port` to connect to.
    fn authority(&self) -> &str {
        let url = match self {
            System::Muster { base } => base,
            System::Etcd { client_url } => client_url,
        };
        url.split("://").nth(1).unwrap_or(url).trim_end_matches('/')
    }

    /// The path under which `/<token>` paths live.
    fn prefix(&self) -> &'static str {
        match self {
            System::Muster { .. } => "",
            System::Etcd { .. } => "/v2/keys/_etcd/registry",
        }
    }

    /// Creates a size-3 token and returns it.
    async fn create_token(&self, http: &mut Conn) -> Result<String> {
        match self {
            // muster mints the token itself and answers with the discovery URL.
            System::Muster { .. } => {
                let url = http.expect("GET", "/new?size=3", None, 200).await?;
                Ok(token_of(url.trim()).to_string())
            }
            // With a raw etcd backend the operator picks a token and writes its size key,
            // exactly what discovery.etcd.io's old proxy did.
            System::Etcd { .. } => {
                let token = new_discovery_token();
                let path = format!("{}/{token}/_config/size?prevExist=false", self.prefix());
                http.expect("PUT", &path, Some("value=3"), 201).await?;
                Ok(token)
            }
        }
    }

    /// Registers member number `n` with a fresh random id, as `etcd --discovery` does.
    async fn register(&self, http: &mut Conn, token: &str, n: u16) -> Result<()> {
        let id = random_hex(8);
        let path = format!("{}/{token}/{id}?prevExist=false", self.prefix());
        // `n<i>=http://127.0.0.1:<port>`, form-encoded the way etcd's Go client sends it.
        let body = format!("value=n{n}%3Dhttp%3A%2F%2F127.0.0.1%3A{}", 2380 + n);
        http.expect("PUT", &path, Some(&body), 201).await?;
        Ok(())
    }

    /// Reads the token directory with the exact query etcd's discovery client sends.
    async fn read_dir(&self, http: &mut Conn, token: &str) -> Result<()> {
        let path = format!(
            "{}/{token}?quorum=false&recursive=false&sorted=false",
            self.prefix()
        );
        http.expect("GET", &path, None, 200).await?;
        Ok(())
    }
}

/// A keep-alive HTTP/1.1 connection that sends one request at a time. It understands exactly
/// what the two servers answer with: a status line, headers, and a body framed by
/// `Content-Length` or `Transfer-Encoding: chunked`.
struct Conn {
    authority: String,
    stream: Option<BufReader<TcpStream>>,
    request: Vec<u8>,
}

impl Conn {
    fn new(authority: &str) -> Self {
        Conn {
            authority: authority.to_string(),
            stream: None,
            request: Vec::with_capacity(512),
        }
    }

    /// Sends a request and fails unless the answer has status `want`; returns the body.
    async fn expect(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
        want: u16,
    ) -> Result<String> {
        let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, self.send(method, path, form))
            .await
            .context("request timed out")?
            .inspect_err(|_| self.stream = None)?;
        let body = String::from_utf8_lossy(&body).into_owned();
        if status != want {
            bail!(
                "expected {want}, got {status}: {}",
                body.chars().take(200).collect::<String>()
            );
        }
        Ok(body)
    }

    async fn send(
        &mut self,
        method: &str,
        path: &str,
        form: Option<&str>,
    ) -> Result<(u16, Vec<u8>)> {
        if self.stream.is_none() {
            let tcp = TcpStream::connect(&self.authority).await?;
            tcp.set_nodelay(true)?;
            self.stream = Some(BufReader::new(tcp));
        }
        let stream = self.stream.as_mut().context("not connected")?;
        self.request.clear();
        self.request.extend_from_slice(
            format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.authority).as_bytes(),
        );
        if let Some(body) = form {
            self.request.extend_from_slice(
                format!(
                    "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        } else {
            self.request.extend_from_slice(b"\r\n");
        }
        stream.get_mut().write_all(&self.request).await?;

        let mut line = String::new();
        stream.read_line(&mut line).await?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let mut length = None;
        let mut chunked = false;
        loop {
            line.clear();
            if stream.read_line(&mut line).await? == 0 {
                bail!("connection closed in headers");
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    length = Some(value.parse::<usize>()?);
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                stream.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim(), 16)?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                stream.read_exact(&mut body[start..]).await?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else {
            body.resize(length.unwrap_or(0), 0);
            stream.read_exact(&mut body).await?;
        }
        Ok((status, body))
    }
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

/// Runs `task` on `clients` tokio tasks, each with its own connection, and returns their
/// outputs and the wall time until the last one finished. Connections open on the first
/// request; `task` gets the start instant to compute its deadline from.
async fn run_clients<T, F, Fut>(
    system: &System,
    clients: u16,
    mut task: F,
) -> Result<(Vec<T>, Duration)>
where
    F: FnMut(usize, Conn, Instant) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let https: Vec<Conn> = (0..clients)
        .map(|_| Conn::new(system.authority()))
        .collect();
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
    let (recs, elapsed) = run_clients(system, clients, |_, mut http, started| {
        let system = system.clone();
        async move {
            let deadline = started + duration;
            let mut rec = Recorder::default();
            while Instant::now() < deadline {
                rec.time(system.create_token(&mut http)).await;
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
    let (results, _) = run_clients(system, clients, |_, mut http, _| {
        let system = system.clone();
        let remaining = remaining.clone();
        async move {
            let mut tokens = Vec::new();
            while claim(&remaining) {
                tokens.push(system.create_token(&mut http).await?);
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
    let (results, elapsed) = run_clients(system, clients, |_, mut http, started| {
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
                    all_ok &= rec
                        .time(system.register(&mut http, token, n))
                        .await
                        .is_some();
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
    let (recs, elapsed) = run_clients(system, clients, |i, mut http, started| {
        let (system, tokens) = (system.clone(), tokens.clone());
        async move {
            let deadline = started + duration;
            let mut rec = Recorder::default();
            // Each task starts at a different token and walks the list, so reads are spread
            // evenly over all of them.
            let mut k = i;
            while Instant::now() < deadline {
                let token = &tokens[k % tokens.len()];
                rec.time(system.read_dir(&mut http, token)).await;
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

/// Per-round state of one system: what the register and read workloads build on.
struct RoundState {
    create: Option<Stats>,
    pool: Vec<String>,
    register: Option<Stats>,
    full: Vec<String>,
    read: Option<Stats>,
}

impl RoundState {
    fn new() -> Self {
        RoundState {
            create: None,
            pool: Vec::new(),
            register: None,
            full: Vec::new(),
            read: None,
        }
    }

    fn finish(self) -> Result<SystemResults> {
        Ok(SystemResults {
            token_creation: self.create.context("creation did not run")?,
            member_registration: self.register.context("registration did not run")?,
            directory_read: self.read.context("reads did not run")?,
        })
    }
}

/// Runs one workload on one system, building on what earlier workloads of the round left.
async fn run_workload(
    workload: Workload,
    system: &System,
    state: &mut RoundState,
    clients: u16,
    duration: Duration,
) -> Result<()> {
    match workload {
        Workload::Create => {
            let stats = bench_create(system, clients, duration).await?;
            // Enough tokens to keep registration busy for the whole duration even if it runs
            // as fast as creation did.
            let pool_size = ((stats.ops_per_sec * duration.as_secs_f64()) as usize).max(MIN_POOL);
            state.create = Some(stats);
            state.pool = create_pool(system, clients, pool_size).await?;
        }
        Workload::Register => {
            let (stats, full) =
                bench_register(system, clients, duration, std::mem::take(&mut state.pool)).await?;
            state.register = Some(stats);
            state.full = full;
        }
        Workload::Read => {
            state.read = Some(bench_read(system, clients, duration, &state.full).await?)
        }
    }
    Ok(())
}

/// The round whose throughput is the median, per workload.
fn median(rounds: &[SystemResults]) -> Result<SystemResults> {
    let pick = |w: Workload| -> Result<Stats> {
        let mut all: Vec<Stats> = rounds.iter().map(|r| *r.get(w)).collect();
        all.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
        all.get(all.len() / 2).copied().context("no rounds ran")
    };
    Ok(SystemResults {
        token_creation: pick(Workload::Create)?,
        member_registration: pick(Workload::Register)?,
        directory_read: pick(Workload::Read)?,
    })
}

/// Starts muster-discovery from the binary next to this one.
async fn start_muster(tmp: &Path) -> Result<Discovery> {
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
    Discovery::start_with(&tmp.join("data"), "127.0.0.1:0", &[]).await
}

async fn start_etcd(etcd_bin: &Path, tmp: &Path) -> Result<Etcd> {
    eprintln!("starting {} --enable-v2…", etcd_bin.display());
    let etcd = Etcd::start_v2(etcd_bin, tmp)?;
    wait_v2_ready(&etcd).await?;
    Ok(etcd)
}

/// Waits until etcd serves the v2 keys API (it answers only once it has elected itself leader).
async fn wait_v2_ready(etcd: &Etcd) -> Result<()> {
    let url = format!("{}/v2/keys/", etcd.client_url);
    wait_for(
        "etcd's v2 API to answer 200",
        Duration::from_secs(20),
        || async {
            let resp = muster_tests::get(&url).await.ok()?;
            (resp.status == 200).then_some(())
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
    /// Rounds run; the reported figures are each workload's median round.
    rounds: u16,
    muster: SystemResults,
    etcd: Option<SystemResults>,
    comparison: Option<Vec<Comparison>>,
    muster_rounds: Vec<SystemResults>,
    etcd_rounds: Option<Vec<SystemResults>>,
}

fn print_table(report: &Report) {
    println!(
        "muster-bench discovery: {} clients, {} per workload, median of {} rounds\n",
        report.clients, report.duration, report.rounds
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

async fn discovery(args: DiscoveryArgs) -> Result<()> {
    let etcd_bin = find_etcd(args.skip_etcd)?;
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    // Both servers stay up for the whole run (an idle one costs next to nothing) and the
    // workloads alternate between them, so a slow minute on a shared machine hurts both alike.
    let mut discovery = start_muster(tmp.path()).await?;
    let mut etcd = match &etcd_bin {
        Some(bin) => Some(start_etcd(bin, tmp.path()).await?),
        None => None,
    };
    let mut systems = vec![System::Muster {
        base: discovery.base.clone(),
    }];
    if let Some(e) = &etcd {
        systems.push(System::Etcd {
            client_url: e.client_url.clone(),
        });
    }
    let outcome = run_rounds(&systems, &args).await;
    let muster_log = tail(&discovery.log(), 40);
    discovery
        .terminate()
        .await
        .context("stopping muster-discovery")?;
    let etcd_log = etcd
        .as_ref()
        .map(|e| tail(&e.log(), 40))
        .unwrap_or_default();
    if let Some(e) = etcd.as_mut() {
        e.kill_and_wipe().await.context("stopping etcd")?;
    }
    let mut per_system = outcome
        .with_context(|| format!("muster-discovery log:\n{muster_log}\netcd log:\n{etcd_log}"))?;
    let etcd_rounds = if per_system.len() > 1 {
        per_system.pop()
    } else {
        None
    };
    let muster_rounds = per_system.pop().context("no results")?;
    let muster = median(&muster_rounds)?;
    let etcd = etcd_rounds.as_deref().map(median).transpose()?;
    let report = Report {
        clients: args.clients,
        duration: format_duration(args.duration),
        duration_secs: args.duration.as_secs_f64(),
        rounds: args.rounds,
        comparison: etcd.as_ref().map(|e| compare(&muster, e)),
        muster,
        etcd,
        muster_rounds,
        etcd_rounds,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// Runs every round: each workload on each system in turn. Returns per system, per round.
async fn run_rounds(systems: &[System], args: &DiscoveryArgs) -> Result<Vec<Vec<SystemResults>>> {
    let mut results: Vec<Vec<SystemResults>> = systems.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        eprintln!("round {round} of {}", args.rounds);
        let mut states: Vec<RoundState> = systems.iter().map(|_| RoundState::new()).collect();
        for workload in Workload::ALL {
            for (system, state) in systems.iter().zip(states.iter_mut()) {
                run_workload(workload, system, state, args.clients, args.duration).await?;
            }
        }
        for (state, out) in states.into_iter().zip(results.iter_mut()) {
            out.push(state.finish()?);
        }
    }
    Ok(results)
}

// =============================================================================================
// muster-bench cluster
//
// Each measurement starts a fresh cluster in its own temp dir on a freshly minted discovery URL,
// so no round inherits state (data dirs, registrations, warm caches) from the one before. The
// systems alternate step by step, as in the discovery benchmark, so a slow minute on a shared
// machine hurts both alike.

/// The goals: a 3-node muster cluster forms within this (median)...
const FORM_3_GOAL_S: f64 = 1.0;
/// ...a 5-node one within this...
const FORM_5_GOAL_S: f64 = 1.5;
/// ...a new leader takes over within this after `kill -9` of the old one (median)...
const FAILOVER_GOAL_S: f64 = 1.0;
/// ...and an idle agent uses at most this fraction of an idle etcd member's RSS.
const RSS_GOAL_RATIO: f64 = 0.5;
/// A node joining with a token is a nonvoter within this (median)...
const JOIN_NONVOTER_GOAL_S: f64 = 0.5;
/// ...and a voter within the agent's promote-after (default 3 s) plus this.
const JOIN_VOTER_SLACK_S: f64 = 0.5;
/// The agents' default `--promote-after`, which the bench leaves as it is.
const PROMOTE_AFTER: Duration = Duration::from_secs(3);
/// The issue asks for the failover median over at least this many kills.
const MIN_FAILOVER_SAMPLES: usize = 5;
/// Pause between rounds of queries while waiting for a cluster. Short next to the ~1 s being
/// measured, long enough that the queries (one `muster status` process per agent) do not crowd
/// the agents off a 2-core machine.
const POLL_PAUSE: Duration = Duration::from_millis(25);
/// A formation or failover slower than this is a failure, not a data point.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a formed cluster sits idle before its RSS is read, so formation's transient
/// allocations (TLS handshakes, join requests) have settled.
const IDLE: Duration = Duration::from_secs(3);
/// Pause between formation and the kill, so the kill hits a steady cluster rather than one
/// still finishing its formation (the record's final write, promotions settling).
const SETTLE: Duration = Duration::from_secs(1);
/// Per-request ceiling for etcd's status endpoint: a member that hangs must not stall a poll.
const ETCD_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// One of the two systems whose clusters are compared.
#[derive(Clone)]
enum ClusterSystem {
    Muster,
    Etcd { bin: PathBuf },
}

impl ClusterSystem {
    fn label(&self) -> &'static str {
        match self {
            ClusterSystem::Muster => "muster",
            ClusterSystem::Etcd { .. } => "etcd 3.4",
        }
    }

    /// Member names are `<prefix><n>`; distinct prefixes keep the two systems' logs apart.
    fn prefix(&self) -> &'static str {
        match self {
            ClusterSystem::Muster => "m",
            ClusterSystem::Etcd { .. } => "e",
        }
    }
}

/// What every measurement needs: the shared discovery service, where to put cluster dirs, and
/// one HTTP client for etcd's status endpoint (building one per request would add to the poll).
struct ClusterBench {
    discovery: Discovery,
    root: PathBuf,
    http: reqwest::Client,
}

/// One started member of either system.
enum Member {
    Muster(AgentProc),
    Etcd(Etcd),
}

/// What a member says about leadership, in its system's own ids (agent names for muster,
/// member ids for etcd): its own id and the leader's, if it knows one.
struct LeaderView {
    me: String,
    leader: Option<String>,
}

impl Member {
    fn start(system: &ClusterSystem, root: &Path, name: &str, url: &str) -> Result<Self> {
        Ok(match system {
            ClusterSystem::Muster => {
                Member::Muster(AgentProc::start(root, name, &["--discovery", url])?)
            }
            ClusterSystem::Etcd { bin } => {
                Member::Etcd(Etcd::start_discovery(bin, root, name, url)?)
            }
        })
    }

    fn name(&self) -> &str {
        match self {
            Member::Muster(a) => &a.name,
            Member::Etcd(e) => &e.name,
        }
    }

    fn log(&self) -> String {
        match self {
            Member::Muster(a) => a.log(),
            Member::Etcd(e) => e.log(),
        }
    }

    /// The OS process id, for `kill -9` and RSS.
    fn pid(&self) -> Option<u32> {
        match self {
            Member::Muster(a) => agent_pid(&a.data_dir),
            Member::Etcd(e) => e.pid(),
        }
    }

    /// `Some(key)` once this member sees the whole cluster of `names`; every member of one
    /// cluster yields the same key. muster: all members listed, the policy's voter count, a
    /// leader, keyed by cluster id. etcd: every name listed as a started member.
    async fn sees_full_shape(&self, names: &[String]) -> Option<String> {
        match self {
            Member::Muster(a) => {
                let s = a.status().await?;
                let members = s["members"].as_array()?;
                let voters = members.iter().filter(|m| m["suffrage"] == "voter").count();
                let full = members.len() == names.len()
                    && voters == voter_target(names.len())
                    && !s["leader"].is_null();
                full.then(|| s["cluster_id"].as_str().map(str::to_string))?
            }
            Member::Etcd(e) => {
                let seen = e.member_names().await?;
                (seen == names).then(|| seen.join(","))
            }
        }
    }

    async fn leader_view(&self, http: &reqwest::Client) -> Option<LeaderView> {
        match self {
            Member::Muster(a) => {
                let s = a.status().await?;
                Some(LeaderView {
                    me: a.name.clone(),
                    leader: s["leader"].as_str().map(str::to_string),
                })
            }
            Member::Etcd(e) => {
                let json: serde_json::Value = http
                    .post(format!("{}/v3/maintenance/status", e.client_url))
                    .body("{}")
                    .timeout(ETCD_STATUS_TIMEOUT)
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                Some(LeaderView {
                    me: etcd_id(&json["header"]["member_id"])?,
                    // etcd reports leader 0 while it knows none (mid-election).
                    leader: etcd_id(&json["leader"]).filter(|id| id != "0"),
                })
            }
        }
    }

    async fn stop(&mut self) -> Result<()> {
        match self {
            Member::Muster(a) => a.kill9().await,
            Member::Etcd(e) => e.kill_and_wipe().await,
        }
    }
}

/// etcd's JSON gateway writes uint64 ids as strings; accept numbers too.
fn etcd_id(v: &serde_json::Value) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .or_else(|| v.as_u64().map(|n| n.to_string()))
}

/// The pid of the `muster agent` whose `--data-dir` is `dir`. `AgentProc` does not expose its
/// child's pid, and the data dir is unique per agent; requiring `agent` as the subcommand keeps
/// a concurrent `muster status --data-dir …` from matching.
fn agent_pid(dir: &Path) -> Option<u32> {
    let want = dir.as_os_str().as_bytes();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let is_agent = args.get(1) == Some(&&b"agent"[..]);
            let owns_dir = args
                .windows(2)
                .any(|w| w[0] == b"--data-dir" && w[1] == want);
            (is_agent && owns_dir).then_some(pid)
        })
}

/// Resident memory of one process, in MiB.
#[derive(Debug, Clone, Copy)]
struct Resident {
    /// `VmRSS`: what the goal is about.
    rss: f64,
    /// `RssAnon`: the process's own memory. The rest of `VmRSS` is file-backed (mostly the
    /// binary's code), shared by every process of the same binary on a host and dependent on
    /// how much of the file the page cache holds, so it is shown apart.
    anon: f64,
}

fn resident_mib(pid: u32) -> Option<Resident> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Resident {
        rss: status_kib(&status, "VmRSS:")? / 1024.0,
        anon: status_kib(&status, "RssAnon:")? / 1024.0,
    })
}

/// A `Field:   1234 kB` line of /proc/<pid>/status.
fn status_kib(status: &str, field: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Drives futures concurrently on the current task and returns their outputs in order. The
/// members are borrowed, so `tokio::spawn` (which needs `'static`) does not fit, and this is
/// too little to pull in the `futures` crate for.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            // A finished future must not be polled again.
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *output = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// How long rounds of queries took. A time is taken when the round that confirms the condition
/// returns, so it can be late by up to one [`POLL_PAUSE`] plus that confirming round. The mean of
/// all rounds says less: queries block while a member starts or elects (muster's status waits
/// for a leader, etcd's gateway for its server) and then answer at once.
#[derive(Default)]
struct PollStats {
    rounds: u32,
    busy: Duration,
    confirmations: u32,
    confirming: Duration,
}

impl PollStats {
    fn record(&mut self, round: Duration, confirmed: bool) {
        self.rounds += 1;
        self.busy += round;
        if confirmed {
            self.confirmations += 1;
            self.confirming += round;
        }
    }

    fn mean_ms(&self) -> f64 {
        mean_ms(self.busy, self.rounds)
    }

    fn mean_confirming_ms(&self) -> f64 {
        mean_ms(self.confirming, self.confirmations)
    }
}

fn mean_ms(total: Duration, count: u32) -> f64 {
    if count == 0 {
        return 0.0;
    }
    total.as_secs_f64() * 1000.0 / f64::from(count)
}

/// Runs `check` (one round of queries) until it yields `Some`, pausing [`POLL_PAUSE`] between
/// rounds. Returns the value and the time from `started` to the end of the confirming round.
async fn poll_until<T, F, Fut>(
    what: &str,
    started: Instant,
    stats: &mut PollStats,
    mut check: F,
) -> Result<(T, Duration)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    loop {
        let round = Instant::now();
        let outcome = check().await;
        stats.record(round.elapsed(), outcome.is_some());
        if let Some(v) = outcome {
            return Ok((v, started.elapsed()));
        }
        if started.elapsed() >= CLUSTER_TIMEOUT {
            bail!("timed out after {CLUSTER_TIMEOUT:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_PAUSE).await;
    }
}

/// A cluster started for one measurement, in its own temp dir.
struct Cluster {
    members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// The last lines of every member's log, for errors.
    fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("--- {}\n{}", m.name(), tail(&m.log(), 25)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Some once every member sees the full shape of the same cluster.
    async fn formed(&self, names: &[String]) -> Option<()> {
        let keys = join_all(
            self.members
                .iter()
                .map(|m| m.sees_full_shape(names))
                .collect(),
        )
        .await;
        let first = keys.first()?.as_ref()?;
        keys.iter().all(|k| k.as_ref() == Some(first)).then_some(())
    }

    /// Stops every member (the harness kills them on drop too; this also reaps them and
    /// surfaces errors) and removes the cluster's dir.
    async fn stop(mut self) -> Result<()> {
        for m in &mut self.members {
            m.stop()
                .await
                .with_context(|| format!("stopping {}", m.name()))?;
        }
        Ok(())
    }
}

/// Mints a discovery URL for `n`, starts `n` members on it at once and waits until every one
/// sees the full cluster. The clock starts just before the first process is spawned.
async fn form(
    system: &ClusterSystem,
    bench: &ClusterBench,
    n: usize,
    polls: &mut PollStats,
) -> Result<(Cluster, Duration)> {
    let size = u32::try_from(n).context("cluster size")?;
    let url = bench.discovery.new_token(size).await?.trim().to_string();
    let dir = tempfile::tempdir_in(&bench.root).context("creating a cluster dir")?;
    let mut names: Vec<String> = (1..=n).map(|i| format!("{}{i}", system.prefix())).collect();
    // The harness's `member_names` sorts; compare etcd's list against a sorted one.
    names.sort();
    let started = Instant::now();
    let members = names
        .iter()
        .map(|name| Member::start(system, dir.path(), name, &url))
        .collect::<Result<Vec<_>>>()?;
    let cluster = Cluster { members, _dir: dir };
    let what = format!("{n} {} members to form", system.label());
    match poll_until(&what, started, polls, || cluster.formed(&names)).await {
        Ok(((), elapsed)) => Ok((cluster, elapsed)),
        Err(e) => {
            let logs = cluster.logs();
            // The error matters more than a failure to stop; the harness kills on drop anyway.
            let _ = cluster.stop().await;
            Err(e.context(logs))
        }
    }
}

/// One formation measurement: form a cluster of `n`, then tear it down.
async fn formation_round(
    system: &ClusterSystem,
    bench: &ClusterBench,
    n: usize,
    polls: &mut PollStats,
) -> Result<Duration> {
    let (cluster, elapsed) = form(system, bench, n, polls).await?;
    cluster.stop().await?;
    eprintln!(
        "  {}: {n} nodes formed in {:.3} s",
        system.label(),
        elapsed.as_secs_f64()
    );
    Ok(elapsed)
}

/// One failover measurement on a fresh 3-node cluster.
async fn failover_round(
    system: &ClusterSystem,
    bench: &ClusterBench,
    polls: &mut PollStats,
) -> Result<Duration> {
    let (cluster, _) = form(system, bench, 3, polls).await?;
    let outcome = time_failover(&cluster, &bench.http, polls).await;
    let logs = cluster.logs();
    cluster.stop().await?;
    let elapsed = outcome.context(logs)?;
    eprintln!(
        "  {}: new leader {:.3} s after kill -9",
        system.label(),
        elapsed.as_secs_f64()
    );
    Ok(elapsed)
}

/// Kills the leader with SIGKILL and times until a survivor names another leader.
async fn time_failover(
    cluster: &Cluster,
    http: &reqwest::Client,
    polls: &mut PollStats,
) -> Result<Duration> {
    tokio::time::sleep(SETTLE).await;
    let views = join_all(
        cluster
            .members
            .iter()
            .map(|m| m.leader_view(http))
            .collect(),
    )
    .await;
    let old = views
        .iter()
        .flatten()
        .find_map(|v| v.leader.clone())
        .context("no member names a leader")?;
    let index = views
        .iter()
        .position(|v| v.as_ref().is_some_and(|v| v.me == old))
        .with_context(|| format!("leader {old} is not one of the members"))?;
    // Found before the clock starts, so the scan of /proc is not timed.
    let pid = cluster.members[index]
        .pid()
        .context("cannot find the leader's pid")?;
    let survivors: Vec<&Member> = cluster
        .members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, m)| m)
        .collect();
    let started = Instant::now();
    // The same signal the same way for both systems (the harness's kill helpers differ).
    signal(pid, "KILL")?;
    let (_, elapsed) = poll_until("a new leader", started, polls, || {
        new_leader(&survivors, http, &old)
    })
    .await?;
    Ok(elapsed)
}

/// Some leader other than `old` that any of `members` names.
async fn new_leader(members: &[&Member], http: &reqwest::Client, old: &str) -> Option<String> {
    let views = join_all(members.iter().map(|m| m.leader_view(http)).collect()).await;
    views
        .into_iter()
        .flatten()
        .find_map(|v| v.leader.filter(|l| l != old))
}

/// RSS of each member of a 3-node cluster that has sat idle for [`IDLE`] after forming.
async fn idle_rss(
    system: &ClusterSystem,
    bench: &ClusterBench,
    polls: &mut PollStats,
) -> Result<Vec<Resident>> {
    let (cluster, _) = form(system, bench, 3, polls).await?;
    tokio::time::sleep(IDLE).await;
    let rss = cluster
        .members
        .iter()
        .map(|m| {
            m.pid()
                .and_then(resident_mib)
                .with_context(|| format!("cannot read the RSS of {}", m.name()))
        })
        .collect::<Result<Vec<_>>>();
    cluster.stop().await?;
    let rss = rss?;
    eprintln!(
        "  {}: idle RSS {} MiB",
        system.label(),
        rss.iter()
            .map(|r| format!("{:.1}", r.rss))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    Ok(rss)
}

/// The suffrage of member `name` as `agent` (the leader of a one-node cluster) reports it.
async fn suffrage_of(agent: &AgentProc, name: &str) -> Option<String> {
    let s = agent.status().await?;
    s["members"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)
        .and_then(|m| m["suffrage"].as_str().map(str::to_string))
}

/// One join measurement (muster only). A one-node cluster gets a second node with a token; that
/// one stays a nonvoter (2 members → 1 voter) until it has been in the configuration for
/// `--promote-after`. Then a third node is timed from its spawn until the leader lists it as a
/// nonvoter, and until it is a voter (3 members → 3 voters; the second is promoted at once, the
/// third once its own promote-after has passed and it has caught up).
async fn join_round(bench: &ClusterBench, polls: &mut PollStats) -> Result<(Duration, Duration)> {
    let (cluster, _) = form(&ClusterSystem::Muster, bench, 1, polls).await?;
    let outcome = time_join(&cluster, polls).await;
    let logs = cluster.logs();
    cluster.stop().await?;
    let (nonvoter, voter) = outcome.context(logs)?;
    eprintln!(
        "  muster: joined as nonvoter in {:.3} s, voter in {:.3} s",
        nonvoter.as_secs_f64(),
        voter.as_secs_f64()
    );
    Ok((nonvoter, voter))
}

async fn time_join(cluster: &Cluster, polls: &mut PollStats) -> Result<(Duration, Duration)> {
    let Some(Member::Muster(leader)) = cluster.members.first() else {
        bail!("the join benchmark needs a muster cluster");
    };
    let token = leader
        .create_token(&["--uses", "2", "--ttl", "10m"])
        .await?;
    let dir = cluster._dir.path();
    let joiner =
        |name: &str| AgentProc::start(dir, name, &["--join", &leader.addr, "--token", &token]);
    let second = joiner("j2")?;
    let second_started = Instant::now();
    poll_until("j2 to join", second_started, polls, || async {
        suffrage_of(leader, "j2").await.map(|_| ())
    })
    .await?;
    // Let j2 pass its promote-after first, so that j3's own promotion is what gets timed.
    tokio::time::sleep_until((second_started + PROMOTE_AFTER + SETTLE).into()).await;
    let third = joiner("j3")?;
    let started = Instant::now();
    let (_, nonvoter) = poll_until("j3 to join as a nonvoter", started, polls, || async {
        suffrage_of(leader, "j3").await.map(|_| ())
    })
    .await?;
    let (_, voter) = poll_until("j3 to become a voter", started, polls, || async {
        (suffrage_of(leader, "j3").await? == "voter").then_some(())
    })
    .await?;
    drop((second, third));
    Ok((nonvoter, voter))
}

/// Everything measured on one system.
#[derive(Default)]
struct ClusterSamples {
    formation_3: Vec<Duration>,
    formation_5: Vec<Duration>,
    failover: Vec<Duration>,
    join_nonvoter: Vec<Duration>,
    join_voter: Vec<Duration>,
    rss: Vec<Resident>,
    polls: PollStats,
}

/// Which measurement a step of a round takes.
#[derive(Clone, Copy)]
enum Step {
    Form3,
    Form5,
    Failover,
    /// muster only: etcd adds members by hand (`member add --learner`, then `member promote`).
    Join,
}

async fn run_step(
    step: Step,
    system: &ClusterSystem,
    bench: &ClusterBench,
    samples: &mut ClusterSamples,
) -> Result<()> {
    let polls = &mut samples.polls;
    match step {
        Step::Form3 => samples
            .formation_3
            .push(formation_round(system, bench, 3, polls).await?),
        Step::Form5 => samples
            .formation_5
            .push(formation_round(system, bench, 5, polls).await?),
        Step::Failover => samples
            .failover
            .push(failover_round(system, bench, polls).await?),
        Step::Join => {
            if matches!(system, ClusterSystem::Muster) {
                let (nonvoter, voter) = join_round(bench, polls).await?;
                samples.join_nonvoter.push(nonvoter);
                samples.join_voter.push(voter);
            }
        }
    }
    Ok(())
}

/// Every round runs each step on each system in turn; the RSS reading, a single snapshot, runs
/// once per system at the end.
async fn run_cluster_rounds(
    systems: &[ClusterSystem],
    bench: &ClusterBench,
    rounds: u16,
) -> Result<Vec<ClusterSamples>> {
    let mut samples: Vec<ClusterSamples> =
        systems.iter().map(|_| ClusterSamples::default()).collect();
    for round in 1..=rounds {
        eprintln!("round {round} of {rounds}");
        for step in [Step::Form3, Step::Form5, Step::Failover, Step::Join] {
            for (system, s) in systems.iter().zip(samples.iter_mut()) {
                run_step(step, system, bench, s)
                    .await
                    .with_context(|| format!("{} round {round}", system.label()))?;
            }
        }
    }
    eprintln!("idle RSS of 3-node clusters ({}s idle)", IDLE.as_secs());
    for (system, s) in systems.iter().zip(samples.iter_mut()) {
        s.rss = idle_rss(system, bench, &mut s.polls).await?;
    }
    Ok(samples)
}

/// Median, min and max of one timed measurement, in seconds.
#[derive(Debug, Serialize)]
struct Times {
    median_s: f64,
    min_s: f64,
    max_s: f64,
    samples: Vec<f64>,
}

impl Times {
    fn of(samples: &[Duration]) -> Self {
        let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        let mut sorted = secs.clone();
        sorted.sort_by(f64::total_cmp);
        Times {
            median_s: median_of_sorted(&sorted),
            min_s: sorted.first().copied().unwrap_or(0.0),
            max_s: sorted.last().copied().unwrap_or(0.0),
            samples: secs,
        }
    }
}

/// The middle sample, or the mean of the middle two (0 when there are none).
fn median_of_sorted(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Idle RSS of one 3-node cluster, in MiB: `VmRSS`, and its anonymous part (see [`Resident`]).
#[derive(Debug, Serialize)]
struct Rss {
    per_node: Vec<f64>,
    mean: f64,
    anon_per_node: Vec<f64>,
    anon_mean: f64,
}

impl Rss {
    fn of(samples: &[Resident]) -> Self {
        let per_node: Vec<f64> = samples.iter().map(|r| r.rss).collect();
        let anon_per_node: Vec<f64> = samples.iter().map(|r| r.anon).collect();
        Rss {
            mean: mean(&per_node),
            anon_mean: mean(&anon_per_node),
            per_node,
            anon_per_node,
        }
    }
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

#[derive(Debug, Serialize)]
struct ClusterResults {
    formation_3: Times,
    formation_5: Times,
    failover: Times,
    /// muster only: spawn of a node joining with a token → the leader lists it as a nonvoter.
    #[serde(skip_serializing_if = "Option::is_none")]
    join_nonvoter: Option<Times>,
    /// muster only: spawn of that node → it is a voter.
    #[serde(skip_serializing_if = "Option::is_none")]
    join_voter: Option<Times>,
    rss_mb: Rss,
    /// Mean time one round of queries took (one status query per member, concurrently).
    poll_round_ms: f64,
    /// Mean time the round that confirmed a formation or failover took: with the pause
    /// between rounds, how late a time can be.
    confirming_round_ms: f64,
}

impl ClusterResults {
    fn from_samples(s: &ClusterSamples) -> Self {
        ClusterResults {
            formation_3: Times::of(&s.formation_3),
            formation_5: Times::of(&s.formation_5),
            failover: Times::of(&s.failover),
            join_nonvoter: (!s.join_nonvoter.is_empty()).then(|| Times::of(&s.join_nonvoter)),
            join_voter: (!s.join_voter.is_empty()).then(|| Times::of(&s.join_voter)),
            rss_mb: Rss::of(&s.rss),
            poll_round_ms: s.polls.mean_ms(),
            confirming_round_ms: s.polls.mean_confirming_ms(),
        }
    }
}

/// One of the goals and whether this run met it.
#[derive(Debug, Serialize)]
struct Goal {
    metric: &'static str,
    /// `None` when this run cannot judge it (no etcd to compare with, too few samples).
    goal_met: Option<bool>,
    /// What was measured against what is wanted, or why it was not judged.
    detail: String,
}

impl Goal {
    fn at_most(metric: &'static str, got_s: f64, want_s: f64) -> Self {
        Goal {
            metric,
            goal_met: Some(got_s <= want_s),
            detail: format!("median {got_s:.3} s, want <= {want_s} s"),
        }
    }
}

fn cluster_goals(muster: &ClusterResults, etcd: Option<&ClusterResults>) -> Vec<Goal> {
    let failover = &muster.failover;
    let failover_goal = if failover.samples.len() < MIN_FAILOVER_SAMPLES {
        Goal {
            metric: "failover after kill -9",
            goal_met: None,
            detail: format!(
                "median {:.3} s of only {} kills; the goal is judged on >= {MIN_FAILOVER_SAMPLES} (--rounds {MIN_FAILOVER_SAMPLES})",
                failover.median_s,
                failover.samples.len()
            ),
        }
    } else {
        Goal::at_most("failover after kill -9", failover.median_s, FAILOVER_GOAL_S)
    };
    let rss_goal = match etcd {
        Some(e) if e.rss_mb.mean > 0.0 => {
            let ratio = muster.rss_mb.mean / e.rss_mb.mean;
            Goal {
                metric: "idle RSS per node",
                goal_met: Some(ratio <= RSS_GOAL_RATIO),
                detail: format!(
                    "muster {:.1} MiB = {ratio:.2}x etcd's {:.1} MiB, want <= {RSS_GOAL_RATIO}x; \
                     anonymous memory alone: {:.2}x",
                    muster.rss_mb.mean,
                    e.rss_mb.mean,
                    muster.rss_mb.anon_mean / e.rss_mb.anon_mean
                ),
            }
        }
        _ => Goal {
            metric: "idle RSS per node",
            goal_met: None,
            detail: format!(
                "muster {:.1} MiB; the goal is relative to etcd, which did not run",
                muster.rss_mb.mean
            ),
        },
    };
    let mut join_goals = Vec::new();
    if let (Some(nonvoter), Some(voter)) = (&muster.join_nonvoter, &muster.join_voter) {
        join_goals.push(Goal::at_most(
            "join with a token: start → nonvoter",
            nonvoter.median_s,
            JOIN_NONVOTER_GOAL_S,
        ));
        join_goals.push(Goal::at_most(
            "join with a token: start → voter",
            voter.median_s,
            PROMOTE_AFTER.as_secs_f64() + JOIN_VOTER_SLACK_S,
        ));
    }
    let mut goals = vec![
        Goal::at_most(
            "formation, 3 nodes",
            muster.formation_3.median_s,
            FORM_3_GOAL_S,
        ),
        Goal::at_most(
            "formation, 5 nodes",
            muster.formation_5.median_s,
            FORM_5_GOAL_S,
        ),
        failover_goal,
        rss_goal,
    ];
    goals.extend(join_goals);
    goals
}

#[derive(Serialize)]
struct ClusterReport {
    /// Measurements per system for each timed figure; RSS is one snapshot.
    rounds: u16,
    /// Pause between rounds of queries while waiting for formation or a new leader.
    poll_pause_ms: u64,
    muster: ClusterResults,
    etcd: Option<ClusterResults>,
    goals: Vec<Goal>,
}

/// A row heading and the figure it shows.
type TimesRow = (&'static str, fn(&ClusterResults) -> &Times);

fn print_cluster_table(report: &ClusterReport) {
    println!(
        "muster-bench cluster: {} rounds; every member bootstraps through the same muster-discovery\n",
        report.rounds
    );
    let mut systems = vec![("muster", &report.muster)];
    if let Some(e) = &report.etcd {
        systems.push(("etcd 3.4", e));
    }
    println!(
        "{:<24} {:<9} {:>9} {:>9} {:>9} {:>8}",
        "seconds", "system", "median", "min", "max", "samples"
    );
    let rows: [TimesRow; 3] = [
        ("formation, 3 nodes", |r| &r.formation_3),
        ("formation, 5 nodes", |r| &r.formation_5),
        ("failover after kill -9", |r| &r.failover),
    ];
    for (title, pick) in rows {
        for (i, (label, results)) in systems.iter().enumerate() {
            let t = pick(results);
            println!(
                "{:<24} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                if i == 0 { title } else { "" },
                label,
                t.median_s,
                t.min_s,
                t.max_s,
                t.samples.len()
            );
        }
    }
    let join_rows: [(&str, Option<&Times>); 2] = [
        (
            "join: start → nonvoter",
            report.muster.join_nonvoter.as_ref(),
        ),
        ("join: start → voter", report.muster.join_voter.as_ref()),
    ];
    for (title, times) in join_rows {
        if let Some(t) = times {
            println!(
                "{:<24} {:<9} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                title,
                "muster",
                t.median_s,
                t.min_s,
                t.max_s,
                t.samples.len()
            );
        }
    }
    println!(
        "(join: a third node with a token into a 2-node cluster whose nonvoter has passed \
         --promote-after {}s; etcd has no automatic promotion to compare with)",
        PROMOTE_AFTER.as_secs()
    );
    println!(
        "\n{:<24} {:<9} {:>9} {:>20} {:>9} {:>20}",
        "idle RSS, MiB", "system", "mean", "per node", "anon", "anon per node"
    );
    let joined = |values: &[f64]| -> String {
        values
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for (i, (label, results)) in systems.iter().enumerate() {
        let r = &results.rss_mb;
        println!(
            "{:<24} {:<9} {:>9.1} {:>20} {:>9.1} {:>20}",
            if i == 0 { "3 nodes, idle 3 s" } else { "" },
            label,
            r.mean,
            joined(&r.per_node),
            r.anon_mean,
            joined(&r.anon_per_node)
        );
    }
    let rounds: Vec<String> = systems
        .iter()
        .map(|(label, r)| {
            format!(
                "{label:<9} {:>4.0} ms (all rounds: {:.0} ms)",
                r.confirming_round_ms, r.poll_round_ms
            )
        })
        .collect();
    println!(
        "\nTimes run from spawning the processes (formation) or the SIGKILL (failover) to the end of\n\
         the round of status queries that confirmed the condition. Rounds are {} ms apart. A query\n\
         blocks while its member starts or elects and answers once it can, so a long round mostly\n\
         waited rather than arrived late; still, a time is late by at most the pause plus the\n\
         confirming round, which took on average\n  {}",
        report.poll_pause_ms,
        rounds.join("\n  ")
    );
    println!();
    for g in &report.goals {
        let verdict = match g.goal_met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not judged",
        };
        println!("{}: goal {verdict} ({})", g.metric, g.detail);
    }
}

/// Starts the discovery service, runs every measurement, stops everything, then reports.
async fn cluster(args: ClusterArgs) -> Result<()> {
    let etcd_bin = find_etcd(args.skip_etcd)?;
    let agent_bin = bin_path("muster");
    if !agent_bin.exists() {
        bail!(
            "{} not found: run `cargo build --release -p muster-agent` first \
             (or set MUSTER_BIN_DIR to the directory holding it)",
            agent_bin.display()
        );
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let discovery = start_muster(tmp.path()).await?;
    let mut bench = ClusterBench {
        discovery,
        root: tmp.path().to_path_buf(),
        http: http_client(),
    };
    let mut systems = vec![ClusterSystem::Muster];
    if let Some(bin) = etcd_bin {
        systems.push(ClusterSystem::Etcd { bin });
    }
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
        poll_pause_ms: u64::try_from(POLL_PAUSE.as_millis()).unwrap_or(u64::MAX),
        goals: cluster_goals(&muster, etcd.as_ref()),
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
    fn median_takes_the_middle_or_the_mean_of_two() {
        assert_eq!(median_of_sorted(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median_of_sorted(&[1.0, 2.0, 4.0, 9.0]), 3.0);
        assert_eq!(median_of_sorted(&[]), 0.0);
    }

    #[test]
    fn etcd_ids_read_as_strings_or_numbers() {
        let json = serde_json::json!({"a": "8e9e05c52164694d", "b": 12, "c": null});
        assert_eq!(etcd_id(&json["a"]).as_deref(), Some("8e9e05c52164694d"));
        assert_eq!(etcd_id(&json["b"]).as_deref(), Some("12"));
        assert_eq!(etcd_id(&json["c"]), None);
    }

    #[tokio::test]
    async fn join_all_keeps_order() {
        let slow_first = join_all(vec![
            Box::pin(async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                1
            }) as Pin<Box<dyn Future<Output = i32>>>,
            Box::pin(async { 2 }),
        ])
        .await;
        assert_eq!(slow_first, vec![1, 2]);
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
