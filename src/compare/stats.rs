//! The statistics `batchlab compare` rests its verdicts on: **intervals of a change**, B against
//! A, at `1 − alpha`. None of them takes a request as an independent sample: the requests of one
//! batch share one generate call, so their fates are tied. The unit is a batch, a block of time,
//! a repeat or a round of an A/B run.
//!
//! - [`bootstrap_changes`]: every statistic of a per-request timing (mean, p50 … p99.9, min,
//!   max, std). The relative change `(B − A) / |A|` of each statistic, resampling **whole units**
//!   with replacement, independently in each run ([`BOOTSTRAP_RESAMPLES`] resamples from a fixed
//!   seed, so a verdict is reproducible). The interval is the *expanded* percentile interval
//!   (Hesterberg, 2015): the percentile bootstrap is too narrow with few units, so its tails are
//!   taken at [`expanded_alpha`], which widens it as a t interval with `n − 1` degrees of
//!   freedom would be widened. A tail statistic is tested as itself, not through the bulk.
//! - [`ratio_interval`]: one value per unit (a repeat, a block of the time series, a round), the
//!   relative change of the means, by the delta method with Welch–Satterthwaite degrees of
//!   freedom; [`paired_interval`] for rounds that pair an A with a B.
//! - [`share_change`]: a share (errors of requests, SLO met of judged) in percentage points, by
//!   Newcombe's hybrid score interval on Wilson intervals, each run's count taken at its
//!   effective size ([`ClusteredShare`]: the requests divided by the design effect measured from
//!   how the hits cluster in units).
//!
//! Degenerate inputs keep their mathematical meaning: identical values give an interval of 0;
//! a run that has no spread gives an interval of its difference alone.

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use serde::Serialize;

use crate::rng::SplitMix64;

fn mean_and_variance(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let variance = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance)
}

/// Resamples of the units behind every [`bootstrap_changes`] interval.
pub const BOOTSTRAP_RESAMPLES: usize = 1999;

/// Fewest units a run needs for [`bootstrap_changes`]: fewer cannot say how much units vary.
pub const MIN_BATCHES: usize = 5;

/// The seed of the bootstrap's resampling: fixed, so that a comparison is reproducible.
const BOOTSTRAP_SEED: u64 = 0x6261_7463_686c_6162;

/// The statistics [`bootstrap_changes`] judges, in the order of `metrics::distribution::Summary::STATS`.
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

/// An interval of a change, B against A: a relative change (a fraction of A's value) or a
/// difference of shares (a fraction, printed in percentage points). `low ≤ estimate ≤ high` is not
/// promised: a bootstrap's percentiles need not straddle the observed change.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct Interval {
    /// The observed change.
    pub estimate: f64,
    /// The lower bound (may be `-inf`).
    pub low: f64,
    /// The upper bound (may be `inf`).
    pub high: f64,
}

impl Interval {
    /// The interval of a change known exactly.
    pub fn exact(change: f64) -> Self {
        Interval { estimate: change, low: change, high: change }
    }

    /// Half its width (`inf` when a bound is).
    pub fn half_width(&self) -> f64 {
        (self.high - self.low) / 2.0
    }
}

/// The two-sided `1 − alpha` quantile of the standard normal.
pub fn z_of(alpha: f64) -> f64 {
    Normal::new(0.0, 1.0).map_or(1.96, |n| n.inverse_cdf(1.0 - alpha / 2.0))
}

/// The two-sided `1 − alpha` quantile of Student's t with `df` degrees of freedom (the normal's
/// for `df = inf`).
pub fn t_of(alpha: f64, df: f64) -> f64 {
    if !df.is_finite() {
        return z_of(alpha);
    }
    StudentsT::new(0.0, 1.0, df.max(1.0)).map_or(f64::INFINITY, |t| t.inverse_cdf(1.0 - alpha / 2.0))
}

/// The level at which a percentile bootstrap of `n` units is read so that its interval is as wide
/// as a `1 − alpha` t interval: `2 Φ(−√(n/(n−1)) · t(1 − alpha/2, n − 1))` (Hesterberg's expanded
/// percentile interval). With 8 units and alpha 0.05 it is about 0.012; it tends to alpha.
pub fn expanded_alpha(alpha: f64, n: usize) -> f64 {
    if n < 2 {
        return 0.0;
    }
    let n = n as f64;
    let t = t_of(alpha, n - 1.0);
    let normal = Normal::new(0.0, 1.0).expect("the standard normal");
    2.0 * normal.cdf(-(n / (n - 1.0)).sqrt() * t)
}

