//! The validated plan a scenario file becomes.
//!
//! A scenario is parsed once into a [`Plan`]; nothing downstream sees TOML. Every value here has
//! passed validation: counts are in range, lists are non-empty, settings do not contradict.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::batcher::BatchConfig;
use crate::engine::faults::Faults;
use crate::engine::python::PythonConfig;
use crate::engine::python::vllm::VllmConfig;
use crate::engine::sim::{CostModel, TimeMode};

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
    Sim(SimPlan),
    Vllm(VllmConfig),
    Python(PythonConfig),
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimPlan {
    pub time: TimeMode,
    pub seed: u64,
    pub cost: CostModel,
}

/// A distribution of token counts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "dist", rename_all = "snake_case")]
pub enum TokenDist {
    Fixed { value: u32 },
    Uniform { min: u32, max: u32 },
    Normal { mean: f64, stdev: f64, min: u32, max: u32 },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum WorkloadPlan {
    Synthetic {
        prompt_tokens: TokenDist,
        output_tokens: TokenDist,
        seed: u64,
        /// Each prompt starts with tokens unique to it, so prefix caching cannot flatter results.
        unique_prefix: bool,
        vocab_size: u32,
        ignore_eos: bool,
        temperature: f32,
    },
    File {
        path: PathBuf,
        /// For lines without `max_tokens`.
        default_max_tokens: u32,
        ignore_eos: bool,
        temperature: f32,
    },
}

/// How requests are offered. Each variant expands into one or more benchmarks.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProfilePlan {
    /// One request at a time.
    Synchronous,
    /// One benchmark per level, each keeping exactly that many requests in flight.
    Concurrent { levels: Vec<u32> },
    /// As fast as possible, with at most `max_concurrency` in flight.
    Throughput { max_concurrency: u32 },
    /// One benchmark per rate (requests/s), evenly spaced arrivals.
    Constant { rates: Vec<f64>, max_concurrency: Option<u32> },
    /// Poisson arrivals at `rate` requests/s.
    Poisson { rate: f64, seed: u64, max_concurrency: Option<u32> },
    /// Synchronous, then throughput, then `rates` constant rates evenly spaced between the two
    /// measured request rates.
    Sweep { rates: u32, max_concurrency: u32 },
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
