//! The two-sample tests `batchlab compare` rests its verdicts on. None of them takes a request
//! as an independent sample: the requests of one batch share one generate call, so their fates
//! are tied. The unit is the batch, a block of time intervals, or a repeat.
//!
//! - [`bootstrap_stats`]: every statistic of a per-request timing (mean, p50 … p99.9, min, max,
//!   std). The difference `B − A` of each statistic, and its distribution under resampling
//!   **whole batches** with replacement, independently in each run ([`BOOTSTRAP_RESAMPLES`]
//!   resamples from a fixed seed, so a verdict is reproducible). The two-sided p-value is the
//!   share of resampled differences on the other side of 0 (the smallest alpha whose percentile
//!   interval excludes 0). A tail statistic is tested as itself, not through the bulk.
//! - [`fisher_exact`]: counts (errors out of requests, SLO met out of judged, full batches out of
//!   batches). Two-sided Fisher's exact test on the 2×2 table, SciPy's `fisher_exact`: the
//!   summed probability of every table as likely as the observed one or less, given the margins.
//! - [`welch_t`]: one value per unit (per repeat with `--repeat`, per block of the time series
//!   without), Welch's unequal-variance t test with Welch–Satterthwaite degrees of freedom.
//!
//! Degenerate inputs keep their mathematical meaning: identical samples give a difference of 0
//! and p = 1; when both sets of values have no variance, equal means give p = 1 and different
//! means p = 0.

use std::cmp::Ordering;

use statrs::distribution::{ContinuousCDF, StudentsT};
use statrs::function::factorial::ln_binomial;

use crate::rng::SplitMix64;

/// Which sample tends to be larger.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Shift {
    /// B's values tend to be larger than A's.
    BLarger,
    /// B's values tend to be smaller than A's.
    BSmaller,
    /// Neither.
    None,
}

/// The result of a two-sample test of A against B.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct TestResult {
    /// Two-sided p-value.
    pub p: f64,
    /// The statistic: `t = (mean_b − mean_a) / se` for Welch, B's share minus A's for Fisher,
    /// the statistic's `B − A` for the bootstrap.
    pub statistic: f64,
    /// Which way the samples differ, by the statistic.
    pub shift: Shift,
    /// Units in A: repeats, blocks, batches (or batch-sized groups of requests for a count).
    pub n_a: usize,
    /// Units in B.
    pub n_b: usize,
}

fn shift_of(x: f64) -> Shift {
    match x.partial_cmp(&0.0) {
        Some(Ordering::Greater) => Shift::BLarger,
        Some(Ordering::Less) => Shift::BSmaller,
        _ => Shift::None,
    }
}

