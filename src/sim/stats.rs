//! Statistics over samples that the simulator's runs and the benchmarks
//! report: nearest-rank percentiles, the median, Jain's fairness index.

/// Jain's fairness index of `x`: (Σx)² / (n·Σx²), 1 when all are equal,
/// 1/n when one takes everything (Jain, Chiu and Hawe, DEC-TR-301, 1984).
/// 0 for an empty slice or when every value is 0 (no throughput to share
/// is not called fair).
pub fn jain_index(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || sq == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * sq)
}

/// The `p`-th percentile (0..=100) of `sorted` (ascending) by the nearest
/// rank: the smallest value with at least p% of the values at or below
/// it. 0 for an empty slice; p <= 0 gives the smallest value.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let n = sorted.len();
    let rank = (p.clamp(0.0, 100.0) / 100.0 * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// The median of `v`: the middle value, or the mean of the two middle
/// values when there is an even number of them; NaN for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index_of_known_vectors() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0, 5.0]), 1.0);
        assert!((jain_index(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        // (1 + 2 + 3)^2 / (3 * (1 + 4 + 9)) = 36 / 42.
        assert!((jain_index(&[1.0, 2.0, 3.0]) - 36.0 / 42.0).abs() < 1e-12);
        // Scale does not matter.
        assert!((jain_index(&[1e9, 2e9, 3e9]) - 36.0 / 42.0).abs() < 1e-12);
        assert_eq!(jain_index(&[7.0]), 1.0);
        assert_eq!(jain_index(&[]), 0.0);
        assert_eq!(jain_index(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn percentile_is_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 99.5), 100);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&v, 1.0), 1);
        assert_eq!(percentile(&v, 1.5), 2);
        assert_eq!(percentile(&[], 50.0), 0);
        assert_eq!(percentile(&[9], 99.0), 9);
        // 10 values: p50 is the 5th, p99 the 10th.
        let w = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1000];
        assert_eq!(percentile(&w, 50.0), 5);
        assert_eq!(percentile(&w, 99.0), 1000);
        assert_eq!(percentile(&w, 90.0), 9);
    }

    #[test]
    fn the_median_is_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(vec![]).is_nan());
    }
}
