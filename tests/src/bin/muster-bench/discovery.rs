//! `muster-bench discovery`: muster-discovery against etcd 3.4 (`--enable-v2`) as a discovery
//! backend, on token creation, member registration and directory reads.
//!
//! With `--store etcd --replicas N` it also measures `muster-discovery --store etcd` on a
//! 3-member etcd v3 cluster, with 1, 2, … N replicas (the clients spread over the replicas, as a
//! load balancer would spread them). Each figure comes with the servers' CPU time per operation,
//! read from /proc for every process of the system under test, so that a comparison does not
//! depend on the load generator's own CPU.

use super::discovery_v3::BENCH_LIMITS;
use crate::discovery_cpu as cpu;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_shared::duration::format_duration;
use muster_shared::token::{new_discovery_token, random_hex};
use muster_tests::etcd_cluster::{EtcdCluster, start_replicas};
use muster_tests::{Discovery, Etcd, bin_path, tail, token_of, wait_for};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::{DiscoveryArgs, find_etcd};

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

// ---------------------------------------------------------------------------------------------
// The systems under test

/// One discovery backend. The workloads differ between systems only in the URLs and in how a
/// token is created; registration and reads use the same etcd v2 keys-API requests on both.
#[derive(Clone)]
enum System {
    /// `bases` are `http://127.0.0.1:PORT` of one or more replicas; tokens live at
    /// `{base}/<token>` on any of them. `pids` are every server process the system runs on.
    Muster {
        label: String,
        bases: Vec<String>,
        pids: Vec<u32>,
    },
    /// `client_url` is etcd's client URL; tokens live under `/v2/keys/_etcd/registry/`.
    Etcd { client_url: String, pid: u32 },
}

impl System {
    fn label(&self) -> &str {
        match self {
            System::Muster { label, .. } => label,
            System::Etcd { .. } => "etcd",
        }
    }

    /// `host:port` that client number `client` connects to (clients spread over replicas).
    fn authority(&self, client: usize) -> &str {
        let url = match self {
            System::Muster { bases, .. } => &bases[client % bases.len()],
            System::Etcd { client_url, .. } => client_url,
        };
        url.split("://").nth(1).unwrap_or(url).trim_end_matches('/')
    }