/// The `q` quantile of sorted `values`, nearest rank.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// Every statistic of [`STATS`] of a per-request timing, its relative change `(B − A) / |A|` with
/// its expanded percentile bootstrap interval at `1 − alpha`, resampling whole units (see the
/// module docs). `None` altogether when a run has fewer than [`MIN_BATCHES`] units; per statistic
/// `None` where either run lacks it. A statistic that is 0 in A has an interval of 0 when every
/// resample agrees, else an unbounded one on the side it moved. `stream` picks the resampling's
/// sub-stream, so that each timing draws its own resamples.
pub fn bootstrap_changes(
    a: &BatchedValues,
    b: &BatchedValues,
    alpha: f64,
    stream: u64,
) -> Option<[Option<Interval>; 9]> {
    if a.batches() < MIN_BATCHES || b.batches() < MIN_BATCHES {
        return None;
    }
    let observed = |x: &BatchedValues| x.stats(&vec![1; x.batches()]);
    let (sa, sb) = (observed(a), observed(b));
    let relative = |x: f64, y: f64, base: f64| {
        if base != 0.0 {
            (y - x) / base.abs()
        } else if y == x {
            0.0
        } else {
            (y - x).signum() * f64::INFINITY
        }
    };
    let mut resampled: [Vec<f64>; 9] = std::array::from_fn(|_| Vec::with_capacity(BOOTSTRAP_RESAMPLES));
    let mut missing = [0usize; 9];
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
            match (ra[i].zip(rb[i]), sa[i]) {
                (Some((x, y)), Some(base)) => resampled[i].push(relative(x, y, base)),
                _ => missing[i] += 1,
            }
        }
    }
    let level = expanded_alpha(alpha, a.batches().min(b.batches()));
    Some(std::array::from_fn(|i| {
        let (x, y) = sa[i].zip(sb[i])?;
        let estimate = relative(x, y, x);
        let values = &mut resampled[i];
        // A resample without the statistic (the std of one value) could be anything.
        if missing[i] as f64 > level / 2.0 * BOOTSTRAP_RESAMPLES as f64 || values.is_empty() {
            return Some(Interval { estimate, low: f64::NEG_INFINITY, high: f64::INFINITY });
        }
        values.sort_by(f64::total_cmp);
        let (low, high) = (nearest_rank(values, level / 2.0), nearest_rank(values, 1.0 - level / 2.0));
        Some(Interval { estimate, low, high })
    }))
}

/// The relative change of the means `(mean B − mean A) / |mean A|` of one value per unit, with its
/// `1 − alpha` interval: the delta method's standard error of the ratio, Welch–Satterthwaite
/// degrees of freedom. `None` unless both have 2+ values (finite), or when A's mean is 0.
pub fn ratio_interval(a: &[f64], b: &[f64], alpha: f64) -> Option<Interval> {
    let (estimate, se2, df) = ratio_of_means(a, b)?;
    if se2 <= 0.0 {
        return Some(Interval::exact(estimate));
    }
    let h = t_of(alpha, df) * se2.sqrt();
    Some(Interval { estimate, low: estimate - h, high: estimate + h })
}

/// The variance of [`ratio_interval`]'s change: how much the change would move from one pair of
/// runs to the next, as the units' own spread says. `None` where [`ratio_interval`] is.
pub fn ratio_variance(a: &[f64], b: &[f64]) -> Option<f64> {
    ratio_of_means(a, b).map(|(_, se2, _)| se2)
}

/// `(change, its variance, Welch–Satterthwaite degrees of freedom)` of [`ratio_interval`].
fn ratio_of_means(a: &[f64], b: &[f64]) -> Option<(f64, f64, f64)> {
    if a.len() < 2 || b.len() < 2 || a.iter().chain(b).any(|v| !v.is_finite()) {
        return None;
    }
    let ((ma, va), (mb, vb)) = (mean_and_variance(a), mean_and_variance(b));
    if ma == 0.0 {
        return None;
    }
    let ratio = mb / ma;
    // Var(B/A) ≈ (1/A²)·Var(B) + (B²/A⁴)·Var(A), per mean.
    let (sa, sb) = (ratio * ratio * va / (a.len() as f64 * ma * ma), vb / (b.len() as f64 * ma * ma));
    let se2 = sa + sb;
    let df = if se2 > 0.0 {
        se2 * se2 / (sa * sa / (a.len() as f64 - 1.0) + sb * sb / (b.len() as f64 - 1.0))
    } else {
        f64::INFINITY
    };
    Some((ratio - 1.0, se2, df))
}

