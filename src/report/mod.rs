//! Run reports: `report.json`, `report.csv`, a console table and a per-request JSONL stream.
//!
//! A [`Report`] is plain data assembled at the end of a run; writers only format it, so the same
//! report always gives the same bytes. `docs/report.md` defines every field and its unit.
//!
//! # Files
//! - `requests`: the one record type of `requests.jsonl` (`RequestRecord` with `Phase`,
//!   `RequestOutcome`, `MetricsMs`), its writer `RequestsJsonl` and its reader `read_records`
//!   (streaming, a bad line named by file and line), through which `compare/` and `calibrate/` read.
//! - `read`: the one reader of a saved `report.json` (schema check first).
//! - `tuning`: the result types of a `batchlab tune` search (`TuneResult`, `Point`, `Space`,
//!   `TuneReport` with its confirmation): data only, the search's policy is in `tune/`.
//! - `html/`: `report.html` from a `Report` alone: `page` (the shared skeleton), `chart` (inline SVG
//!   through plotters' SVG backend), `report_page`. No script, no external resource; compare pages
//!   reuse `page` and `chart`.
//!
//! Formats what `run/` and `tune/` produce; never uses `run/`, `tune/`, `calibrate/` or `compare/`.

#[doc(hidden)]
pub mod environment;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod expect;
#[doc(hidden)]
pub mod html;
#[doc(hidden)]
pub mod merge;
#[doc(hidden)]
pub mod read;
#[doc(hidden)]
pub mod requests;
#[doc(hidden)]
pub mod shard;
#[doc(hidden)]
pub mod table;
#[doc(hidden)]
pub mod tuning;
#[doc(hidden)]
pub mod write;

use serde::{Deserialize, Serialize};

pub use crate::metrics::result::BenchmarkResult;
#[doc(hidden)]
pub use crate::metrics::result::metric_names;
pub use environment::{Environment, MachineProbe};
pub use error::ReportError;
#[doc(hidden)]
pub use expect::{ExpectationOutcome, evaluate, render_failures};
#[doc(hidden)]
pub use html::{HTML_FILE, render_html, write_html};
#[doc(hidden)]
pub use read::{read_report, report_path};
#[doc(hidden)]
pub use requests::{Phase, RequestOutcome, RequestRecord, RequestsJsonl, read_records};
#[doc(hidden)]
pub use table::render_table;
#[doc(hidden)]
pub use write::{CSV_FILE, JSON_FILE, csv_columns, prepare_output_dir, render_json, write_csv, write_json};

use crate::metrics::repeats::{RepeatSummary, summarize_repeats};
use crate::scenario::plan::Plan;

/// Bumped whenever a field of `report.json` changes meaning or disappears. 2: `tpot` is vLLM's
/// (`itl` was), `latency_per_token` is the old `tpot`, `itl` is per gap; SLOs; repeats.
#[doc(hidden)]
pub const SCHEMA_VERSION: u32 = 2;

/// Everything a run produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The report format's version, [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The batchlab version that ran.
    pub batchlab_version: String,
    /// The run stopped early (interrupted, or the engine failed, to start or later): some
    /// benchmarks are missing.
    pub incomplete: bool,
    /// Why the run could not start: the engine's start error (then there are no benchmarks).
    /// Left out of report.json when the engine started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resolved scenario the run executed, as `batchlab check` prints it (in JSON).
    pub scenario: serde_json::Value,
    /// Versions, engine, machine and seeds.
    pub environment: Environment,
    /// One result per benchmark (profile step) and repeat, in run order.
    pub benchmarks: Vec<BenchmarkResult>,
    /// With `--repeat N`: per benchmark, every metric's mean, spread and 95 % interval over its
    /// repeats. Empty without repeats.
    pub repeats: Vec<RepeatSummary>,
    /// Every `[expect]` checked against every benchmark, passed or not.
    pub expectations: Vec<ExpectationOutcome>,
    /// How prompt token lengths were counted: the model's tokenizer (`workload.tokenizer`), the
    /// four-byte rule (the simulator's, without one), or the engine's own count (a real engine).
    #[serde(default)]
    pub token_counting: TokenCounting,
    /// A file workload: its entries, the bad lines skipped and the prompts filtered; absent for
    /// synthetic workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<crate::loadgen::DatasetStats>,
    /// `batchlab tune`: the search, its recommendation and its confirmation on the real engine;
    /// absent for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tune: Option<tuning::TuneReport>,
    /// A shard of a sharded run (`batchlab run --shard K/N`): which, and how it started; absent
    /// for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<shard::ShardInfo>,
    /// A merged report (`batchlab merge`): its shards, their verdicts, those missing or failed;
    /// absent for other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<merge::MergeSummary>,
}

