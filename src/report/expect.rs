//! Checking a scenario's `[expect]` lines against the measured benchmarks.
//!
//! Every expectation is checked against every benchmark of the run. A metric that was not
//! measured (TTFT when nothing completed, a rate over an empty window) fails: an expectation
//! that cannot be checked must not pass silently.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::metrics::BenchmarkResult;
use crate::metrics::result::is_metric_name;
use crate::scenario::plan::{Comparison, Expectation};

/// One expectation checked against one benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExpectationOutcome {
    /// The metric, as `[expect]` names it (e.g. `ttft_p99_ms`, `errors_engine_error`).
    pub metric: String,
    /// How measured is compared with expected.
    pub op: Comparison,
    /// The bound the expectation gives.
    pub expected: f64,
    /// `None` when the benchmark has no such measurement; see `reason`.
    pub measured: Option<f64>,
    /// The benchmark it was checked against.
    pub benchmark: String,
    /// Which repeat of the benchmark (`--repeat`), 0-based.
    #[serde(default)]
    pub repeat: u32,
    /// Whether the measurement met the bound (false when there is no measurement).
    pub passed: bool,
    /// `file:line:column` of the expectation.
    pub origin: String,
    /// Why there is no measurement, when there is none.
    pub reason: Option<String>,
}

impl ExpectationOutcome {
    /// The benchmark as people read it: `throughput`, or `throughput #2` for its second repeat
    /// ([`BenchmarkResult::label`]).
    pub fn label(&self) -> String {
        if self.repeat == 0 { self.benchmark.clone() } else { format!("{} #{}", self.benchmark, self.repeat + 1) }
    }
}

/// Why `benchmark` has no value for `metric`.
fn missing_reason(metric: &str) -> String {
    if !is_metric_name(metric) {
        return format!("unknown metric {metric:?}");
    }
    if matches!(metric, "slo_attainment" | "goodput_requests_per_s" | "goodput_output_tokens_per_s") {
        return "no [slo] objectives in the scenario, or nothing judged".to_string();
    }
    let dist = metric.strip_suffix("_ms").and_then(|m| m.rsplit_once('_')).map(|(d, _)| d);
    match dist {
        Some(dist) => format!("no {dist} samples"),
        None => "not measurable (empty window or no batches)".to_string(),
    }
}

/// Checks each expectation against each benchmark, in expectation-major order.
pub fn evaluate(expectations: &[Expectation], benchmarks: &[BenchmarkResult]) -> Vec<ExpectationOutcome> {
    let mut outcomes = Vec::with_capacity(expectations.len() * benchmarks.len());
    for e in expectations {
        for b in benchmarks {
            let measured = b.metric(&e.metric).filter(|v| !v.is_nan());
            outcomes.push(ExpectationOutcome {
                metric: e.metric.clone(),
                op: e.op,
                expected: e.value,
                measured,
                benchmark: b.name.clone(),
                repeat: b.repeat,
                passed: measured.is_some_and(|m| e.op.holds(m, e.value)),
                origin: e.origin.clone(),
                reason: measured.is_none().then(|| missing_reason(&e.metric)),
            });
        }
    }
    outcomes
}

