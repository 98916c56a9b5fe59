//! What a comparison is asked and what it says: the options ([`CompareOptions`]), which way
//! each metric is better, and the answer, row by row ([`Row`], [`Judgement`], [`Verdict`],
//! [`Gate`]) up to the whole [`Comparison`]'s [`Outcome`]. Data only: the judging is in `judge`,
//! the gate's rule in `gate`.

use serde::Serialize;

use super::DEFAULT_GATES;
use super::stats::{ClusteredShare, Interval};

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
    pub(super) share_inputs: Option<(ClusteredShare, ClusteredShare)>,
}

impl Judgement {
    /// A relative change's interval, made by `test` on `units` independent `unit`s.
    pub(super) fn relative(interval: Interval, test: TestKind, units: usize, unit: &str) -> Self {
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
