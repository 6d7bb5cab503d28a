//! Reporting for `muster-bench discovery --protocol v3`: from the collected [`Measurements`] to
//! the median rows and the goal verdicts ([`summarize`], pure, so it can be tested without
//! starting a server), and from those to the text table or the `--json` object ([`print`]).
//! Apart from the measuring so that the figures' arithmetic and their printed shape, on which
//! scripts and docs/benchmarks.md rely, can be read and checked on their own.

use serde::Serialize;

use super::samples::{Measurements, SIZE, Stats, WORKLOADS, Workload};
use crate::DiscoveryArgs;

/// The goal: at least this many times etcd's throughput...
const THROUGHPUT_GOAL: f64 = 2.0;
/// ...with a p99 no worse than etcd's.
const P99_GOAL: f64 = 1.0;

#[derive(Debug, Serialize)]
pub(super) struct Row {
    workload: Workload,
    system: String,
    #[serde(flatten)]
    stats: Stats,
}

#[derive(Debug, Serialize)]
pub(super) struct Verdict {
    workload: Workload,
    throughput_ratio: f64,
    p99_ratio: f64,
    cpu_ratio: f64,
    met: bool,
}

/// The summary of one run: what is printed.
pub(super) struct Report {
    systems: Vec<String>,
    /// One row per workload and system: its median round.
    rows: Vec<Row>,
    /// One per workload when there are two systems (muster against etcd).
    verdicts: Vec<Verdict>,
    /// `rounds[workload][system]`, each system's rounds sorted by throughput: the order the
    /// `--json` output's `all_rounds` has always listed them in.
    sorted_rounds: Vec<Vec<Vec<Stats>>>,
}

/// Medians (by throughput) per workload and system, and muster's ratios to etcd's.
pub(super) fn summarize(measured: &Measurements) -> Report {
    let mut sorted_rounds = measured.rounds.clone();
    let mut rows = Vec::new();
    let mut verdicts = Vec::new();
    for (w, &workload) in WORKLOADS.iter().enumerate() {
        let Some(per_system) = sorted_rounds.get_mut(w) else {
            continue;
        };
        // `--rounds` is at least 1, so every system has a median round.
        let medians: Vec<Stats> = per_system
            .iter_mut()
            .filter_map(|rs| {
                rs.sort_by(|a, b| a.ops_per_sec.total_cmp(&b.ops_per_sec));
                rs.get(rs.len() / 2).cloned()
            })
            .collect();
        if let [m, e] = medians.as_slice() {
            let throughput_ratio = m.ops_per_sec / e.ops_per_sec.max(f64::MIN_POSITIVE);
            let p99_ratio = m.p99_ms / e.p99_ms.max(f64::MIN_POSITIVE);
            verdicts.push(Verdict {
                workload,
                throughput_ratio,
                p99_ratio,
                cpu_ratio: m.server_cpu_us_per_op / e.server_cpu_us_per_op.max(f64::MIN_POSITIVE),
                met: throughput_ratio >= THROUGHPUT_GOAL && p99_ratio <= P99_GOAL,
            });
        }
        for (system, stats) in measured.systems.iter().zip(medians) {
            rows.push(Row {
                workload,
                system: system.clone(),
                stats,
            });
        }
    }
    Report {
        systems: measured.systems.clone(),
        rows,
        verdicts,
        sorted_rounds,
    }
}

/// Prints the report on stdout: one JSON object with `--json`, else the table and verdicts.
pub(super) fn print(report: &Report, args: &DiscoveryArgs) {
    if args.json {
        print_json(report, args);
    } else {
        print_table(report, args);
    }
}

