//! The validated plan a scenario file becomes.
//!
//! A scenario is parsed once into a [`Plan`]; nothing downstream sees TOML. Every value here has
//! passed validation: counts are in range, lists are non-empty, settings do not contradict.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::batcher::BatchConfig;
pub use crate::engine::chat::RequestFormat;
use crate::engine::faults::Faults;
use crate::engine::python::vllm::VllmConfig;
use crate::engine::python::{PythonConfig, PythonEngine};
use crate::engine::sim::{SimConfig, SimEngine};
use crate::engine::{EngineError, TimedEngine};
pub use crate::loadgen::{
    Columns, DatasetOptions, FileFormat, ProfileSpec, SyntheticChat, TokenDist, TraceArrivals, WorkloadSpec,
};
pub use crate::metrics::slo::Slo;

/// A validated scenario: everything a run needs, with every default filled in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// `name`: the scenario's name; `batchlab run` writes to `results/<name>` unless `output.dir` is set.
    pub name: String,
    /// `description`: free text, carried into the report.
    pub description: Option<String>,
    /// The run's master seed; component seeds default to values derived from it.
    pub seed: u64,
    /// `[engine]`: which engine runs, with its settings (ignored by `run_with*`).
    pub engine: EnginePlan,
    /// `[batching]`: batch size, batch timeout and generate timeout.
    pub batching: BatchConfig,
    /// `[workload]`: where the requests come from.
    pub workload: WorkloadSpec,
    /// `[profile]`: how requests are offered; one or more benchmarks.
    pub profile: ProfileSpec,
    /// `[stop]`: when each benchmark stops admitting measured requests.
    pub stop: StopPlan,
    /// `[warmup]`: unmeasured requests before each benchmark's measurement.
    pub warmup: Option<PhaseLimit>,
    /// `[cooldown]`: unmeasured requests after each benchmark's measurement.
    pub cooldown: Option<PhaseLimit>,
    /// `[faults]`: injected around whichever engine runs.
    pub faults: Faults,
    /// `[slo]`: per-request objectives; the report's `slo_attainment` and goodput judge them.
    pub slo: Slo,
    /// `[expect]`: the checks `RunSummary::assert_expectations` and `batchlab run` judge.
    pub expect: Vec<Expectation>,
    /// `[output]`: where files are written.
    pub output: OutputPlan,
    /// `[matrix]`: the combinations to run in one engine start (each a whole plan); `None`
    /// without a matrix. The other fields are the first combination's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matrix: Option<Box<crate::scenario::matrix::MatrixPlan>>,
}

/// `[engine]`: the built-in engine a plan names; [`EnginePlan::build`] builds it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EnginePlan {
    /// `kind = "sim"`: the simulated engine.
    Sim(SimConfig),
    /// `kind = "vllm"`: vLLM through its Python protocol class (needs the `vllm` feature).
    Vllm(VllmConfig),
    /// `kind = "python"`: any Python class implementing the engine protocol (needs the `vllm` feature).
    Python(PythonConfig),
}

impl EnginePlan {
    /// Builds the engine this plan names, in the time it names: the simulator in virtual or real
    /// time, Python engines (vLLM included) in real time. Fails for a Python engine in a build
    /// without the `vllm` feature.
    pub fn build(&self) -> Result<TimedEngine, EngineError> {
        match self {
            EnginePlan::Sim(config) => Ok(SimEngine::timed(config.clone())),
            EnginePlan::Vllm(_) | EnginePlan::Python(_) if !cfg!(feature = "vllm") => Err(EngineError::Unsupported(
                "this batchlab was built without Python engines (vLLM and `engine.kind = \"python\"`): \
                 rebuild with `--features vllm` (see docs/vllm.md)"
                    .into(),
            )),
            EnginePlan::Vllm(v) => Ok(TimedEngine::real_time(v.engine())),
            EnginePlan::Python(p) => Ok(TimedEngine::real_time(PythonEngine::new(p.clone()))),
        }
    }

