//! Reporting for `muster-bench discovery` (v2): from every round's figures ([`Measurements`]) to
//! the medians and muster's ratios to etcd ([`summarize`], pure, tested without a server), and
//! from those to the table or the `--json` object ([`print`]). Apart from the measuring so that
//! the arithmetic and the printed shape, which scripts and docs/benchmarks.md read, stand alone.

use anyhow::{Context, Result};
use muster_shared::duration::format_duration;
use serde::Serialize;

use super::samples::{Measurements, Stats, SystemResults, Workload};
use crate::DiscoveryArgs;

/// The target: at least this many times etcd's throughput on every workload...
const THROUGHPUT_GOAL: f64 = 2.0;
/// ...with a p99 latency no worse than etcd's.
const P99_GOAL: f64 = 1.0;

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
pub(super) struct Report {
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

/// Medians per system and workload, and the ratios of each muster system to etcd.
pub(super) fn summarize(measured: Measurements, args: &DiscoveryArgs) -> Result<Report> {
    let mut per_system = measured.per_system;
    let etcd_rounds = if measured.with_etcd {
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
    Ok(Report {
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
    })
}

/// Prints the report on stdout: one pretty JSON object with `--json`, else the table.
pub(super) fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print_table(report);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stats(ops_per_sec: f64, p99_ms: f64) -> Stats {
        Stats {
            ops: 10,
            ops_per_sec,
            p50_ms: p99_ms / 2.0,
            p99_ms,
            errors: 0,
            elapsed_secs: 1.0,
            server_cpu_us_per_op: 5.0,
        }
    }

    fn round(ops_per_sec: f64, p99_ms: f64) -> SystemResults {
        let s = stats(ops_per_sec, p99_ms);
        SystemResults {
            token_creation: s,
            member_registration: s,
            directory_read: s,
        }
    }

    fn args() -> DiscoveryArgs {
        DiscoveryArgs {
            clients: 4,
            duration: Duration::from_secs(2),
            json: false,
            rounds: 3,
            skip_etcd: false,
            store: "etcd".into(),
            replicas: 1,
            protocol: "v2".into(),
        }
    }

    #[test]
    fn medians_and_ratios_for_muster_the_replicas_and_etcd() {
        let measured = Measurements {
            per_system: vec![
                vec![round(300.0, 1.0), round(100.0, 5.0), round(200.0, 2.0)],
                vec![round(50.0, 4.0), round(60.0, 4.0), round(40.0, 4.0)],
                vec![round(90.0, 4.0), round(80.0, 3.0), round(100.0, 4.0)],
            ],
            with_etcd: true,
        };
        let r = summarize(measured, &args()).expect("summary");
        assert_eq!(r.muster.token_creation.ops_per_sec, 200.0);
        assert_eq!(r.etcd.map(|e| e.directory_read.ops_per_sec), Some(90.0));
        let c = &r.comparison.as_ref().expect("a comparison")[0];
        assert!((c.throughput_ratio - 200.0 / 90.0).abs() < 1e-9);
        assert!((c.p99_ratio - 0.5).abs() < 1e-9);
        assert!(c.goal_met);
        assert_eq!(r.etcd_store.len(), 1);
        assert_eq!(r.etcd_store[0].replicas, 1);
        assert_eq!(
            r.etcd_store[0].results.member_registration.ops_per_sec,
            50.0
        );
        assert!(!r.etcd_store[0].comparison.as_ref().expect("a comparison")[0].goal_met);
        assert_eq!(r.duration, "2s");
    }

    #[test]
    fn without_etcd_there_is_nothing_to_compare() {
        let measured = Measurements {
            per_system: vec![vec![round(10.0, 1.0)]],
            with_etcd: false,
        };
        let r = summarize(measured, &args()).expect("summary");
        assert!(r.etcd.is_none() && r.comparison.is_none() && r.etcd_rounds.is_none());
        assert!(r.etcd_store.is_empty());
    }
}
