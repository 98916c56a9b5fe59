//! The validated plan a scenario file becomes.
//!
//! A scenario is parsed once into a [`Plan`]; nothing downstream sees TOML. Every value here has
//! passed validation: counts are in range, lists are non-empty, settings do not contradict.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::files::Files;
use crate::batcher::BatchConfig;
#[doc(hidden)]
pub use crate::engine::chat::RequestFormat;
use crate::engine::faults::Faults;
use crate::engine::openai::OpenAiConfig;
use crate::engine::python::vllm::VllmConfig;
use crate::engine::python::{PythonConfig, PythonEngine};
use crate::engine::sim::{SimConfig, SimEngine};
use crate::engine::{EngineError, TimedEngine};
#[doc(hidden)]
pub use crate::loadgen::sessions::SessionSpec;
#[doc(hidden)]
pub use crate::loadgen::{
    Columns, DatasetOptions, FileFormat, ProfileSpec, SyntheticChat, TokenDist, TraceArrivals, WorkloadSpec,
};
#[doc(hidden)]
pub use crate::metrics::slo::Slo;

/// A validated scenario: everything a run needs, with every default filled in.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// `name`: the scenario's name; `batchlab run` writes to `results/<name>` unless `output.dir` is set.
    pub(super) name: String,
    /// `description`: free text, carried into the report.
    pub(super) description: Option<String>,
    /// The run's master seed; component seeds default to values derived from it.
    pub(super) seed: u64,
    /// `[engine]`: which engine runs, with its settings (ignored by `run_with*`).
    pub(super) engine: EnginePlan,
    /// `[batching]`: batch size, batch timeout and generate timeout.
    pub(super) batching: BatchConfig,
    /// `[workload]`: where the requests come from.
    pub(super) workload: WorkloadSpec,
    /// `[workload.sessions]`: turns chained into sessions; `None` sends each request once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sessions: Option<SessionSpec>,
    /// `[profile]`: how requests are offered; one or more benchmarks.
    pub(super) profile: ProfileSpec,
    /// `[stop]`: when each benchmark stops admitting measured requests.
    pub(super) stop: StopPlan,
    /// `[warmup]`: unmeasured requests before each benchmark's measurement.
    pub(super) warmup: Option<PhaseLimit>,
    /// `[cooldown]`: unmeasured requests after each benchmark's measurement.
    pub(super) cooldown: Option<PhaseLimit>,
    /// `[faults]`: injected around whichever engine runs.
    pub(super) faults: Faults,
    /// `[slo]`: per-request objectives; the report's `slo_attainment` and goodput judge them.
    pub(super) slo: Slo,
    /// `[expect]`: the checks `RunSummary::assert_expectations` and `batchlab run` judge.
    pub(super) expect: Vec<Expectation>,
    /// `[output]`: where files are written.
    pub(super) output: OutputPlan,
    /// `[matrix]`: the combinations to run in one engine start (each a whole plan); `None`
    /// without a matrix. The other fields are the first combination's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) matrix: Option<Box<MatrixPlan>>,
    /// What the plan was lowered from, for [`Plan::with_sets`]; never part of its value.
    #[serde(skip)]
    pub(super) source: Source,
    /// Where some keys were written, for the checks after lowering; never part of its value.
    #[serde(skip)]
    pub(super) places: Places,
}

impl Plan {
    /// `name`: the scenario's name; `batchlab run` writes to `results/<name>` unless `output.dir` is set.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `description`: free text, carried into the report.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }
    /// The run's master seed; component seeds default to values derived from it.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// `[engine]`: which engine runs, with its settings (ignored by `run_with*`).
    pub fn engine(&self) -> &EnginePlan {
        &self.engine
    }
    /// `[batching]`: batch size, batch timeout and generate timeout.
    pub fn batching(&self) -> &BatchConfig {
        &self.batching
    }
    /// `[workload]`: where the requests come from.
    pub fn workload(&self) -> &WorkloadSpec {
        &self.workload
    }
    /// `[workload.sessions]`: turns chained into sessions; `None` sends each request once.
    #[doc(hidden)]
    pub fn sessions(&self) -> Option<&SessionSpec> {
        self.sessions.as_ref()
    }
    /// `[profile]`: how requests are offered; one or more benchmarks.
    pub fn profile(&self) -> &ProfileSpec {
        &self.profile
    }
    /// `[stop]`: when each benchmark stops admitting measured requests.
    pub fn stop(&self) -> &StopPlan {
        &self.stop
    }
    /// `[warmup]`: unmeasured requests before each benchmark's measurement.
    pub fn warmup(&self) -> Option<&PhaseLimit> {
        self.warmup.as_ref()
    }
    /// `[cooldown]`: unmeasured requests after each benchmark's measurement.
    pub fn cooldown(&self) -> Option<&PhaseLimit> {
        self.cooldown.as_ref()
    }
    /// `[faults]`: injected around whichever engine runs.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }
    /// `[slo]`: per-request objectives; the report's `slo_attainment` and goodput judge them.
    pub fn slo(&self) -> &Slo {
        &self.slo
    }
    /// `[expect]`: the checks `RunSummary::assert_expectations` and `batchlab run` judge.
    pub fn expect(&self) -> &[Expectation] {
        &self.expect
    }
    /// `[output]`: where files are written.
    pub fn output(&self) -> &OutputPlan {
        &self.output
    }
    /// `[matrix]`: the combinations to run in one engine start; `None` without a matrix.
    pub fn matrix(&self) -> Option<&MatrixPlan> {
        self.matrix.as_deref()
    }
    /// Where `key` (a dotted path, e.g. `batching.max_in_flight`) was written: `file:line:column`,
    /// or the `--set` that set it. Kept only for the keys a check after the lowering may refuse
    /// (`run::preflight`: what the plan's own engine cannot take, while a caller's engine may);
    /// `None` for any other key, or one the scenario does not write.
    #[doc(hidden)]
    pub fn place(&self, key: &str) -> Option<&str> {
        self.places.0.iter().find(|(k, _)| k == key).map(|(_, place)| place.as_str())
    }
}

