//! `batchlab compare A B`: two saved runs, metric by metric, with a verdict that rests on a test.
//!
//! A and B are `report.json` files or output directories ([`crate::report::read_report`]).
//! Benchmarks are matched by name. For every metric either run measured, the comparison shows
//! A's and B's value (the mean over repeats when a run has several), the delta, and a verdict:
//!
//! - **per-request timings** (`latency`, `ttft`, `tpot`, `itl`, `latency_per_token`, `batch_wait`,
//!   `engine_queue`, every statistic of each): a Mann–Whitney U test on the measured requests of
//!   both runs' `requests.jsonl` (all repeats pooled; `itl` by each request's longest gap,
//!   `itl_max_ms`). Every statistic of a timing gets its distribution's verdict;
//! - **everything else** (throughput, counts, batching, goodput): Welch's t test on the runs'
//!   repeats (`--repeat N`, at least 2 in each run). Without repeats it is **not judged**: one run
//!   gives no idea of its noise. Per-request timings fall back to this test without
//!   `requests.jsonl`.
//!
//! A difference with `p < alpha` is `better` or `worse` by the metric's direction (lower latency,
//! higher throughput; metrics without a better direction, such as `batches`, are `differs`), else
//! `within noise`. A **gated** metric that is `worse` by more than `max_regression` of A's value
//! is a regression, and `batchlab compare` exits non-zero ([`Comparison::passed`]).
//! docs/compare.md has the details.
//!
//! ```no_run
//! use batchlab::compare::{CompareOptions, Run, compare, table::render_comparison};
//!
//! let a = Run::load("results/base".as_ref())?;
//! let b = Run::load("results/new".as_ref())?;
//! let comparison = compare(&a, &b, &CompareOptions::default())?;
//! print!("{}", render_comparison(&comparison));
//! assert!(comparison.passed(), "regressions: {:?}", comparison.regressions().collect::<Vec<_>>());
//! # Ok::<(), batchlab::compare::CompareError>(())
//! ```

pub mod html;
pub mod stats;
pub mod table;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::metrics::result::metric_names;
use crate::report::requests::MetricsMs;
use crate::report::{
    Phase, Report, ReportError, RequestOutcome, RequestRecord, read_records, read_report, report_path,
};
use stats::{Shift, TestResult, mann_whitney_u, welch_t};

/// The metrics gated when `--gate` is not given.
pub const DEFAULT_GATES: &[&str] = &[
    "latency_p50_ms",
    "latency_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "requests_per_s",
    "output_tokens_per_s",
    "errors",
    "slo_attainment",
    "goodput_requests_per_s",
];

/// A completed request's value of one timing, in ms.
type Timing = fn(&MetricsMs) -> Option<f64>;

/// The per-request timings `requests.jsonl` holds: the distribution, the record's field it is
/// judged by, and that field's value in a completed request's metrics.
const PER_REQUEST: &[(&str, &str, Timing)] = &[
    ("latency", "latency_ms", |m| Some(m.latency_ms)),
    ("ttft", "ttft_ms", |m| m.ttft_ms),
    ("tpot", "tpot_ms", |m| m.tpot_ms),
    ("itl", "itl_max_ms", |m| m.itl_max_ms),
    ("latency_per_token", "latency_per_token_ms", |m| m.latency_per_token_ms),
    ("batch_wait", "batch_wait_ms", |m| Some(m.batch_wait_ms)),
    ("engine_queue", "engine_queue_ms", |m| m.engine_queue_ms),
];

/// Why a comparison could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A report or its `requests.jsonl` could not be read.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// The two runs have no benchmark of the same name.
    #[error("the runs have no benchmark in common (A: {a}; B: {b})")]
    NothingInCommon {
        /// A's benchmark names.
        a: String,
        /// B's benchmark names.
        b: String,
    },
    /// An unknown metric was asked to be gated.
    #[error("unknown metric `{0}` for --gate (the names are those of report.csv's columns)")]
    UnknownGate(String),
}

/// The measured, completed requests of one benchmark: per-request samples by `requests.jsonl` field.
pub type Samples = BTreeMap<String, Vec<f64>>;

/// One run: its report and, when it was written, its `requests.jsonl`.
#[derive(Clone, Debug)]
pub struct Run {
    /// How the run is named in output: the path it was read from.
    pub label: String,
    /// The report.
    pub report: Report,
    /// Per benchmark name: the samples of its measured, completed requests; `None` without
    /// `requests.jsonl`.
    pub requests: Option<BTreeMap<String, Samples>>,
}

