//! A streaming distribution of durations: memory does not grow with the number of samples.
//!
//! Percentiles come from an HDR histogram with 3 significant digits; count, min, max and sum are
//! exact, and mean and variance use Welford's update (a run of equal samples recorded at once,
//! [`Distribution::record_n_nanos`], is Chan et al.'s combination of a group), so they need no
//! stored samples either.
//!
//! # Precision
//!
//! - Values below 2048 ns are recorded exactly.
//! - Above that, a histogram bucket is at most 1/1024 of its lowest value wide. A percentile is
//!   reported as the top of the bucket holding the true nearest-rank sample, then clamped into the
//!   exact `[min, max]`, so `true ≤ reported ≤ true × (1 + 1/1024)`: under 0.1 % high, never low.
//! - Percentiles use nearest rank: `pXX` is the smallest recorded value with at least `XX %` of
//!   the samples at or below it.
//! - Values above [`MAX_TRACKED_NS`] (about 13 days) are clamped to it in the histogram, so their
//!   percentiles read as at most that; min, max, sum and mean still use the exact value.

use std::time::Duration;

use hdrhistogram::Histogram as HdrHistogram;
use serde::{Deserialize, Serialize};

use crate::time::duration_nanos;

/// Significant decimal digits kept by the histogram.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// The highest value the histogram tracks: 2^50 ns, about 13 days. Larger values are clamped.
pub const MAX_TRACKED_NS: u64 = 1 << 50;

/// Worst-case relative error of a reported percentile (always an overestimate).
pub const RELATIVE_PRECISION: f64 = 1.0 / 1024.0;

/// Bins of a [`Summary::histogram`] (at most; fewer when the range holds fewer distinct nanoseconds).
pub const HISTOGRAM_BINS: usize = 100;

/// Summary statistics in milliseconds. All `None` when there are no samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Samples recorded.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: Option<f64>,
    /// Population standard deviation (divides by `count`).
    pub std: Option<f64>,
    /// Smallest sample.
    pub min: Option<f64>,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// 99.9th percentile.
    pub p999: Option<f64>,
    /// Largest sample.
    pub max: Option<f64>,
    /// The samples binned for charts; `None` when there are none.
    pub histogram: Option<Histogram>,
}

/// A distribution's samples in at most [`HISTOGRAM_BINS`] bins, for charts: geometric bins from
/// the exact min to the exact max, so that both a narrow body and a long tail get resolution.
///
/// Bin `i` holds the samples in `[edges_ms[i], edges_ms[i + 1])`, the last bin its upper edge
/// too. Samples are placed by their HDR histogram bucket's midpoint, so a sample within 0.1 % of
/// an edge may sit in the neighbouring bin; the counts add up to `count` exactly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Histogram {
    /// Bin edges in milliseconds, ascending: `counts.len() + 1` of them, first min, last max.
    pub edges_ms: Vec<f64>,
    /// Samples per bin.
    pub counts: Vec<u64>,
}

impl Histogram {
    /// The empirical CDF through the bin edges: `(ms, fraction of samples at or below)`,
    /// starting at `(min, 0)` and ending at `(max, 1)`; linear within a bin when drawn as a line.
    pub fn cdf_points(&self) -> Vec<(f64, f64)> {
        let total: u64 = self.counts.iter().sum();
        if total == 0 || self.edges_ms.len() != self.counts.len() + 1 {
            return Vec::new();
        }
        let mut points = Vec::with_capacity(self.edges_ms.len());
        points.push((self.edges_ms[0], 0.0));
        let mut seen = 0;
        for (count, upper) in self.counts.iter().zip(&self.edges_ms[1..]) {
            seen += count;
            points.push((*upper, seen as f64 / total as f64));
        }
        points
    }

