//! [`EngineSession`]: one engine start, and every run on it.
//!
//! A session is a driver ([`super::driver::Driver`]) whose engine starts once, at its first run,
//! and shuts down once, at [`EngineSession::finish`]; each run in between goes through the one
//! step loop ([`super::driver::run_steps`]). This is the one way batchlab runs several plans on
//! one engine start:
//!
//! - `run`, `run_with` and [`super::run_benchmarks`]: a session of one run;
//! - a `[matrix]` plan: one run, one report, its combinations the segments of that run (repeats
//!   interleaved across them);
//! - calibrate's design and the fidelity bench: a run per plan, each with its report and output
//!   directory, and the caller's own work between them.
//!
//! What the engine is started with stays for the session: the faults (its runs must all have the
//! same `[faults]`) and the interrupt (its runs must all be given it). A run's `[batching]` is
//! taken between runs while the batcher is idle, as between a matrix's combinations. The batcher
//! numbers requests over the engine's life, so a later run's workload requests (and its
//! requests.jsonl ids) go on from where the run before stopped. A real engine is called from the
//! batcher's one engine thread for the whole session (vLLM's `LLM` stays on the thread it was
//! built on); a virtual-time engine keeps its clock running from one run to the next.

use std::collections::BTreeMap;

use super::driver::{Carried, Driver, RunShape, Segment, Sinks, run_steps, start_engine, stop_engine};
use super::progress::Progress;
use super::realtime::RealTimeDriver;
use super::virtual_driver::VirtualTimeDriver;
use super::{Interrupt, RunError, RunOptions, RunResult, RunSummary};
use crate::engine::faults::{Faults, FaultyEngine};
use crate::engine::{EngineInfo, RequestPrep, Started, TimedEngine};
use crate::loadgen::Workload;
use crate::report::{MachineProbe, RequestsJsonl, write_csv, write_html, write_json};
use crate::scenario::plan::{EnginePlan, Plan, ProfileSpec, WorkloadSpec};
use crate::sys::MachineSample;
use crate::time::MonotonicClock;

/// An engine started once for several runs; see the module docs.
///
/// ```no_run
/// # fn main() -> Result<(), batchlab::run::RunError> {
/// # let plans: Vec<batchlab::scenario::Plan> = Vec::new();
/// use batchlab::run::{EngineSession, Interrupt, RunOptions};
/// let mut session = EngineSession::new(&plans[0], &Interrupt::never())?;
/// for plan in &plans {
///     let summary = session.run(plan, RunOptions::quiet())?;
///     println!("{}", summary.table);
/// }
/// session.finish()?;
/// # Ok(())
/// # }
/// ```
pub struct EngineSession {
    driver: Box<dyn Driver>,
    engine: EngineState,
    carried: Carried,
    /// The faults the engine runs with, which every run must have.
    faults: Faults,
    interrupt: Interrupt,
    source: EngineSource,
}

/// Where the engine is in its one life.
enum EngineState {
    /// Not yet started: the first run starts it.
    Idle,
    /// Started: what it is and what else it can do, handed to each run's loop.
    Started(Started),
    /// Its start failed (it is shut down): every run reports this error.
    FailedToStart(String),
    Stopped,
}

/// Whose engine a session runs: the report lists the plan's engine seed only for the plan's engine,
/// and only the plan's engine has its processes watched.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum EngineSource {
    Plan,
    Caller,
}

impl EngineSession {
    /// A session on the engine `plan` names ([`EnginePlan::build`](crate::scenario::plan::EnginePlan::build),
    /// after its [`check`](crate::scenario::plan::EnginePlan::check)), with `plan`'s
    /// `[batching]`, `[faults]` and seeds; fire `interrupt` to stop the running run and every
    /// later one. Nothing starts before the first run.
    pub fn new(plan: &Plan, interrupt: &Interrupt) -> Result<Self, RunError> {
        plan.engine().check()?;
        let engine = plan.engine().build()?;
        Ok(Self::open(plan, engine, interrupt, EngineSource::Plan))
    }

    /// A session on the caller's `engine`, as [`super::run_with_blocking`] runs one; otherwise as
    /// [`EngineSession::new`].
    pub fn with_engine(plan: &Plan, engine: impl Into<TimedEngine>, interrupt: &Interrupt) -> Self {
        Self::open(plan, engine.into(), interrupt, EngineSource::Caller)
    }