impl Run {
    /// Reads a run from its `report.json` or output directory, and the `requests.jsonl` next to
    /// the report if there is one.
    pub fn load(path: &Path) -> Result<Run, CompareError> {
        let report = read_report(path)?;
        let json = report_path(path);
        let jsonl = json.with_file_name(crate::report::requests::REQUESTS_FILE);
        let requests = if jsonl.is_file() { Some(read_requests(&jsonl)?) } else { None };
        Ok(Run { label: path.display().to_string(), report, requests })
    }
}

/// The per-request samples of `path`, by benchmark: measured, completed requests only.
fn read_requests(path: &Path) -> Result<BTreeMap<String, Samples>, CompareError> {
    let mut out: BTreeMap<String, Samples> = BTreeMap::new();
    for record in read_records(path)? {
        let RequestRecord { benchmark, phase, outcome, metrics, .. } = record?;
        let (Phase::Measure, RequestOutcome::Completed, Some(metrics)) = (phase, outcome, metrics) else { continue };
        let samples = out.entry(benchmark).or_default();
        for (_, field, value) in PER_REQUEST {
            if let Some(v) = value(&metrics) {
                samples.entry((*field).to_string()).or_default().push(v);
            }
        }
    }
    Ok(out)
}

/// How a comparison judges and gates.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareOptions {
    /// A gated metric worse by more than this fraction of A's value fails the comparison.
    pub max_regression: f64,
    /// Significance level of the tests.
    pub alpha: f64,
    /// The gated metrics; [`DEFAULT_GATES`] by default.
    pub gates: Vec<String>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            max_regression: 0.05,
            alpha: 0.05,
            gates: DEFAULT_GATES.iter().map(|g| g.to_string()).collect(),
        }
    }
}

/// Which way a metric is better.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Lower is better (timings, errors).
    Lower,
    /// Higher is better (throughput, goodput).
    Higher,
    /// Neither (batches, duration, concurrency).
    Neutral,
}

/// Which way `metric` is better.
pub fn direction(metric: &str) -> Direction {
    match metric {
        "completed"
        | "requests_per_s"
        | "input_tokens_per_s"
        | "output_tokens_per_s"
        | "total_tokens_per_s"
        | "slo_attainment"
        | "goodput_requests_per_s"
        | "goodput_output_tokens_per_s" => Direction::Higher,
        "errors" | "cancelled" | "incomplete" | "lost" | "anomalies" => Direction::Lower,
        m if m.ends_with("_ms") => Direction::Lower,
        _ => Direction::Neutral,
    }
}

/// A metric's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "reason")]
pub enum Verdict {
    /// Significantly better in B.
    Better,
    /// Significantly worse in B.
    Worse,
    /// Significantly different, for a metric without a better direction.
    Differs,
    /// No significant difference.
    WithinNoise,
    /// No test could be made; why.
    NotJudged(String),
}

impl Verdict {
    /// The verdict as the table shows it.
    pub fn label(&self) -> &str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::Differs => "differs",
            Verdict::WithinNoise => "within noise",
            Verdict::NotJudged(_) => "not judged",
        }
    }
}

/// Which test a verdict rests on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// Mann–Whitney U on per-request samples.
    MannWhitney,
    /// Welch's t on per-repeat values.
    Welch,
}

/// One metric of one benchmark, A against B.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// The benchmark's name.
    pub benchmark: String,
    /// The metric's name.
    pub metric: String,
    /// A's value (mean over its repeats); `None` when A did not measure it.
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// `b − a`.
    pub delta: Option<f64>,
    /// `(b − a) / |a|`.
    pub relative: Option<f64>,
    /// Which test, and its p-value.
    pub test: Option<(TestKind, f64)>,
    /// The verdict.
    pub verdict: Verdict,
    /// Whether the metric is gated.
    pub gated: bool,
    /// A gated metric worse by more than the threshold.
    pub regression: bool,
}

/// Two runs compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// A's label (its path).
    pub a: String,
    /// B's label.
    pub b: String,
    /// The threshold regressions are judged by, a fraction.
    pub max_regression: f64,
    /// The tests' significance level.
    pub alpha: f64,
    /// Every metric of every benchmark both runs have, benchmarks in A's order.
    pub rows: Vec<Row>,
    /// Benchmarks only A has.
    pub only_a: Vec<String>,
    /// Benchmarks only B has.
    pub only_b: Vec<String>,
}

impl Comparison {
    /// The regressions: gated metrics worse beyond the threshold.
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.regression)
    }

    /// Whether no gated metric regressed.
    pub fn passed(&self) -> bool {
        self.regressions().next().is_none()
    }
}

