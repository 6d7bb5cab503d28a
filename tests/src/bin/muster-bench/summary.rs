//! Order statistics shared by the benchmarks' reports (`asg`, `fleetlock`, `lease`): one
//! definition each of a percentile and a median, so that p99 or "median" means the same figure
//! in every benchmark that prints it.

use std::time::Duration;

/// The nearest-rank `p` percentile (0 < p <= 1) of `sorted`, in milliseconds; 0 when empty.
pub(crate) fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1000.0
}

/// The upper median (the middle, or the later of the two middles) of `v`, which it sorts; 0 when
/// empty.
pub(crate) fn upper_median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
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

    #[test]
    fn median_of_an_even_count_is_the_upper_middle() {
        assert_eq!(upper_median(&mut [4.0, 1.0, 3.0, 2.0]), 3.0);
        assert_eq!(upper_median(&mut [2.0, 1.0, 3.0]), 2.0);
        assert_eq!(upper_median(&mut []), 0.0);
    }
}