/// The relative change of paired values (round `i` of an A/B run gives `a[i]` and `b[i]`): the
/// mean of `b[i]/a[i] − 1` with a t interval on `n − 1` degrees of freedom. `None` with fewer than
/// 2 pairs or a value of A that is 0.
pub fn paired_interval(a: &[f64], b: &[f64], alpha: f64) -> Option<Interval> {
    if a.len() != b.len() || a.len() < 2 || a.iter().any(|&x| x == 0.0 || !x.is_finite()) {
        return None;
    }
    let changes: Vec<f64> = a.iter().zip(b).map(|(x, y)| y / x - 1.0).collect();
    if changes.iter().any(|c| !c.is_finite()) {
        return None;
    }
    let (mean, variance) = mean_and_variance(&changes);
    let h = t_of(alpha, changes.len() as f64 - 1.0) * (variance / changes.len() as f64).sqrt();
    Some(Interval { estimate: mean, low: mean - h, high: mean + h })
}

/// Wilson's score interval of a share of `hits` out of `n` (both may be fractional: effective
/// counts), at the normal quantile `z`.
pub fn wilson(hits: f64, n: f64, z: f64) -> (f64, f64) {
    if n <= 0.0 {
        return (0.0, 1.0);
    }
    let p = (hits / n).clamp(0.0, 1.0);
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// One run's share, with the units its hits fall in: per unit (a batch, a block of time), its
/// hits and its members.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusteredShare {
    /// Hits in all.
    pub hits: u64,
    /// Members in all.
    pub total: u64,
    /// Per unit `(hits, members)`; empty when the run does not say (then [`Self::fallback_units`]).
    pub units: Vec<(u64, u64)>,
    /// How many units the run had that can fail on their own (its generate calls), for when the
    /// clustering cannot be measured: no hit at all, every member a hit, or no units.
    pub fallback_units: u64,
}

impl ClusteredShare {
    /// The share.
    pub fn share(&self) -> f64 {
        if self.total == 0 { 0.0 } else { self.hits as f64 / self.total as f64 }
    }

    /// The design effect measured from the units: the variance of the share between units
    /// (the ratio estimator's, `k/(k−1) Σ (yᵢ − p nᵢ)² / N²`) over the binomial variance
    /// `p (1 − p) / N`, at least 1. `None` when it cannot be measured (no spread in the share, or
    /// fewer than 2 units).
    pub fn design_effect(&self) -> Option<f64> {
        let k = self.units.len();
        let p = self.share();
        if k < 2 || self.hits == 0 || self.hits == self.total {
            return None;
        }
        let n = self.total as f64;
        let between: f64 = self.units.iter().map(|&(y, m)| (y as f64 - p * m as f64).powi(2)).sum();
        let variance = k as f64 / (k as f64 - 1.0) * between / (n * n);
        Some((variance / (p * (1.0 - p) / n)).max(1.0))
    }

    /// The effective number of independent members, given the design effect to use.
    fn effective(&self, deff: Option<f64>) -> f64 {
        let n = self.total as f64;
        match deff {
            Some(d) => n / d,
            None => (self.fallback_units.max(1) as f64).min(n),
        }
    }
}

/// A share compared: B's share minus A's with Newcombe's hybrid score interval at `1 − alpha`, and
/// B's own Wilson interval (for an absolute limit). Each run counts at its effective size: its
/// members over the design effect measured from its units, or the other run's when its own cannot
/// be measured (a run with no hit says nothing of how hits cluster), else its fallback units.
#[derive(Copy, Clone, Debug, PartialEq, Serialize)]
pub struct ShareChange {
    /// `share B − share A`, with its interval.
    pub change: Interval,
    /// B's share's interval.
    pub b_low: f64,
    /// B's share's upper bound.
    pub b_high: f64,
    /// A's effective size.
    pub n_a: f64,
    /// B's effective size.
    pub n_b: f64,
}

