//! `batchlab run`: a validated [`Plan`] and an engine in, a [`Report`] out. **API boundary**:
//! [`run_with`] / [`run_with_blocking`] run a plan against any [`Engine`]; [`run`] /
//! [`run_blocking`] against the engine the plan names ([`EnginePlan::build`]).
//!
//! Two levels: the middle one runs the benchmarks and hands back their results in memory
//! ([`RunResult`]), on the caller's engine ([`run_benchmarks`]) or on the plan's own
//! ([`run_plan_benchmarks`]); the top one, `run_with` and `run`, wraps it with the [`Report`] and
//! its files (and, on the plan's engine, the [`preflight`] before it). The workflows above
//! (`tune`, `calibrate`) use whichever they need, and never read back a report they wrote: each
//! of tune's points is a `run_plan_benchmarks`.
//! Each is one run on an engine started for it; an [`EngineSession`] runs several plans, each
//! with its report, on one engine start (and a `[matrix]` plan is one run of many segments).
//!
//! The plan's profile expands into steps (benchmarks). Each step is a sans-IO [`step::StepRun`];
//! one loop ([`driver`]) feeds it time, submissions and outcomes through a [`driver::Driver`]:
//! real time on the threaded batcher for any engine, or virtual time on one thread for an engine
//! that implements [`VirtualTimeEngine`] (deterministic, byte-identical reports for a seed). The
//! engine is loaded before the first step's clock starts, so cold start is never measured.
//! Every engine, the caller's included, runs inside a [`FaultyEngine`] with the plan's `[faults]`
//! (a plain pass-through when there are none).
//!
//! # Files
//! - `driver`: the one step loop and the `Driver` trait: `run_steps` takes one run's benchmarks in
//!   the schedule's order on a started engine, `run_step` runs one; a `[matrix]` run is one
//!   `Segment` per combination in the same loop, `Driver::reconfigure` between them; the servers'
//!   counters are read before and after each step.
//! - `schedule`: `StepSchedule`, the order of a run's benchmarks (rounds, `Segment`s, steps,
//!   interleaved repeats, a sweep's next step planned from the rate the last one measured).
//! - `step/`: `StepRun`, one benchmark, sans-IO; it fills `report::RequestRecord`s and dates each
//!   request's intended arrival. Its counts are `PerPhase<PhaseCounts>` (`phases`), its stop rules
//!   in `stop`, what the display shows in `display`.
//! - `realtime`, `virtual_driver`: the two drivers.
//! - `ahead`: `RequestsAhead`, in virtual time a scoped thread makes the workload's requests ahead,
//!   in order, with the engine's work on each request alone (`engine::RequestPrep`, the plan's simulator's).
//! - `session`: `EngineSession`, the one way to run several plans on one engine start.
//! - `preflight`: what a run rejects before its engine starts, shared with `batchlab check`.
//! - `engine_guard`: what keeps a real engine from hanging a run: the death watch over the engine's
//!   own processes, the CPU-time probe the stall watch samples, the Ctrl-C grace, the bounded
//!   shutdown.
//! - `status` (what the display is told), `progress/` (indicatif bars on a terminal, plain lines
//!   otherwise, the `EngineStepLayer` and `LogWriter`; the terminal is a `Screen` passed in, never a
//!   process global), `interrupt`.

mod ahead;
#[doc(hidden)]
pub mod driver;
#[doc(hidden)]
pub mod engine_guard;
mod interrupt;
mod preflight;
#[doc(hidden)]
pub mod progress;
mod realtime;
mod schedule;
mod session;
#[doc(hidden)]
pub mod shard;
#[doc(hidden)]
pub mod status;
#[doc(hidden)]
pub mod step;
mod virtual_driver;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use interrupt::Interrupt;
pub use preflight::preflight;
// Not on the API boundary (ARCHITECTURE.md): calibrate's design and the fidelity bench use it.
#[doc(hidden)]
pub use session::EngineSession;

#[cfg(doc)]
use crate::engine::{Engine, VirtualTimeEngine};

