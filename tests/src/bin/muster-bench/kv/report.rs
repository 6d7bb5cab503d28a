//! Reporting for `muster-bench kv`: every round's figures ([`RoundFigures`]) summarised per row
//! (workload × clients × system) as medians with min and max ([`report`], pure, tested without
//! a cluster), then printed as a table or one `--json` object.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use super::workloads::{Run, Workload};
use crate::summary::{percentile_ms, upper_median};

/// One workload at one client count on one system, one round.
#[derive(Debug, Clone, Serialize)]
pub(super) struct RoundFigures {
    pub(super) system: &'static str,
    pub(super) workload: Workload,
    pub(super) clients: usize,
    pub(super) ops_per_sec: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) errors: u64,
    /// CPU (user + system) of the system's three server processes per answered request.
    pub(super) server_cpu_us_per_op: f64,
    /// `fsync` + `fdatasync` calls of the three server processes per acknowledged write (writes
    /// only; `None` where they are not counted).
    pub(super) fsyncs_per_write: Option<f64>,
}

impl RoundFigures {
    pub(super) fn new(
        system: &'static str,
        workload: Workload,
        clients: usize,
        run: Run,
        cpu_us: f64,
        fsyncs: Option<u64>,
    ) -> Self {
        let Run {
            mut latencies,
            errors,
            elapsed,
            ..
        } = run;
        latencies.sort();
        let ops = latencies.len().max(1) as f64;
        Self {
            system,
            workload,
            clients,
            ops_per_sec: latencies.len() as f64 / elapsed.as_secs_f64().max(1e-9),
            p50_ms: percentile_ms(&latencies, 0.50),
            p99_ms: percentile_ms(&latencies, 0.99),
            errors,
            server_cpu_us_per_op: cpu_us / ops,
            fsyncs_per_write: fsyncs.filter(|_| workload.writes()).map(|n| n as f64 / ops),
        }
    }
}

/// A figure over the rounds: the median, and the smallest and largest round.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Self {
        let median = upper_median(&mut values);
        Self {
            median,
            min: values.first().copied().unwrap_or(0.0),
            max: values.last().copied().unwrap_or(0.0),
        }
    }
}

/// One system's row, over the rounds.
#[derive(Debug, Clone, Serialize)]
pub(super) struct SystemRow {
    pub(super) ops_per_sec: Spread,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) server_cpu_us_per_op: f64,
    pub(super) fsyncs_per_write: Option<f64>,
    pub(super) errors: u64,
}

#[derive(Debug, Clone, Serialize)]
pub(super) struct Row {
    pub(super) workload: Workload,
    pub(super) clients: usize,
    pub(super) muster: Option<SystemRow>,
    pub(super) etcd: Option<SystemRow>,
    /// muster's median throughput over etcd's (≥ 1.0 is the goal).
    pub(super) ratio: Option<f64>,
}

/// Watch delivery per system: latencies over every round.
#[derive(Debug, Clone, Serialize)]
pub(super) struct WatchRow {
    pub(super) system: &'static str,
    pub(super) deliveries: usize,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) rounds: usize,
    pub(super) duration_s: f64,
    pub(super) timing: String,
    /// What one writer with `fdatasync` after each 4 KiB reached on the same disk (median of the
    /// probes before each round).
    pub(super) disk_fsyncs_per_sec: f64,
    pub(super) rows: Vec<Row>,
    pub(super) watch: Vec<WatchRow>,
}

pub(super) fn report(
    rounds: usize,
    duration: Duration,
    timing: String,
    disk_rates: Vec<f64>,
    figures: &[RoundFigures],
    watch: &BTreeMap<&'static str, Vec<Duration>>,
) -> Report {
    let mut keys: Vec<(Workload, usize)> = Vec::new();
    for f in figures {
        if !keys.contains(&(f.workload, f.clients)) {
            keys.push((f.workload, f.clients));
        }
    }
    let system_row = |system: &str, workload: Workload, clients: usize| {
        let mine: Vec<&RoundFigures> = figures
            .iter()
            .filter(|f| f.system == system && f.workload == workload && f.clients == clients)
            .collect();
        if mine.is_empty() {
            return None;
        }
        let median = |get: &dyn Fn(&RoundFigures) -> f64| {
            upper_median(&mut mine.iter().map(|f| get(f)).collect::<Vec<_>>())
        };
        let fsyncs: Vec<f64> = mine.iter().filter_map(|f| f.fsyncs_per_write).collect();
        Some(SystemRow {
            ops_per_sec: Spread::of(mine.iter().map(|f| f.ops_per_sec).collect()),
            p50_ms: median(&|f| f.p50_ms),
            p99_ms: median(&|f| f.p99_ms),
            server_cpu_us_per_op: median(&|f| f.server_cpu_us_per_op),
            fsyncs_per_write: (!fsyncs.is_empty()).then(|| upper_median(&mut fsyncs.clone())),
            errors: mine.iter().map(|f| f.errors).sum(),
        })
    };
    let rows = keys
        .into_iter()
        .map(|(workload, clients)| {
            let muster = system_row("muster", workload, clients);
            let etcd = system_row("etcd", workload, clients);
            let ratio = match (&muster, &etcd) {
                (Some(m), Some(e)) if e.ops_per_sec.median > 0.0 => {
                    Some(m.ops_per_sec.median / e.ops_per_sec.median)
                }
                _ => None,
            };
            Row {
                workload,
                clients,
                muster,
                etcd,
                ratio,
            }
        })
        .collect();
    let watch = watch
        .iter()
        .map(|(system, latencies)| {
            let mut sorted = latencies.clone();
            sorted.sort();
            WatchRow {
                system,
                deliveries: sorted.len(),
                p50_ms: percentile_ms(&sorted, 0.50),
                p99_ms: percentile_ms(&sorted, 0.99),
            }
        })
        .collect();
    let mut disk = disk_rates;
    Report {
        rounds,
        duration_s: duration.as_secs_f64(),
        timing,
        disk_fsyncs_per_sec: upper_median(&mut disk),
        rows,
        watch,
    }
}

