//! `batchlab compare A B`: two saved runs, metric by metric, with a verdict that rests on
//! evidence: an interval of the change, never "not significant, so fine".
//!
//! A and B are `report.json` files or output directories ([`crate::report::read_report`]).
//! Benchmarks are matched by name. For every metric either run measured, the comparison shows
//! A's and B's value (the mean over distinct repeats when a run has several), the change, and the
//! change's `1 − alpha` interval, in the **unit of independence** the data has ([`stats`] has the
//! intervals):
//!
//! - **per-request timings** (`latency`, `ttft`, `tpot`, `itl`, `latency_per_token`, `batch_wait`,
//!   `engine_queue`) and the per-batch `generate`, every statistic of each: a bootstrap of the
//!   statistic's relative change over whole **units** of both runs' `requests.jsonl` (every
//!   distinct repeat pooled). The unit is the **batch**, or a **block of time** where every
//!   request is its own batch (`batch_size = 1`, an HTTP engine at 1, continuous admission,
//!   where the engine's step is the batch): never the request. With repeats as well, the
//!   repeats' own values give a second interval, and the narrower one is used: more data never
//!   weakens a verdict;
//! - **shares** (`errors`, `completed`, `cancelled`, `incomplete`, `lost`, `anomalies`,
//!   `slo_attainment`, the flush shares): the change in percentage points, each run's count at its
//!   effective size: its requests over the design effect measured from how the hits cluster in
//!   its units (a batch that failed whole is one event; independent failures are many);
//! - **throughput** (`requests_per_s`, `output_tokens_per_s`) and `concurrency_mean`: the repeats,
//!   and the report's per-interval time series cut into [`SERIES_BLOCKS`] blocks of time per
//!   repeat, the narrower;
//! - **everything else**: the repeats; with one, **not judged**.
//!
//! Each **gated** metric gets one of three verdicts ([`Gate`]): **pass** when the interval's
//! worse-side bound is within the margin (`max_regression`, or `max_error_increase` points for a
//! share): an equivalence test; **regression** when the interval excludes no change on the worse
//! side and the change is beyond the margin; else **inconclusive**, with what would decide it. A
//! B whose error share is above `max_error_rate` with certainty is a regression whatever A did.
//! Repeats that are byte-identical copies (virtual time, one seed) count once. docs/compare.md
//! has the details.
//!
//! ```no_run
//! use batchlab::compare::{CompareOptions, Outcome, Run, compare, table::render_comparison};
//!
//! let a = Run::load("results/base".as_ref())?;
//! let b = Run::load("results/new".as_ref())?;
//! let comparison = compare(&a, &b, &CompareOptions::default())?;
//! print!("{}", render_comparison(&comparison));
//! assert_eq!(comparison.outcome(), Outcome::Pass, "regressions: {:?}", comparison.regressions().collect::<Vec<_>>());
//! # Ok::<(), batchlab::compare::CompareError>(())
//! ```

pub mod html;
pub mod rounds;
pub mod stats;
pub mod table;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::metrics::result::{BenchmarkResult, metric_names};
use crate::report::requests::MetricsMs;
use crate::report::{
    Phase, Report, ReportError, RequestOutcome, RequestRecord, read_records, read_report, report_path,
};
use stats::{BatchedValues, ClusteredShare, Interval, MIN_BATCHES, bootstrap_changes, ratio_interval, share_change};

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

/// Blocks of time each repeat's window is cut into: the unit of the time series, and of the
/// requests where every request is its own batch.
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

/// One measured request of `requests.jsonl`, as compare reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Its repeat.
    pub repeat: u32,
    /// Its generate call, when it completed.
    pub batch: Option<u64>,
    /// When its batch was dispatched (ns), when it was.
    pub dispatched_ns: Option<u64>,
    /// Whether it failed (an error outcome).
    pub failed: bool,
    /// A completed request's timings, in [`PER_REQUEST`]'s order.
    pub timings: [Option<f64>; 7],
}

/// One batch of measured requests: its repeat, id, dispatch (ns) and dispatch-to-last-completion
/// time (ms).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchSpan {
    /// Its repeat.
    pub repeat: u32,
    /// The batch's id.
    pub batch: u64,
    /// Its dispatch, ns.
    pub dispatched_ns: u64,
    /// Its dispatch to its last measured completion, ms.
    pub generate_ms: f64,
}

/// The measured requests of one benchmark in `requests.jsonl`, every repeat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples {
    /// Every measured request that completed or failed.
    pub requests: Vec<Sample>,
    /// Every batch of measured, completed requests.
    pub batches: Vec<BatchSpan>,
}

