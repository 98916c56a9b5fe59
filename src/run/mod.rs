//! `batchlab run`: a validated [`Plan`] and an engine in, a [`Report`] out. **API boundary**:
//! [`run_with`] / [`run_with_blocking`] run a plan against any [`Engine`]; [`run`] /
//! [`run_blocking`] against the engine the plan names ([`EnginePlan::build`]).
//!
//! Two levels: [`run_benchmarks`] runs the benchmarks and hands back their results in memory
//! ([`RunResult`]); `run_with` and `run` wrap it with the [`Report`] and its files. The workflows
//! above (`tune`, `calibrate`) use whichever they need, and never read back a report they wrote.
//!
//! The plan's profile expands into steps (benchmarks). Each step is a sans-IO [`step::StepRun`];
//! one loop ([`driver`]) feeds it time, submissions and outcomes through a [`driver::Driver`]:
//! real time on the threaded batcher for any engine, or virtual time on one thread for an engine
//! that implements [`VirtualTimeEngine`] (deterministic, byte-identical reports for a seed). The
//! engine is loaded before the first step's clock starts, so cold start is never measured.
//! Every engine, the caller's included, runs inside a [`FaultyEngine`] with the plan's `[faults]`
//! (a plain pass-through when there are none).

pub mod driver;
pub mod engine_guard;
mod interrupt;
mod plan_runner;
pub mod progress;
mod realtime;
mod schedule;
pub mod status;
pub mod step;
mod virtual_driver;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use interrupt::Interrupt;
pub use plan_runner::PlanRunner;

#[cfg(doc)]
use crate::engine::{Engine, VirtualTimeEngine};

use crate::engine::faults::FaultyEngine;
use crate::engine::{EngineError, EngineInfo, TimedEngine};
use crate::loadgen::{DatasetStats, LoadError, Workload};
use crate::report::{
    BenchmarkResult, Environment, Report, ReportError, RequestsJsonl, write_csv, write_html, write_json,
};
use crate::scenario::plan::{EnginePlan, Plan, ProfileSpec, WorkloadSpec};
use crate::time::MonotonicClock;
use driver::{Driver, Segment, Sinks, run_steps};
use progress::{Progress, ProgressMode, Screen};
use realtime::RealTimeDriver;
use virtual_driver::VirtualTimeDriver;

/// How a run is carried out and where it writes. The default writes nothing, shows nothing and is
/// never interrupted.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Where report.json, report.csv, report.html (and requests.jsonl) go; `None` writes nothing.
    pub output_dir: Option<PathBuf>,
    /// Also write requests.jsonl (so does the plan's `output.requests_jsonl`).
    pub requests_jsonl: bool,
    /// The live display.
    pub progress: ProgressMode,
    /// Where the display draws: the binary passes the screen its logging writes to, so log lines
    /// go above the bars and engine steps reach the spinner.
    pub screen: Screen,
    /// Fire it to stop admitting, drain and report (the CLI fires it on the first Ctrl-C).
    pub interrupt: Interrupt,
    /// Run every benchmark this many times in one engine start (`--repeat`; 0 counts as 1). The
    /// report keeps each repeat and summarizes them (`Report::repeats`).
    pub repeat: u32,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            output_dir: None,
            requests_jsonl: false,
            progress: ProgressMode::Off,
            screen: Screen::stderr(),
            interrupt: Interrupt::never(),
            repeat: 1,
        }
    }
}

