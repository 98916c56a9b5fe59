//! The two-sample tests `batchlab compare` rests its verdicts on.
//!
//! - [`mann_whitney_u`]: per-request samples (latency, TTFT, ...). Rank-based, so it needs no
//!   assumption about the shape of a latency distribution (skewed, multi-modal); the normal
//!   approximation with the tie correction and a continuity correction of ½, as SciPy's
//!   `mannwhitneyu(method="asymptotic")`. It tests whether one sample tends to be larger than the
//!   other, i.e. a shift of the bulk, not of a far tail alone.
//! - [`welch_t`]: per-repeat values (throughput and every other per-benchmark number), Welch's
//!   unequal-variance t test with Welch–Satterthwaite degrees of freedom.
//!
//! Both are deterministic (no resampling). Degenerate inputs keep their mathematical meaning: when
//! every value is tied the U statistic equals its mean, so p = 1; when both repeat sets have no
//! variance, equal means give p = 1 and different means p = 0.

use std::cmp::Ordering;

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

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
    /// The statistic: U of sample A for Mann–Whitney, `t = (mean_b − mean_a) / se` for Welch.
    pub statistic: f64,
    /// Which way the samples differ, by the statistic.
    pub shift: Shift,
    /// Sample sizes.
    pub n_a: usize,
    /// Sample sizes.
    pub n_b: usize,
}

fn shift_of(x: f64) -> Shift {
    match x.partial_cmp(&0.0) {
        Some(Ordering::Greater) => Shift::BLarger,
        Some(Ordering::Less) => Shift::BSmaller,
        _ => Shift::None,
    }
}

/// Mann–Whitney U test of `a` against `b`, two-sided; `None` when either is empty or holds a NaN.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> Option<TestResult> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|v| v.is_nan()) {
        return None;
    }
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let n = n1 + n2;
    let mut all: Vec<(f64, bool)> = a.iter().map(|&v| (v, true)).chain(b.iter().map(|&v| (v, false))).collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Average ranks over ties; Σ(t³ − t) for the variance correction.
    let (mut rank_sum_a, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        let t = (j - i + 1) as f64;
        ties += t * t * t - t;
        rank_sum_a += rank * all[i..=j].iter().filter(|(_, from_a)| *from_a).count() as f64;
        i = j + 1;
    }
    let u_a = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    // U of A below its mean: A's values tend to be smaller, so B's larger.
    let shift = shift_of(mean - u_a);
    let p = if variance > 0.0 {
        let z = ((u_a - mean).abs() - 0.5).max(0.0) / variance.sqrt();
        let normal = Normal::new(0.0, 1.0).ok()?;
        (2.0 * normal.sf(z)).min(1.0)
    } else {
        1.0
    };
    Some(TestResult { p, statistic: u_a, shift, n_a: a.len(), n_b: b.len() })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn close(x: f64, y: f64, tolerance: f64) -> bool {
        (x - y).abs() <= tolerance
    }

    #[test]
    fn mann_whitney_known_values() {
        // SciPy's documentation example: mannwhitneyu(males, females, method="asymptotic") gives
        // U = 17, p = 0.11134688653314041.
        let males = [19.0, 22.0, 16.0, 29.0, 24.0];
        let females = [20.0, 11.0, 17.0, 12.0];
        let r = mann_whitney_u(&males, &females).unwrap();
        assert_eq!(r.statistic, 17.0);
        assert!(close(r.p, 0.111_346_886_533_140_41, 1e-9), "{r:?}");
        assert_eq!(r.shift, Shift::BSmaller);

        // With ties: a = [1 2 2 3], b = [2 3 3 4]. Ranks 1, 3 3 3, 6 6 6, 8: R_a = 13, U_a = 3,
        // mean 8, Σ(t³ − t) = 48, variance 16/12 × (9 − 48/56), z = 4.5 / √variance =
        // 1.365698202000489, p = erfc(z / √2) = 0.17203370892182296.
        let r = mann_whitney_u(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 3.0, 4.0]).unwrap();
        assert_eq!(r.statistic, 3.0);
        assert!(close(r.p, 0.172_033_708_921_822_96, 1e-9), "{r:?}");
        assert_eq!(r.shift, Shift::BLarger);
    }

    #[test]
    fn mann_whitney_edge_cases() {
        // The same sample on both sides: U is exactly its mean, p = 1.
        let x = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
        let r = mann_whitney_u(&x, &x).unwrap();
        assert_eq!((r.p, r.shift), (1.0, Shift::None));
        // Everything tied: no variance, p = 1.
        let r = mann_whitney_u(&[2.0; 5], &[2.0; 7]).unwrap();
        assert_eq!((r.p, r.shift), (1.0, Shift::None));
        // Fully separated large samples: p tiny, B larger.
        let a: Vec<f64> = (0..200).map(f64::from).collect();
        let b: Vec<f64> = (1000..1200).map(f64::from).collect();
        let r = mann_whitney_u(&a, &b).unwrap();
        assert!(r.p < 1e-60, "{r:?}");
        assert_eq!((r.statistic, r.shift), (0.0, Shift::BLarger));
        // A symmetric view: swapping the samples gives the same p, the other direction.
        let s = mann_whitney_u(&b, &a).unwrap();
        assert_eq!((s.p, s.shift), (r.p, Shift::BSmaller));
        assert_eq!(mann_whitney_u(&[], &[1.0]), None);
        assert_eq!(mann_whitney_u(&[f64::NAN], &[1.0]), None);
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
}