/// One run: its report and, when it was written, its `requests.jsonl`.
#[derive(Clone, Debug)]
pub struct Run {
    /// How the run is named in output: the path it was read from.
    pub label: String,
    /// The directory its report is in (where `compare.html` goes when this run is B).
    pub dir: PathBuf,
    /// The report.
    pub report: Report,
    /// Per benchmark name: its measured requests; `None` without `requests.jsonl`.
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

/// Per repeat and batch: its dispatch and its last completion, ns.
type BatchWindows = BTreeMap<(u32, u64), (u64, u64)>;

/// The measured requests of `path`, by benchmark, and per batch its generate time.
fn read_requests(path: &Path) -> Result<BTreeMap<String, Samples>, CompareError> {
    let mut out: BTreeMap<String, Samples> = BTreeMap::new();
    // Per benchmark, repeat and batch: its dispatch and its last completion, ns.
    let mut spans: BTreeMap<String, BatchWindows> = BTreeMap::new();
    for record in read_records(path)? {
        let RequestRecord { benchmark, repeat, phase, outcome, metrics, batch, dispatched_ns, finished_ns, .. } =
            record?;
        if phase != Phase::Measure {
            continue;
        }
        let failed = matches!(outcome, RequestOutcome::Error { .. });
        let completed = matches!(outcome, RequestOutcome::Completed);
        if !failed && !completed {
            continue;
        }
        let mut timings = [None; 7];
        if let (true, Some(m)) = (completed, &metrics) {
            for (i, (_, _, value)) in PER_REQUEST.iter().enumerate() {
                timings[i] = value(m).filter(|v| v.is_finite());
            }
            if let (Some(batch), Some(d), Some(f)) = (batch, dispatched_ns, finished_ns) {
                let span = spans.entry(benchmark.clone()).or_default().entry((repeat, batch)).or_insert((u64::MAX, 0));
                *span = (span.0.min(d.as_nanos()), span.1.max(f.as_nanos()));
            }
        }
        let dispatched_ns = dispatched_ns.map(|d| d.as_nanos());
        let batch = if completed { batch } else { None };
        out.entry(benchmark).or_default().requests.push(Sample { repeat, batch, dispatched_ns, failed, timings });
    }
    for (benchmark, spans) in spans {
        let batches = spans.into_iter().map(|((repeat, batch), (from, to))| BatchSpan {
            repeat,
            batch,
            dispatched_ns: from,
            generate_ms: to.saturating_sub(from) as f64 / 1e6,
        });
        out.entry(benchmark).or_default().batches = batches.collect();
    }
    Ok(out)
}

/// How a comparison judges and gates.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareOptions {
    /// The margin of a gated metric: a change worse than this fraction of A's value is a
    /// regression, and a pass needs the interval's worse bound inside it.
    pub max_regression: f64,
    /// The intervals are at `1 − alpha`.
    pub alpha: f64,
    /// The gated metrics; [`DEFAULT_GATES`] by default.
    pub gates: Vec<String>,
    /// The absolute gate on errors: B fails when its error share's lower bound is above this.
    pub max_error_rate: f64,
    /// The margin of a gated share (errors, SLO attainment, …), in share points (0.01 = 1 pp).
    pub max_error_increase: f64,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            max_regression: 0.05,
            alpha: 0.05,
            gates: DEFAULT_GATES.iter().map(|g| g.to_string()).collect(),
            max_error_rate: 0.005,
            max_error_increase: 0.01,
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

/// What the interval of a metric's change says, gated or not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "reason")]
pub enum Verdict {
    /// The interval lies on the better side of no change.
    Better,
    /// The interval lies on the worse side.
    Worse,
    /// The interval excludes no change, for a metric without a better direction.
    Differs,
    /// The interval holds no change.
    WithinNoise,
    /// No interval could be made; why.
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

/// A gated metric's verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "gate", content = "reason")]
pub enum Gate {
    /// The change is within the margin: the interval's worse bound is inside it.
    Pass,
    /// The change is worse, certainly, and beyond the margin; why (or which limit).
    Regression(String),
    /// Neither: what the interval leaves open, and what would decide it.
    Inconclusive(String),
}

impl Gate {
    /// The gate as the table shows it.
    pub fn label(&self) -> &'static str {
        match self {
            Gate::Pass => "pass",
            Gate::Regression(_) => "REGRESSION",
            Gate::Inconclusive(_) => "INCONCLUSIVE",
        }
    }
}

/// The whole comparison's verdict: what `batchlab compare` exits with.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every gated metric passed (exit 0).
    Pass,
    /// A gated metric regressed (exit 4).
    Regression,
    /// Nothing regressed, but a gated metric could not be shown to pass (exit 5).
    Inconclusive,
}