    /// The server processes whose CPU time counts for this system.
    fn pids(&self) -> Vec<u32> {
        match self {
            System::Muster { pids, .. } => pids.clone(),
            System::Etcd { pid, .. } => vec![*pid],
        }
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
    /// CPU time (user + system) of the system's server processes per successful operation.
    server_cpu_us_per_op: f64,
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
            server_cpu_us_per_op: 0.0,
        }
    }

    /// Adds the servers' CPU time spent on the workload (`cpu_us`) per operation.
    fn with_cpu(mut self, cpu_us: f64) -> Self {
        if self.ops > 0 {
            self.server_cpu_us_per_op = cpu_us / self.ops as f64;
        }
        self
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
        .map(|i| Conn::new(system.authority(usize::from(i))))
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
    let cpu = cpu::Sample::take(&system.pids());
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
    let cpu_us = cpu.elapsed_us();
    let rec = merged(recs);
    report_errors(system, Workload::Create, &rec);
    Ok(Stats::from_recorder(rec, elapsed).with_cpu(cpu_us))
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
    let cpu = cpu::Sample::take(&system.pids());
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
    let cpu_us = cpu.elapsed_us();
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
        Stats::from_recorder(rec, elapsed).with_cpu(cpu_us),
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
    let cpu = cpu::Sample::take(&system.pids());
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
    let cpu_us = cpu.elapsed_us();
    let rec = merged(recs);
    report_errors(system, Workload::Read, &rec);
    Ok(Stats::from_recorder(rec, elapsed).with_cpu(cpu_us))
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
pub(crate) async fn start_muster(tmp: &Path) -> Result<Discovery> {
    // The harness errors too, but its hint lacks the profile this bench was built with.
    let bin = bin_path("muster-discovery");
    if !bin.exists() {
        bail!(
            "{} not found: run `cargo build{} -p muster-discovery` first \
             (or set MUSTER_BIN_DIR to the directory holding it)",
            bin.display(),
            crate::profile_flag()
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
    /// muster-discovery with its embedded store.
    muster: SystemResults,
    etcd: Option<SystemResults>,
    comparison: Option<Vec<Comparison>>,
    /// muster-discovery `--store etcd` with 1, 2, … replicas (`--store etcd --replicas N`).
    etcd_store: Vec<ReplicaResults>,
    muster_rounds: Vec<SystemResults>,
    etcd_rounds: Option<Vec<SystemResults>>,
}

#[derive(Serialize)]
struct ReplicaResults {
    replicas: usize,
    results: SystemResults,
    comparison: Option<Vec<Comparison>>,
    rounds: Vec<SystemResults>,
}

fn print_table(report: &Report) {
    println!(
        "muster-bench discovery: {} clients, {} per workload, median of {} rounds\n",
        report.clients, report.duration, report.rounds
    );
    println!(
        "{:<20} {:<22} {:>9} {:>11} {:>9} {:>9} {:>7} {:>11}",
        "workload", "system", "ops", "ops/s", "p50 ms", "p99 ms", "errors", "cpu us/op"
    );
    for (i, &w) in Workload::ALL.iter().enumerate() {
        print_row(w.title(), "muster-discovery", report.muster.get(w));
        for r in &report.etcd_store {
            let label = format!("muster --store etcd x{}", r.replicas);
            print_row("", &label, r.results.get(w));
        }
        if let Some(etcd) = &report.etcd {
            print_row("", "etcd 3.4 (v2)", etcd.get(w));
        }
        let mut ratios = vec![("muster/etcd".to_string(), report.comparison.as_ref())];
        for r in &report.etcd_store {
            ratios.push((
                format!("etcd-store x{}/etcd", r.replicas),
                r.comparison.as_ref(),
            ));
        }
        for (label, comparison) in ratios {
            if let Some(c) = comparison.and_then(|c| c.get(i)) {
                println!(
                    "{:<20} {:<22} {:>9} {:>10.2}x {:>9} {:>8.2}x",
                    "", label, "", c.throughput_ratio, "", c.p99_ratio
                );
            }
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
        "{:<20} {:<22} {:>9} {:>11.1} {:>9.3} {:>9.3} {:>7} {:>11.1}",
        workload,
        system,
        s.ops,
        s.ops_per_sec,
        s.p50_ms,
        s.p99_ms,
        s.errors,
        s.server_cpu_us_per_op
    );
}

// ---------------------------------------------------------------------------------------------

pub async fn run(args: DiscoveryArgs) -> Result<()> {
    let etcd_bin = find_etcd(args.skip_etcd)?;
    if args.protocol == "v3" {
        return super::discovery_v3::run(&args, etcd_bin).await;
    }
    let store_etcd = args.store == "etcd";
    if store_etcd && etcd_bin.is_none() {
        bail!("--store etcd needs etcd (a 3-member etcd v3 cluster is started); drop --skip-etcd");
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    // Every server stays up for the whole run (an idle one costs next to nothing) and the
    // workloads alternate between them, so a slow minute on a shared machine hurts all alike.
    let mut discovery =
        Discovery::start_with(&tmp.path().join("data"), "127.0.0.1:0", BENCH_LIMITS).await?;
    let mut systems = vec![System::Muster {
        label: "muster-discovery".into(),
        bases: vec![discovery.base.clone()],
        pids: discovery.pid().into_iter().collect(),
    }];
    let mut backing = None;
    let mut replicas = Vec::new();
    if store_etcd && let Some(bin) = &etcd_bin {
        eprintln!(
            "starting a 3-member etcd v3 cluster and {} replicas…",
            args.replicas
        );
        let cluster = EtcdCluster::start(bin, 3).await?;
        replicas = start_replicas(&cluster, usize::from(args.replicas), BENCH_LIMITS)
            .await?
            .0;
        let etcd_pids: Vec<u32> = cluster.members.iter().filter_map(|m| m.pid()).collect();
        for k in 1..=replicas.len() {
            let mut pids: Vec<u32> = replicas[..k].iter().filter_map(|r| r.pid()).collect();
            pids.extend(&etcd_pids);
            systems.push(System::Muster {
                label: format!("muster --store etcd x{k}"),
                bases: replicas[..k].iter().map(|r| r.base.clone()).collect(),
                pids,
            });
        }
        backing = Some(cluster);
    }
    let mut etcd = match &etcd_bin {
        Some(bin) => Some(start_etcd(bin, tmp.path()).await?),
        None => None,
    };
    if let Some(e) = &etcd {
        systems.push(System::Etcd {
            client_url: e.client_url.clone(),
            pid: e.pid().context("etcd is not running")?,
        });
    }
    let outcome = run_rounds(&systems, &args).await;
    let muster_log = tail(&discovery.log(), 40);
    discovery
        .terminate()
        .await
        .context("stopping muster-discovery")?;
    for r in replicas.iter_mut() {
        let _ = r.terminate().await;
    }
    drop(backing);
    let etcd_log = etcd
        .as_ref()
        .map(|e| tail(&e.log(), 40))
        .unwrap_or_default();
    if let Some(e) = etcd.as_mut() {
        e.kill_and_wipe().await.context("stopping etcd")?;
    }
    let mut per_system = outcome
        .with_context(|| format!("muster-discovery log:\n{muster_log}\netcd log:\n{etcd_log}"))?;
    let etcd_rounds = if etcd.is_some() {
        per_system.pop()
    } else {
        None
    };
    let etcd_median = etcd_rounds.as_deref().map(median).transpose()?;
    let mut per_system = per_system.into_iter();
    let muster_rounds = per_system.next().context("no results")?;
    let muster = median(&muster_rounds)?;
    let mut etcd_store = Vec::new();
    for (k, rounds) in per_system.enumerate() {
        let results = median(&rounds)?;
        etcd_store.push(ReplicaResults {
            replicas: k + 1,
            comparison: etcd_median.as_ref().map(|e| compare(&results, e)),
            results,
            rounds,
        });
    }
    let report = Report {
        clients: args.clients,
        duration: format_duration(args.duration),
        duration_secs: args.duration.as_secs_f64(),
        rounds: args.rounds,
        comparison: etcd_median.as_ref().map(|e| compare(&muster, e)),
        muster,
        etcd: etcd_median,
        etcd_store,
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