fn mean_and_variance(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let variance = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

/// Welch's t test of `a` against `b`, two-sided; `None` unless both have at least 2 values
/// (and no NaN).
pub fn welch_t(a: &[f64], b: &[f64]) -> Option<TestResult> {
    if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let ((m1, v1), (m2, v2)) = (mean_and_variance(a), mean_and_variance(b));
    let (s1, s2) = (v1 / n1, v2 / n2);
    let se2 = s1 + s2;
    let diff = m2 - m1;
    let (t, p) = if se2 > 0.0 {
        let t = diff / se2.sqrt();
        let df = se2 * se2 / (s1 * s1 / (n1 - 1.0) + s2 * s2 / (n2 - 1.0));
        let dist = StudentsT::new(0.0, 1.0, df).ok()?;
        (t, (2.0 * dist.sf(t.abs())).min(1.0))
    } else if diff == 0.0 {
        (0.0, 1.0)
    } else {
        (diff.signum() * f64::INFINITY, 0.0)
    };
    Some(TestResult { p, statistic: t, shift: shift_of(diff), n_a: a.len(), n_b: b.len() })
}

/// Two-sided Fisher's exact test of the share `a_hits / a_total` against `b_hits / b_total`
/// (SciPy's `fisher_exact`: every table with the same margins whose probability is at most the
/// observed one's, relative tolerance 1e-7). `None` when a total is 0 or below its hits.
/// `statistic` is B's share minus A's.
pub fn fisher_exact(a_hits: u64, a_total: u64, b_hits: u64, b_total: u64) -> Option<TestResult> {
    if a_total == 0 || b_total == 0 || a_hits > a_total || b_hits > b_total {
        return None;
    }
    let hits = a_hits + b_hits;
    let total = a_total + b_total;
    // P(A has x of the hits), hypergeometric.
    let ln_p = |x: u64| ln_binomial(a_total, x) + ln_binomial(b_total, hits - x) - ln_binomial(total, hits);
    let observed = ln_p(a_hits);
    let lowest = hits.saturating_sub(b_total);
    let highest = hits.min(a_total);
    let threshold = observed + (1.0f64 + 1e-7).ln();
    let p: f64 = (lowest..=highest).map(ln_p).filter(|&l| l <= threshold).map(f64::exp).sum();
    let difference = b_hits as f64 / b_total as f64 - a_hits as f64 / a_total as f64;
    Some(TestResult {
        p: p.min(1.0),
        statistic: difference,
        shift: shift_of(difference),
        n_a: a_total as usize,
        n_b: b_total as usize,
    })
}

/// Resamples of the batches behind every [`bootstrap_stats`] verdict.
pub const BOOTSTRAP_RESAMPLES: usize = 1999;

/// Fewest batches a run needs for [`bootstrap_stats`]: fewer cannot say how much batches vary.
pub const MIN_BATCHES: usize = 5;

/// The seed of the bootstrap's resampling: fixed, so that a comparison is reproducible.
const BOOTSTRAP_SEED: u64 = 0x6261_7463_686c_6162;

/// The statistics [`bootstrap_stats`] tests, in the order of `metrics::distribution::Summary::STATS`.
pub const STATS: [&str; 9] = ["mean", "p50", "p90", "p95", "p99", "p999", "min", "max", "std"];

/// The quantiles among [`STATS`], as fractions.
const QUANTILES: [(usize, f64); 5] = [(1, 0.5), (2, 0.9), (3, 0.95), (4, 0.99), (5, 0.999)];

/// One run's values of a timing, grouped by the batch each came from.
#[derive(Clone, Debug)]
pub struct BatchedValues {
    /// Every value with its batch's dense index, sorted by value.
    sorted: Vec<(f64, u32)>,
    /// Per batch: values, Σ value, Σ value².
    batches: Vec<(u64, f64, f64)>,
}

impl BatchedValues {
    /// Groups `(batch id, value)` pairs; `None` if a value is not finite.
    pub fn new(values: &[(u64, f64)]) -> Option<Self> {
        if values.iter().any(|(_, v)| !v.is_finite()) {
            return None;
        }
        let mut index = std::collections::BTreeMap::new();
        let mut batches: Vec<(u64, f64, f64)> = Vec::new();
        let mut sorted = Vec::with_capacity(values.len());
        for &(batch, v) in values {
            let i = *index.entry(batch).or_insert_with(|| {
                batches.push((0, 0.0, 0.0));
                batches.len() - 1
            });
            let b = &mut batches[i];
            *b = (b.0 + 1, b.1 + v, b.2 + v * v);
            sorted.push((v, i as u32));
        }
        sorted.sort_by(|x, y| x.0.total_cmp(&y.0));
        Some(BatchedValues { sorted, batches })
    }

    /// Batches.
    pub fn batches(&self) -> usize {
        self.batches.len()
    }

    /// Every statistic of [`STATS`] with batch `i` counted `weights[i]` times; `None` for a
    /// statistic without enough values (std of one value).
    fn stats(&self, weights: &[u32]) -> [Option<f64>; 9] {
        let mut out = [None; 9];
        let (mut n, mut sum, mut squares) = (0.0, 0.0, 0.0);
        for (b, &w) in self.batches.iter().zip(weights) {
            let w = f64::from(w);
            n += w * b.0 as f64;
            sum += w * b.1;
            squares += w * b.2;
        }
        if n == 0.0 {
            return out;
        }
        let mean = sum / n;
        out[0] = Some(mean);
        out[8] = (n > 1.0).then(|| ((squares - n * mean * mean) / (n - 1.0)).max(0.0).sqrt());
        // Nearest rank: the value at rank ⌈q·n⌉ (1-based) in the weighted order.
        let mut next = 0;
        let mut seen = 0.0;
        let mut last = None;
        for &(v, i) in &self.sorted {
            let w = weights[i as usize];
            if w == 0 {
                continue;
            }
            if out[6].is_none() {
                out[6] = Some(v);
            }
            seen += f64::from(w);
            while next < QUANTILES.len() && seen >= (QUANTILES[next].1 * n).ceil().max(1.0) {
                out[QUANTILES[next].0] = Some(v);
                next += 1;
            }
            last = Some(v);
        }
        out[7] = last;
        out
    }
}

/// Every statistic of [`STATS`] compared between `a` and `b` by a bootstrap over whole batches
/// (see the module docs): per statistic, its test, `None` where either run lacks the statistic.
/// `None` altogether when a run has fewer than [`MIN_BATCHES`] batches. `stream` picks the
/// resampling's sub-stream, so that each timing draws its own resamples.
pub fn bootstrap_stats(a: &BatchedValues, b: &BatchedValues, stream: u64) -> Option<[Option<TestResult>; 9]> {
    if a.batches() < MIN_BATCHES || b.batches() < MIN_BATCHES {
        return None;
    }
    let observed = |x: &BatchedValues| x.stats(&vec![1; x.batches()]);
    let (sa, sb) = (observed(a), observed(b));
    let differences: [Option<f64>; 9] = std::array::from_fn(|i| sa[i].zip(sb[i]).map(|(x, y)| y - x));
    // Per statistic: resampled differences at or below 0, and at or above.
    let mut below = [0usize; 9];
    let mut above = [0usize; 9];
    let mut rng = SplitMix64::derive(BOOTSTRAP_SEED, stream);
    let mut resample = |x: &BatchedValues, weights: &mut Vec<u32>| {
        weights.clear();
        weights.resize(x.batches(), 0);
        for _ in 0..x.batches() {
            weights[rng.range_u64(0, x.batches() as u64 - 1) as usize] += 1;
        }
    };
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    for _ in 0..BOOTSTRAP_RESAMPLES {
        resample(a, &mut wa);
        resample(b, &mut wb);
        let (ra, rb) = (a.stats(&wa), b.stats(&wb));
        for i in 0..9 {
            // A resample without the statistic (std of one value) counts against the difference.
            let Some(d) = ra[i].zip(rb[i]).map(|(x, y)| y - x) else {
                below[i] += 1;
                above[i] += 1;
                continue;
            };
            below[i] += usize::from(d <= 0.0);
            above[i] += usize::from(d >= 0.0);
        }
    }
    let n = (BOOTSTRAP_RESAMPLES + 1) as f64;
    Some(std::array::from_fn(|i| {
        let d = differences[i]?;
        let p = (2.0 * (below[i].min(above[i]) + 1) as f64 / n).min(1.0);
        Some(TestResult { p, statistic: d, shift: shift_of(d), n_a: a.batches(), n_b: b.batches() })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(x: f64, y: f64, tolerance: f64) -> bool {
        (x - y).abs() <= tolerance
    }

    #[test]
    fn welch_known_values() {
        // a = 1..5, b = 2, 4, .. 10: means 3 and 6, variances 2.5 and 10, t = 3 / √2.5 =
        // 1.8973665961010275, df = 2.5² / (0.5²/4 + 2²/4) = 5.882352941176471; p from the
        // t distribution's tail (numerically integrated) = 0.10753119494252587.
        let r = welch_t(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0]).unwrap();
        assert!(close(r.statistic, 1.897_366_596_101_027_5, 1e-12), "{r:?}");
        assert!(close(r.p, 0.107_531_194_942_525_87, 1e-7), "{r:?}");
        assert_eq!(r.shift, Shift::BLarger);
    }

    #[test]
    fn welch_edge_cases() {
        assert_eq!(welch_t(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).map(|r| (r.p, r.shift)), Some((1.0, Shift::None)));
        // No variance anywhere: equal means are indistinguishable, different ones certain.
        assert_eq!(welch_t(&[5.0, 5.0], &[5.0, 5.0, 5.0]).map(|r| r.p), Some(1.0));
        let r = welch_t(&[5.0, 5.0], &[4.0, 4.0]).unwrap();
        assert_eq!((r.p, r.shift), (0.0, Shift::BSmaller));
        // One repeat cannot be judged.
        assert_eq!(welch_t(&[5.0], &[4.0, 4.0]), None);
    }

    #[test]
    fn fisher_known_values() {
        // Exact sums over the hypergeometric (Python's fractions and math.comb): the classic
        // 8/10 against 1/6, every unit failing against none, and 3 % against 12 % of 100.
        let cases = [
            ((8, 10, 1, 6), 0.034_965_034_965_034_97),
            ((0, 8, 8, 8), 0.000_155_400_155_400_155_4),
            ((3, 100, 12, 100), 0.028_671_314_973_177_1),
        ];
        for ((ah, at, bh, bt), expected) in cases {
            let r = fisher_exact(ah, at, bh, bt).unwrap();
            assert!(close(r.p, expected, 1e-12), "{ah}/{at} vs {bh}/{bt}: {r:?}");
        }
        let r = fisher_exact(0, 8, 8, 8).unwrap();
        assert_eq!((r.shift, r.statistic), (Shift::BLarger, 1.0));
        // The same share is no evidence; one failed batch of nine is not either.
        assert!(fisher_exact(2, 10, 2, 10).unwrap().p > 1.0 - 1e-9);
        assert!(fisher_exact(0, 8, 1, 9).unwrap().p > 0.99);
        assert_eq!(fisher_exact(0, 0, 1, 9), None);
        assert_eq!(fisher_exact(3, 2, 1, 9), None);
    }

    /// `(batch, value)` pairs: `batches` batches of `per_batch` values each, from `value(i, j)`.
    fn batched(batches: u64, per_batch: u64, value: impl Fn(u64, u64) -> f64) -> BatchedValues {
        let pairs: Vec<(u64, f64)> =
            (0..batches).flat_map(|i| (0..per_batch).map(move |j| (i, j))).map(|(i, j)| (i, value(i, j))).collect();
        BatchedValues::new(&pairs).unwrap()
    }

    #[test]
    fn batched_statistics_use_the_nearest_rank() {
        // 1..=200 in 20 batches: p50 is the 100th value, p99 the 198th, p99.9 the 200th.
        let x = batched(20, 10, |i, j| (i * 10 + j + 1) as f64);
        let s = x.stats(&[1; 20]);
        let expected = [100.5, 100.0, 180.0, 190.0, 198.0, 200.0, 1.0, 200.0];
        for (i, e) in expected.into_iter().enumerate() {
            assert_eq!(s[i], Some(e), "{}", STATS[i]);
        }
        assert!(close(s[8].unwrap(), 57.879_184_513_951_12, 1e-9), "std {:?}", s[8]);
        // Weights count a batch that many times: batch 19 twice, batch 0 not at all.
        let mut w = [1; 20];
        (w[0], w[19]) = (0, 2);
        let s = x.stats(&w);
        assert_eq!((s[6], s[7]), (Some(11.0), Some(200.0)));
        assert_eq!(s[0], Some((20_100.0 - 55.0 + 1955.0) / 200.0));
    }

    #[test]
    fn bootstrap_sees_a_tail_that_the_median_does_not() {
        // 100 batches of 8; in B every tenth batch is three times slower. The median stays, the
        // p99 triples.
        let a = batched(100, 8, |i, j| 100.0 + ((i * 8 + j) % 13) as f64);
        let b = batched(100, 8, |i, j| (100.0 + ((i * 8 + j) % 13) as f64) * if i % 10 == 3 { 3.0 } else { 1.0 });
        let t = bootstrap_stats(&a, &b, 0).unwrap();
        let p99 = t[4].unwrap();
        assert!(p99.p < 0.01 && p99.shift == Shift::BLarger, "{p99:?}");
        assert!(close(p99.statistic, 333.0 - 112.0, 1e-9), "{p99:?}");
        let p50 = t[1].unwrap();
        assert!(p50.statistic.abs() <= 1.0, "the median barely moves: {p50:?}");
        // The same data again: every statistic's difference is 0, and p is near 1.
        for r in bootstrap_stats(&a, &a.clone(), 1).unwrap().into_iter().flatten() {
            assert_eq!((r.statistic, r.shift), (0.0, Shift::None));
            assert!(r.p > 0.9, "{r:?}");
        }
        // Reproducible: the same stream gives the same p-values.
        assert_eq!(bootstrap_stats(&a, &b, 7), bootstrap_stats(&a, &b, 7));
    }

    #[test]
    fn bootstrap_takes_the_batch_not_the_request_as_the_unit() {
        // Ten batches of 100 per run; each batch has its own level (shared fate), and B's levels
        // are A's shuffled plus a shift well inside their spread. Per request the 1000 values of
        // each run would look very different; per batch they are ten against ten.
        let level = |i: u64| [3.0, 9.0, 1.0, 7.0, 5.0, 8.0, 2.0, 6.0, 0.0, 4.0][i as usize] * 10.0;
        let a = batched(10, 100, |i, j| 100.0 + level(i) + (j % 5) as f64);
        let b = batched(10, 100, |i, j| 104.0 + level((i + 3) % 10) + (j % 5) as f64);
        let t = bootstrap_stats(&a, &b, 0).unwrap();
        let mean = t[0].unwrap();
        assert!(close(mean.statistic, 4.0, 1e-9) && mean.p > 0.05, "{mean:?}");
        // Too few batches to resample: not judged.
        assert_eq!(bootstrap_stats(&batched(4, 100, |_, j| j as f64), &a, 0), None);
    }
}