/// Which interval a verdict rests on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestKind {
    /// A bootstrap of the statistic's change over whole units of requests.jsonl.
    Bootstrap,
    /// A share's change in points (Newcombe on Wilson, at each run's effective size).
    Share,
    /// The repeats' values, Welch's t on the ratio of means.
    Repeats,
    /// Blocks of the report's per-interval time series, Welch's t on the ratio of means.
    Series,
    /// Rounds of an A/B run, each an A and a B: a paired t on the per-round changes.
    Paired,
}

impl TestKind {
    /// The interval as the console table names it.
    pub fn label(self) -> &'static str {
        match self {
            TestKind::Bootstrap => "bootstrap",
            TestKind::Share => "wilson",
            TestKind::Repeats => "repeats-t",
            TestKind::Series => "series-t",
            TestKind::Paired => "paired-t",
        }
    }
}

/// How a change is measured: as a fraction of A's value, or in points of a share.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// `(B − A) / |A|`.
    Relative,
    /// `share B − share A`.
    Points,
}

/// The interval behind a row: the change with its bounds, how it was made and on how many
/// independent units.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    /// The change and its `1 − alpha` interval.
    pub interval: Interval,
    /// Relative, or in points.
    pub scale: Scale,
    /// Which interval.
    pub test: TestKind,
    /// Independent units in the smaller of the two runs (batches, blocks, repeats, rounds; for a
    /// share, its effective size).
    pub units: f64,
    /// The unit, in words, for the table ("batches", "time blocks", "repeats", "rounds", …).
    pub unit: String,
    /// For a share: B's own interval, `(low, high)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_share: Option<(f64, f64)>,
    /// For a share: the requests of B, which a larger run multiplies.
    #[serde(skip)]
    share_inputs: Option<(ClusteredShare, ClusteredShare)>,
}

impl Judgement {
    /// A relative change's interval, made by `test` on `units` independent `unit`s.
    fn relative(interval: Interval, test: TestKind, units: usize, unit: &str) -> Self {
        Judgement {
            interval,
            scale: Scale::Relative,
            test,
            units: units as f64,
            unit: unit.to_string(),
            b_share: None,
            share_inputs: None,
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
    /// A's value (mean over its distinct repeats); `None` when A did not measure it.
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// `b − a`.
    pub delta: Option<f64>,
    /// `(b − a) / |a|`.
    pub relative: Option<f64>,
    /// The interval behind the verdict, or `None` when not judged.
    pub judgement: Option<Judgement>,
    /// What the interval says.
    pub verdict: Verdict,
    /// Whether the metric is gated.
    pub gated: bool,
    /// A gated metric's verdict; `None` for one not gated (or judged through its parts).
    pub gate: Option<Gate>,
}

impl Row {
    /// Whether the row is a gated regression.
    pub fn is_regression(&self) -> bool {
        matches!(self.gate, Some(Gate::Regression(_)))
    }
}

/// Two runs compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// A's label (its path).
    pub a: String,
    /// B's label.
    pub b: String,
    /// The margin of relative changes, a fraction.
    pub max_regression: f64,
    /// The margin of shares, in share points.
    pub max_error_increase: f64,
    /// The absolute limit on B's error share.
    pub max_error_rate: f64,
    /// The intervals are at `1 − alpha`.
    pub alpha: f64,
    /// Every metric of every benchmark both runs have, benchmarks in A's order.
    pub rows: Vec<Row>,
    /// Benchmarks only A has.
    pub only_a: Vec<String>,
    /// Benchmarks only B has.
    pub only_b: Vec<String>,
    /// What the reader must know about the evidence (repeats counted once, the machine's drift).
    pub notes: Vec<String>,
}

impl Comparison {
    /// The regressions: gated metrics certainly worse beyond the margin.
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.is_regression())
    }

    /// The gated metrics neither shown to pass nor to regress.
    pub fn inconclusive(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| matches!(r.gate, Some(Gate::Inconclusive(_))))
    }

    /// Regression when any gated metric regressed, else inconclusive when any is, else pass.
    pub fn outcome(&self) -> Outcome {
        if self.regressions().next().is_some() {
            Outcome::Regression
        } else if self.inconclusive().next().is_some() {
            Outcome::Inconclusive
        } else {
            Outcome::Pass
        }
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

/// A run's repeats of a benchmark, byte-identical copies counted once (a virtual-time run of one
/// seed repeats itself exactly: one sample, however many copies). Also whether copies were
/// dropped.
fn distinct_repeats(results: Vec<&BenchmarkResult>) -> (Vec<&BenchmarkResult>, bool) {
    let copies = results.len();
    let mut seen: Vec<serde_json::Value> = Vec::new();
    let mut out = Vec::new();
    for r in results {
        let mut value = serde_json::to_value(r).unwrap_or_default();
        if let Some(o) = value.as_object_mut() {
            o.remove("repeat");
        }
        if !seen.contains(&value) {
            seen.push(value);
            out.push(r);
        }
    }
    let dropped = out.len() < copies;
    (out, dropped)
}

/// An interval, or why none could be made.
type Judged = Result<Judgement, String>;

/// The unit a run's requests are judged in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum UnitKind {
    /// The batch (generate call): the requests of one share its fate.
    Batch,
    /// A block of time: every request is its own batch, or the engine batches by itself.
    TimeBlock,
}

