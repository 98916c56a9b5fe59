//! Repeats: one benchmark run several times (`--repeat N`), summarized per metric.
//!
//! For every metric the repeats measured: the mean, the spread between runs (sample standard
//! deviation, min, max) and a 95 % confidence interval of the mean from Student's t with
//! `n − 1` degrees of freedom, `mean ± t(0.975, n − 1) · s / √n`; plus the coefficient of
//! variation (`s / mean`) of the throughput. Each repeat's own numbers stay in the report's
//! `benchmarks`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, StudentsT};

use super::result::{BenchmarkResult, metric_names};

/// How one metric varied over a benchmark's repeats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Repeats that measured the metric.
    pub n: u32,
    /// Mean over the repeats.
    pub mean: f64,
    /// Sample standard deviation between repeats (divides by `n − 1`); `None` for one repeat.
    pub std: Option<f64>,
    /// Smallest repeat's value.
    pub min: f64,
    /// Largest repeat's value.
    pub max: f64,
    /// Lower end of the 95 % confidence interval of the mean; `None` for one repeat.
    pub ci95_low: Option<f64>,
    /// Upper end of the 95 % confidence interval of the mean.
    pub ci95_high: Option<f64>,
}

impl Spread {
    /// The spread of `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (std, half) = if n >= 2 {
            let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let std = var.sqrt();
            let t = StudentsT::new(0.0, 1.0, (n - 1) as f64).map(|d| d.inverse_cdf(0.975)).ok();
            (Some(std), t.map(|t| t * std / (n as f64).sqrt()))
        } else {
            (None, None)
        };
        Some(Spread {
            n: u32::try_from(n).unwrap_or(u32::MAX),
            mean,
            std,
            min,
            max,
            ci95_low: half.map(|h| mean - h),
            ci95_high: half.map(|h| mean + h),
        })
    }

    /// `std / mean`; `None` for one repeat or a zero mean.
    pub fn cv(&self) -> Option<f64> {
        self.std.filter(|_| self.mean != 0.0).map(|s| s / self.mean.abs())
    }
}

/// One benchmark over its repeats (`report.json`'s `repeats[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RepeatSummary {
    /// The benchmark's name.
    pub benchmark: String,
    /// How many times it ran.
    pub repeats: u32,
    /// Coefficient of variation of `requests_per_s` between repeats.
    pub requests_per_s_cv: Option<f64>,
    /// Coefficient of variation of `output_tokens_per_s` between repeats.
    pub output_tokens_per_s_cv: Option<f64>,
    /// Every metric at least one repeat measured, by name ([`metric_names`]).
    pub metrics: BTreeMap<String, Spread>,
}

/// One summary per benchmark name, in order of first appearance; empty unless some benchmark
/// ran more than once.
pub fn summarize_repeats(benchmarks: &[BenchmarkResult]) -> Vec<RepeatSummary> {
    if !benchmarks.iter().any(|b| b.repeat > 0) {
        return Vec::new();
    }
    let mut names: Vec<&str> = Vec::new();
    for b in benchmarks {
        if !names.contains(&b.name.as_str()) {
            names.push(&b.name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let runs: Vec<&BenchmarkResult> = benchmarks.iter().filter(|b| b.name == name).collect();
            let metrics: BTreeMap<String, Spread> = metric_names()
                .iter()
                .filter_map(|m| {
                    let values: Vec<f64> = runs.iter().filter_map(|b| b.metric(m)).filter(|v| v.is_finite()).collect();
                    Spread::of(&values).map(|s| (m.clone(), s))
                })
                .collect();
            RepeatSummary {
                benchmark: name.to_string(),
                repeats: u32::try_from(runs.len()).unwrap_or(u32::MAX),
                requests_per_s_cv: metrics.get("requests_per_s").and_then(Spread::cv),
                output_tokens_per_s_cv: metrics.get("output_tokens_per_s").and_then(Spread::cv),
                metrics,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::aggregate::tests::sample_result;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-7 * b.abs().max(1.0)
    }

    #[test]
    fn spread_and_student_t_interval() {
        // Known values: 10, 12, 14 → mean 12, s = 2, t(0.975, 2) = 4.302652729911275,
        // half width 4.302652729911275 × 2 / √3 = 4.968275301870...
        let s = Spread::of(&[10.0, 12.0, 14.0]).unwrap();
        assert_eq!((s.n, s.mean, s.std, s.min, s.max), (3, 12.0, Some(2.0), 10.0, 14.0));
        let half = 4.302_652_729_911_275 * 2.0 / 3f64.sqrt();
        assert!(close(s.ci95_low.unwrap(), 12.0 - half), "{s:?}");
        assert!(close(s.ci95_high.unwrap(), 12.0 + half), "{s:?}");
        assert!(close(s.cv().unwrap(), 2.0 / 12.0));
        // Two repeats: t(0.975, 1) = 12.706204736174698.
        let s = Spread::of(&[1.0, 3.0]).unwrap();
        let half = 12.706_204_736_174_698 * 2f64.sqrt() / 2f64.sqrt();
        assert!(close(s.ci95_high.unwrap(), 2.0 + half), "{s:?}");
        // One repeat: a mean, no spread.
        let s = Spread::of(&[5.0]).unwrap();
        assert_eq!((s.std, s.ci95_low, s.cv()), (None, None, None));
        // Identical repeats: zero width, not a failure.
        let s = Spread::of(&[7.0, 7.0, 7.0]).unwrap();
        assert_eq!((s.std, s.ci95_low, s.ci95_high, s.cv()), (Some(0.0), Some(7.0), Some(7.0), Some(0.0)));
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn one_summary_per_benchmark_over_its_repeats() {
        let mut runs = Vec::new();
        for repeat in 0..3 {
            for name in ["a", "b"] {
                let mut r = sample_result();
                r.name = name.into();
                r.repeat = repeat;
                r.requests_per_s = Some(4.0 + f64::from(repeat));
                runs.push(r);
            }
        }
        let summaries = summarize_repeats(&runs);
        assert_eq!(
            summaries.iter().map(|s| (s.benchmark.as_str(), s.repeats)).collect::<Vec<_>>(),
            [("a", 3), ("b", 3)]
        );
        let rps = &summaries[0].metrics["requests_per_s"];
        assert_eq!((rps.mean, rps.std), (5.0, Some(1.0)));
        assert!(close(summaries[0].requests_per_s_cv.unwrap(), 0.2));
        assert_eq!(summaries[0].output_tokens_per_s_cv, Some(0.0), "equal in every repeat");
        assert!(summaries[0].metrics.contains_key("latency_p50_ms"));
        assert!(summarize_repeats(&runs[..2]).is_empty(), "no repeats, no summary");
    }
}