    /// Samples in all bins.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Geometric bin edges in ns from `min` to `max` (both included, integers, strictly ascending).
/// A zero minimum starts the geometric range at 1 ns; equal ends give one bin.
fn histogram_edges(min: u64, max: u64) -> Vec<u64> {
    let lo = min.max(1);
    if max <= lo {
        return vec![min, max.max(min)];
    }
    let ratio = (max as f64 / lo as f64).ln();
    let mut edges = vec![min];
    for i in 1..HISTOGRAM_BINS {
        let edge = (lo as f64 * (ratio * i as f64 / HISTOGRAM_BINS as f64).exp()).round() as u64;
        if edge > *edges.last().unwrap_or(&0) && edge < max {
            edges.push(edge);
        }
    }
    edges.push(max);
    edges
}

impl Summary {
    /// The statistic called `stat` (`mean`, `std`, `min`, `max`, `p50` ... `p999`).
    pub fn stat(&self, stat: &str) -> Option<f64> {
        match stat {
            "mean" => self.mean,
            "std" => self.std,
            "min" => self.min,
            "p50" => self.p50,
            "p90" => self.p90,
            "p95" => self.p95,
            "p99" => self.p99,
            "p999" => self.p999,
            "max" => self.max,
            _ => None,
        }
    }

    /// The names [`Summary::stat`] accepts, in report order.
    pub const STATS: [&'static str; 9] = ["mean", "p50", "p90", "p95", "p99", "p999", "min", "max", "std"];
}

/// A streaming distribution of durations, in nanoseconds.
#[derive(Clone, Debug)]
pub struct Distribution {
    histogram: HdrHistogram<u64>,
    count: u64,
    min: u64,
    max: u64,
    sum: u128,
    /// Welford running mean and sum of squared deviations, in ns and ns².
    mean: f64,
    m2: f64,
}

impl Default for Distribution {
    fn default() -> Self {
        Self::new()
    }
}

impl Distribution {
    /// An empty distribution.
    pub fn new() -> Self {
        // Auto-resizing from a tiny start: memory follows the largest value seen, not the count.
        let histogram = HdrHistogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is a valid setting");
        Distribution { histogram, count: 0, min: u64::MAX, max: 0, sum: 0, mean: 0.0, m2: 0.0 }
    }

    /// Records one sample.
    pub fn record(&mut self, d: Duration) {
        self.record_nanos(duration_nanos(d));
    }

    /// Records `count` samples of `nanos` ns each: the same as `count` calls of
    /// [`Self::record_nanos`], in O(1). Count, sum, min, max and the histogram are exactly theirs;
    /// mean and variance come from Chan et al.'s combination of a group of equal values (its own
    /// mean `nanos`, no spread), which may differ from `count` Welford updates in the last bits.
    /// One sample is recorded by Welford's update, as by [`Self::record_nanos`].
    pub fn record_n_nanos(&mut self, nanos: u64, count: u64) {
        match count {
            0 => {}
            1 => self.record_nanos(nanos),
            _ => {
                self.histogram
                    .record_n(nanos.min(MAX_TRACKED_NS), count)
                    .expect("values up to MAX_TRACKED_NS fit an auto-resizing histogram");
                self.min = self.min.min(nanos);
                self.max = self.max.max(nanos);
                self.sum += u128::from(nanos) * u128::from(count);
                let (n_a, n_b) = (self.count as f64, count as f64);
                let n = n_a + n_b;
                let delta = nanos as f64 - self.mean;
                self.mean += delta * n_b / n;
                self.m2 += delta * delta * n_a * n_b / n;
                self.count += count;
            }
        }
    }