impl UnitKind {
    fn words(self) -> &'static str {
        match self {
            UnitKind::Batch => "batches",
            UnitKind::TimeBlock => "time blocks",
        }
    }
}

/// One run's side of one benchmark: its distinct repeats and their requests.
struct Side<'r> {
    results: Vec<&'r BenchmarkResult>,
    /// The measured requests of the distinct repeats.
    requests: Option<Vec<&'r Sample>>,
    batches: Option<Vec<&'r BatchSpan>>,
    unit: UnitKind,
    /// Per request (index into `requests`): its unit's id.
    unit_of: Vec<u64>,
    /// Per batch (index into `batches`): its unit's id.
    batch_unit: Vec<u64>,
}

impl<'r> Side<'r> {
    fn new(name: &str, run: &'r Run, notes: &mut Vec<String>, which: &str) -> Self {
        let all: Vec<&BenchmarkResult> = run.report.benchmarks.iter().filter(|x| x.name == name).collect();
        let n_all = all.len();
        let (results, copies) = distinct_repeats(all);
        if copies {
            notes.push(format!(
                "{which}'s {n_all} repeats of {name} are {} distinct (byte-identical copies: virtual time, one seed); each is counted once, copies are no evidence",
                results.len()
            ));
        }
        let repeats: BTreeSet<u32> = results.iter().map(|r| r.repeat).collect();
        let samples = run.requests.as_ref().and_then(|r| r.get(name));
        let requests: Option<Vec<&Sample>> =
            samples.map(|s| s.requests.iter().filter(|x| repeats.contains(&x.repeat)).collect());
        let batches: Option<Vec<&BatchSpan>> =
            samples.map(|s| s.batches.iter().filter(|x| repeats.contains(&x.repeat)).collect());
        // Every request its own batch (batch_size 1), or the engine's own steps (continuous
        // admission): the batch is no unit, a block of time is.
        let steps = results.iter().any(|r| r.batching.steps > 0);
        let per_batch = requests.as_ref().map(|reqs| {
            let completed = reqs.iter().filter(|x| x.batch.is_some()).count();
            let batches: BTreeSet<(u32, u64)> = reqs.iter().filter_map(|x| x.batch.map(|b| (x.repeat, b))).collect();
            completed as f64 / batches.len().max(1) as f64
        });
        let unit = if steps || per_batch.is_some_and(|m| m <= 1.5) { UnitKind::TimeBlock } else { UnitKind::Batch };
        let mut side = Side { results, requests, batches, unit, unit_of: Vec::new(), batch_unit: Vec::new() };
        side.assign_units();
        side
    }

    /// Each request's and batch's unit: its batch, or its block of its repeat's window.
    fn assign_units(&mut self) {
        let Some(requests) = &self.requests else { return };
        // Per repeat: the window of dispatches.
        let mut window: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for r in requests {
            if let Some(d) = r.dispatched_ns {
                let w = window.entry(r.repeat).or_insert((u64::MAX, 0));
                *w = (w.0.min(d), w.1.max(d));
            }
        }
        let block = |repeat: u32, at: Option<u64>| -> u64 {
            let k = SERIES_BLOCKS as u64;
            let (from, to) = window.get(&repeat).copied().unwrap_or((0, 0));
            let i = match at {
                Some(t) if to > from => ((t.saturating_sub(from)) as u128 * k as u128 / (to - from) as u128) as u64,
                _ => 0,
            };
            u64::from(repeat) * k + i.min(k - 1)
        };
        let unit = self.unit;
        self.unit_of = requests
            .iter()
            .enumerate()
            .map(|(i, r)| match unit {
                UnitKind::TimeBlock => block(r.repeat, r.dispatched_ns),
                // A failed request has no batch id: its dispatch names its batch (a request never
                // dispatched is a unit of its own).
                UnitKind::Batch => match (r.batch, r.dispatched_ns) {
                    (Some(b), _) => u64::from(r.repeat) << 48 | b,
                    (None, Some(d)) => 1 << 63 | d,
                    (None, None) => 1 << 62 | i as u64,
                },
            })
            .collect();
        self.batch_unit = self
            .batches
            .iter()
            .flatten()
            .map(|b| match unit {
                UnitKind::TimeBlock => block(b.repeat, Some(b.dispatched_ns)),
                UnitKind::Batch => u64::from(b.repeat) << 48 | b.batch,
            })
            .collect();
    }