/// How a run counted prompt tokens: report.json's `token_counting`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenCounting {
    /// The model's own tokenizer (`workload.tokenizer`) sized the prompts and set the length limits.
    Tokenizer,
    /// Four bytes a token: the simulator, without a tokenizer.
    #[default]
    FourBytes,
    /// The engine's own count (vLLM, a Python engine, an HTTP server), without a tokenizer.
    Engine,
}

impl TokenCounting {
    /// The counting `plan` uses.
    pub(crate) fn of(plan: &Plan) -> TokenCounting {
        if plan.workload().tokenizer().is_some() {
            TokenCounting::Tokenizer
        } else if plan.engine().kind() == "sim" {
            TokenCounting::FourBytes
        } else {
            TokenCounting::Engine
        }
    }
}

impl Report {
    /// Assembles a report, checking `plan.expect()` against `benchmarks`.
    pub fn new(plan: &Plan, environment: Environment, benchmarks: Vec<BenchmarkResult>, incomplete: bool) -> Self {
        // The resolved scenario in the DSL's own terms (durations as "10ms", every default
        // spelled out): what `batchlab check` prints, as JSON.
        let scenario = crate::scenario::to_json(plan);
        let expectations = evaluate(plan.expect(), &benchmarks);
        let repeats = summarize_repeats(&benchmarks);
        Report {
            schema_version: SCHEMA_VERSION,
            batchlab_version: env!("CARGO_PKG_VERSION").to_string(),
            incomplete,
            error: None,
            scenario,
            environment,
            benchmarks,
            repeats,
            expectations,
            token_counting: TokenCounting::of(plan),
            dataset: None,
            tune: None,
            shard: None,
            merge: None,
        }
    }

    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.expectations.iter().all(|o| o.passed)
    }

    /// The benchmarks (`name`, or `name repeat N`) that completed no request, unless the scenario
    /// expects that (any `expect.completed`, such as `">= 0"`, says what the run may complete). A
    /// run in which nothing completed measured nothing: `batchlab run` fails it (exit 3).
    pub fn completed_nothing(&self) -> Vec<String> {
        if self.scenario.get("expect").and_then(|e| e.get("completed")).is_some() {
            return Vec::new();
        }
        let repeats = self.benchmarks.iter().any(|b| b.repeat > 0);
        self.benchmarks
            .iter()
            .filter(|b| b.counts.completed == 0)
            .map(|b| if repeats { format!("{} repeat {}", b.name, b.repeat) } else { b.name.clone() })
            .collect()
    }

    /// Panics unless every expectation held and the run is complete. The message lists every
    /// failed expectation with its measured and expected values, one per line:
    /// `FAIL ttft_p99_ms <= 50 (scenarios/x.toml:12:1): measured 73.2 in benchmark throughput`.
    #[track_caller]
    pub fn assert_expectations(&self) {
        let mut problems = render_failures(&self.expectations);
        if self.incomplete {
            problems.push_str("the run is incomplete (interrupted, or the engine became unusable)\n");
        }
        if !problems.is_empty() {
            let failed = self.expectations.iter().filter(|o| !o.passed).count();
            panic!(
                "{failed} of {} expectations failed in scenario {}:\n{problems}",
                self.expectations.len(),
                self.scenario.get("name").and_then(|n| n.as_str()).unwrap_or("?"),
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metrics::aggregate::tests::sample_aggregator;
    use crate::scenario::plan::{Comparison, Expectation};
    use crate::time::Timestamp;

    /// Environment fields that differ between machines and releases, redacted for snapshots.
    pub(crate) fn redacted_environment() -> Environment {
        Environment {
            batchlab_version: "[version]".into(),
            engine_name: "sim".into(),
            engine_version: "[version]".into(),
            engine_config: None,
            cpu_model: Some("[cpu]".into()),
            cores: Some(2),
            cpu_affinity: Some("0-1".into()),
            os: "[os]".into(),
            hostname: Some("[host]".into()),
            machine: Some(MachineProbe {
                probe_start_ms: 7.5,
                probe_end_ms: 7.75,
                load_start: Some(0.5),
                load_end: Some(1.25),
                steal_share: Some(0.0),
            }),
            seeds: BTreeMap::from([("run".to_string(), 42), ("workload".to_string(), 7)]),
        }
    }

    /// A fixed, hand-built report: two benchmarks and two expectations. The scenario is a stand-in
    /// (the plan's own serialization is tested with the plan).
    pub(crate) fn sample_report() -> Report {
        let end = Timestamp::from_nanos(1_001_000_000_000);
        let benchmarks =
            vec![sample_aggregator("throughput").finish(end), sample_aggregator("constant@10.0/s").finish(end)];
        let expectations = [
            Expectation {
                metric: "lost".into(),
                op: Comparison::Eq,
                value: 0.0,
                origin: "scenarios/x.toml:20:1".into(),
            },
            Expectation {
                metric: "ttft_p99_ms".into(),
                op: Comparison::Le,
                value: 50.0,
                origin: "scenarios/x.toml:21:1".into(),
            },
        ];
        Report {
            schema_version: SCHEMA_VERSION,
            batchlab_version: "[version]".into(),
            incomplete: false,
            error: None,
            scenario: serde_json::json!({ "name": "sample", "seed": 42 }),
            environment: redacted_environment(),
            expectations: evaluate(&expectations, &benchmarks),
            benchmarks,
            repeats: Vec::new(),
            token_counting: TokenCounting::FourBytes,
            dataset: None,
            tune: None,
            shard: None,
            merge: None,
        }
    }

    #[test]
    fn new_serializes_the_plan_and_checks_its_expectations() {
        let plan = crate::scenario::Scenario::builder()
            .name("plan")
            .seed(42)
            .synthetic(16, 8)
            .profile_throughput(4)
            .expect("lost", Comparison::Eq, 0.0)
            .build()
            .unwrap();
        let end = Timestamp::from_nanos(1_001_000_000_000);
        let benchmarks = vec![sample_aggregator("throughput").finish(end)];
        let report = Report::new(&plan, redacted_environment(), benchmarks, false);
        assert_eq!(report.schema_version, SCHEMA_VERSION);
        assert_eq!(report.scenario["name"], "plan");
        assert_eq!(report.scenario["profile"]["kind"], "throughput");
        assert_eq!(report.expectations.len(), 1);
        assert!(report.passed());
    }

    #[test]
    fn assert_expectations_lists_every_failure_with_measured_and_expected() {
        let report = sample_report();
        let panic = std::panic::catch_unwind(|| report.assert_expectations()).expect_err("ttft_p99_ms fails");
        let message = panic.downcast_ref::<String>().expect("a formatted message");
        insta::assert_snapshot!(message, @r"
        2 of 4 expectations failed in scenario sample:
        FAIL ttft_p99_ms <= 50 (scenarios/x.toml:21:1): measured 70 in benchmark throughput
        FAIL ttft_p99_ms <= 50 (scenarios/x.toml:21:1): measured 70 in benchmark constant@10.0/s
        ");
        let mut passing = sample_report();
        passing.expectations.retain(|o| o.metric == "lost");
        passing.assert_expectations();
        passing.incomplete = true;
        let panic = std::panic::catch_unwind(|| passing.assert_expectations()).expect_err("incomplete");
        assert!(panic.downcast_ref::<String>().unwrap().contains("the run is incomplete"));
    }

    #[test]
    fn passed_needs_every_expectation() {
        let mut report = sample_report();
        assert!(!report.passed(), "ttft_p99_ms <= 50 fails on the sample");
        report.expectations.retain(|o| o.metric == "lost");
        assert!(report.passed());
    }
}