fn print_json(report: &Report, args: &DiscoveryArgs) {
    let json = serde_json::json!({
        "protocol": "v3",
        "clients": args.clients,
        "duration_s": args.duration.as_secs_f64(),
        "rounds": args.rounds,
        "members_per_formation": SIZE,
        "results": report.rows,
        "verdicts": report.verdicts,
        "all_rounds": WORKLOADS.iter().zip(&report.sorted_rounds).map(|(workload, per_system)| serde_json::json!({
            "workload": workload,
            "systems": report.systems.iter().zip(per_system).map(|(name, rounds)| serde_json::json!({
                "system": name, "rounds": rounds,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    println!("{json}");
}

fn print_table(report: &Report, args: &DiscoveryArgs) {
    println!(
        "etcd v3 discovery, {} clients × {:?}, median of {} rounds",
        args.clients, args.duration, args.rounds
    );
    println!(
        "{:<30} {:<18} {:>9} {:>7} {:>10} {:>8} {:>8} {:>10} {:>10}",
        "workload",
        "system",
        "ops",
        "failed",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "cpu us/op",
        "client us"
    );
    for r in &report.rows {
        let s = &r.stats;
        println!(
            "{:<30} {:<18} {:>9} {:>7} {:>10.1} {:>8.2} {:>8.2} {:>10.1} {:>10.1}",
            r.workload.label(),
            r.system,
            s.ops,
            s.failed,
            s.ops_per_sec,
            s.p50_ms,
            s.p99_ms,
            s.server_cpu_us_per_op,
            s.client_cpu_us_per_op
        );
    }
    for v in &report.verdicts {
        println!(
            "{:<30} throughput {:.2}× etcd, p99 {:.2}×, cpu/op {:.2}×: goal (≥ {THROUGHPUT_GOAL}×, p99 ≤ {P99_GOAL}×) {}",
            v.workload.label(),
            v.throughput_ratio,
            v.p99_ratio,
            v.cpu_ratio,
            if v.met { "met" } else { "NOT met" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(ops_per_sec: f64, p99_ms: f64) -> Stats {
        Stats {
            ops: 1,
            failed: 0,
            ops_per_sec,
            p50_ms: p99_ms / 2.0,
            p99_ms,
            server_cpu_us_per_op: 10.0,
            client_cpu_us_per_op: 1.0,
        }
    }

    #[test]
    fn medians_by_throughput_and_ratios_to_etcd() {
        let per_workload = vec![
            vec![stats(300.0, 1.0), stats(100.0, 9.0), stats(200.0, 2.0)],
            vec![stats(100.0, 2.0), stats(50.0, 1.0), stats(90.0, 3.0)],
        ];
        let m = Measurements {
            systems: vec!["muster-discovery".into(), "etcd 3.4".into()],
            rounds: vec![per_workload; WORKLOADS.len()],
        };
        let r = summarize(&m);
        assert_eq!(r.rows.len(), 2 * WORKLOADS.len());
        // Median rounds: muster's 200 ops/s (p99 2 ms), etcd's 90 ops/s (p99 3 ms).
        assert_eq!(r.rows[0].stats.ops_per_sec, 200.0);
        assert_eq!(r.rows[1].stats.ops_per_sec, 90.0);
        assert_eq!(r.rows[1].system, "etcd 3.4");
        let v = &r.verdicts[0];
        assert!((v.throughput_ratio - 200.0 / 90.0).abs() < 1e-9);
        assert!((v.p99_ratio - 2.0 / 3.0).abs() < 1e-9);
        assert!(v.met);
        // The JSON's every-round listing is sorted by throughput.
        let listed: Vec<f64> = r.sorted_rounds[0][0]
            .iter()
            .map(|s| s.ops_per_sec)
            .collect();
        assert_eq!(listed, vec![100.0, 200.0, 300.0]);
    }

    #[test]
    fn one_system_has_rows_but_no_verdicts() {
        let m = Measurements {
            systems: vec!["muster-discovery".into()],
            rounds: vec![vec![vec![stats(10.0, 1.0)]]; WORKLOADS.len()],
        };
        let r = summarize(&m);
        assert_eq!(r.rows.len(), WORKLOADS.len());
        assert!(r.verdicts.is_empty());
    }
}