    fn repeats(&self, metric: &str) -> Vec<f64> {
        self.results.iter().filter_map(|x| x.metric(metric)).collect()
    }

    /// `(unit, value)` of a timing field over the requests (or batches for `generate_ms`).
    fn timing(&self, field: &str) -> Option<Vec<(u64, f64)>> {
        if field == GENERATE.1 {
            let batches = self.batches.as_ref()?;
            return Some(batches.iter().zip(&self.batch_unit).map(|(b, &u)| (u, b.generate_ms)).collect());
        }
        let i = PER_REQUEST.iter().position(|(_, f, _)| *f == field)?;
        let requests = self.requests.as_ref()?;
        Some(requests.iter().zip(&self.unit_of).filter_map(|(r, &u)| r.timings[i].map(|v| (u, v))).collect())
    }

    /// How errors cluster: per unit where the request failures fall, `(failed, measured)`. For
    /// batches, a batch is its dispatch (a failed request has no batch id, but its dispatch).
    fn error_units(&self) -> Option<Vec<(u64, u64)>> {
        let requests = self.requests.as_ref()?;
        let mut units: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (i, r) in requests.iter().enumerate() {
            let key = match (self.unit, r.dispatched_ns) {
                (UnitKind::TimeBlock, _) => self.unit_of[i],
                (UnitKind::Batch, Some(d)) => u64::from(r.repeat) << 56 ^ d,
                (UnitKind::Batch, None) => 1 << 63 | i as u64,
            };
            let u = units.entry(key).or_default();
            *u = (u.0 + u64::from(r.failed), u.1 + 1);
        }
        Some(units.into_values().collect())
    }

    /// The generate calls the run made in its measured window (its batches; for an engine that
    /// batches by itself, its requests, each handed over alone).
    fn calls(&self) -> u64 {
        self.results
            .iter()
            .map(|r| if r.batching.steps > 0 { r.counts.completed + r.counts.errors } else { r.batching.batches })
            .sum()
    }
}

/// Every statistic's interval of one timing, in [`stats::STATS`]' order.
type StatIntervals = [Option<Interval>; 9];

/// One benchmark of both runs.
struct Pair<'r> {
    a: Side<'r>,
    b: Side<'r>,
    alpha: f64,
    /// Per requests.jsonl field: each statistic's bootstrap interval, or why there is none.
    bootstraps: BTreeMap<&'static str, Result<(StatIntervals, usize), String>>,
}

impl<'r> Pair<'r> {
    fn judge(&mut self, metric: &str) -> Judged {
        if let Some(shared) = self.share(metric) {
            return shared;
        }
        let mut candidates: Vec<Judged> = Vec::new();
        if let Some((field, stat)) = timing_of(metric) {
            candidates.push(self.bootstrap(field, stat));
        }
        if let Some(field) = series_field(metric) {
            candidates.push(self.series(field));
        }
        candidates.push(self.by_repeats(metric));
        // The narrowest interval: the one that holds the most independent information.
        let mut best: Option<Judgement> = None;
        let mut reasons: Vec<String> = Vec::new();
        for c in candidates {
            match c {
                Ok(j) => {
                    if best.as_ref().is_none_or(|b| j.interval.half_width() < b.interval.half_width()) {
                        best = Some(j);
                    }
                }
                // The repeats' reason names requests.jsonl too.
                Err(r) if r.starts_with("needs requests.jsonl") => {}
                Err(r) => reasons.push(r),
            }
        }
        best.ok_or_else(|| reasons.join("; "))
    }