    /// What can be known to fail before the engine is built, checked without starting anything:
    /// a Python engine in a build without the `vllm` feature, a vLLM model directory that does not
    /// exist (batchlab never downloads one). `batchlab check` and every run call it (through
    /// `run::preflight`) before the engine starts.
    pub fn check(&self) -> Result<(), EngineError> {
        // The model first: it is wrong whichever build reads the scenario.
        match self {
            EnginePlan::Sim(_) => Ok(()),
            EnginePlan::Vllm(v) if !v.model.exists() => Err(EngineError::Unsupported(missing_model(&v.model))),
            EnginePlan::Vllm(_) | EnginePlan::Python(_) if !cfg!(feature = "vllm") => self.build().map(drop),
            EnginePlan::Vllm(_) | EnginePlan::Python(_) => Ok(()),
        }
    }

    /// The engine's kind as `engine.kind` spells it: `sim`, `vllm` or `python`.
    pub fn kind(&self) -> &'static str {
        match self {
            EnginePlan::Sim(_) => "sim",
            EnginePlan::Vllm(_) => "vllm",
            EnginePlan::Python(_) => "python",
        }
    }

    /// Whether the engine runs processes of its own (a Python engine: vLLM's EngineCore and
    /// workers), whose output is captured into a log and whose deaths are watched.
    pub fn runs_processes(&self) -> bool {
        match self {
            EnginePlan::Sim(_) => false,
            EnginePlan::Vllm(_) | EnginePlan::Python(_) => true,
        }
    }

    /// The engine's seed, where the plan gives it one.
    pub fn seed(&self) -> Option<u64> {
        match self {
            EnginePlan::Sim(sim) => Some(sim.seed),
            EnginePlan::Vllm(v) => Some(v.seed),
            EnginePlan::Python(_) => None,
        }
    }
}

/// Per-benchmark stop conditions; the first one met ends the benchmark.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StopPlan {
    /// Measured requests to submit.
    pub max_requests: Option<u64>,
    /// How long to measure.
    pub max_duration: Option<Duration>,
    /// Stop once this many measured requests failed.
    pub max_errors: Option<u64>,
    /// Stop once this share (0 to 1) of measured requests failed, judged after 20.
    pub max_error_rate: Option<f64>,
}

/// A warmup or cooldown: requests run but excluded from the metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseLimit {
    /// This many requests.
    Requests(u64),
    /// This long.
    Duration(Duration),
}

/// How an expectation compares the measured value with its bound.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Comparison {
    /// `==`: equal (exactly; counts are whole numbers).
    #[serde(rename = "==")]
    Eq,
    /// `!=`: not equal.
    #[serde(rename = "!=")]
    Ne,
    /// `<`: less than.
    #[serde(rename = "<")]
    Lt,
    /// `<=`: at most.
    #[serde(rename = "<=")]
    Le,
    /// `>`: greater than.
    #[serde(rename = ">")]
    Gt,
    /// `>=`: at least.
    #[serde(rename = ">=")]
    Ge,
}

/// `metric op value`, checked against every benchmark of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    /// A metric name, one of [`crate::scenario::expect::known_metrics`].
    pub metric: String,
    /// How measured is compared with `value`.
    pub op: Comparison,
    /// The bound.
    pub value: f64,
    /// Where it was written, for messages: `file:line:column`.
    pub origin: String,
}

/// `[output]`: what the run writes, and where.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OutputPlan {
    /// Directory for report.json, report.csv (and requests.jsonl); `None` writes nothing.
    pub dir: Option<PathBuf>,
    /// Also write requests.jsonl, one line per request.
    pub requests_jsonl: bool,
}

/// Why a vLLM model path that does not exist cannot be used; a relative `org/name` under
/// `$BATCHLAB_HOME` looks like a Hugging Face id, and gets told how to fetch it beforehand.
fn missing_model(model: &std::path::Path) -> String {
    let mut message = format!(
        "`engine.vllm.model`: no model at {}; batchlab loads models from local directories only and never \
         downloads one",
        model.display()
    );
    let home = crate::engine::python::batchlab_home();
    let written = model.strip_prefix(&home).ok();
    if let Some(id) = written.filter(|w| w.components().count() == 2) {
        let id = id.display();
        message.push_str(&format!(
            ". `{id}` looks like a Hugging Face model id: download it first, e.g. \
             `huggingface-cli download {id} --local-dir {}`",
            model.display()
        ));
    }
    message
}
