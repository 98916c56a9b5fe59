//! The one step loop, written against [`Driver`]: how time passes and where requests go.
//!
//! A driver owns the clock and the batcher ([`super::realtime`]: threads and a real clock;
//! [`super::virtual_driver`]: one thread and virtual time). The loop owns everything else:
//! `run_steps` takes the benchmarks in the order of the `StepSchedule` (rounds, segments,
//! steps) and runs each with `run_step`: the sans-IO [`StepRun`], the interrupt, writing the
//! `requests.jsonl` rows the step returns and handing its [`StepStatus`](super::status::StepStatus)
//! to the display.
//!
//! # The driver contract
//! The loop calls [`Driver::start`] once, then, per step, repeatedly: [`Driver::poll_event`] until
//! it returns `None` (a batch is always given before the outcomes of its requests), then
//! [`Driver::submit`] or [`Driver::wait`] as the step asks, [`Driver::cancel`] on interruption,
//! and finally [`Driver::shutdown`] once, whatever happened before.

use std::time::{Duration, Instant};

use super::interrupt::Interrupt;
use super::progress::Progress;
use super::schedule::{ScheduledStep, StepSchedule};
use super::step::{Action, Finished, StepRun};
use super::{DriverResult, RunError};
use crate::batcher::{BatchConfig, BatchRun, ConfigError, Outcome, RequestError};
use crate::engine::{ClockDomain, EngineError, EngineInfo, EngineRequest, RequestId};
use crate::loadgen::Workload;
use crate::metrics::result::{BenchmarkResult, MatrixPoint};
use crate::report::RequestsJsonl;
use crate::scenario::plan::Plan;
use crate::time::{Timestamp, WallAnchor};

/// Something that happened in the batcher, for the step.
#[derive(Debug)]
pub enum DriverEvent {
    /// The engine ran a batch.
    Batch(BatchRun),
    /// A request's outcome, and when it arrived.
    Outcome(RequestId, Box<Outcome>, Timestamp),
}

/// Nothing can ever happen: no event is scheduled and the step gave no deadline (a driver bug or
/// a wedged virtual engine).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stalled;

/// How time passes and where requests go; see the module docs for the calling order.
pub trait Driver {
    /// Loads the engine and says what it is. Called once, before anything else.
    fn start(&mut self) -> Result<EngineInfo, EngineError>;
    /// The driver's current time.
    fn now(&self) -> Timestamp;
    /// The clock of the engine's `*_ts` stats.
    fn clock_domain(&self) -> ClockDomain;
    /// The wall clock at a moment of the driver's timeline.
    fn wall_anchor(&self) -> WallAnchor;
    /// Submits a request now; returns the id its batcher gave it, which its outcome will carry.
    fn submit(&mut self, request: EngineRequest<()>) -> Result<RequestId, RequestError>;
    /// Cancels a queued request (its outcome becomes `Cancelled`); no effect once dispatched.
    fn cancel(&mut self, id: RequestId);
    /// The next event that is ready, batches before the outcomes of their requests.
    #[must_use]
    fn poll_event(&mut self) -> Option<DriverEvent>;
    /// Lets time pass until an event is ready, `until` is reached, or (real time) the run's
    /// interrupt fires.
    fn wait(&mut self, until: Option<Timestamp>) -> Result<(), Stalled>;
    /// Takes new batching settings between benchmarks, with nothing queued or running (a
    /// `[matrix]` run's next combination); the engine stays loaded.
    fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError>;
    /// Shuts the engine down; every request still queued gets its outcome first.
    fn shutdown(&mut self) -> Result<(), EngineError>;
}

/// Where the loop's outputs go.
pub(super) struct Sinks<'a> {
    pub jsonl: Option<&'a mut RequestsJsonl>,
    pub progress: &'a mut Progress,
    pub interrupt: &'a Interrupt,
}

/// How often, at most, the loop builds a status for the display.
const STATUS_EVERY: Duration = Duration::from_millis(50);

/// The token count of a KV block, the unit a prefix cache hits in: the engine's, where it says;
/// else 1 (the designed hit rate then counts the shared prefix token by token).
fn kv_block_size(info: &EngineInfo) -> u32 {
    info.resolved_config.map_or(1, |c| c.block_size)
}