/// The per-request field a metric is judged by: `latency_p99_ms` → `latency_ms`.
fn per_request_field(metric: &str) -> Option<&'static str> {
    let (dist, _) = metric.strip_suffix("_ms")?.rsplit_once('_')?;
    PER_REQUEST.iter().find(|(d, _, _)| *d == dist).map(|(_, field, _)| *field)
}

fn names_of(report: &Report) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for b in &report.benchmarks {
        if !names.contains(&b.name) {
            names.push(b.name.clone());
        }
    }
    names
}

/// Compares every metric of every benchmark A and B share. See the module docs.
pub fn compare(a: &Run, b: &Run, options: &CompareOptions) -> Result<Comparison, CompareError> {
    if let Some(unknown) = options.gates.iter().find(|g| !metric_names().contains(g)) {
        return Err(CompareError::UnknownGate(unknown.clone()));
    }
    let (names_a, names_b) = (names_of(&a.report), names_of(&b.report));
    let common: Vec<&String> = names_a.iter().filter(|n| names_b.contains(n)).collect();
    if common.is_empty() {
        return Err(CompareError::NothingInCommon { a: names_a.join(", "), b: names_b.join(", ") });
    }
    let mut rows = Vec::new();
    for name in &common {
        let repeats = |run: &Run, metric: &str| -> Vec<f64> {
            run.report.benchmarks.iter().filter(|x| &&x.name == name).filter_map(|x| x.metric(metric)).collect()
        };
        let samples = |run: &Run, field: &str| -> Option<Vec<f64>> {
            run.requests.as_ref().map(|r| r.get(name.as_str()).and_then(|s| s.get(field)).cloned().unwrap_or_default())
        };
        for metric in metric_names() {
            let (ra, rb) = (repeats(a, metric), repeats(b, metric));
            if ra.is_empty() && rb.is_empty() {
                continue;
            }
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let (va, vb) = (mean(&ra), mean(&rb));
            let per_request = per_request_field(metric).and_then(|f| Some((samples(a, f)?, samples(b, f)?)));
            let test = match &per_request {
                Some((sa, sb)) => mann_whitney_u(sa, sb).map(|t| (TestKind::MannWhitney, t)),
                None => welch_t(&ra, &rb).map(|t| (TestKind::Welch, t)),
            };
            let verdict =
                verdict(metric, test.as_ref().map(|(_, t)| t), options.alpha, per_request.is_some(), &ra, &rb);
            let delta = va.zip(vb).map(|(x, y)| y - x);
            let relative = va.zip(delta).and_then(|(x, d)| (x != 0.0).then(|| d / x.abs()));
            let gated = options.gates.iter().any(|g| g == metric);
            let worse_by = match direction(metric) {
                Direction::Lower => relative,
                Direction::Higher => relative.map(|r| -r),
                Direction::Neutral => None,
            };
            // From zero, any worsening is beyond every threshold.
            let beyond =
                worse_by.map_or(va == Some(0.0) && delta.is_some_and(|d| d != 0.0), |w| w > options.max_regression);
            rows.push(Row {
                benchmark: name.to_string(),
                metric: metric.clone(),
                a: va,
                b: vb,
                delta,
                relative,
                test: test.map(|(kind, t)| (kind, t.p)),
                regression: gated && verdict == Verdict::Worse && beyond,
                verdict,
                gated,
            });
        }
    }
    Ok(Comparison {
        a: a.label.clone(),
        b: b.label.clone(),
        max_regression: options.max_regression,
        alpha: options.alpha,
        rows,
        only_a: names_a.iter().filter(|n| !names_b.contains(n)).cloned().collect(),
        only_b: names_b.iter().filter(|n| !names_a.contains(n)).cloned().collect(),
    })
}

fn verdict(metric: &str, test: Option<&TestResult>, alpha: f64, per_request: bool, ra: &[f64], rb: &[f64]) -> Verdict {
    let Some(t) = test else {
        let reason = if per_request {
            "no completed request with this timing in one of the runs".to_string()
        } else if per_request_field(metric).is_some() {
            format!("needs requests.jsonl in both runs, or 2+ repeats in each (A has {}, B has {})", ra.len(), rb.len())
        } else {
            format!(
                "one run cannot say how noisy it is: needs 2+ repeats in each run (--repeat N; A has {}, B has {})",
                ra.len(),
                rb.len()
            )
        };
        return Verdict::NotJudged(reason);
    };
    if t.p >= alpha || t.shift == Shift::None {
        return Verdict::WithinNoise;
    }
    match (direction(metric), t.shift) {
        (Direction::Neutral, _) => Verdict::Differs,
        (Direction::Lower, Shift::BSmaller) | (Direction::Higher, Shift::BLarger) => Verdict::Better,
        _ => Verdict::Worse,
    }
}

#[cfg(test)]
mod tests;