    fn by_repeats(&self, metric: &str) -> Judged {
        let (ra, rb) = (self.a.repeats(metric), self.b.repeats(metric));
        ratio_interval(&ra, &rb, self.alpha)
            .map(|interval| Judgement::relative(interval, TestKind::Repeats, ra.len().min(rb.len()), "repeats"))
            .ok_or_else(|| {
                format!(
                    "needs 2+ distinct repeats in each run (--repeat N; A has {}, B has {}){}",
                    ra.len(),
                    rb.len(),
                    if timing_of(metric).is_some() { ", or requests.jsonl in both" } else { "" }
                )
            })
    }

    fn series(&self, field: SeriesField) -> Judged {
        let (ba, bb) = (series_blocks(&self.a.results, field), series_blocks(&self.b.results, field));
        ratio_interval(&ba, &bb, self.alpha)
            .map(|interval| Judgement::relative(interval, TestKind::Series, ba.len().min(bb.len()), "time blocks"))
            .ok_or_else(|| format!("too short a time series: needs {SERIES_BLOCKS}+ intervals in each run"))
    }

    fn bootstrap(&mut self, field: &'static str, stat: &str) -> Judged {
        let (a, b, alpha) = (&self.a, &self.b, self.alpha);
        let unit = if a.unit == UnitKind::TimeBlock || b.unit == UnitKind::TimeBlock {
            UnitKind::TimeBlock
        } else {
            UnitKind::Batch
        };
        let tests = self.bootstraps.entry(field).or_insert_with(|| {
            let (Some(va), Some(vb)) = (a.timing(field), b.timing(field)) else {
                return Err("needs requests.jsonl in both runs".to_string());
            };
            if va.is_empty() || vb.is_empty() {
                return Err("no completed request with this timing in one of the runs".to_string());
            }
            let (Some(xa), Some(xb)) = (BatchedValues::new(&va), BatchedValues::new(&vb)) else {
                return Err("a value that is not a number".to_string());
            };
            let stream = PER_REQUEST.iter().position(|(_, f, _)| *f == field).unwrap_or(PER_REQUEST.len()) as u64;
            let units = xa.batches().min(xb.batches());
            bootstrap_changes(&xa, &xb, alpha, stream).map(|t| (t, units)).ok_or_else(|| {
                format!(
                    "fewer than {MIN_BATCHES} {} with this timing in a run (A has {}, B has {}): too few to resample",
                    unit.words(),
                    xa.batches(),
                    xb.batches()
                )
            })
        });
        let i = stats::STATS.iter().position(|s| *s == stat).unwrap_or_default();
        match tests {
            Ok((tests, units)) => tests[i]
                .map(|interval| Judgement::relative(interval, TestKind::Bootstrap, *units, unit.words()))
                .ok_or_else(|| "too few values".to_string()),
            Err(reason) => Err(reason.clone()),
        }
    }

    /// A share metric's change in points; `None` for a metric that is not a share.
    fn share(&self, metric: &str) -> Option<Judged> {
        share_of(metric, self.a.results.first()?)?;
        let side = |s: &Side| -> Option<ClusteredShare> {
            let (hits, total, per_request) =
                s.results.iter().map(|r| share_of(metric, r)).try_fold((0u64, 0u64, false), |(h, t, _), x| {
                    let (hits, total, per_request) = x?;
                    Some((h + hits, t + total, per_request))
                })?;
            let units = if metric == "errors" { s.error_units().unwrap_or_default() } else { Vec::new() };
            let fallback_units = if per_request { s.calls() } else { total };
            Some(ClusteredShare { hits, total, units, fallback_units })
        };
        let (Some(a), Some(b)) = (side(&self.a), side(&self.b)) else {
            return Some(Err("not measured in one of the runs".to_string()));
        };
        Some(
            share_change(&a, &b, self.alpha, 1.0)
                .map(|c| {
                    let measured = a.design_effect().or(b.design_effect());
                    Judgement {
                        interval: c.change,
                        scale: Scale::Points,
                        test: TestKind::Share,
                        units: c.n_a.min(c.n_b),
                        unit: match measured {
                            Some(d) => format!("independent requests (design effect {d:.1})"),
                            None => "generate calls".into(),
                        },
                        b_share: Some((c.b_low, c.b_high)),
                        share_inputs: Some((a, b)),
                    }
                })
                .ok_or_else(|| "nothing to count in one of the runs".to_string()),
        )
    }
}

