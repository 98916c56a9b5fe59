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

    /// The same draw as `range_u64(range.lo, range.hi)`, without its division: for many draws
    /// from one range (a prompt's tokens).
    pub fn range_in(&mut self, range: &FastRange) -> u64 {
        match range.span {
            None => self.next_u64(),
            // No draw, as `range_u64` takes none for a single value.
            Some(0) => range.lo,
            Some(span) => {
                let z = self.next_u64();
                range.lo + range.rem(z, span)
            }
        }
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

/// A range `[lo, hi]` for [`SplitMix64::range_in`], with its span's remainder precomputed
/// (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019: `z mod d` as the high
/// half of `(c·z mod 2^128)·d` with `c = ⌈2^128 / d⌉`, exact for every 64-bit `z` and `d ≥ 2`).
#[derive(Clone, Debug)]
pub struct FastRange {
    lo: u64,
    /// `hi - lo + 1`; `Some(0)` for a range of one value (or an empty one: `lo`), `None` for all
    /// 64-bit values.
    span: Option<u64>,
    /// `⌈2^128 / span⌉` (unused below a span of 2).
    c: u128,
}

impl FastRange {
    /// The values `lo..=hi` (only `lo` when `hi <= lo`, as [`SplitMix64::range_u64`]).
    pub fn new(lo: u64, hi: u64) -> Self {
        let span = if hi <= lo { Some(0) } else { (hi - lo).checked_add(1) };
        let c = match span {
            Some(d) if d >= 2 => u128::MAX / u128::from(d) + 1,
            _ => 0,
        };
        // A span of 1 cannot happen (hi > lo), so `Some(0)` alone stands for "only lo".
        FastRange { lo, span, c }
    }

    fn rem(&self, z: u64, d: u64) -> u64 {
        let low = self.c.wrapping_mul(u128::from(z));
        // The high 128 bits of `low · d`, of which the remainder is the low 64.
        let (hi, lo) = ((low >> 64) as u64, low as u64);
        let carry = (u128::from(lo) * u128::from(d)) >> 64;
        ((u128::from(hi) * u128::from(d) + carry) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_in_draws_as_range_u64() {
        let mut spans = vec![(0, 0), (5, 3), (0, 1), (3, 9), (0, 31_999), (0, 151_935), (7, u64::MAX), (0, u64::MAX)];
        let mut g = SplitMix64::new(99);
        for _ in 0..2000 {
            let (a, b) = (g.next_u64() >> (g.next_u64() % 64), g.next_u64() >> (g.next_u64() % 64));
            spans.push((a.min(b), a.max(b)));
            spans.push((0, (1 << (g.next_u64() % 64)) - 1));
            spans.push((0, 1 << (g.next_u64() % 63)));
        }
        for (lo, hi) in spans {
            let range = FastRange::new(lo, hi);
            let (mut a, mut b) = (SplitMix64::new(lo ^ hi), SplitMix64::new(lo ^ hi));
            for _ in 0..200 {
                assert_eq!(a.range_in(&range), b.range_u64(lo, hi), "[{lo}, {hi}]");
            }
        }
    }

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
