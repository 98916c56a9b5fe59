//! The arrival statistics of the load profiles, from outside the crate: gamma gaps (CV = 1/√k,
//! mean 1/rate, and their whole distribution), Poisson as gamma's k = 1, ramp-ups whose arrival
//! counts follow the ramped intensity, and the ramp of a concurrent step. Every draw is seeded:
//! the numbers below are the same on every run, and each bound is several standard errors wide,
//! so a correct sampler passes for any seed and a wrong one (shape and scale swapped, a ramp that
//! is not linear) fails by far.

use std::time::Duration;

use batchlab::loadgen::{Poll, Scheduler, Step, StepKind};
use batchlab::time::Timestamp;
use statrs::distribution::{ChiSquared, ContinuousCDF, Gamma};

const START: Timestamp = Timestamp::from_nanos(1_000_000_000);

/// The first `n` due times of `step`, in seconds after the start, submitted exactly when due.
fn arrivals(step: Step, n: usize) -> Vec<f64> {
    let mut s = Scheduler::new(step, START).unwrap();
    (0..n)
        .map(|_| {
            let due = s.next_arrival().expect("a rate always has a next arrival");
            assert_eq!(s.poll(due, 0), Poll::SubmitNow);
            s.on_submitted(due);
            due.checked_since(START).unwrap().as_secs_f64()
        })
        .collect()
}

fn gaps(times: &[f64]) -> Vec<f64> {
    let mut previous = 0.0;
    times
        .iter()
        .map(|&t| {
            let gap = t - previous;
            previous = t;
            gap
        })
        .collect()
}

/// (mean, coefficient of variation).
fn mean_cv(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt() / mean)
}

