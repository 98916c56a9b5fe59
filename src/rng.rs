//! A small seeded generator (SplitMix64). Ours, so that a seed gives the same numbers on every
//! platform and every version of every dependency: reports are byte-identical for a seed.

/// The SplitMix64 generator: 64 bits of state, a seed always gives the same sequence.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose state starts at `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// A generator for a sub-stream, so that adding draws in one place does not shift another.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut g = SplitMix64(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        g.next_u64();
        g
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi] (inclusive); `lo` when `hi < lo`.
    pub fn range_u64(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo).wrapping_add(1);
        if span == 0 {
            return self.next_u64();
        }
        lo + self.next_u64() % span
    }

    /// True with probability `p` (clamped to [0, 1]; NaN is 0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p.min(1.0)
    }

    /// Standard normal by Box-Muller.
    pub fn normal(&mut self, mean: f64, stdev: f64) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        mean + stdev * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Exponential with the given rate (events per unit).
    pub fn exponential(&mut self, rate: f64) -> f64 {
        let u = self.next_f64();
        -(1.0 - u).ln() / rate
    }

    /// Gamma with shape `k > 0` and scale `theta` (mean `k·θ`, coefficient of variation `1/√k`),
    /// by Marsaglia and Tsang's squeeze method (ACM TOMS 26(3), 2000); shapes below 1 draw at
    /// `k + 1` and multiply by `U^(1/k)`. Non-positive or non-finite parameters give NaN.
    pub fn gamma(&mut self, k: f64, theta: f64) -> f64 {
        if !(k > 0.0 && k.is_finite() && theta > 0.0 && theta.is_finite()) {
            return f64::NAN;
        }
        if k < 1.0 {
            // Stuart's boost: Gamma(k) = Gamma(k + 1) · U^(1/k).
            let u = self.next_f64().max(f64::MIN_POSITIVE);
            return self.gamma(k + 1.0, theta) * u.powf(1.0 / k);
        }
        let d = k - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal(0.0, 1.0);
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.next_f64();
            let x2 = x * x;
            if u < 1.0 - 0.0331 * x2 * x2 || u.max(f64::MIN_POSITIVE).ln() < 0.5 * x2 + d * (1.0 - v + v.ln()) {
                return d * v * theta;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut g = SplitMix64::new(7);
                move |_| g.next_u64()
            })
            .collect();
        let mut g = SplitMix64::new(7);
        let b: Vec<u64> = (0..4).map(|_| g.next_u64()).collect();
        assert_eq!(a, b);
        assert_ne!(a[0], a[1]);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut g = SplitMix64::new(1);
        for _ in 0..1000 {
            let v = g.range_u64(3, 9);
            assert!((3..=9).contains(&v));
            let f = g.next_f64();
            assert!((0.0..1.0).contains(&f));
        }
        assert_eq!(g.range_u64(5, 5), 5);
        let _ = g.range_u64(0, u64::MAX);
    }

    /// Gamma draws have the shape's mean and variance (`kθ`, `kθ²`), for shapes on both sides of 1.
    #[test]
    fn gamma_moments() {
        for (k, theta) in [(0.25, 2.0), (0.5, 1.0), (1.0, 0.1), (4.0, 0.5), (30.0, 1.0)] {
            let mut g = SplitMix64::new(42);
            let n = 200_000;
            let xs: Vec<f64> = (0..n).map(|_| g.gamma(k, theta)).collect();
            assert!(xs.iter().all(|x| x.is_finite() && *x >= 0.0), "k = {k}");
            let mean = xs.iter().sum::<f64>() / n as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            assert!((mean / (k * theta) - 1.0).abs() < 0.02, "k = {k}: mean {mean}");
            assert!((var / (k * theta * theta) - 1.0).abs() < 0.05, "k = {k}: variance {var}");
        }
        assert!(SplitMix64::new(1).gamma(0.0, 1.0).is_nan());
        assert!(SplitMix64::new(1).gamma(1.0, f64::INFINITY).is_nan());
    }
}