/// The share a count metric is: (hits, out of, whether the members are requests rather than
/// batches); `None` for a metric that is not a share, or a run without it.
fn share_of(metric: &str, r: &BenchmarkResult) -> Option<(u64, u64, bool)> {
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

/// The per-interval series a metric is judged by.
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

/// Compares every metric of every benchmark A and B share. See the module docs. When the two
/// runs' machine-speed probes (`environment.machine`) differ by more than the margin, every gated
/// relative metric's pass or regression becomes inconclusive, naming the drift: within one run no
/// interval can tell a slower machine from a slower change, and the probe (one core's speed)
/// understates what contention does to a server, so no size of change is safe from it.
pub fn compare(a: &Run, b: &Run, options: &CompareOptions) -> Result<Comparison, CompareError> {
    let mut c = compare_unprobed(a, b, options)?;
    if let Some(drift) = a.report.environment.machine_drift(&b.report.environment)
        && drift.abs() > options.max_regression
    {
        let why = format!(
            "the machine drifted by {:+.1} % between the runs (their speed probes); run A and B alternately (batchlab ab) to tell a change from the machine",
            drift * 100.0
        );
        for row in &mut c.rows {
            let relative = row.judgement.as_ref().is_some_and(|j| j.scale == Scale::Relative);
            if relative && matches!(row.gate, Some(Gate::Pass | Gate::Regression(_))) {
                row.gate = Some(Gate::Inconclusive(why.clone()));
            }
        }
        c.notes.push(why);
    }
    Ok(c)
}

/// [`compare`] without the machine's drift (the A/B runner pairs it away).
fn compare_unprobed(a: &Run, b: &Run, options: &CompareOptions) -> Result<Comparison, CompareError> {
    if let Some(unknown) = options.gates.iter().find(|g| !metric_names().contains(g)) {
        return Err(CompareError::UnknownGate(unknown.clone()));
    }
    let (names_a, names_b) = (names_of(&a.report), names_of(&b.report));
    let common: Vec<&String> = names_a.iter().filter(|n| names_b.contains(n)).collect();
    if common.is_empty() {
        return Err(CompareError::NothingInCommon { a: names_a.join(", "), b: names_b.join(", ") });
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let gated = |metric: &str| options.gates.iter().any(|g| g == metric);
    for name in &common {
        let mut pair = Pair {
            a: Side::new(name, a, &mut notes, "A"),
            b: Side::new(name, b, &mut notes, "B"),
            alpha: options.alpha,
            bootstraps: BTreeMap::new(),
        };
        for metric in metric_names() {
            let (ra, rb) = (pair.a.repeats(metric), pair.b.repeats(metric));
            if ra.is_empty() && rb.is_empty() {
                continue;
            }
            let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
            let (va, vb) = (mean(&ra), mean(&rb));
            let judged = pair.judge(metric);
            let delta = va.zip(vb).map(|(x, y)| y - x);
            let relative = va.zip(delta).and_then(|(x, d)| (x != 0.0).then(|| d / x.abs()));
            let verdict = match &judged {
                Ok(j) => verdict_of(metric, &j.interval),
                Err(reason) => Verdict::NotJudged(reason.clone()),
            };
            let is_gated = gated(metric);
            // Goodput without repeats is judged through its parts, each gated.
            let through_parts =
                metric.starts_with("goodput_") && judged.is_err() && gated("slo_attainment") && gated("requests_per_s");
            let gate = (is_gated && !through_parts).then(|| gate_of(metric, &judged, relative, options));
            rows.push(Row {
                benchmark: name.to_string(),
                metric: metric.clone(),
                a: va,
                b: vb,
                delta,
                relative,
                judgement: judged.ok(),
                verdict,
                gated: is_gated,
                gate,
            });
        }
    }
    Ok(Comparison {
        a: a.label.clone(),
        b: b.label.clone(),
        max_regression: options.max_regression,
        max_error_increase: options.max_error_increase,
        max_error_rate: options.max_error_rate,
        alpha: options.alpha,
        rows,
        only_a: names_a.iter().filter(|n| !names_b.contains(n)).cloned().collect(),
        only_b: names_b.iter().filter(|n| !names_a.contains(n)).cloned().collect(),
        notes,
    })
}

/// What an interval says of a metric: on which side of no change it lies, if on one.
fn verdict_of(metric: &str, interval: &Interval) -> Verdict {
    let side = if interval.low > 0.0 {
        1
    } else if interval.high < 0.0 {
        -1
    } else {
        return Verdict::WithinNoise;
    };
    match (direction(metric), side) {
        (Direction::Neutral, _) => Verdict::Differs,
        (Direction::Lower, -1) | (Direction::Higher, 1) => Verdict::Better,
        _ => Verdict::Worse,
    }
}

/// An interval turned so that positive is worse: `(estimate, better bound, worse bound)`. A
/// metric without a better direction is judged both ways: its larger departure is "worse".
fn worse_side(metric: &str, i: &Interval) -> (f64, f64, f64) {
    match direction(metric) {
        Direction::Lower => (i.estimate, i.low, i.high),
        Direction::Higher => (-i.estimate, -i.high, -i.low),
        Direction::Neutral => {
            let far = i.high.abs().max(i.low.abs());
            let near = if i.low > 0.0 || i.high < 0.0 { i.low.abs().min(i.high.abs()) } else { 0.0 };
            (i.estimate.abs(), near, far)
        }
    }
}

/// The three-way rule on `interval` (turned worse-positive) against `margin`; `estimate` is the
/// table's change, which a pass must also keep inside the margin.
fn decide(metric: &str, interval: &Interval, estimate: Option<f64>, margin: f64) -> Option<bool> {
    let (est, better, worse) = worse_side(metric, interval);
    let shown = estimate.map(|e| worse_side(metric, &Interval::exact(e)).0);
    if better > 0.0 && est > margin {
        return Some(false);
    }
    if worse < margin && shown.is_none_or(|s| s <= margin) {
        return Some(true);
    }
    None
}

fn percent(x: f64) -> String {
    format!("{} %", crate::report::expect::human_number(x * 100.0))
}

/// A gated metric's verdict. See [`Gate`].
fn gate_of(metric: &str, judged: &Judged, relative: Option<f64>, options: &CompareOptions) -> Gate {
    let j = match judged {
        Ok(j) => j,
        Err(reason) => return Gate::Inconclusive(format!("not judged: {reason}")),
    };
    let (margin, estimate) = match j.scale {
        Scale::Points => (options.max_error_increase, Some(j.interval.estimate)),
        Scale::Relative => (options.max_regression, relative),
    };
    // The absolute limit on errors, whatever A did.
    if metric == "errors"
        && let Some((low, _)) = j.b_share
        && low > options.max_error_rate
    {
        return Gate::Regression(format!(
            "B's error share is at least {} (its {}-interval), above --max-error-rate {}",
            percent(low),
            percent(1.0 - options.alpha),
            percent(options.max_error_rate)
        ));
    }
    let (est, _, _) = worse_side(metric, &j.interval);
    match decide(metric, &j.interval, estimate, margin) {
        Some(true) => Gate::Pass,
        Some(false) => {
            Gate::Regression(format!("worse by {} at least", show(worse_side(metric, &j.interval).1, j.scale)))
        }
        None => Gate::Inconclusive(needs(metric, j, estimate, margin, est, options.alpha)),
    }
}

/// A change as the table shows it: a percentage, or points.
fn show(x: f64, scale: Scale) -> String {
    match scale {
        Scale::Relative => format!("{:+.1} %", x * 100.0),
        Scale::Points => format!("{:+.2} pp", x * 100.0),
    }
}

/// What would decide an inconclusive row: the units per run at which the same change, measured
/// as precisely as a larger run would, is a pass or a regression.
fn needs(metric: &str, j: &Judgement, estimate: Option<f64>, margin: f64, est: f64, alpha: f64) -> String {
    let tell = match j.scale {
        Scale::Relative => format!("±{}", percent(margin)),
        Scale::Points => format!("±{} pp", crate::report::expect::human_number(margin * 100.0)),
    };
    let open = format!(
        "the interval [{}, {}] holds both no change and more than {tell}",
        show(j.interval.low, j.scale),
        show(j.interval.high, j.scale)
    );
    let at = |scale: f64| -> Option<Interval> {
        match &j.share_inputs {
            Some((a, b)) => share_change(a, b, alpha, scale).map(|c| c.change),
            None => {
                let i = &j.interval;
                let k = scale.sqrt();
                Some(Interval {
                    estimate: i.estimate,
                    low: i.estimate - (i.estimate - i.low) / k,
                    high: i.estimate + (i.high - i.estimate) / k,
                })
            }
        }
    };
    if !j.interval.low.is_finite() || !j.interval.high.is_finite() || j.units < 1.0 {
        return format!("{open}; too few units to say how many more would decide it");
    }
    let mut scale = 1.0;
    while scale < 1e4 {
        scale *= 1.25;
        if let Some(i) = at(scale)
            && decide(metric, &i, estimate, margin).is_some()
        {
            let target = if est > margin { "to tell it from no change".to_string() } else { format!("to tell {tell}") };
            let count = (j.units * scale).ceil();
            return format!("{open}; needs about {count} {} per run {target}", j.unit);
        }
    }
    format!("{open}; the change is too close to the margin for any run size to decide")
}

#[cfg(test)]
mod tests;
