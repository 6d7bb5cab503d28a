//! Reporting for `muster-bench lease`: from the samples the measuring collected
//! ([`Measurements`]) to the figures ([`report`], pure, tested without a cluster), and those to
//! the text lines or the `--json` object ([`print`]). Apart from the measuring so that the
//! arithmetic and the printed shape, which scripts and docs/benchmarks.md read, stand alone.

use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::summary::{percentile_ms, upper_median};

/// What one run measured, unsummarised.
pub(super) struct Measurements {
    pub(super) ttl_s: u64,
    /// Claim and renewal latencies, in the order they were sent.
    pub(super) claims: Vec<Duration>,
    /// Compare-and-set put latencies, in the order they were sent.
    pub(super) puts: Vec<Duration>,
    /// Wall time of the whole compare-and-set part, for puts per second.
    pub(super) cas_seconds: f64,
    /// Kill -9 of the holder's agent to the other machine's CMD starting, per round.
    pub(super) handover_s: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub(super) struct Report {
    ttl_s: u64,
    claims: usize,
    claim_p50_ms: f64,
    claim_p99_ms: f64,
    cas_puts: usize,
    cas_puts_per_second: f64,
    cas_p50_ms: f64,
    cas_p99_ms: f64,
    /// Kill -9 of the holder's agent to the other machine's CMD starting, per round.
    handover_s: Vec<f64>,
    handover_median_s: f64,
}

pub(super) fn report(m: &Measurements) -> Report {
    let mut claims = m.claims.clone();
    claims.sort();
    let mut puts = m.puts.clone();
    puts.sort();
    let mut sorted = m.handover_s.clone();
    Report {
        ttl_s: m.ttl_s,
        claims: claims.len(),
        claim_p50_ms: percentile_ms(&claims, 0.50),
        claim_p99_ms: percentile_ms(&claims, 0.99),
        cas_puts: puts.len(),
        cas_puts_per_second: puts.len() as f64 / m.cas_seconds,
        cas_p50_ms: percentile_ms(&puts, 0.50),
        cas_p99_ms: percentile_ms(&puts, 0.99),
        handover_median_s: upper_median(&mut sorted),
        // In round order, as measured.
        handover_s: m.handover_s.clone(),
    }
}

/// Prints the report on stdout: one JSON object with `--json`, else three lines.
pub(super) fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        println!(
            "lease claim/renew through a follower: {} calls, p50 {:.2} ms, p99 {:.2} ms",
            report.claims, report.claim_p50_ms, report.claim_p99_ms
        );
        println!(
            "compare-and-set puts: {:.0}/s (p50 {:.2} ms, p99 {:.2} ms)",
            report.cas_puts_per_second, report.cas_p50_ms, report.cas_p99_ms
        );
        println!(
            "hand-over after kill -9 of the holder's agent (ttl {} s): median {:.2} s over {:?}",
            report.ttl_s, report.handover_median_s, report.handover_s
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_from_unsorted_samples() {
        let ms = Duration::from_millis;
        let r = report(&Measurements {
            ttl_s: 3,
            claims: vec![ms(3), ms(1), ms(2)],
            puts: vec![ms(4), ms(2), ms(6), ms(8)],
            cas_seconds: 2.0,
            handover_s: vec![3.5, 3.1, 3.3],
        });
        assert_eq!((r.claims, r.claim_p50_ms, r.claim_p99_ms), (3, 2.0, 3.0));
        assert_eq!((r.cas_puts, r.cas_puts_per_second), (4, 2.0));
        assert_eq!((r.cas_p50_ms, r.cas_p99_ms), (4.0, 8.0));
        assert_eq!(r.handover_median_s, 3.3);
        assert_eq!(r.handover_s, vec![3.5, 3.1, 3.3]);
    }
}