fn cell(row: &Option<SystemRow>) -> String {
    let Some(r) = row else {
        return "—".into();
    };
    let fsyncs = r
        .fsyncs_per_write
        .map(|f| format!(", {f:.2} fsync/w"))
        .unwrap_or_default();
    let errors = if r.errors > 0 {
        format!(", {} errors", r.errors)
    } else {
        String::new()
    };
    format!(
        "{:>7.0}/s ({:.0}–{:.0}) p50 {:.2} p99 {:.2} ms, {:.0} µs/op{fsyncs}{errors}",
        r.ops_per_sec.median,
        r.ops_per_sec.min,
        r.ops_per_sec.max,
        r.p50_ms,
        r.p99_ms,
        r.server_cpu_us_per_op
    )
}

pub(super) fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
        return Ok(());
    }
    println!(
        "key-value store, 3 members each ({}), medians of {} rounds of {:.0} s; disk: {:.0} fdatasync/s",
        report.timing, report.rounds, report.duration_s, report.disk_fsyncs_per_sec
    );
    for row in &report.rows {
        let ratio = row
            .ratio
            .map(|r| format!("{r:.2}×"))
            .unwrap_or_else(|| "—".into());
        println!(
            "{:<20} {:>2} clients  {ratio:>6}\n    muster {}\n    etcd   {}",
            row.workload.title(),
            row.clients,
            cell(&row.muster),
            cell(&row.etcd)
        );
    }
    for w in &report.watch {
        println!(
            "watch delivery {:<6} {} events, p50 {:.2} ms, p99 {:.2} ms",
            w.system, w.deliveries, w.p50_ms, w.p99_ms
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ops: usize) -> Run {
        Run {
            latencies: vec![Duration::from_millis(1); ops],
            errors: 0,
            first_error: None,
            elapsed: Duration::from_secs(1),
        }
    }

    fn round(system: &'static str, ops: f64, fsyncs: u64) -> RoundFigures {
        RoundFigures::new(
            system,
            Workload::Put,
            16,
            run(ops as usize),
            ops * 100.0,
            Some(fsyncs),
        )
    }

    #[test]
    fn medians_over_rounds_and_the_ratio_of_medians() {
        let figures = vec![
            round("muster", 300.0, 30),
            round("muster", 100.0, 30),
            round("muster", 200.0, 40),
            round("etcd", 100.0, 300),
            round("etcd", 100.0, 300),
            round("etcd", 50.0, 150),
        ];
        let r = report(
            3,
            Duration::from_secs(1),
            "t".into(),
            vec![900.0],
            &figures,
            &BTreeMap::new(),
        );
        let row = &r.rows[0];
        let m = row.muster.as_ref().expect("muster's row");
        assert_eq!(
            m.ops_per_sec,
            Spread {
                median: 200.0,
                min: 100.0,
                max: 300.0
            }
        );
        assert_eq!(m.fsyncs_per_write, Some(0.2));
        assert_eq!(m.server_cpu_us_per_op, 100.0);
        assert_eq!(
            row.etcd.as_ref().expect("etcd's row").fsyncs_per_write,
            Some(3.0)
        );
        assert_eq!(row.ratio, Some(2.0));
        assert_eq!(r.disk_fsyncs_per_sec, 900.0);
    }

    #[test]
    fn reads_have_no_fsyncs_per_write() {
        let f = RoundFigures::new("etcd", Workload::Get, 1, run(10), 0.0, Some(5));
        assert_eq!(f.fsyncs_per_write, None);
        assert_eq!(f.ops_per_sec, 10.0);
    }
}