impl RunOptions {
    /// No output files, no progress, never interrupted: for tests and embedding.
    pub fn quiet() -> Self {
        RunOptions::default()
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The engine failed to start (or cannot be built).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The workload could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The report could not be assembled, or requests.jsonl written during the run.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// The output directory cannot be created or written in; found before the engine starts.
    #[error(transparent)]
    Output(ReportError),
    /// The run cannot be carried out as asked.
    #[error("{0}")]
    Unsupported(String),
    /// A bug: please report it.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a run produced.
#[derive(Debug)]
pub struct RunSummary {
    /// The report, as written to report.json.
    pub report: Report,
    /// The console table.
    pub table: String,
    /// Files written.
    pub written: Vec<PathBuf>,
    /// The run's interrupt fired.
    pub interrupted: bool,
    /// Report files that could not be written at the end (each names its path). The report and
    /// the table are complete all the same.
    pub write_errors: Vec<ReportError>,
}

impl RunSummary {
    /// Panics unless every expectation held and the run is complete; the message lists every
    /// failed expectation with its measured and expected values. See
    /// [`Report::assert_expectations`].
    #[track_caller]
    pub fn assert_expectations(&self) {
        self.report.assert_expectations();
    }
}

/// What the loop hands back.
struct DriverResult {
    engine: EngineInfo,
    benchmarks: Vec<BenchmarkResult>,
    interrupted: bool,
    /// The run could not finish every step (engine unusable, or interrupted).
    incomplete: bool,
    /// The engine's start error, when it did not start.
    error: Option<String>,
}

/// Everything a run would reject before its engine starts, checked without starting anything:
/// the engine plan's own checks ([`EnginePlan::check`]: the build has the engine, a vLLM model
/// directory exists) and the whole workload, built exactly as the run builds it (a JSONL file is
/// read and every line checked). `batchlab check` calls this; so does [`run_blocking`], before
/// the engine starts. Returns the workload.
pub fn preflight(plan: &Plan) -> Result<Workload, RunError> {
    plan.engine.check()?;
    let workload = Workload::from_plan(&plan.workload)?;
    for c in plan.matrix.iter().flat_map(|m| &m.combinations) {
        Workload::from_plan(&c.plan.workload)?;
    }
    Ok(workload)
}

/// Runs a plan against the engine it names, to completion (or interruption), and writes its
/// report. Blocks; see [`run`] for async callers.
pub fn run_blocking(plan: &Plan, options: RunOptions) -> Result<RunSummary, RunError> {
    let workload = preflight(plan)?;
    let engine = plan.engine.build()?;
    run_engine(plan, engine, workload, options, EngineSource::Plan)
}

/// [`run_blocking`] on tokio's blocking pool.
pub async fn run(plan: &Plan, options: RunOptions) -> Result<RunSummary, RunError> {
    let plan = plan.clone();
    tokio::task::spawn_blocking(move || run_blocking(&plan, options))
        .await
        .map_err(|e| RunError::Internal(e.to_string()))?
}

/// Runs a plan against `engine`: any [`Engine`] (real time), or a [`TimedEngine::VirtualTime`].
/// The plan's `[engine]` section is ignored, and the report names the engine by its
/// [`EngineInfo`]. Blocks; see [`run_with`] for async callers.
pub fn run_with_blocking(
    plan: &Plan,
    engine: impl Into<TimedEngine>,
    options: RunOptions,
) -> Result<RunSummary, RunError> {
    let workload = Workload::from_plan(&plan.workload)?;
    run_engine(plan, engine.into(), workload, options, EngineSource::Caller)
}

/// Whose engine a run uses: the report lists the plan's engine seed only for the plan's engine.
#[derive(Copy, Clone, PartialEq, Eq)]
enum EngineSource {
    Plan,
    Caller,
}

/// What the benchmarks of a run produced, before any report: [`run_benchmarks`]' result. The
/// report and its files are [`run_with`]'s layer on top ([`RunResult::into_report`]).
#[derive(Debug)]
pub struct RunResult {
    /// What the engine said about itself.
    pub engine: EngineInfo,
    /// Every benchmark, in run order.
    pub benchmarks: Vec<BenchmarkResult>,
    /// The run's interrupt fired.
    pub interrupted: bool,
    /// The run could not finish every step (engine unusable, or interrupted).
    pub incomplete: bool,
    /// The engine's start error, when it did not start.
    pub error: Option<String>,
    /// The workload file's statistics, for a file workload.
    pub dataset: Option<DatasetStats>,
    /// Every seed the run used, by component.
    pub seeds: BTreeMap<String, u64>,
    /// requests.jsonl, when the run wrote one: its path, or why it could not be finished.
    pub requests_jsonl: Option<Result<PathBuf, ReportError>>,
}

impl RunResult {
    /// The report of these benchmarks of `plan` (what report.json holds).
    pub fn into_report(self, plan: &Plan) -> Result<Report, ReportError> {
        let environment = Environment::detect(&self.engine, self.seeds);
        let mut report = Report::new(plan, environment, self.benchmarks, self.incomplete)?;
        report.error = self.error;
        report.dataset = self.dataset;
        Ok(report)
    }
}

/// Runs a plan's benchmarks against `engine`, as [`run_with_blocking`] does, but writes no report:
/// the results stay in memory, for a workflow above `run/` (tune's confirmation, calibrate's
/// design) to use. `options.output_dir` and `options.requests_jsonl` still stream requests.jsonl,
/// the one file a run writes while it runs. Blocks.
pub fn run_benchmarks(plan: &Plan, engine: impl Into<TimedEngine>, options: RunOptions) -> Result<RunResult, RunError> {
    let workload = Workload::from_plan(&plan.workload)?;
    benchmarks(plan, engine.into(), workload, options, EngineSource::Caller)
}

/// The middle level: the benchmarks, and requests.jsonl while they run.
fn benchmarks(
    plan: &Plan,
    engine: TimedEngine,
    workload: Workload,
    options: RunOptions,
    source: EngineSource,
) -> Result<RunResult, RunError> {
    // Before the engine loads: an unwritable output directory must not cost a run.
    if let Some(dir) = &options.output_dir {
        crate::report::prepare_output_dir(dir).map_err(RunError::Output)?;
    }
    let mut jsonl = match (&options.output_dir, options.requests_jsonl || plan.output.requests_jsonl) {
        (Some(dir), true) => Some(RequestsJsonl::create(dir)?),
        _ => None,
    };
    let mut progress = Progress::new(options.progress, &options.screen);
    // Faults draw from the engine's seed where the plan gives one, else from the run's.
    let seed = plan.engine.seed().filter(|_| source == EngineSource::Plan).unwrap_or(plan.seed);
    let faults = plan.faults.clone();
    let mut driver: Box<dyn Driver> = match engine {
        TimedEngine::RealTime(e) => {
            let e = FaultyEngine::new(e, faults, seed, std::sync::Arc::new(MonotonicClock));
            // The plan's Python engines run processes (vLLM's EngineCore and workers): when one does
            // not name them, those alive at its start are taken for them.
            let guess = source == EngineSource::Plan && plan.engine.runs_processes();
            // Every real engine, a caller's included, gets a real engine's timeouts where the plan
            // sets none (a caller's plan is usually the simulator's, which has none).
            let real_engine = source == EngineSource::Caller || !matches!(plan.engine, EnginePlan::Sim(_));
            let driver = RealTimeDriver::new(e, plan.batching.clone(), &options.interrupt, guess, real_engine);
            Box::new(driver)
        }
        TimedEngine::VirtualTime(e) => {
            // The virtual driver puts the wrapper, and with it the engine, on its virtual clock.
            let e = FaultyEngine::new(e, faults, seed, std::sync::Arc::new(MonotonicClock));
            Box::new(VirtualTimeDriver::new(e, plan.batching.clone()))
        }
    };
    let sinks = Sinks { jsonl: jsonl.as_mut(), progress: &mut progress, interrupt: &options.interrupt };
    // A `[matrix]` run: one segment per combination (each with its own workload), one engine start.
    let result = match &plan.matrix {
        None => {
            run_steps(&[Segment { plan, workload: &workload, label: None }], driver.as_mut(), sinks, options.repeat)
        }
        Some(matrix) => {
            let workloads = matrix
                .combinations
                .iter()
                .map(|c| {
                    if c.plan.workload == plan.workload {
                        Ok(workload.clone())
                    } else {
                        Workload::from_plan(&c.plan.workload)
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            let segments: Vec<Segment<'_>> = matrix
                .combinations
                .iter()
                .zip(&workloads)
                .map(|(c, w)| Segment { plan: &c.plan, workload: w, label: Some(c) })
                .collect();
            run_steps(&segments, driver.as_mut(), sinks, options.repeat)
        }
    };
    drop(driver);
    progress.clear();
    let result = result?;

    // Only a run with an output directory has a requests.jsonl.
    let requests_jsonl = jsonl.zip(options.output_dir.as_deref()).map(|(j, dir)| {
        let lines = j.lines();
        j.finish()?;
        tracing::debug!(lines, "requests.jsonl written");
        Ok(dir.join(crate::report::requests::REQUESTS_FILE))
    });
    Ok(RunResult {
        engine: result.engine,
        benchmarks: result.benchmarks,
        interrupted: result.interrupted,
        incomplete: result.incomplete,
        error: result.error,
        dataset: workload.dataset_stats().cloned(),
        seeds: seeds(plan, source),
        requests_jsonl,
    })
}

/// The top level: the benchmarks ([`benchmarks`]), then the report and its files.
fn run_engine(
    plan: &Plan,
    engine: TimedEngine,
    workload: Workload,
    options: RunOptions,
    source: EngineSource,
) -> Result<RunSummary, RunError> {
    let output_dir = options.output_dir.clone();
    let mut result = benchmarks(plan, engine, workload, options, source)?;
    let interrupted = result.interrupted;
    let requests_jsonl = result.requests_jsonl.take();
    let report = result.into_report(plan)?;
    // A file that cannot be written loses only itself: the summary keeps the report and table.
    let (mut written, mut write_errors) = (Vec::new(), Vec::new());
    if let Some(dir) = &output_dir {
        for write in [write_json, write_csv, write_html] {
            match write(&report, dir) {
                Ok(path) => written.push(path),
                Err(e) => write_errors.push(e),
            }
        }
    }
    match requests_jsonl {
        Some(Ok(path)) => written.push(path),
        Some(Err(e)) => write_errors.push(e),
        None => {}
    }
    let table = crate::report::render_table(&report);
    Ok(RunSummary { report, table, written, interrupted, write_errors })
}

/// [`run_with_blocking`] on tokio's blocking pool.
pub async fn run_with(
    plan: &Plan,
    engine: impl Into<TimedEngine>,
    options: RunOptions,
) -> Result<RunSummary, RunError> {
    let plan = plan.clone();
    let engine = engine.into();
    tokio::task::spawn_blocking(move || run_with_blocking(&plan, engine, options))
        .await
        .map_err(|e| RunError::Internal(e.to_string()))?
}

/// Every seed the run used, by component.
fn seeds(plan: &Plan, source: EngineSource) -> BTreeMap<String, u64> {
    let mut s = BTreeMap::new();
    s.insert("run".to_string(), plan.seed);
    if let Some(seed) = plan.engine.seed().filter(|_| source == EngineSource::Plan) {
        s.insert("engine".to_string(), seed);
    }
    if let WorkloadSpec::Synthetic { seed, .. } = &plan.workload {
        s.insert("workload".to_string(), *seed);
    }
    match &plan.profile {
        ProfileSpec::Poisson { seed, .. } => _ = s.insert("poisson".to_string(), *seed),
        ProfileSpec::Gamma { seed, .. } => _ = s.insert("gamma".to_string(), *seed),
        _ => {}
    }
    s
}