    pub(super) fn open(plan: &Plan, engine: TimedEngine, interrupt: &Interrupt, source: EngineSource) -> Self {
        // Faults draw from the engine's seed where the plan gives one, else from the run's.
        let seed = plan.engine().seed().filter(|_| source == EngineSource::Plan).unwrap_or(plan.seed());
        let faults = plan.faults().clone();
        let batching = plan.batching().clone();
        let driver: Box<dyn Driver> = match engine {
            TimedEngine::RealTime(e) => {
                let e = FaultyEngine::new(e, faults.clone(), seed, std::sync::Arc::new(MonotonicClock));
                // The plan's Python engines run processes (vLLM's EngineCore and workers): when one does
                // not name them, those alive at its start are taken for them.
                let guess = source == EngineSource::Plan && plan.engine().runs_processes();
                // Every real engine, a caller's included, gets a real engine's timeouts where the plan
                // sets none (a caller's plan is usually the simulator's, which has none).
                let real_engine = source == EngineSource::Caller || !matches!(plan.engine(), EnginePlan::Sim(_));
                Box::new(RealTimeDriver::new(e, batching.clone(), interrupt, guess, real_engine))
            }
            TimedEngine::VirtualTime(e) => {
                // The virtual driver puts the wrapper, and with it the engine, on its virtual clock.
                let e = FaultyEngine::new(e, faults.clone(), seed, std::sync::Arc::new(MonotonicClock));
                Box::new(VirtualTimeDriver::new(e, batching.clone(), request_prep(plan, source)))
            }
        };
        EngineSession {
            driver,
            engine: EngineState::Idle,
            carried: Carried { batching, next_request: 0 },
            faults,
            interrupt: interrupt.clone(),
            source,
        }
    }

    /// Runs `plan` on the session's engine, starting it if this is the first run, and writes its
    /// report as [`super::run_with_blocking`] does. The engine stays started for the next run.
    pub fn run(&mut self, plan: &Plan, options: RunOptions) -> Result<RunSummary, RunError> {
        let workload = Workload::from_plan(plan.workload())?;
        let output_dir = options.output_dir.clone();
        let result = self.benchmarks(plan, workload, options, AfterRun::KeepEngine)?;
        report(plan, result, output_dir)
    }

    /// Runs `plan` as [`EngineSession::run`] does, but writes no report, as
    /// [`super::run_benchmarks`] does.
    pub fn run_benchmarks(&mut self, plan: &Plan, options: RunOptions) -> Result<RunResult, RunError> {
        let workload = Workload::from_plan(plan.workload())?;
        self.benchmarks(plan, workload, options, AfterRun::KeepEngine)
    }

    /// Shuts the engine down (if a run started it). Its error is the only thing it reports.
    pub fn finish(mut self) -> Result<(), RunError> {
        self.stop(None)
    }

    fn stop(&mut self, progress: Option<&mut Progress>) -> Result<(), RunError> {
        match std::mem::replace(&mut self.engine, EngineState::Stopped) {
            EngineState::Started(_) => Ok(stop_engine(self.driver.as_mut(), progress)?),
            // Never started: the batcher's threads end, and the engine is never called.
            EngineState::Idle => Ok(self.driver.shutdown()?),
            EngineState::FailedToStart(_) | EngineState::Stopped => Ok(()),
        }
    }