/// See [`ShareChange`]. `scale` multiplies both effective sizes (what a larger run would give).
pub fn share_change(a: &ClusteredShare, b: &ClusteredShare, alpha: f64, scale: f64) -> Option<ShareChange> {
    if a.total == 0 || b.total == 0 {
        return None;
    }
    let (da, db) = (a.design_effect(), b.design_effect());
    let (n_a, n_b) = (a.effective(da.or(db)) * scale, b.effective(db.or(da)) * scale);
    let z = z_of(alpha);
    let (pa, pb) = (a.share(), b.share());
    let (la, ua) = wilson(pa * n_a, n_a, z);
    let (lb, ub) = wilson(pb * n_b, n_b, z);
    let d = pb - pa;
    let low = d - ((pb - lb).powi(2) + (ua - pa).powi(2)).sqrt();
    let high = d + ((ub - pb).powi(2) + (pa - la).powi(2)).sqrt();
    Some(ShareChange { change: Interval { estimate: d, low, high }, b_low: lb, b_high: ub, n_a, n_b })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(x: f64, y: f64, tolerance: f64) -> bool {
        (x - y).abs() <= tolerance
    }

    #[test]
    fn quantiles_and_the_expanded_level() {
        assert!(close(z_of(0.05), 1.959_963_984_540_054, 1e-9));
        // t(0.975, 7) = 2.364624251592785 (SciPy).
        assert!(close(t_of(0.05, 7.0), 2.364_624_251_592_785, 1e-6));
        // Hesterberg's expanded level for 8 units: 2 Φ(−√(8/7) · 2.3646) = 0.01146.
        assert!(close(expanded_alpha(0.05, 8), 0.011_46, 2e-4), "{}", expanded_alpha(0.05, 8));
        // It widens less as units grow, towards alpha itself.
        assert!(expanded_alpha(0.05, 5) < expanded_alpha(0.05, 8));
        assert!(close(expanded_alpha(0.05, 10_000), 0.05, 1e-3));
    }

    #[test]
    fn ratio_and_paired_intervals() {
        // Means 3 and 6: +100 %. Var(A) = 2.5, Var(B) = 10, n = 5 each: se² of the ratio =
        // 2²·2.5/(5·9) + 10/(5·9) = 0.444…, df = 0.444²/((0.222²)/4 + (0.222²)/4) = 8.
        let r = ratio_interval(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 4.0, 6.0, 8.0, 10.0], 0.05).unwrap();
        let h = t_of(0.05, 8.0) * (4.0_f64 / 9.0).sqrt();
        assert!(close(r.estimate, 1.0, 1e-12) && close(r.high - r.estimate, h, 1e-9), "{r:?}");
        // No spread: the change alone. One value: nothing to say.
        let exact = ratio_interval(&[5.0, 5.0], &[4.0, 4.0], 0.05).unwrap();
        assert!(
            close(exact.estimate, -0.2, 1e-12) && exact.low == exact.high && exact.low == exact.estimate,
            "{exact:?}"
        );
        assert_eq!(ratio_interval(&[5.0], &[4.0, 4.0], 0.05), None);
        // Paired: rounds that move together give a tight interval around their common change.
        let p = paired_interval(&[100.0, 50.0, 200.0], &[110.0, 55.0, 220.0], 0.05).unwrap();
        assert!(close(p.estimate, 0.1, 1e-12) && close(p.low, 0.1, 1e-9) && close(p.high, 0.1, 1e-9), "{p:?}");
    }

    #[test]
    fn wilson_known_values() {
        // 0 of 8 at z = 1.96: [0, z²/(n+z²)] = [0, 0.3244]; 3 of 3: [n/(n+z²), 1] = [0.4385, 1].
        let z = z_of(0.05);
        let (l, u) = wilson(0.0, 8.0, z);
        assert!(close(l, 0.0, 1e-12) && close(u, 0.324_4, 1e-4), "{l} {u}");
        let (l, u) = wilson(3.0, 3.0, z);
        assert!(close(l, 0.438_5, 1e-4) && close(u, 1.0, 1e-12), "{l} {u}");
        // 81 of 263 (Newcombe 1998, example): [0.2553, 0.3662].
        let (l, u) = wilson(81.0, 263.0, z);
        assert!(close(l, 0.255_3, 1e-4) && close(u, 0.366_2, 1e-4), "{l} {u}");
    }

    fn share(units: &[(u64, u64)], fallback_units: u64) -> ClusteredShare {
        ClusteredShare {
            hits: units.iter().map(|u| u.0).sum(),
            total: units.iter().map(|u| u.1).sum(),
            units: units.to_vec(),
            fallback_units,
        }
    }

    #[test]
    fn whole_failed_batches_are_one_event_each_and_independent_failures_are_many() {
        // Half of 8 batches of 32 failed whole: the design effect is the batch size (32), so the
        // share counts as 8 independent units.
        let whole = share(&[(32, 32), (0, 32), (32, 32), (0, 32), (32, 32), (0, 32), (32, 32), (0, 32)], 8);
        let d = whole.design_effect().unwrap();
        assert!(close(d, 32.0 * 8.0 / 7.0, 1e-9), "{d}");
        // Failures spread evenly (3 of 32 in each batch): no clustering at all, design effect 1.
        let spread = share(&[(3, 32); 8], 8);
        assert_eq!(spread.design_effect(), Some(1.0));
        // Against a clean run, the spread failures (9.4 %) are a certain increase; the same count
        // taken as 8 batch-sized events would not be.
        let clean = share(&[(0, 32); 8], 8);
        let c = share_change(&clean, &spread, 0.05, 1.0).unwrap();
        assert!(c.change.low > 0.0, "{c:?}");
        assert!(close(c.n_b, 256.0, 1e-9) && close(c.n_a, 256.0, 1e-9), "A borrows B's design effect: {c:?}");
        let as_batches = ClusteredShare { units: Vec::new(), ..spread.clone() };
        let c = share_change(&clean, &as_batches, 0.05, 1.0).unwrap();
        assert!(c.change.low < 0.0 && close(c.n_b, 8.0, 1e-9), "{c:?}");
        // No hit anywhere: the clustering cannot be measured; the run counts its generate calls.
        assert_eq!(clean.design_effect(), None);
        // 96 of 96 failed in 3 batches: B's share is at least 0.44.
        let all = share(&[(32, 32); 3], 3);
        let none = share(&[(0, 32); 3], 3);
        let c = share_change(&none, &all, 0.05, 1.0).unwrap();
        assert!(close(c.b_low, 0.438_5, 1e-4) && c.change.low > 0.2, "{c:?}");
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
        let t = bootstrap_changes(&a, &b, 0.05, 0).unwrap();
        let p99 = t[4].unwrap();
        assert!(close(p99.estimate, (333.0 - 112.0) / 112.0, 1e-9), "{p99:?}");
        assert!(p99.low > 0.5, "the tail is certainly worse: {p99:?}");
        let p50 = t[1].unwrap();
        assert!(p50.estimate.abs() <= 0.01 && p50.high < 0.05, "the median holds, within 5 %: {p50:?}");
        // The same data again: every change is 0, and the interval straddles it.
        for r in bootstrap_changes(&a, &a.clone(), 0.05, 1).unwrap().into_iter().flatten() {
            assert!(r.estimate == 0.0 && r.low <= 0.0 && r.high >= 0.0, "{r:?}");
        }
        // Reproducible: the same stream gives the same intervals.
        assert_eq!(bootstrap_changes(&a, &b, 0.05, 7), bootstrap_changes(&a, &b, 0.05, 7));
    }

    #[test]
    fn bootstrap_takes_the_batch_not_the_request_as_the_unit() {
        // Ten batches of 100 per run; each batch has its own level (shared fate), and B's levels
        // are A's shuffled plus a shift well inside their spread. Per request the 1000 values of
        // each run would look very different; per batch they are ten against ten.
        let level = |i: u64| [3.0, 9.0, 1.0, 7.0, 5.0, 8.0, 2.0, 6.0, 0.0, 4.0][i as usize] * 10.0;
        let a = batched(10, 100, |i, j| 100.0 + level(i) + (j % 5) as f64);
        let b = batched(10, 100, |i, j| 104.0 + level((i + 3) % 10) + (j % 5) as f64);
        let mean = bootstrap_changes(&a, &b, 0.05, 0).unwrap()[0].unwrap();
        assert!(close(mean.estimate, 4.0 / 147.0, 1e-9), "{mean:?}");
        assert!(mean.low < 0.0 && mean.high > 0.05, "ten batches cannot show +2.7 % nor rule out +5 %: {mean:?}");
        // Too few batches to resample: not judged.
        assert_eq!(bootstrap_changes(&batched(4, 100, |_, j| j as f64), &a, 0.05, 0), None);
    }
}