/// Where keys were written whose value a check after the lowering may refuse (see
/// [`Plan::place`]), each as the short form of its origin. Not part of the plan's value: two
/// plans with the same values are equal however they were written.
#[derive(Clone, Debug, Default)]
pub(super) struct Places(pub(super) Vec<(String, String)>);

impl PartialEq for Places {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// What a plan was lowered from: the scenario text, where it came from, and every change made
/// to it since, in order. `Plan::with_sets` (in `change`) lowers it again with one change more.
/// Not part of the plan's value: two plans with the same values are equal however they were
/// written.
#[derive(Clone)]
pub(super) struct Source(pub(super) Arc<Written>);

/// The text of a scenario and the changes applied to it.
#[derive(Clone)]
pub(super) struct Written {
    pub text: Arc<str>,
    /// The file name, for messages and the default name.
    pub file: Arc<str>,
    /// What relative paths resolve against.
    pub base_dir: Arc<Path>,
    pub layers: Vec<Layer>,
    /// The files its lowerings read, kept for the next.
    pub files: Files,
}

/// One round of changes: keys taken out, then `key=value` sets as `--set` takes them (and a
/// master seed), each problem labelled with `arg` (`--set`, `builder:`, `set`).
#[derive(Clone)]
pub(super) struct Layer {
    pub arg: &'static str,
    pub remove: Vec<String>,
    pub sets: Vec<String>,
    pub seed: Option<u64>,
}

impl Source {
    pub fn new(written: Written) -> Self {
        Source(Arc::new(written))
    }

    /// This source with one layer of changes more.
    pub fn with(&self, layer: Layer) -> Written {
        let mut written = (*self.0).clone();
        written.layers.push(layer);
        written
    }
}

impl Default for Source {
    fn default() -> Self {
        let base_dir: Arc<Path> = Path::new(".").into();
        Source::new(Written {
            text: "".into(),
            file: "builder".into(),
            base_dir,
            layers: Vec::new(),
            files: Files::default(),
        })
    }
}

impl PartialEq for Source {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Source({})", self.0.file)
    }
}

/// A validated `[matrix]`: its axes and every combination, each a complete [`Plan`].
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MatrixPlan {
    /// The axes in file order; the first varies slowest (none for `Plan::with_combinations`).
    pub(super) axes: Vec<Axis>,
    /// The Cartesian product of the axes, in order.
    pub(super) combinations: Vec<Combination>,
}

impl MatrixPlan {
    /// The axes in file order; the first varies slowest (none for `Plan::with_combinations`).
    pub fn axes(&self) -> &[Axis] {
        &self.axes
    }
    /// Every combination, in run order.
    pub fn combinations(&self) -> &[Combination] {
        &self.combinations
    }
}

/// One `[matrix]` key and its values.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Axis {
    /// The full key path, e.g. `batching.batch_size`.
    pub(super) key: String,
    /// Each value as TOML text (`8`, `"10ms"`, `[1, 2]`).
    pub(super) values: Vec<String>,
}

impl Axis {
    /// The full key path, e.g. `batching.batch_size`.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// Each value as TOML text (`8`, `"10ms"`, `[1, 2]`).
    pub fn values(&self) -> &[String] {
        &self.values
    }
}

/// One combination of the matrix.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Combination {
    /// `batch_size=8,batch_timeout=10ms`: the benchmark name (or its prefix).
    pub(super) label: String,
    /// (full key, value as the label shows it), one per axis.
    pub(super) values: Vec<(String, String)>,
    /// The scenario with this combination's values.
    #[serde(skip)]
    pub(super) plan: Plan,
}

