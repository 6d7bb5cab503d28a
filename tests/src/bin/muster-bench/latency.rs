//! Latency percentiles shared by the benchmarks that time single requests (`fleetlock`, `lease`):
//! one nearest-rank definition, so that their p50 and p99 mean the same thing.

use std::time::Duration;

/// The nearest-rank `p` percentile (0 < p <= 1) of `sorted`, in milliseconds; 0 when empty.
pub(crate) fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_in_milliseconds() {
        let sorted: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&sorted, 0.50), 50.0);
        assert_eq!(percentile_ms(&sorted, 0.99), 99.0);
        assert_eq!(percentile_ms(&sorted[..1], 0.99), 1.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
    }
}
