//! `batchlab compare A B`: two saved runs, metric by metric, with a verdict that rests on a test.
//!
//! A and B are `report.json` files or output directories ([`crate::report::read_report`]).
//! Benchmarks are matched by name. For every metric either run measured, the comparison shows
//! A's and B's value (the mean over repeats when a run has several), the delta, and a verdict.
//! No test takes a request as an independent sample: the requests of one batch share one
//! generate call. The unit comes from the data ([`stats`] has the tests):
//!
//! - **per-request timings** (`latency`, `ttft`, `tpot`, `itl`, `latency_per_token`, `batch_wait`,
//!   `engine_queue`) and the per-batch `generate`, every statistic of each: a bootstrap of the
//!   statistic's difference that resamples whole **batches** of both runs' `requests.jsonl` (all
//!   repeats pooled; `itl` by each request's longest gap, `itl_max_ms`; `generate` by each batch's
//!   dispatch to its requests' completion). A p99 is tested as a p99, not through the median;
//! - **counts** (`completed`, `errors`, `cancelled`, `incomplete`, `lost`, `anomalies`,
//!   `slo_attainment`, the flush shares): Fisher's exact test on the share, in units of batches
//!   (request counts divided by the run's mean batch size; the flush shares count batches);
//! - **throughput** (`requests_per_s`, `output_tokens_per_s`) and `concurrency_mean`: Welch's t
//!   on the runs' repeats (`--repeat N`, 2+ in each run), else on the report's per-interval time
//!   series cut into [`SERIES_BLOCKS`] blocks of time per run;
//! - **everything else** (input and total tokens/s, goodput, batching, duration): Welch's t on the
//!   repeats; without repeats it is **not judged**. Per-request timings fall back to this test
//!   without `requests.jsonl`.
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
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::metrics::result::{BenchmarkResult, metric_names};
use crate::report::requests::MetricsMs;
use crate::report::{
    Phase, Report, ReportError, RequestOutcome, RequestRecord, read_records, read_report, report_path,
};
use stats::{BatchedValues, MIN_BATCHES, Shift, TestResult, bootstrap_stats, fisher_exact, welch_t};

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

/// Blocks of time each run's window is cut into when throughput is judged from its time series.
pub const SERIES_BLOCKS: usize = 10;

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

/// The per-batch timing read from `requests.jsonl`: a batch's dispatch to its requests' completion.
const GENERATE: (&str, &str) = ("generate", "generate_ms");

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

/// The measured, completed requests of one benchmark, by `requests.jsonl` field: every value
/// with the batch (generate call) it ran in, `(batch id, value)`. `generate_ms` has one value per
/// batch.
pub type Samples = BTreeMap<String, Vec<(u64, f64)>>;

/// One run: its report and, when it was written, its `requests.jsonl`.
#[derive(Clone, Debug)]
pub struct Run {
    /// How the run is named in output: the path it was read from.
    pub label: String,
    /// The directory its report is in (where `compare.html` goes when this run is B).
    pub dir: PathBuf,
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
        let dir = json.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        Ok(Run { label: path.display().to_string(), dir, report, requests })
    }
}