use crate::engine::{EngineError, EngineInfo, TimedEngine};
use crate::loadgen::{DatasetStats, LoadError, Workload};
use crate::report::{BenchmarkResult, Environment, MachineProbe, Report, ReportError};
#[cfg(doc)]
use crate::scenario::plan::EnginePlan;
use crate::scenario::plan::Plan;
use progress::{ProgressMode, Screen};
use session::{AfterRun, EngineSource};

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
    /// Run one shard of the plan's schedule (`--shard K/N`, [`crate::loadgen::shard`]): its
    /// requests only, from its start time; requests.jsonl is always written. `None` runs it all.
    pub shard: Option<shard::ShardRun>,
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
            shard: None,
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
    /// The plan cannot be split as `--shard K/N` asks (`loadgen::shard`); found before the engine
    /// starts.
    #[error(transparent)]
    Shard(#[from] crate::loadgen::shard::ShardError),
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

/// Runs a plan against the engine it names, to completion (or interruption), and writes its
/// report. Blocks; see [`run`] for async callers.
///
/// The top level: [`preflight`], then the benchmarks on the plan's own engine (what
/// [`run_plan_benchmarks`] runs), then the report and its files.
pub fn run_blocking(plan: &Plan, options: RunOptions) -> Result<RunSummary, RunError> {
    let workload = preflight(plan)?;
    let output_dir = options.output_dir.clone();
    let result = plan_benchmarks(plan, workload, options)?;
    session::report(plan, result, output_dir)
}

/// Runs a plan's benchmarks against the engine it names, as [`run_blocking`] does, but checks
/// nothing first and makes no report: no [`preflight`], no `Environment` read from the machine,
/// no [`Report`], no table; the results stay in memory ([`RunResult`]). The middle level for a
/// workflow that runs many plans it has checked once (tune's points: one [`preflight`] of the
/// search's plan, then a run per point). `options.output_dir` and `options.requests_jsonl` still
/// stream requests.jsonl. Blocks.
pub fn run_plan_benchmarks(plan: &Plan, options: RunOptions) -> Result<RunResult, RunError> {
    let workload = Workload::from_plan(plan.workload())?;
    plan_benchmarks(plan, workload, options)
}

/// The benchmarks of `plan` on the engine it names, with its `workload`: [`run_blocking`] and
/// [`run_plan_benchmarks`] are this.
fn plan_benchmarks(plan: &Plan, workload: Workload, options: RunOptions) -> Result<RunResult, RunError> {
    let engine = plan.engine().build()?;
    benchmarks(plan, engine, workload, options, EngineSource::Plan)
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
    let output_dir = options.output_dir.clone();
    let result = run_benchmarks(plan, engine, options)?;
    session::report(plan, result, output_dir)
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
    /// The machine-speed probe before the engine started and after the run (report.json's
    /// `environment.machine`); `None` in virtual time.
    pub machine: Option<MachineProbe>,
    /// A shard's report block (`--shard`; its host filled in with the report); `None` otherwise.
    pub shard: Option<crate::report::shard::ShardInfo>,
}

impl RunResult {
    /// The report of these benchmarks of `plan` (what report.json holds).
    pub fn into_report(self, plan: &Plan) -> Result<Report, ReportError> {
        let mut environment = Environment::detect(&self.engine, self.seeds);
        environment.machine = self.machine;
        let mut report = Report::new(plan, environment, self.benchmarks, self.incomplete);
        report.error = self.error;
        report.dataset = self.dataset;
        report.shard = self
            .shard
            .map(|info| crate::report::shard::ShardInfo { host: report.environment.hostname.clone(), ..info });
        Ok(report)
    }
}

/// Runs a plan's benchmarks against `engine`, as [`run_with_blocking`] does, but writes no report:
/// the results stay in memory, for a workflow above `run/` (tune's confirmation, calibrate's
/// design) to use. `options.output_dir` and `options.requests_jsonl` still stream requests.jsonl,
/// the one file a run writes while it runs. Blocks.
pub fn run_benchmarks(plan: &Plan, engine: impl Into<TimedEngine>, options: RunOptions) -> Result<RunResult, RunError> {
    let workload = Workload::from_plan(plan.workload())?;
    benchmarks(plan, engine.into(), workload, options, EngineSource::Caller)
}

/// One run in a session of its own ([`EngineSession`]): the engine started for it and shut down
/// after it, on its display. `run_benchmarks`, `run_plan_benchmarks`, `run_with` and `run` are
/// this.
fn benchmarks(
    plan: &Plan,
    engine: TimedEngine,
    workload: Workload,
    options: RunOptions,
    source: EngineSource,
) -> Result<RunResult, RunError> {
    let mut session = EngineSession::open(plan, engine, &options.interrupt, source);
    session.benchmarks(plan, workload, options, AfterRun::StopEngine)
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