    /// One run: the benchmarks, and requests.jsonl while they run; with [`AfterRun::StopEngine`]
    /// the engine's shutdown too, on this run's display.
    pub(super) fn benchmarks(
        &mut self,
        plan: &Plan,
        workload: Workload,
        options: RunOptions,
        after: AfterRun,
    ) -> Result<RunResult, RunError> {
        if *plan.faults() != self.faults {
            return Err(RunError::Unsupported(
                "every run of an engine session has the [faults] its engine started with".into(),
            ));
        }
        if !options.interrupt.is_same(&self.interrupt) {
            return Err(RunError::Unsupported(
                "every run of an engine session is given the session's interrupt".into(),
            ));
        }
        // Before the engine loads: an unwritable output directory must not cost a run.
        if let Some(dir) = &options.output_dir {
            crate::report::prepare_output_dir(dir).map_err(RunError::Output)?;
        }
        if let Some(shard) = options.shard.as_ref().filter(|s| s.shard.n > 1) {
            refuse_unshardable(plan, shard)?;
        }
        // A shard always keeps its records: the merge makes the run's report from them.
        let keep_records = options.requests_jsonl || plan.output().requests_jsonl() || options.shard.is_some();
        let mut jsonl = match (&options.output_dir, keep_records) {
            (Some(dir), true) => Some(RequestsJsonl::create(dir)?),
            _ => None,
        };
        // A `[matrix]` run: one segment per combination, each with its own workload.
        let workloads = match plan.matrix() {
            None => Vec::new(),
            Some(matrix) => matrix
                .combinations()
                .iter()
                .map(|c| {
                    if c.plan().workload() == plan.workload() {
                        Ok(workload.clone())
                    } else {
                        Workload::from_plan(c.plan().workload())
                    }
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        let segments: Vec<Segment<'_>> = match plan.matrix() {
            None => vec![Segment { plan, workload: &workload, label: None }],
            Some(matrix) => matrix
                .combinations()
                .iter()
                .zip(&workloads)
                .map(|(c, w)| Segment { plan: c.plan(), workload: w, label: Some(c) })
                .collect(),
        };
        // The machine's speed before the engine starts (in a later run of the session: before this
        // run's first benchmark) and after the run; not in virtual time, whose results do not
        // depend on it.
        let machine_start = (!self.driver.virtual_time()).then(MachineSample::take);
        let mut progress = Progress::new(options.progress, &options.screen);
        if let EngineState::Idle = self.engine {
            self.engine = match start_engine(self.driver.as_mut(), &mut progress) {
                Ok(started) => EngineState::Started(started),
                Err(e) => EngineState::FailedToStart(e.to_string()),
            };
        }
        let (mut start_lateness, mut schedule_start) = (None, self.driver.now());
        let result = match &self.engine {
            EngineState::Started(Started { info, concurrent }) => {
                let sinks = Sinks { jsonl: jsonl.as_mut(), progress: &mut progress, interrupt: &self.interrupt };
                // The engine's capabilities are the session's to give: the loop reads the servers'
                // counters around each step.
                let counters = concurrent.as_ref().and_then(|c| c.counters.clone());
                // A shard starts its schedule at the common instant, once its engine is loaded.
                start_lateness = options.shard.as_ref().and_then(|s| s.wait_for_start(&self.interrupt));
                schedule_start = self.driver.now();
                let driver = self.driver.as_mut();
                let shard = options.shard.as_ref().map(|s| s.shard);
                let shape = RunShape { repeats: options.repeat, shard };
                let steps = run_steps(&segments, driver, info, counters, &mut self.carried, sinks, shape);
                steps.map(|s| (info.clone(), (s.benchmarks, s.windows), s.interrupted, s.incomplete, None))
            }
            // A report all the same, marked incomplete, with the error: a failed start is a result.
            EngineState::FailedToStart(error) => {
                let engine = EngineInfo {
                    name: "unknown (did not start)".into(),
                    version: "unknown".into(),
                    resolved_config: None,
                    processes: None,
                    engine_thread: None,
                };
                Ok((engine, (Vec::new(), Vec::new()), false, true, Some(error.clone())))
            }
            EngineState::Stopped => Err(RunError::Internal("a run after its engine session finished".into())),
            EngineState::Idle => unreachable!("the engine was started above"),
        };
        if after == AfterRun::StopEngine {
            // A failed shutdown is logged; the run's results stand.
            let _ = self.stop(Some(&mut progress));
        }
        progress.clear();
        let (engine, (benchmarks, windows), interrupted, incomplete, error) = result?;
        let machine = machine_start.map(|start| MachineProbe::between(&start, &MachineSample::take()));

        // Only a run with an output directory has a requests.jsonl.
        let requests_jsonl = jsonl.zip(options.output_dir.as_deref()).map(|(j, dir)| {
            let lines = j.lines();
            j.finish()?;
            tracing::debug!(lines, "requests.jsonl written");
            Ok(dir.join(crate::report::requests::REQUESTS_FILE))
        });
        let shard = options.shard.map(|s| s.info(start_lateness, schedule_start, &benchmarks, &windows));
        Ok(RunResult {
            engine,
            benchmarks,
            interrupted,
            incomplete,
            error,
            dataset: workload.dataset_stats().cloned(),
            seeds: seeds(plan, self.source),
            requests_jsonl,
            machine,
            shard,
        })
    }
}

/// Refuses what a shard of `n > 1` cannot run ([`crate::loadgen::shard`]): a sweep, sessions, and
/// a concurrency below `n` in any step a fixed profile has.
fn refuse_unshardable(plan: &Plan, shard: &super::shard::ShardRun) -> Result<(), RunError> {
    let unsupported = |what, why| RunError::Shard(crate::loadgen::shard::ShardError::Unsupported { what, why });
    if plan.sessions().is_some() {
        return Err(unsupported(
            "[workload.sessions]",
            "a session's turns follow its replies, so the arrival order is not the single-process run's",
        ));
    }
    match crate::loadgen::expand(plan.profile()) {
        crate::loadgen::Expansion::Sweep { .. } => Err(unsupported(
            "a sweep",
            "its rates are measured as it runs, so each shard's steps would differ; shard its constant rates instead",
        )),
        crate::loadgen::Expansion::Fixed(steps) => {
            steps.iter().try_for_each(|step| shard.shard.step(step).map(drop).map_err(RunError::Shard))
        }
    }
}

impl Drop for EngineSession {
    /// A session given up without [`EngineSession::finish`] (an error, a panic) still shuts its
    /// engine down.
    fn drop(&mut self) {
        let _ = self.stop(None);
    }
}

/// What a run does with the session's engine when it is done.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum AfterRun {
    /// Leaves it started for the next run.
    KeepEngine,
    /// Shuts it down: the session's last run.
    StopEngine,
}

/// The report of a run and its files in `output_dir`.
pub(super) fn report(
    plan: &Plan,
    mut result: RunResult,
    output_dir: Option<std::path::PathBuf>,
) -> Result<RunSummary, RunError> {
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

/// Every seed the run used, by component.
fn seeds(plan: &Plan, source: EngineSource) -> BTreeMap<String, u64> {
    let mut s = BTreeMap::new();
    s.insert("run".to_string(), plan.seed());
    if let Some(seed) = plan.engine().seed().filter(|_| source == EngineSource::Plan) {
        s.insert("engine".to_string(), seed);
    }
    if let WorkloadSpec::Synthetic { seed, .. } = &plan.workload() {
        s.insert("workload".to_string(), *seed);
    }
    match &plan.profile() {
        ProfileSpec::Poisson { seed, .. } => _ = s.insert("poisson".to_string(), *seed),
        ProfileSpec::Gamma { seed, .. } => _ = s.insert("gamma".to_string(), *seed),
        _ => {}
    }
    s
}

/// The work on each request alone that a run in virtual time does where it makes the requests:
/// the plan's own simulator's ([`crate::engine::sim::request_prep`]), under the settings the plan
/// builds it with. An engine a caller brings gets its requests as they are; its results are the
/// same either way.
fn request_prep(plan: &Plan, source: EngineSource) -> Option<RequestPrep> {
    match (source, plan.engine()) {
        (EngineSource::Plan, EnginePlan::Sim(sim)) => Some(crate::engine::sim::request_prep(sim.scheduler)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use super::*;
    use crate::engine::{Engine, EngineError, EngineOutput, EngineRequest, FinishReason};
    use crate::scenario::{Overrides, parse_str};

    /// What the engine was asked, and from which thread.
    type Log = Arc<Mutex<Vec<(String, ThreadId)>>>;

    /// A real-time engine that records its calls; its start fails when told to.
    struct Recorder {
        log: Log,
        fail_start: bool,
    }

    impl Recorder {
        fn note(&self, what: String) {
            self.log.lock().unwrap().push((what, std::thread::current().id()));
        }
    }

    impl Engine for Recorder {
        fn start(&mut self) -> Result<Started, EngineError> {
            self.note("start".into());
            if self.fail_start {
                return Err(EngineError::Start("no model".into()));
            }
            Ok(EngineInfo { name: "recorder".into(), version: "1".into(), ..Default::default() }.into())
        }
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
            let ids: Vec<String> = batch.iter().map(|r| r.id.to_string()).collect();
            self.note(format!("generate {}", ids.join(",")));
            Ok(batch
                .iter()
                .map(|r| EngineOutput::new(Some(r.id), FinishReason::Length).with_output_tokens(2))
                .collect())
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            self.note("shutdown".into());
            Ok(())
        }
    }

    fn scenario() -> Result<Plan, crate::scenario::ScenarioError> {
        let text = "name = \"s\"\n[batching]\nbatch_size = 4\nbatch_timeout = \"5s\"\n[workload]\noutput_tokens = 2\n\
                    [profile]\nkind = \"throughput\"\nmax_concurrency = 4\n[stop]\nmax_requests = 8\n";
        parse_str(text, "s.toml", std::path::Path::new("."), &Overrides::default())
    }

    /// The plan's own simulator has its prompts read where the requests are made, under the
    /// plan's settings; a simulator a caller brings gets its requests as they are.
    #[test]
    fn only_the_plans_own_simulator_has_its_prompts_read_ahead() {
        use crate::engine::sim::{SimConfig, SimEngine};
        let plan = scenario().expect("a valid scenario");
        let EnginePlan::Sim(sim) = plan.engine() else { panic!("the default engine is the simulator") };
        let own = EngineSession::new(&plan, &Interrupt::never()).expect("the plan's simulator");
        let prep = own.driver.request_prep().expect("the plan's simulator reads its prompts ahead");
        let mut request = EngineRequest::tokens((0..100).collect(), 2);
        prep(&mut request);
        let prepared = request.prepared.expect("the prompt was read");
        assert_eq!((prepared.prompt_len, prepared.block_size), (100, sim.scheduler.block_size));
        let brought = TimedEngine::virtual_time(SimEngine::new(SimConfig::default()));
        let theirs = EngineSession::with_engine(&plan, brought, &Interrupt::never());
        assert!(theirs.driver.request_prep().is_none());
    }

    fn calls(log: &Log) -> Vec<String> {
        log.lock().unwrap().iter().map(|(what, _)| what.clone()).collect()
    }

    #[test]
    fn several_runs_share_one_start_on_one_thread_each_with_its_own_report() {
        let log = Log::default();
        let base = scenario().expect("a valid scenario");
        let smaller = base.with_sets(&[crate::scenario::keys::BATCH_SIZE.to(2)]).expect("a valid batch size");
        let engine = Recorder { log: log.clone(), fail_start: false };
        let mut session = EngineSession::with_engine(&base, engine, &Interrupt::never());
        for (plan, size) in [(&base, 4), (&smaller, 2), (&base, 4)] {
            let summary = session.run(plan, RunOptions::quiet()).expect("a run");
            assert!(!summary.report.incomplete);
            let b = &summary.report.benchmarks[0];
            assert_eq!((b.counts.completed, b.counts.lost), (8, 0));
            // Full batches only (the timeout is long): each run has its own batch size.
            let sizes: Vec<_> = b.batching.batch_size_histogram.iter().map(|(s, n)| (*s, *n)).collect();
            assert_eq!(sizes, [(size, 8 / size as u64)], "{}", b.name);
        }
        assert_eq!(calls(&log).iter().filter(|c| c.starts_with("generate")).count(), 2 + 4 + 2);
        session.finish().expect("a clean shutdown");

        let calls = calls(&log);
        assert_eq!(calls.first().map(String::as_str), Some("start"));
        assert_eq!(calls.last().map(String::as_str), Some("shutdown"));
        assert_eq!(calls.iter().filter(|c| *c == "start" || *c == "shutdown").count(), 2, "{calls:?}");
        let log = log.lock().unwrap();
        assert!(log.iter().all(|(_, thread)| *thread == log[0].1), "every call on the engine thread");
        // The batcher numbers requests over the engine's life: the runs go on from each other.
        let ids: Vec<u64> = calls
            .iter()
            .filter_map(|c| c.strip_prefix("generate "))
            .flat_map(|ids| ids.split(',').map(|id| id.parse::<u64>().unwrap()).collect::<Vec<_>>())
            .collect();
        assert_eq!(ids, (0..24).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_start_is_every_runs_error_and_the_engine_is_never_shut_down() {
        let log = Log::default();
        let base = scenario().expect("a valid scenario");
        let engine = Recorder { log: log.clone(), fail_start: true };
        let mut session = EngineSession::with_engine(&base, engine, &Interrupt::never());
        for _ in 0..2 {
            let report = session.run(&base, RunOptions::quiet()).expect("a report all the same").report;
            assert!(report.incomplete && report.benchmarks.is_empty());
            assert!(report.error.as_deref().is_some_and(|e| e.contains("no model")), "{:?}", report.error);
        }
        session.finish().expect("nothing to shut down");
        assert_eq!(calls(&log), ["start"]);
    }

    #[test]
    fn a_run_with_other_faults_or_another_interrupt_is_refused() {
        let log = Log::default();
        let base = scenario().expect("a valid scenario");
        let engine = Recorder { log: log.clone(), fail_start: false };
        let mut session = EngineSession::with_engine(&base, engine, &Interrupt::never());
        let faulty =
            base.with_sets(&[crate::scenario::Set::new("faults.fail_batch.every", 3_u64)]).expect("valid faults");
        assert!(matches!(session.run(&faulty, RunOptions::quiet()), Err(RunError::Unsupported(_))));
        let other = RunOptions { interrupt: Interrupt::new(), ..RunOptions::quiet() };
        assert!(matches!(session.run(&base, other), Err(RunError::Unsupported(_))));
        drop(session);
        assert!(calls(&log).is_empty(), "nothing started, nothing shut down: {:?}", calls(&log));
    }
}
