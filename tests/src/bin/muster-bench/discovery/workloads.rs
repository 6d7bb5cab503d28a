//! The timed workloads of `muster-bench discovery` (token creation, member registration,
//! directory reads) and the rounds that run them on every system in turn. This is the measuring:
//! it drives the servers and records latencies, errors and server CPU into [`Stats`]; medians and
//! comparisons are the reporting's ([`super::report`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use muster_shared::duration::format_duration;

use super::conn::Conn;
use super::samples::{Stats, SystemResults, Workload};
use super::system::System;
use crate::DiscoveryArgs;
use crate::discovery_cpu as cpu;

/// Members registered per token, as in a 3-node cluster bootstrap.
const MEMBERS_PER_TOKEN: u16 = 3;
/// The smallest registration pool, so a slow token-creation rate still leaves enough tokens.
const MIN_POOL: usize = 1000;

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

impl Recorder {
    /// The figures of everything recorded over `elapsed` (CPU not yet added).
    fn stats(self, elapsed: Duration) -> Stats {
        Stats::from_latencies(self.latencies_us, self.errors, elapsed)
    }
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
    Ok(rec.stats(elapsed).with_cpu(cpu_us))
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
        rec.stats(elapsed).with_cpu(cpu_us),
        fulls.into_iter().flatten().collect(),
    ))
}

/// Workload 3: closed-loop directory reads spread evenly over the full tokens (every one the
/// registration filled, as the members of that many clusters read theirs), or over the first
/// `hot` of them (`--read-tokens N`: a set small enough to stay in any cache).
async fn bench_read(
    system: &System,
    clients: u16,
    duration: Duration,
    full_tokens: &[String],
    hot: Option<usize>,
) -> Result<Stats> {
    if full_tokens.is_empty() {
        bail!(
            "no token on {} got all {MEMBERS_PER_TOKEN} members; cannot run the read workload",
            system.label()
        );
    }
    let tokens: Arc<Vec<String>> = Arc::new(
        full_tokens
            .iter()
            .take(hot.unwrap_or(usize::MAX))
            .cloned()
            .collect(),
    );
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
            // Each task starts at its own share of the list and walks it, so reads are spread
            // evenly over all of them and no two tasks read the same token at once.
            let mut k = i * (tokens.len() / usize::from(clients).max(1)).max(1);
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
    Ok(rec.stats(elapsed).with_cpu(cpu_us))
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
    hot: Option<usize>,
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
            state.read = Some(bench_read(system, clients, duration, &state.full, hot).await?)
        }
    }
    Ok(())
}

/// Runs every round: each workload on each system in turn. Returns per system, per round.
pub(super) async fn run_rounds(
    systems: &[System],
    args: &DiscoveryArgs,
) -> Result<Vec<Vec<SystemResults>>> {
    let mut results: Vec<Vec<SystemResults>> = systems.iter().map(|_| Vec::new()).collect();
    for round in 1..=args.rounds {
        eprintln!("round {round} of {}", args.rounds);
        let mut states: Vec<RoundState> = systems.iter().map(|_| RoundState::new()).collect();
        for workload in Workload::ALL {
            for (system, state) in systems.iter().zip(states.iter_mut()) {
                let hot = (args.read_tokens > 0).then_some(args.read_tokens);
                run_workload(workload, system, state, args.clients, args.duration, hot).await?;
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
    fn claim_counts_down_to_zero_and_stops() {
        let remaining = AtomicUsize::new(2);
        assert!(claim(&remaining));
        assert!(claim(&remaining));
        assert!(!claim(&remaining));
        assert_eq!(remaining.load(Ordering::Relaxed), 0);
    }
}
