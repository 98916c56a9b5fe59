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
//!   weakens a verdict. But where both runs have 2+ repeats and these differ more than the
//!   units of one repeat allow (the units of a repeat share its machine's state), the repeat is
//!   the unit, and a note says so;
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

mod comparison;
mod gate;
mod judge;
mod run;

use std::collections::BTreeMap;

use crate::metrics::result::metric_names;
use crate::report::requests::MetricsMs;
use crate::report::{Report, ReportError};
pub use comparison::{
    CompareOptions, Comparison, Direction, Gate, Judgement, Outcome, Row, Scale, TestKind, Verdict, direction,
};
use gate::{gate_of, verdict_of};
use judge::{Pair, Side};
pub use run::{BatchSpan, Run, Sample, Samples};

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

fn names_of(report: &Report) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for b in &report.benchmarks {
        if !names.contains(&b.name) {
            names.push(b.name.clone());
        }
    }
    names
}

/// Compares every metric of every benchmark A and B share. See the module docs. When the two
/// runs' machine-speed probes (`environment.machine`) differ by more than the margin, every gated
/// relative metric's pass or regression becomes inconclusive, naming the drift: within one run no
/// interval can tell a slower machine from a slower change, and the probe (one core's speed)
/// understates what contention does to a server, so no size of change is safe from it.
pub fn compare(a: &Run, b: &Run, options: &CompareOptions) -> Result<Comparison, CompareError> {
    let (mut c, overruled) = compare_unprobed(a, b, options)?;
    note_repeat_units(&mut c, &overruled);
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

/// Per benchmark, the metrics whose within-run interval the repeats' spread overruled
/// ([`Pair::judge`]).
type Overruled = Vec<(String, Vec<String>)>;

/// A note per benchmark naming the metrics of `overruled` that the repeats still judge: the A/B
/// runner judges its rows again by the rounds, and a note on an interval no row shows would
/// mislead.
fn note_repeat_units(c: &mut Comparison, overruled: &Overruled) {
    for (name, metrics) in overruled {
        let by_repeats = |m: &&String| {
            c.rows.iter().any(|r| {
                &r.benchmark == name
                    && &r.metric == *m
                    && r.judgement.as_ref().is_some_and(|j| j.test == TestKind::Repeats)
            })
        };
        let shown: Vec<&str> = metrics.iter().filter(by_repeats).map(String::as_str).collect();
        if !shown.is_empty() {
            c.notes.push(format!(
                "{name}: the repeats differ more than their batches or blocks of time allow (those of one repeat share its machine's state), so the repeat is the unit for {}",
                shown.join(", ")
            ));
        }
    }
}

/// [`compare`] without the machine's drift (the A/B runner pairs it away), and the metrics whose
/// within-run interval the repeats overruled, unnoted (see [`note_repeat_units`]).
fn compare_unprobed(a: &Run, b: &Run, options: &CompareOptions) -> Result<(Comparison, Overruled), CompareError> {
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
    let mut overruled = Overruled::new();
    let gated = |metric: &str| options.gates.iter().any(|g| g == metric);
    for name in &common {
        let mut pair = Pair {
            a: Side::new(name, a, &mut notes, "A"),
            b: Side::new(name, b, &mut notes, "B"),
            alpha: options.alpha,
            bootstraps: BTreeMap::new(),
            repeat_bound: Vec::new(),
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
        if !pair.repeat_bound.is_empty() {
            let mut metrics = std::mem::take(&mut pair.repeat_bound);
            metrics.dedup();
            overruled.push((name.to_string(), metrics));
        }
    }
    let comparison = Comparison {
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
    };
    Ok((comparison, overruled))
}

#[cfg(test)]
mod tests;
