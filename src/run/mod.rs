//! `batchlab run`: a validated [`Plan`] in, a [`Report`] out.
//!
//! The plan's profile expands into steps (benchmarks). Each step is a [`step::StepRun`] state
//! machine; a driver feeds it time, submissions and outcomes. The simulated engine in virtual time
//! runs on the single-threaded [`virtual_driver`] (deterministic, byte-identical reports for a
//! seed); everything in real time runs on the tokio [`realtime`] driver over the threaded batcher.
//! The engine is loaded before the first step's clock starts, so cold start is never measured.
//! Every engine runs inside a [`FaultyEngine`] with the plan's `[faults]` (a plain pass-through
//! when there are none), seeded with the engine's seed.

pub mod progress;
mod realtime;
pub mod status;
pub mod step;
mod virtual_driver;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::engine::faults::FaultyEngine;
use crate::engine::python::PythonEngine;
use crate::engine::sim::{SimConfig, SimEngine, TimeMode};
use crate::engine::{EngineError, EngineInfo};
use crate::load::{LoadError, Workload};
use crate::report::{BenchmarkResult, Environment, Report, ReportError, RequestsJsonl, write_csv, write_json};
use crate::scenario::plan::{EnginePlan, Plan, WorkloadPlan};
use crate::time::MonotonicClock;
use progress::{Progress, ProgressMode};

/// How a run is carried out and where it writes.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where report.json, report.csv (and requests.jsonl) go; `None` writes nothing.
    pub output_dir: Option<PathBuf>,
    pub requests_jsonl: bool,
    pub progress: ProgressMode,
    /// Becomes `true` on the first Ctrl-C.
    pub interrupt: watch::Receiver<bool>,
}

impl RunOptions {
    /// No output files, no progress, never interrupted: for tests and embedding.
    pub fn quiet() -> Self {
        let (tx, rx) = watch::channel(false);
        // Keep the sender alive for the life of the process so `changed()` never errors.
        std::mem::forget(tx);
        RunOptions { output_dir: None, requests_jsonl: false, progress: ProgressMode::Off, interrupt: rx }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("{0}")]
    Unsupported(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a run produced.
#[derive(Debug)]
pub struct RunSummary {
    pub report: Report,
    /// The console table.
    pub table: String,
    /// Files written.
    pub written: Vec<PathBuf>,
    pub interrupted: bool,
}

/// What a driver hands back.
struct DriverResult {
    engine: EngineInfo,
    benchmarks: Vec<BenchmarkResult>,
    interrupted: bool,
    /// The run could not finish every step (engine unusable, or interrupted).
    incomplete: bool,
}

/// Runs a plan to completion (or interruption) and writes its report.
pub async fn run(plan: &Plan, options: RunOptions) -> Result<RunSummary, RunError> {
    let workload = Workload::from_plan(&plan.workload)?;
    let mut jsonl = match (&options.output_dir, options.requests_jsonl || plan.output.requests_jsonl) {
        (Some(dir), true) => Some(RequestsJsonl::create(dir)?),
        _ => None,
    };
    let mut progress = Progress::new(options.progress);
    let result = match &plan.engine {
        EnginePlan::Sim(sim) => {
            let config = SimConfig { seed: sim.seed, cost: sim.cost.clone() };
            match sim.time {
                TimeMode::Virtual => {
                    let plan = plan.clone();
                    let interrupt = options.interrupt.clone();
                    let (r, j) = tokio::task::spawn_blocking(move || {
                        let mut progress = Progress::new(options.progress);
                        let r = virtual_driver::run(&plan, config, &workload, &mut jsonl, &mut progress, &interrupt);
                        (r, jsonl)
                    })
                    .await
                    .map_err(|e| RunError::Internal(e.to_string()))?;
                    jsonl = j;
                    r?
                }
                TimeMode::Real => {
                    let engine = SimEngine::new(config, Arc::new(MonotonicClock));
                    let engine = FaultyEngine::new(engine, plan.faults.clone(), sim.seed, Arc::new(MonotonicClock));
                    realtime::run(plan, engine, &workload, &mut jsonl, &mut progress, options.interrupt.clone()).await?
                }
            }
        }
        EnginePlan::Vllm(_) | EnginePlan::Python(_) if !cfg!(feature = "vllm") => {
            return Err(RunError::Unsupported(
                "this batchlab was built without Python engines (vLLM and `engine.kind = \"python\"`): \
                 rebuild with `--features vllm` (see docs/vllm.md)"
                    .into(),
            ));
        }
        EnginePlan::Vllm(v) => {
            let engine = FaultyEngine::new(v.engine(), plan.faults.clone(), v.seed, Arc::new(MonotonicClock));
            realtime::run(plan, engine, &workload, &mut jsonl, &mut progress, options.interrupt.clone()).await?
        }
        EnginePlan::Python(p) => {
            let engine = PythonEngine::new(p.clone());
            let engine = FaultyEngine::new(engine, plan.faults.clone(), plan.seed, Arc::new(MonotonicClock));
            realtime::run(plan, engine, &workload, &mut jsonl, &mut progress, options.interrupt.clone()).await?
        }
    };
    progress.clear();

    let environment = Environment::detect(&result.engine, seeds(plan));
    let report = Report::new(plan, environment, result.benchmarks, result.incomplete)?;
    let mut written = Vec::new();
    if let Some(dir) = &options.output_dir {
        written.push(write_json(&report, dir)?);
        written.push(write_csv(&report, dir)?);
    }
    if let Some(j) = jsonl {
        let lines = j.lines();
        j.finish()?;
        if let Some(dir) = &options.output_dir {
            written.push(dir.join(crate::report::requests::REQUESTS_FILE));
        }
        tracing::debug!(lines, "requests.jsonl written");
    }
    let table = crate::report::render_table(&report);
    Ok(RunSummary { report, table, written, interrupted: result.interrupted })
}

/// Every seed the run used, by component.
fn seeds(plan: &Plan) -> BTreeMap<String, u64> {
    let mut s = BTreeMap::new();
    s.insert("run".to_string(), plan.seed);
    match &plan.engine {
        EnginePlan::Sim(sim) => s.insert("engine".to_string(), sim.seed),
        EnginePlan::Vllm(v) => s.insert("engine".to_string(), v.seed),
        EnginePlan::Python(_) => None,
    };
    if let WorkloadPlan::Synthetic { seed, .. } = &plan.workload {
        s.insert("workload".to_string(), *seed);
    }
    if let crate::scenario::plan::ProfilePlan::Poisson { seed, .. } = &plan.profile {
        s.insert("poisson".to_string(), *seed);
    }
    s
}