/// The per-request samples of `path`, by benchmark: measured, completed requests only, each with
/// its batch; and per batch its generate time.
fn read_requests(path: &Path) -> Result<BTreeMap<String, Samples>, CompareError> {
    let mut out: BTreeMap<String, Samples> = BTreeMap::new();
    // Per benchmark and batch: its dispatch and its last completion, ns.
    let mut batches: BTreeMap<String, BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    for record in read_records(path)? {
        let RequestRecord { benchmark, phase, outcome, metrics, batch, dispatched_ns, finished_ns, .. } = record?;
        // A completed record always names its batch.
        let (Phase::Measure, RequestOutcome::Completed, Some(metrics), Some(batch)) = (phase, outcome, metrics, batch)
        else {
            continue;
        };
        if let (Some(dispatched), Some(finished)) = (dispatched_ns, finished_ns) {
            let span = batches.entry(benchmark.clone()).or_default().entry(batch).or_insert((u64::MAX, 0));
            *span = (span.0.min(dispatched.as_nanos()), span.1.max(finished.as_nanos()));
        }
        let samples = out.entry(benchmark).or_default();
        for (_, field, value) in PER_REQUEST {
            if let Some(v) = value(&metrics) {
                samples.entry((*field).to_string()).or_default().push((batch, v));
            }
        }
    }
    for (benchmark, spans) in batches {
        let generate = spans.into_iter().map(|(batch, (from, to))| (batch, to.saturating_sub(from) as f64 / 1e6));
        out.entry(benchmark).or_default().insert(GENERATE.1.to_string(), generate.collect());
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
    /// A bootstrap of the statistic's difference over whole batches of requests.jsonl.
    Bootstrap,
    /// Fisher's exact test on a share, in units of batches.
    Fisher,
    /// Welch's t on per-repeat values.
    Welch,
    /// Welch's t on blocks of the report's per-interval time series.
    Series,
}

impl TestKind {
    /// The test as the console table names it.
    pub fn label(self) -> &'static str {
        match self {
            TestKind::Bootstrap => "bootstrap",
            TestKind::Fisher => "fisher",
            TestKind::Welch => "welch-t",
            TestKind::Series => "series-t",
        }
    }
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

/// The timing a metric is a statistic of, and which: `latency_p99_ms` → (`latency_ms`, `p99`).
fn timing_of(metric: &str) -> Option<(&'static str, &'static str)> {
    let (dist, stat) = metric.strip_suffix("_ms")?.rsplit_once('_')?;
    let stat = stats::STATS.iter().find(|s| **s == stat)?;
    let field = PER_REQUEST.iter().map(|(d, f, _)| (*d, *f)).chain([GENERATE]).find(|(d, _)| *d == dist)?.1;
    Some((field, stat))
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

/// A test, or why none could be made.
type Judged = Result<(TestKind, TestResult), String>;

/// One benchmark of both runs: every repeat of each, and their per-request samples.
struct Pair<'r> {
    a: Vec<&'r BenchmarkResult>,
    b: Vec<&'r BenchmarkResult>,
    samples_a: Option<&'r Samples>,
    samples_b: Option<&'r Samples>,
    has_requests: bool,
    /// Per requests.jsonl field: each statistic's bootstrap test, or why there is none.
    bootstraps: BTreeMap<&'static str, Result<[Option<TestResult>; 9], String>>,
}

impl<'r> Pair<'r> {
    fn new(name: &str, a: &'r Run, b: &'r Run) -> Self {
        let of = |run: &'r Run| run.report.benchmarks.iter().filter(|x| x.name == name).collect::<Vec<_>>();
        let samples = |run: &'r Run| run.requests.as_ref().and_then(|r| r.get(name));
        Pair {
            a: of(a),
            b: of(b),
            samples_a: samples(a),
            samples_b: samples(b),
            has_requests: a.requests.is_some() && b.requests.is_some(),
            bootstraps: BTreeMap::new(),
        }
    }

    fn repeats(&self, metric: &str) -> (Vec<f64>, Vec<f64>) {
        let values = |runs: &[&BenchmarkResult]| runs.iter().filter_map(|x| x.metric(metric)).collect();
        (values(&self.a), values(&self.b))
    }

    /// The test behind `metric`'s verdict; see the module docs for which one.
    fn judge(&mut self, metric: &str) -> Judged {
        if let Some((field, stat)) = timing_of(metric)
            && self.has_requests
        {
            return self.bootstrap(field, stat);
        }
        if let Some(judged) = count_test(metric, &self.a, &self.b) {
            return judged;
        }
        let (ra, rb) = self.repeats(metric);
        if let Some(t) = welch_t(&ra, &rb) {
            return Ok((TestKind::Welch, t));
        }
        if let Some(field) = series_field(metric) {
            let (ba, bb) = (series_blocks(&self.a, field), series_blocks(&self.b, field));
            return welch_t(&ba, &bb).map(|t| (TestKind::Series, t)).ok_or_else(|| {
                format!(
                    "too short a time series: needs {SERIES_BLOCKS}+ intervals in each run, or 2+ repeats in each (A has {}, B has {})",
                    ra.len(),
                    rb.len()
                )
            });
        }
        Err(if timing_of(metric).is_some() {
            format!("needs requests.jsonl in both runs, or 2+ repeats in each (A has {}, B has {})", ra.len(), rb.len())
        } else {
            format!(
                "one run cannot say how noisy it is: needs 2+ repeats in each run (--repeat N; A has {}, B has {})",
                ra.len(),
                rb.len()
            )
        })
    }

    fn bootstrap(&mut self, field: &'static str, stat: &str) -> Judged {
        let (samples_a, samples_b) = (self.samples_a, self.samples_b);
        let tests = self.bootstraps.entry(field).or_insert_with(|| {
            fn values<'s>(s: Option<&'s Samples>, field: &str) -> &'s [(u64, f64)] {
                s.and_then(|s| s.get(field)).map_or(&[][..], Vec::as_slice)
            }
            let (va, vb) = (values(samples_a, field), values(samples_b, field));
            if va.is_empty() || vb.is_empty() {
                return Err("no completed request with this timing in one of the runs".to_string());
            }
            let (Some(a), Some(b)) = (BatchedValues::new(va), BatchedValues::new(vb)) else {
                return Err("a value that is not a number".to_string());
            };
            let stream = PER_REQUEST.iter().position(|(_, f, _)| *f == field).unwrap_or(PER_REQUEST.len()) as u64;
            bootstrap_stats(&a, &b, stream).ok_or_else(|| {
                format!(
                    "fewer than {MIN_BATCHES} batches with this timing in a run (A has {}, B has {}): too few to resample",
                    a.batches(),
                    b.batches()
                )
            })
        });
        let i = stats::STATS.iter().position(|s| *s == stat).unwrap_or_default();
        match tests {
            Ok(tests) => tests[i].map(|t| (TestKind::Bootstrap, t)).ok_or_else(|| "too few values".to_string()),
            Err(reason) => Err(reason.clone()),
        }
    }
}