impl Combination {
    /// `batch_size=8,batch_timeout=10ms`: the benchmark name (or its prefix).
    pub fn label(&self) -> &str {
        &self.label
    }
    /// (full key, value as the label shows it), one per axis.
    pub fn values(&self) -> &[(String, String)] {
        &self.values
    }
    /// The scenario with this combination's values.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
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
    /// `kind = "openai"`: an OpenAI-compatible server (or several) over HTTP.
    #[serde(rename = "openai")]
    OpenAi(OpenAiConfig),
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
            #[cfg(not(loom))]
            EnginePlan::OpenAi(c) => Ok(TimedEngine::real_time(crate::engine::openai::OpenAiEngine::new(c.clone()))),
            #[cfg(loom)]
            EnginePlan::OpenAi(_) => Err(EngineError::Unsupported("a loom build has no HTTP client".into())),
        }
    }

    /// What can be known to fail before the engine is built, checked without starting anything:
    /// a Python engine in a build without the `vllm` feature, a vLLM model directory that does not
    /// exist (batchlab never downloads one), an HTTP engine's API key variable that is not set.
    /// `batchlab check` and every run call it (through `run::preflight`) before the engine starts.
    pub fn check(&self) -> Result<(), EngineError> {
        // The model first: it is wrong whichever build reads the scenario.
        match self {
            EnginePlan::Sim(_) => Ok(()),
            EnginePlan::OpenAi(c) => match &c.api_key_env {
                Some(name) if std::env::var_os(name).is_none_or(|v| v.is_empty()) => Err(EngineError::Unsupported(
                    format!("`engine.openai.api_key_env`: the environment variable ${name} is not set (or empty)"),
                )),
                _ => Ok(()),
            },
            EnginePlan::Vllm(v) if !v.model.exists() => Err(EngineError::Unsupported(missing_model(&v.model))),
            EnginePlan::Vllm(_) | EnginePlan::Python(_) if !cfg!(feature = "vllm") => self.build().map(drop),
            EnginePlan::Vllm(_) | EnginePlan::Python(_) => Ok(()),
        }
    }

    /// The engine's kind as `engine.kind` spells it: `sim`, `vllm`, `python` or `openai`.
    pub fn kind(&self) -> &'static str {
        match self {
            EnginePlan::Sim(_) => "sim",
            EnginePlan::Vllm(_) => "vllm",
            EnginePlan::Python(_) => "python",
            EnginePlan::OpenAi(_) => "openai",
        }
    }

    /// Whether the engine runs processes of its own (a Python engine: vLLM's EngineCore and
    /// workers), whose output is captured into a log and whose deaths are watched.
    pub fn runs_processes(&self) -> bool {
        match self {
            EnginePlan::Sim(_) | EnginePlan::OpenAi(_) => false,
            EnginePlan::Vllm(_) | EnginePlan::Python(_) => true,
        }
    }

    /// The engine's seed, where the plan gives it one.
    pub fn seed(&self) -> Option<u64> {
        match self {
            EnginePlan::Sim(sim) => Some(sim.seed),
            EnginePlan::Vllm(v) => Some(v.seed),
            EnginePlan::Python(_) | EnginePlan::OpenAi(_) => None,
        }
    }
}

/// Per-benchmark stop conditions; the first one met ends the benchmark.
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StopPlan {
    /// Measured requests to submit.
    pub(super) max_requests: Option<u64>,
    /// How long to measure.
    pub(super) max_duration: Option<Duration>,
    /// Stop once this many measured requests failed.
    pub(super) max_errors: Option<u64>,
    /// Stop once this share (0 to 1) of measured requests failed, judged after 20.
    pub(super) max_error_rate: Option<f64>,
}

impl StopPlan {
    /// Measured requests to submit.
    pub fn max_requests(&self) -> Option<u64> {
        self.max_requests
    }
    /// How long to measure.
    pub fn max_duration(&self) -> Option<Duration> {
        self.max_duration
    }
    /// Stop once this many measured requests failed.
    pub fn max_errors(&self) -> Option<u64> {
        self.max_errors
    }
    /// Stop once this share (0 to 1) of measured requests failed, judged after 20.
    pub fn max_error_rate(&self) -> Option<f64> {
        self.max_error_rate
    }
}

/// A warmup or cooldown: requests run but excluded from the metrics.
#[doc(hidden)]
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
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    /// A metric name, one of `scenario::expect::known_metrics()`.
    pub metric: String,
    /// How measured is compared with `value`.
    pub op: Comparison,
    /// The bound.
    pub value: f64,
    /// Where it was written, for messages: `file:line:column`.
    pub origin: String,
}

/// `[output]`: what the run writes, and where.
#[doc(hidden)]
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OutputPlan {
    /// Directory for report.json, report.csv (and requests.jsonl); `None` writes nothing.
    pub(super) dir: Option<PathBuf>,
    /// Also write requests.jsonl, one line per request.
    pub(super) requests_jsonl: bool,
}

impl OutputPlan {
    /// Directory for report.json, report.csv (and requests.jsonl); `None` writes nothing.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }
    /// Also write requests.jsonl, one line per request.
    pub fn requests_jsonl(&self) -> bool {
        self.requests_jsonl
    }
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