/// The Kolmogorov–Smirnov distance between the sample and `cdf`, taken over `x >= 1 µs`: arrival
/// times are rounded to the nanosecond, which moves gaps by up to 1 ns and piles the many gamma
/// gaps below 1 ns (1.2 % of them at k = 0.25) onto 0 and 1 ns; above a microsecond the empirical
/// CDF is unaffected.
fn ks_distance(mut xs: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    xs.iter()
        .enumerate()
        .filter(|(_, x)| **x >= 1e-6)
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

const N: usize = 100_000;

#[test]
fn gamma_gaps_have_cv_one_over_root_k_and_the_mean_rate() {
    for (k, rate, seed) in [(0.25, 50.0, 1), (0.5, 10.0, 2), (1.0, 200.0, 3), (2.0, 5.0, 4), (4.0, 1000.0, 5)] {
        let step = Step::new(StepKind::Gamma { rate, burstiness: k, seed, max_concurrency: None });
        let times = arrivals(step, N);
        let gaps = gaps(&times);
        let (mean, cv) = mean_cv(&gaps);
        let want_cv = 1.0 / f64::sqrt(k);
        assert!((cv / want_cv - 1.0).abs() < 0.05, "k = {k}: CV {cv:.4}, expected {want_cv:.4} within 5 %");
        // The mean gap's standard error is CV / √N (0.6 % at k = 0.25): 3 % is five of them.
        let measured_rate = N as f64 / times[N - 1];
        assert!((mean * rate - 1.0).abs() < 0.03, "k = {k}: mean gap {mean}");
        assert!((measured_rate / rate - 1.0).abs() < 0.03, "k = {k}: rate {measured_rate}, expected {rate}");
        // The whole distribution: Gamma(shape k, rate k · rate). At N = 100 000 the KS distance
        // exceeds 1.95 / √N = 0.0062 with probability 0.001.
        let gamma = Gamma::new(k, k * rate).unwrap();
        let d = ks_distance(gaps, |x| gamma.cdf(x));
        eprintln!("gamma k = {k}: CV {cv:.4} (1/√k = {want_cv:.4}), rate {measured_rate:.3}/s of {rate}, KS {d:.5}");
        assert!(d < 1.95 / (N as f64).sqrt(), "k = {k}: KS distance {d:.5}");
    }
}

#[test]
fn poisson_is_gamma_with_k_one() {
    let rate = 20.0;
    let step = Step::new(StepKind::Poisson { rate, seed: 9, max_concurrency: None });
    let times = arrivals(step, N);
    let (mean, cv) = mean_cv(&gaps(&times));
    assert!((cv - 1.0).abs() < 0.05, "CV {cv}");
    assert!((mean * rate - 1.0).abs() < 0.02, "mean gap {mean}");
    let exponential = Gamma::new(1.0, rate).unwrap();
    let d = ks_distance(gaps(&times), |x| exponential.cdf(x));
    assert!(d < 1.95 / (N as f64).sqrt(), "KS distance {d:.5}");
}

/// Arrivals per tenth of a ramp of `ramp_s` at `rate`, and per second of the steady part after it.
fn ramp_counts(times: &[f64], ramp_s: f64, steady_s: f64) -> (Vec<f64>, f64) {
    let mut deciles = vec![0.0; 10];
    let mut steady = 0.0;
    for &t in times {
        if t < ramp_s {
            deciles[((t / ramp_s) * 10.0) as usize] += 1.0;
        } else if t < ramp_s + steady_s {
            steady += 1.0;
        }
    }
    (deciles, steady)
}

/// Under `λ(t) = rate · t / T`, tenth `i` of the ramp expects `rate · T / 200 · (2i + 1)` arrivals.
fn expected_deciles(rate: f64, ramp_s: f64) -> Vec<f64> {
    (0..10).map(|i| rate * ramp_s / 200.0 * f64::from(2 * i + 1)).collect()
}

/// Pearson's chi-square of the observed counts against the expected ones.
fn chi_square(observed: &[f64], expected: &[f64]) -> f64 {
    observed.iter().zip(expected).map(|(o, e)| (o - e).powi(2) / e).sum()
}

#[test]
fn ramped_rates_follow_the_ramped_intensity() {
    let (rate, ramp_s, steady_s) = (500.0, 20.0, 10.0);
    let ramp = Some(Duration::from_secs_f64(ramp_s));
    let expected = expected_deciles(rate, ramp_s);
    // Counts are Poisson given the intensity (independent per decile, poisson and gamma alike at
    // this scale): 10 degrees of freedom. Its 0.999 quantile is about 29.6.
    let limit = ChiSquared::new(10.0).unwrap().inverse_cdf(0.999);
    let kinds = [
        StepKind::Poisson { rate, seed: 17, max_concurrency: None },
        StepKind::Gamma { rate, burstiness: 1.0, seed: 18, max_concurrency: None },
    ];
    for kind in kinds {
        let n = (rate * (ramp_s / 2.0 + steady_s + 5.0)) as usize;
        let times = arrivals(Step::new(kind.clone()).with_rampup(ramp), n);
        let (deciles, steady) = ramp_counts(&times, ramp_s, steady_s);
        let chi2 = chi_square(&deciles, &expected);
        eprintln!("ramp {kind:?}: chi-square {chi2:.2} (limit {limit:.2}), {steady} arrivals in the 10 s after");
        assert!(
            chi2 < limit,
            "{kind:?}: chi-square {chi2:.1} >= {limit:.1}; deciles {deciles:?}, expected {expected:?}"
        );
        // After the ramp, the full rate: 5000 expected, sd 71.
        assert!((steady - rate * steady_s).abs() < 5.0 * (rate * steady_s).sqrt(), "{kind:?}: {steady} after the ramp");
    }
    // A constant rate's ramp is deterministic: every decile within one arrival of its expectation.
    let constant = Step::new(StepKind::Constant { rate, max_concurrency: None }).with_rampup(ramp);
    let times = arrivals(constant, (rate * (ramp_s / 2.0 + steady_s + 1.0)) as usize);
    let (deciles, steady) = ramp_counts(&times, ramp_s, steady_s);
    for (i, (got, want)) in deciles.iter().zip(&expected).enumerate() {
        assert!((got - want).abs() <= 1.0, "decile {i}: {got}, expected {want}");
    }
    assert!((steady - rate * steady_s).abs() <= 1.0, "{steady}");
}

/// A bursty gamma ramp still ramps: its chi-square is inflated by the gaps' variance (counts of
/// a renewal process have variance ≈ CV² · mean), so it is judged on counts scaled by 1/CV².
#[test]
fn a_bursty_ramp_follows_the_ramped_intensity() {
    let (rate, ramp_s, k) = (500.0, 20.0, 0.5);
    let step = Step::new(StepKind::Gamma { rate, burstiness: k, seed: 21, max_concurrency: None })
        .with_rampup(Some(Duration::from_secs_f64(ramp_s)));
    let times = arrivals(step, (rate * (ramp_s / 2.0 + 1.0)) as usize);
    let (deciles, _) = ramp_counts(&times, ramp_s, 0.0);
    let expected = expected_deciles(rate, ramp_s);
    let cv2 = 1.0 / k;
    let chi2 = chi_square(&deciles, &expected) / cv2;
    let limit = ChiSquared::new(10.0).unwrap().inverse_cdf(0.999);
    assert!(chi2 < limit, "scaled chi-square {chi2:.1} >= {limit:.1}: {deciles:?} vs {expected:?}");
}

#[test]
fn seeds_give_the_same_arrivals() {
    let step = |seed| Step::new(StepKind::Gamma { rate: 7.0, burstiness: 0.3, seed, max_concurrency: None });
    assert_eq!(arrivals(step(5), 1000), arrivals(step(5), 1000));
    assert_ne!(arrivals(step(5), 1000), arrivals(step(6), 1000));
}