/// The share a count metric is: (hits, out of, whether the units are requests rather than batches).
fn share(metric: &str, r: &BenchmarkResult) -> Option<(u64, u64, bool)> {
    let c = &r.counts;
    let b = &r.batching;
    Some(match metric {
        "completed" => (c.completed, c.submitted, true),
        "errors" => (c.errors, c.completed + c.errors, true),
        "cancelled" => (c.cancelled, c.submitted, true),
        "incomplete" => (c.incomplete, c.submitted, true),
        "lost" => (c.lost.max(0) as u64, c.submitted.max(c.lost.max(0) as u64), true),
        "anomalies" => (r.anomalies.requests, c.completed, true),
        "slo_attainment" => {
            let slo = r.slo.as_ref()?;
            (slo.met, slo.judged, true)
        }
        "full_flush_share" => (b.full, b.batches, false),
        "timeout_flush_share" => (b.timeout, b.batches, false),
        "drain_flush_share" => (b.drain, b.batches, false),
        _ => return None,
    })
}

/// Requests per batch over all of a run's repeats; `None` without batches.
fn mean_batch_size(runs: &[&BenchmarkResult]) -> Option<f64> {
    let batches: u64 = runs.iter().map(|r| r.batching.batches).sum();
    let requests: f64 =
        runs.iter().map(|r| r.batching.batch_size_mean.unwrap_or(0.0) * r.batching.batches as f64).sum();
    (batches > 0 && requests >= 1.0).then(|| requests / batches as f64)
}