    /// Records one sample of `nanos` ns; percentiles saturate above [`MAX_TRACKED_NS`], min, max and mean stay exact.
    pub fn record_nanos(&mut self, nanos: u64) {
        self.histogram
            .record(nanos.min(MAX_TRACKED_NS))
            .expect("values up to MAX_TRACKED_NS fit an auto-resizing histogram");
        self.count += 1;
        self.min = self.min.min(nanos);
        self.max = self.max.max(nanos);
        self.sum += u128::from(nanos);
        let x = nanos as f64;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// Adds `other`'s samples, as if they had been recorded here.
    pub fn merge(&mut self, other: &Distribution) {
        if other.count == 0 {
            return;
        }
        self.histogram.add(&other.histogram).expect("an auto-resizing histogram accepts any other");
        let (n_a, n_b) = (self.count as f64, other.count as f64);
        let n = n_a + n_b;
        let delta = other.mean - self.mean;
        // Chan et al.'s pairwise combination of Welford states.
        self.mean += delta * n_b / n;
        self.m2 += other.m2 + delta * delta * n_a * n_b / n;
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Exact sum of all samples, in nanoseconds.
    pub fn sum_nanos(&self) -> u128 {
        self.sum
    }

    /// The exact smallest sample in ns; `None` when empty.
    pub fn min_nanos(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// The exact largest sample in ns; `None` when empty.
    pub fn max_nanos(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// The nearest-rank quantile `q` in `[0, 1]`, within [`RELATIVE_PRECISION`], clamped into the
    /// exact `[min, max]`.
    pub fn quantile_nanos(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        Some(self.histogram.value_at_quantile(q).clamp(self.min, self.max))
    }

    /// The statistics in milliseconds, as reports show them.
    pub fn summary(&self) -> Summary {
        if self.count == 0 {
            return Summary::default();
        }
        let ms = |nanos: u64| nanos as f64 / 1e6;
        let q = |q: f64| self.quantile_nanos(q).map(ms);
        // Rounding can put the float mean a hair outside the exact range; keep it inside.
        let mean = self.mean.clamp(self.min as f64, self.max as f64) / 1e6;
        let std = (self.m2.max(0.0) / self.count as f64).sqrt() / 1e6;
        Summary {
            count: self.count,
            mean: Some(mean),
            std: Some(std),
            min: Some(ms(self.min)),
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            max: Some(ms(self.max)),
            histogram: Some(self.histogram_bins()),
        }
    }

    /// The samples in [`HISTOGRAM_BINS`] geometric bins between min and max (see [`Histogram`]).
    fn histogram_bins(&self) -> Histogram {
        let edges = histogram_edges(self.min, self.max);
        let mut counts = vec![0u64; edges.len() - 1];
        for v in self.histogram.iter_recorded() {
            let value = self.histogram.median_equivalent(v.value_iterated_to()).clamp(self.min, self.max);
            let bin = edges.partition_point(|&e| e <= value).saturating_sub(1).min(counts.len() - 1);
            counts[bin] += v.count_at_value();
        }
        Histogram { edges_ms: edges.iter().map(|&e| e as f64 / 1e6).collect(), counts }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The nearest-rank quantile of `sorted`, with the same rank rule as the histogram.
    fn exact_quantile(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    fn from(values: &[u64]) -> Distribution {
        let mut d = Distribution::new();
        values.iter().for_each(|&v| d.record_nanos(v));
        d
    }

    fn check_summary_invariants(s: &Summary) {
        let all = [s.mean, s.std, s.min, s.p50, s.p90, s.p95, s.p99, s.p999, s.max];
        assert!(all.iter().all(|v| v.is_some_and(|v| v.is_finite())), "{s:?}");
        let chain = [s.min, s.p50, s.p90, s.p95, s.p99, s.p999, s.max].map(Option::unwrap);
        assert!(chain.windows(2).all(|w| w[0] <= w[1]), "{s:?}");
        let mean = s.mean.unwrap();
        assert!(chain[0] <= mean && mean <= chain[6], "{s:?}");
    }

    /// Values spread over many magnitudes, with many repeats.
    fn values() -> impl Strategy<Value = Vec<u64>> {
        let one =
            prop_oneof![0..3000u64, 0..10_000_000u64, 0..100_000_000_000u64, Just(u64::MAX), Just(MAX_TRACKED_NS + 1)];
        prop::collection::vec(one, 1..400)
    }

    proptest! {
        #[test]
        fn percentiles_match_sorted_vector(values in values()) {
            let d = from(&values);
            let mut sorted = values.clone();
            sorted.sort_unstable();
            for q in [0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0] {
                let exact = exact_quantile(&sorted, q);
                let got = d.quantile_nanos(q).unwrap();
                prop_assert!(got >= exact.min(MAX_TRACKED_NS), "q={q} got={got} exact={exact}");
                if exact <= MAX_TRACKED_NS {
                    let bound = exact as f64 * (1.0 + RELATIVE_PRECISION);
                    prop_assert!(got as f64 <= bound, "q={q} got={got} exact={exact}");
                }
            }
            check_summary_invariants(&d.summary());
            prop_assert_eq!(d.min_nanos(), sorted.first().copied());
            prop_assert_eq!(d.max_nanos(), sorted.last().copied());
            prop_assert_eq!(d.sum_nanos(), values.iter().map(|&v| u128::from(v)).sum::<u128>());
        }

        #[test]
        fn merge_is_like_recording_everything(a in values(), b in values()) {
            let mut merged = from(&a);
            merged.merge(&from(&b));
            let all: Vec<u64> = a.iter().chain(&b).copied().collect();
            let whole = from(&all);
            prop_assert_eq!(merged.count(), (a.len() + b.len()) as u64);
            prop_assert_eq!(merged.sum_nanos(), whole.sum_nanos());
            let (m, w) = (merged.summary(), whole.summary());
            prop_assert_eq!((m.min, m.max, m.p50, m.p99, m.p999), (w.min, w.max, w.p50, w.p99, w.p999));
            let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
            prop_assert!(close(m.mean.unwrap(), w.mean.unwrap()), "{m:?} {w:?}");
            prop_assert!(close(m.std.unwrap(), w.std.unwrap()), "{m:?} {w:?}");
            check_summary_invariants(&m);
        }
    }

    proptest! {
        #[test]
        fn histogram_bins_hold_every_sample_near_its_value(values in values()) {
            let d = from(&values);
            let h = d.summary().histogram.expect("samples give a histogram");
            let edges_ns: Vec<u64> = h.edges_ms.iter().map(|e| (e * 1e6).round() as u64).collect();
            prop_assert_eq!(h.edges_ms.len(), h.counts.len() + 1);
            prop_assert!(h.counts.len() <= HISTOGRAM_BINS);
            prop_assert_eq!(h.total(), values.len() as u64);
            prop_assert_eq!(edges_ns.first().copied(), d.min_nanos());
            prop_assert_eq!(edges_ns.last().copied(), d.max_nanos());
            prop_assert!(edges_ns.windows(2).all(|w| w[0] < w[1]) || edges_ns.len() == 2, "{edges_ns:?}");
            // Each bin's count is the samples whose value lies in it, give or take the HDR bucket
            // (0.1 %) at its edges, and values beyond MAX_TRACKED_NS (clamped in the HDR histogram).
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let last = h.counts.len() - 1;
            for (i, &count) in h.counts.iter().enumerate() {
                let (lo, hi) = (edges_ns[i] as f64, edges_ns[i + 1] as f64);
                let slack = |v: f64| v * RELATIVE_PRECISION + 1.0;
                let inside = |v: u64, a: f64, b: f64| {
                    let v = v as f64;
                    v >= a && (v < b || (i == last && v <= b))
                };
                let tight = sorted.iter().filter(|&&v| inside(v, lo + slack(lo), hi - slack(hi))).count() as u64;
                let loose = sorted.iter().filter(|&&v| v > MAX_TRACKED_NS || inside(v, lo - slack(lo), hi + slack(hi))).count() as u64;
                prop_assert!(tight <= count && count <= loose, "bin {i} [{lo}, {hi}): {count} not in {tight}..={loose}");
            }
            let cdf = h.cdf_points();
            prop_assert_eq!(cdf.first().map(|p| p.1), Some(0.0));
            prop_assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
            prop_assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        }
    }

    #[test]
    fn histogram_edges_are_geometric_and_cover_min_to_max() {
        let d = from(&(1..=1000).map(|ms| ms * 1_000_000).collect::<Vec<_>>());
        let h = d.summary().histogram.unwrap();
        assert_eq!(h.counts.len(), HISTOGRAM_BINS);
        assert_eq!((h.edges_ms[0], h.edges_ms[HISTOGRAM_BINS]), (1.0, 1000.0));
        // 1 ms to 1 s in 100 geometric bins: each edge 10^(3/100) ≈ 1.0715 times the last.
        let ratios: Vec<f64> = h.edges_ms.windows(2).map(|w| w[1] / w[0]).collect();
        assert!(ratios.iter().all(|r| (r - 1.0715).abs() < 1e-3), "{ratios:?}");
        assert_eq!(h.total(), 1000);
        // One value, or only zeros: one bin.
        for values in [&[7u64, 7][..], &[0, 0], &[0, 1]] {
            let h = from(values).summary().histogram.unwrap();
            assert_eq!((h.counts.len(), h.total()), (1, 2), "{values:?}");
        }
        assert_eq!(Distribution::new().summary().histogram, None);
    }

    proptest! {
        #[test]
        fn recording_n_equal_samples_is_like_recording_each(runs in prop::collection::vec((0u64..5_000_000_000, 0u64..50), 0..40)) {
            let mut each = Distribution::new();
            let mut grouped = Distribution::new();
            for &(v, n) in &runs {
                (0..n).for_each(|_| each.record_nanos(v));
                grouped.record_n_nanos(v, n);
            }
            prop_assert_eq!(grouped.count(), each.count());
            prop_assert_eq!(grouped.sum_nanos(), each.sum_nanos());
            prop_assert_eq!(grouped.min_nanos(), each.min_nanos());
            prop_assert_eq!(grouped.max_nanos(), each.max_nanos());
            let (g, e) = (grouped.summary(), each.summary());
            prop_assert_eq!(&g.histogram, &e.histogram);
            prop_assert_eq!((g.p50, g.p90, g.p99, g.p999), (e.p50, e.p90, e.p99, e.p999));
            if let (Some(gm), Some(em)) = (g.mean, e.mean) {
                prop_assert!((gm - em).abs() <= 1e-9 * em.abs().max(1e-9), "mean {} vs {}", gm, em);
                let (gs, es) = (g.std.unwrap(), e.std.unwrap());
                prop_assert!((gs - es).abs() <= 1e-6 * em.abs().max(es).max(1e-9), "std {} vs {}", gs, es);
            }
        }
    }

    #[test]
    fn empty_summary_has_no_values() {
        let s = Distribution::new().summary();
        assert_eq!(s, Summary { count: 0, ..Summary::default() });
        let mut d = Distribution::new();
        d.merge(&Distribution::new());
        assert!(d.is_empty());
    }

    #[test]
    fn known_values() {
        // 1..=100 ms: nearest rank p50 is 50 ms, p99 is 99 ms; both within 0.1 %, never below.
        let d = from(&(1..=100).map(|ms| ms * 1_000_000).collect::<Vec<_>>());
        let s = d.summary();
        assert_eq!((s.count, s.min, s.max, s.mean), (100, Some(1.0), Some(100.0), Some(50.5)));
        let p50 = s.p50.unwrap();
        assert!((50.0..50.05).contains(&p50), "{p50}");
        let p99 = s.p99.unwrap();
        assert!((99.0..99.1).contains(&p99), "{p99}");
        let std = s.std.unwrap();
        assert!((std - 28.866_070).abs() < 1e-5, "{std}");
    }

    #[test]
    fn huge_values_are_clamped_not_fatal() {
        let d = from(&[u64::MAX, 5]);
        let s = d.summary();
        assert_eq!(s.max, Some(u64::MAX as f64 / 1e6));
        assert!(s.p999.unwrap() <= s.max.unwrap());
        assert!(s.p999.unwrap() >= MAX_TRACKED_NS as f64 / 1e6);
    }
}