/// One part of a run: the plan its benchmarks follow, its workload, and (in a `[matrix]` run) the
/// combination's label, which names its benchmarks.
pub(super) struct Segment<'a> {
    pub plan: &'a Plan,
    pub workload: &'a Workload,
    pub label: Option<&'a crate::scenario::matrix::Combination>,
}

/// Runs every step of every segment on `driver`, `repeats` times (at least once), in one engine
/// start, in the order of the [`StepSchedule`]. Between segments the batcher takes the next
/// segment's `[batching]` while idle ([`Driver::reconfigure`]); the engine stays loaded.
pub(super) fn run_steps(
    segments: &[Segment<'_>],
    driver: &mut dyn Driver,
    sinks: Sinks<'_>,
    repeats: u32,
) -> Result<DriverResult, RunError> {
    let Sinks { jsonl, progress, interrupt } = sinks;
    progress.engine_step("loading engine");
    let info = match driver.start() {
        Ok(info) => info,
        Err(e) => {
            if let Err(e) = driver.shutdown() {
                tracing::error!(error = %e, "engine shutdown after a failed start failed");
            }
            // A report all the same, marked incomplete, with the error: a failed start is a result.
            let engine = EngineInfo {
                name: "unknown (did not start)".into(),
                version: "unknown".into(),
                resolved_config: None,
                processes: None,
                engine_thread: None,
            };
            let error = Some(e.to_string());
            return Ok(DriverResult { engine, benchmarks: Vec::new(), interrupted: false, incomplete: true, error });
        }
    };
    let mut steps = StepLoop {
        domain: driver.clock_domain(),
        anchor: Some(driver.wall_anchor()),
        block_size: kv_block_size(&info),
        driver,
        jsonl,
        progress,
        interrupt,
        next_request: 0,
        interrupted: false,
        last_status: None,
    };
    let mut schedule = StepSchedule::new(segments, repeats);
    let mut benchmarks = Vec::new();
    let mut incomplete = false;
    let mut current_batching = segments.first().map(|seg| &seg.plan.batching);
    while let Some(scheduled) = schedule.next_step() {
        let batching = &scheduled.segment.plan.batching;
        if current_batching != Some(batching) {
            steps.driver.reconfigure(batching.clone()).map_err(|e| RunError::Internal(e.to_string()))?;
            current_batching = Some(batching);
        }
        let finished = steps.run_step(scheduled)?;
        schedule.measured(finished.result.requests_per_s);
        benchmarks.push(finished.result);
        if finished.ends_run {
            incomplete = true;
            break;
        }
    }
    mark_pareto_front(&mut benchmarks);

    let StepLoop { driver, progress, interrupted, .. } = steps;
    progress.engine_step("stopping engine");
    if let Err(e) = driver.shutdown() {
        tracing::error!(error = %e, "engine shutdown failed");
    }
    Ok(DriverResult { engine: info, benchmarks, interrupted, incomplete, error: None })
}

/// The loop's side of every step: the driver, where outputs go, and what carries over from one
/// step to the next.
struct StepLoop<'d, 's> {
    driver: &'d mut dyn Driver,
    jsonl: Option<&'s mut RequestsJsonl>,
    progress: &'s mut Progress,
    interrupt: &'s Interrupt,
    domain: ClockDomain,
    anchor: Option<WallAnchor>,
    /// The engine's KV block size, for a workload's designed prefix-cache hits.
    block_size: u32,
    /// The workload's next request, numbered over the whole run.
    /// The workload's next request (its index, which the batcher's id then equals).
    next_request: u64,
    /// The interrupt fired: every later step starts interrupted.
    interrupted: bool,
    /// When the display was last given a status.
    last_status: Option<Instant>,
}

impl StepLoop<'_, '_> {
    /// Runs one benchmark to its end: the step asks, the driver submits and waits, events go back
    /// to the step, its rows to requests.jsonl and its status to the display.
    fn run_step(&mut self, scheduled: ScheduledStep<'_, '_>) -> Result<Finished, RunError> {
        let segment = scheduled.segment;
        let mut run = self.start_step(scheduled)?;
        loop {
            self.take_events(&mut run)?;
            if !self.interrupted && self.interrupt.is_fired() {
                self.interrupted = true;
                self.interrupt_step(&mut run);
            }
            if self.last_status.is_none_or(|t| t.elapsed() >= STATUS_EVERY) {
                self.last_status = Some(Instant::now());
                self.progress.status(&run.status(self.driver.now()));
            }
            let now = self.driver.now();
            match run.poll(now) {
                Action::Submit(phase) => {
                    // The batcher numbers every submit from 0 and this loop is its only caller,
                    // so workload request k is request id k (the prefix design and requests.jsonl
                    // rely on it).
                    let request = segment.workload.request(self.next_request);
                    self.next_request += 1;
                    match self.driver.submit(request) {
                        Ok(id) => {
                            debug_assert_eq!(id + 1, self.next_request, "workload request and id differ");
                            run.on_submitted(id, phase, now)
                        }
                        Err(e) => run.on_rejected(&e, now),
                    }
                }
                Action::Wait(until) => self.driver.wait(until).map_err(|Stalled| {
                    let (name, in_flight) = (run.name(), run.in_flight());
                    RunError::Internal(format!(
                        "benchmark {name} is waiting with nothing scheduled ({in_flight} in flight)"
                    ))
                })?,
                Action::Done => break,
            }
        }
        let now = self.driver.now();
        self.progress.benchmark_done(&run.status(now));
        let mut finished = run.finish(now);
        if let Some(j) = self.jsonl.as_deref_mut() {
            finished.records.iter().try_for_each(|record| j.write(record))?;
        }
        if let Some(c) = segment.label {
            let (combination, values) = (c.label.clone(), c.values.clone());
            finished.result.matrix = Some(MatrixPoint { combination, values, pareto_front: false });
        }
        Ok(finished)
    }

    /// The step's [`StepRun`], positioned in the run; interrupted at once after an interrupt.
    fn start_step(&mut self, scheduled: ScheduledStep<'_, '_>) -> Result<StepRun, RunError> {
        let ScheduledStep { step, segment, index, count, round, repeats } = scheduled;
        let now = self.driver.now();
        let mut run = StepRun::for_plan(step, segment.plan, now, self.domain, self.anchor)?
            .with_position(index, count)
            .with_repeat(round, repeats);
        if self.jsonl.is_some() {
            run = run.with_records();
        }
        if let Some(design) = segment.workload.prefix_design() {
            run = run.with_prefix_design(design, self.block_size);
        }
        if self.interrupted {
            run.interrupt(now);
        }
        Ok(run)
    }

    /// The run was interrupted during this step: it admits nothing more, its queued requests are
    /// cancelled and the rest drain.
    fn interrupt_step(&mut self, run: &mut StepRun) {
        tracing::warn!("interrupted: no new requests; cancelling queued ones and draining the rest");
        run.interrupt(self.driver.now());
        let ids: Vec<_> = run.in_flight_ids().collect();
        for id in ids {
            self.driver.cancel(id);
        }
    }

    /// Hands the step every event that is ready, and writes the rows its outcomes complete.
    fn take_events(&mut self, run: &mut StepRun) -> Result<(), RunError> {
        while let Some(event) = self.driver.poll_event() {
            match event {
                DriverEvent::Batch(b) => run.on_batch(&b),
                DriverEvent::Outcome(id, outcome, at) => {
                    run.on_outcome(id, &outcome, at);
                    while let Some(record) = run.poll_record() {
                        if let Some(j) = self.jsonl.as_deref_mut() {
                            j.write(&record)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Marks the throughput/latency Pareto front (output tokens/s up, latency p99 down) among the
/// benchmarks of a `[matrix]` run.
pub(crate) fn mark_pareto_front(benchmarks: &mut [BenchmarkResult]) {
    let points: Vec<_> = benchmarks
        .iter()
        .map(|b| match b.matrix {
            Some(_) => (b.output_tokens_per_s, b.metric("latency_p99_ms")),
            None => (None, None),
        })
        .collect();
    for (b, on) in benchmarks.iter_mut().zip(crate::metrics::pareto::front(&points)) {
        if let Some(m) = &mut b.matrix {
            m.pareto_front = on;
        }
    }
}
