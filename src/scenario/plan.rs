//! The validated plan a scenario file becomes.
//!
//! A scenario is parsed once into a [`Plan`]; nothing downstream sees TOML. Every value here has
//! passed validation: counts are in range, lists are non-empty, settings do not contradict.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::batcher::BatchConfig;
use crate::engine::faults::Faults;
use crate::engine::python::vllm::VllmConfig;
use crate::engine::python::{PythonConfig, PythonEngine};
use crate::engine::sim::{SimConfig, SimEngine};
use crate::engine::{EngineError, TimedEngine};
pub use crate::load::{ProfilePlan, TokenDist, WorkloadPlan};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    /// The run's master seed; component seeds default to values derived from it.
    pub seed: u64,
    pub engine: EnginePlan,
    pub batching: BatchConfig,
    pub workload: WorkloadPlan,
    pub profile: ProfilePlan,
    pub stop: StopPlan,
    pub warmup: Option<PhaseLimit>,
    pub cooldown: Option<PhaseLimit>,
    /// `[faults]`: injected around whichever engine runs.
    pub faults: Faults,
    pub expect: Vec<Expectation>,
    pub output: OutputPlan,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EnginePlan {
    Sim(SimConfig),
    Vllm(VllmConfig),
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
    pub max_requests: Option<u64>,
    pub max_duration: Option<Duration>,
    pub max_errors: Option<u64>,
    pub max_error_rate: Option<f64>,
}

/// A warmup or cooldown: requests run but excluded from the metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseLimit {
    Requests(u64),
    Duration(Duration),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Comparison {
    #[serde(rename = "==")]
    Eq,
    #[serde(rename = "!=")]
    Ne,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

/// `metric op value`, checked against every benchmark of the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Expectation {
    pub metric: String,
    pub op: Comparison,
    pub value: f64,
    /// Where it was written, for messages: `file:line:column`.
    pub origin: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OutputPlan {
    pub dir: Option<PathBuf>,
    pub requests_jsonl: bool,
}