/// A number for people: integers as such, others to 3 decimals without trailing zeros.
pub(crate) fn human_number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    if v != 0.0 && v.abs() < 0.001 {
        return format!("{v:e}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

/// One line per failed outcome:
/// `FAIL ttft_p99_ms <= 50 (scenarios/x.toml:12:1): measured 73.2 in benchmark throughput`.
/// Empty when everything passed.
pub fn render_failures(outcomes: &[ExpectationOutcome]) -> String {
    let mut out = String::new();
    for o in outcomes.iter().filter(|o| !o.passed) {
        let head = format!("FAIL {} {} {} ({})", o.metric, o.op.symbol(), human_number(o.expected), o.origin);
        let _ = match o.measured {
            Some(m) => writeln!(out, "{head}: measured {} in benchmark {}", human_number(m), o.label()),
            None => writeln!(
                out,
                "{head}: no measurement in benchmark {} ({})",
                o.label(),
                o.reason.as_deref().unwrap_or("not measured")
            ),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::BenchmarkAggregator;
    use crate::metrics::aggregate::tests::sample_result;
    use crate::time::Timestamp;

    fn expectation(metric: &str, op: Comparison, value: f64) -> Expectation {
        Expectation { metric: metric.to_string(), op, value, origin: "scenarios/x.toml:12:1".to_string() }
    }

    /// One row per case: expectation, measured value and verdict on the sample benchmark.
    #[test]
    fn evaluation_table() {
        use Comparison::*;
        let sample = sample_result();
        let cases: &[(&str, Comparison, f64, Option<f64>, bool)] = &[
            ("lost", Eq, 0.0, Some(0.0), true),
            ("lost", Ne, 0.0, Some(0.0), false),
            ("completed", Ge, 4.0, Some(4.0), true),
            ("completed", Gt, 4.0, Some(4.0), false),
            ("errors", Le, 0.0, Some(1.0), false),
            ("requests_per_s", Lt, 4.5, Some(4.0), true),
            ("concurrency_mean", Gt, 1.0, Some(1.02), true),
            ("latency_max_ms", Le, 350.0, Some(350.0), true),
            ("latency_min_ms", Lt, 110.0, Some(110.0), false),
            ("no_such_metric", Ge, 0.0, None, false),
        ];
        for &(metric, op, value, measured, passed) in cases {
            let outcome = evaluate(&[expectation(metric, op, value)], std::slice::from_ref(&sample));
            assert_eq!(outcome.len(), 1);
            let o = &outcome[0];
            assert_eq!((o.measured, o.passed), (measured, passed), "{metric} {op:?} {value}");
            assert_eq!(o.benchmark, "throughput");
            assert_eq!(o.reason.is_some(), measured.is_none(), "{metric}");
        }
    }

    #[test]
    fn every_expectation_meets_every_benchmark() {
        let empty = BenchmarkAggregator::new("concurrent@4").finish(Timestamp::from_nanos(5));
        let benchmarks = [sample_result(), empty];
        let expectations = [expectation("ttft_p99_ms", Comparison::Le, 50.0), expectation("lost", Comparison::Eq, 0.0)];
        let outcomes = evaluate(&expectations, &benchmarks);
        let summary: Vec<_> = outcomes.iter().map(|o| (o.metric.as_str(), o.benchmark.as_str(), o.passed)).collect();
        assert_eq!(
            summary,
            [
                ("ttft_p99_ms", "throughput", false),
                ("ttft_p99_ms", "concurrent@4", false),
                ("lost", "throughput", true),
                ("lost", "concurrent@4", true),
            ]
        );
        insta::assert_snapshot!(render_failures(&outcomes), @r"
        FAIL ttft_p99_ms <= 50 (scenarios/x.toml:12:1): measured 70 in benchmark throughput
        FAIL ttft_p99_ms <= 50 (scenarios/x.toml:12:1): no measurement in benchmark concurrent@4 (no ttft samples)
        ");
    }

    #[test]
    fn unknown_metric_is_named_in_the_failure() {
        let outcomes = evaluate(&[expectation("ttft_p42_ms", Comparison::Le, 1.5)], &[sample_result()]);
        assert_eq!(
            render_failures(&outcomes),
            "FAIL ttft_p42_ms <= 1.5 (scenarios/x.toml:12:1): no measurement in benchmark throughput (unknown metric \"ttft_p42_ms\")\n"
        );
    }

    #[test]
    fn numbers_for_people() {
        let cases = [
            (50.0, "50"),
            (73.2, "73.2"),
            (73.21234, "73.212"),
            (0.5, "0.5"),
            (0.0, "0"),
            (-2.0, "-2"),
            (0.0001, "1e-4"),
        ];
        for (v, s) in cases {
            assert_eq!(human_number(v), s, "{v}");
        }
    }
}