/// Fisher's exact test of a count metric, every repeat pooled, in units of batches: a run's
/// request counts divided by its mean batch size (so a batch that failed as a whole counts once,
/// as the one event it is). `None` for a metric that is not a count.
fn count_test(metric: &str, a: &[&BenchmarkResult], b: &[&BenchmarkResult]) -> Option<Judged> {
    let pooled = |runs: &[&BenchmarkResult]| -> Option<(u64, u64, bool)> {
        runs.iter().map(|r| share(metric, r)).try_fold((0, 0, false), |(h, t, _), s| {
            let (hits, total, requests) = s?;
            Some((h + hits, t + total, requests))
        })
    };
    if share(metric, a.first()?).is_none() && !matches!(metric, "slo_attainment") {
        return None;
    }
    let (Some((ha, ta, requests)), Some((hb, tb, _))) = (pooled(a), pooled(b)) else {
        return Some(Err("not measured in one of the runs".to_string()));
    };
    let (ma, mb) = (mean_batch_size(a), mean_batch_size(b));
    let unit = |m: Option<f64>, other: Option<f64>| if requests { m.or(other).unwrap_or(1.0) } else { 1.0 };
    let (ua, ub) = (unit(ma, mb), unit(mb, ma));
    // A count in units: at least one unit once there is anything to count.
    let units = |n: u64, size: f64| if n == 0 { 0 } else { ((n as f64 / size).round() as u64).max(1) };
    let (hits_a, hits_b) = (units(ha, ua), units(hb, ub));
    let total_a = hits_a + units(ta - ha, ua);
    let total_b = hits_b + units(tb - hb, ub);
    Some(
        fisher_exact(hits_a, total_a, hits_b, total_b)
            .map(|t| (TestKind::Fisher, t))
            .ok_or_else(|| "nothing to count in one of the runs".to_string()),
    )
}

/// The per-interval series a metric is judged by without repeats.
#[derive(Copy, Clone)]
enum SeriesField {
    Completed,
    OutputTokens,
    Concurrency,
}

fn series_field(metric: &str) -> Option<SeriesField> {
    match metric {
        "requests_per_s" => Some(SeriesField::Completed),
        "output_tokens_per_s" => Some(SeriesField::OutputTokens),
        "concurrency_mean" => Some(SeriesField::Concurrency),
        _ => None,
    }
}

/// Every repeat's window cut into [`SERIES_BLOCKS`] blocks of consecutive intervals, and the
/// metric over each block: a rate per second, or the time-weighted mean concurrency. A repeat
/// with fewer intervals than blocks gives none.
fn series_blocks(runs: &[&BenchmarkResult], field: SeriesField) -> Vec<f64> {
    let mut out = Vec::new();
    for r in runs {
        let s = &r.time_series;
        let n = s.len();
        if n < SERIES_BLOCKS {
            continue;
        }
        for k in 0..SERIES_BLOCKS {
            let (mut seconds, mut sum) = (0.0, 0.0);
            for i in k * n / SERIES_BLOCKS..(k + 1) * n / SERIES_BLOCKS {
                let len = s.interval_len_s(i, r.duration_s);
                match field {
                    SeriesField::Completed => (seconds, sum) = (seconds + len, sum + s.completed[i] as f64),
                    SeriesField::OutputTokens => (seconds, sum) = (seconds + len, sum + s.output_tokens[i] as f64),
                    SeriesField::Concurrency => {
                        if let Some(c) = s.concurrency.get(i).copied().flatten() {
                            (seconds, sum) = (seconds + len, sum + c * len);
                        }
                    }
                }
            }
            if seconds > 0.0 {
                out.push(sum / seconds);
            }
        }
    }
    out
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
        let mut pair = Pair::new(name, a, b);
        for metric in metric_names() {
            let (ra, rb) = pair.repeats(metric);
            if ra.is_empty() && rb.is_empty() {
                continue;
            }
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let (va, vb) = (mean(&ra), mean(&rb));
            let judged = pair.judge(metric);
            let verdict = verdict(metric, &judged, options.alpha);
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
                test: judged.ok().map(|(kind, t)| (kind, t.p)),
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

fn verdict(metric: &str, judged: &Judged, alpha: f64) -> Verdict {
    let t = match judged {
        Ok((_, t)) => t,
        Err(reason) => return Verdict::NotJudged(reason.clone()),
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
