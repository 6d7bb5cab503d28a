//! Reporting for `muster-bench discovery` (v2): from every round's figures ([`Measurements`]) to
//! the medians and muster's ratios to etcd ([`summarize`], pure, tested without a server), and
//! from those to the table or the `--json` object ([`print`]). Apart from the measuring so that
//! the arithmetic and the printed shape, which scripts and docs/benchmarks.md read, stand alone.

use anyhow::{Context, Result};
use muster_shared::duration::format_duration;
use serde::Serialize;

use super::samples::{Measurements, Stats, SystemResults, Workload};
use crate::DiscoveryArgs;

/// The goals: at least this many times the anchor's throughput on every workload (etcd's v2
/// keys API used directly, or discovery.etcd.io in front of it)...
fn throughput_goal(against: &str) -> f64 {
    if against == "etcd" { 2.0 } else { 5.0 }
}
/// ...with a p99 latency no worse than the anchor's.
const P99_GOAL: f64 = 1.0;

/// How the table names the anchor.
fn anchor_label(against: &str) -> &'static str {
    if against == "etcd" {
        "etcd 3.4 (v2)"
    } else {
        "discovery.etcd.io"
    }
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

/// muster compared with etcd on one workload.
#[derive(Debug, Serialize)]
struct Comparison {
    workload: &'static str,
    /// muster ops/s divided by the anchor's; the goal is at least 2 (etcd) or 5
    /// (discovery.etcd.io).
    throughput_ratio: f64,
    /// muster p99 divided by etcd p99; the goal is at most 1.
    p99_ratio: f64,
    goal_met: bool,
}

fn compare(muster: &SystemResults, etcd: &SystemResults, goal: f64) -> Vec<Comparison> {
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
                goal_met: m.errors == 0 && throughput_ratio >= goal && p99_ratio <= P99_GOAL,
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
    /// Directory reads went to this many of the filled tokens (0: all of them).
    read_tokens: usize,
    /// What `etcd` and the ratios compare with: `etcd` (its v2 keys API) or `discovery.etcd.io`.
    against: String,
    /// The throughput ratio each workload has to reach.
    throughput_goal: f64,
    /// muster-discovery with its embedded store.
    muster: SystemResults,
    /// The anchor (see `against`).
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
    let reads = match report.read_tokens {
        0 => "reads spread over every filled token".to_string(),
        n => format!("reads over {n} tokens"),
    };
    println!(
        "muster-bench discovery: {} clients, {} per workload, median of {} rounds, {reads}\n",
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
            print_row("", anchor_label(&report.against), etcd.get(w));
        }
        let short = if report.against == "etcd" {
            "etcd"
        } else {
            "d.e.io"
        };
        let mut ratios = vec![(format!("muster/{short}"), report.comparison.as_ref())];
        for r in &report.etcd_store {
            ratios.push((
                format!("etcd-store x{}/{short}", r.replicas),
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
                "{}: goal {} against {} (throughput {:.2}x, want >= {}x; p99 {:.2}x, want <= {P99_GOAL}x)",
                c.workload,
                if c.goal_met { "met" } else { "NOT met" },
                anchor_label(&report.against),
                c.throughput_ratio,
                report.throughput_goal,
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
    let goal = throughput_goal(&args.against);
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
            comparison: etcd_median.as_ref().map(|e| compare(&results, e, goal)),
            results,
            rounds,
        });
    }
    Ok(Report {
        clients: args.clients,
        duration: format_duration(args.duration),
        duration_secs: args.duration.as_secs_f64(),
        rounds: args.rounds,
        read_tokens: args.read_tokens,
        comparison: etcd_median.as_ref().map(|e| compare(&muster, e, goal)),
        against: args.against.clone(),
        throughput_goal: goal,
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
            against: "etcd".into(),
            read_tokens: 0,
            cache_bytes: None,
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
    fn against_discovery_etcd_io_the_goal_is_five_times() {
        let measured = || Measurements {
            per_system: vec![vec![round(300.0, 1.0)], vec![round(100.0, 2.0)]],
            with_etcd: true,
        };
        // 3x with a lower p99: enough against etcd's keys API, not against discovery.etcd.io.
        let r = summarize(measured(), &args()).expect("summary");
        assert!(r.comparison.as_ref().expect("a comparison")[0].goal_met);
        let proxy = DiscoveryArgs {
            against: "discovery.etcd.io".into(),
            store: "fjall".into(),
            ..args()
        };
        let r = summarize(measured(), &proxy).expect("summary");
        assert_eq!(r.throughput_goal, 5.0);
        assert!(!r.comparison.as_ref().expect("a comparison")[0].goal_met);
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
