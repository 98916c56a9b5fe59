//! The one step loop, written against [`Driver`]: how time passes and where requests go.
//!
//! A driver owns the clock and the batcher ([`super::realtime`]: threads and a real clock;
//! [`super::virtual_driver`]: one thread and virtual time). The loop owns everything else: the
//! steps of the profile, the sans-IO [`StepRun`] of each, the interrupt, writing the
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
use super::step::{Action, StepRun};
use super::{DriverResult, RunError};
use crate::batcher::{BatchConfig, BatchRun, ConfigError, Outcome, RequestError};
use crate::engine::{ClockDomain, EngineError, EngineInfo, EngineRequest, RequestId};
use crate::loadgen::{Expansion, StepPlanner, Workload, expand};
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
    /// Submits a request now; returns the id its outcome will carry.
    fn submit(&mut self, request: EngineRequest) -> Result<RequestId, RequestError>;
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
/// start. Between segments the batcher takes the next segment's `[batching]` while idle
/// ([`Driver::reconfigure`]); the engine stays loaded.
///
/// Repeats are interleaved: the whole profile runs, then runs again (`a b c a b c`), so a drift of
/// the engine over time spreads over every benchmark instead of biasing one. A sweep's rates are
/// planned from the first round's measurements; later rounds rerun exactly those steps.
pub(super) fn run_steps(
    segments: &[Segment<'_>],
    driver: &mut dyn Driver,
    sinks: Sinks<'_>,
    repeats: u32,
) -> Result<DriverResult, RunError> {
    let repeats = repeats.max(1);
    let Sinks { mut jsonl, progress, interrupt } = sinks;
    progress.engine_step("loading engine");
    let info = match driver.start() {
        Ok(info) => info,
        Err(e) => {
            if let Err(e) = driver.shutdown() {
                tracing::error!(error = %e, "engine shutdown after a failed start failed");
            }
            // A report all the same, marked incomplete, with the error: a failed start is a result.
            let engine =
                EngineInfo { name: "unknown (did not start)".into(), version: "unknown".into(), resolved_config: None };
            let error = Some(e.to_string());
            return Ok(DriverResult { engine, benchmarks: Vec::new(), interrupted: false, incomplete: true, error });
        }
    };
    let domain = driver.clock_domain();
    let anchor = Some(driver.wall_anchor());
    let count = segments
        .iter()
        .map(|seg| match expand(seg.plan.profile()) {
            Expansion::Fixed(steps) => Some(steps.len() * repeats as usize),
            Expansion::Sweep { .. } => None,
        })
        .sum::<Option<usize>>();

    // Per segment: its planner, the last step's rate, and the first round's steps for the later rounds.
    let mut planners: Vec<(StepPlanner, Option<f64>, Vec<crate::loadgen::Step>)> =
        segments.iter().map(|seg| (StepPlanner::new(seg.plan.profile()), None, Vec::new())).collect();
    let mut benchmarks = Vec::new();
    let mut next_request = 0;
    let mut interrupted = false;
    let mut incomplete = false;
    let mut last_status: Option<Instant> = None;
    let mut current_batching = segments.first().map(|seg| seg.plan.batching().clone());

    'rounds: for round in 0..repeats {
        for (segment, state) in segments.iter().zip(&mut planners) {
            if current_batching.as_ref() != Some(segment.plan.batching()) {
                driver.reconfigure(segment.plan.batching().clone()).map_err(|e| RunError::Internal(e.to_string()))?;
                current_batching = Some(segment.plan.batching().clone());
            }
            let single_step = matches!(expand(segment.plan.profile()), Expansion::Fixed(ref s) if s.len() == 1);
            let mut position = 0usize;
            loop {
                let (planner, last_rps, round_steps) = &mut *state;
                let step = if round == 0 { planner.next_step(*last_rps) } else { round_steps.get(position).cloned() };
                let Some(mut step) = step else { break };
                if round == 0 {
                    round_steps.push(step.clone());
                }
                position += 1;
                if let Some(c) = segment.label {
                    step.name = if single_step { c.label().to_owned() } else { format!("{}/{}", c.label(), step.name) };
                }
                let plan = segment.plan;
                let workload = segment.workload;
                let index = benchmarks.len();
                let mut run = StepRun::for_plan(step, plan, driver.now(), domain, anchor)?
                    .with_position(index, count)
                    .with_repeat(round, repeats);
                if jsonl.is_some() {
                    run = run.with_records();
                }
                if let Some(design) = workload.prefix_design() {
                    run = run.with_prefix_design(design, kv_block_size(&info));
                }
                if interrupted {
                    run.interrupt(driver.now());
                }
                loop {
                    while let Some(event) = driver.poll_event() {
                        match event {
                            DriverEvent::Batch(b) => run.on_batch(&b),
                            DriverEvent::Outcome(id, outcome, at) => {
                                run.on_outcome(id, &outcome, at);
                                while let Some(record) = run.poll_record() {
                                    if let Some(j) = jsonl.as_deref_mut() {
                                        j.write(&record)?;
                                    }
                                }
                            }
                        }
                    }
                    if !interrupted && interrupt.is_fired() {
                        interrupted = true;
                        tracing::warn!("interrupted: no new requests; cancelling queued ones and draining the rest");
                        run.interrupt(driver.now());
                        let ids: Vec<_> = run.in_flight_ids().collect();
                        for id in ids {
                            driver.cancel(id);
                        }
                    }
                    if last_status.is_none_or(|t| t.elapsed() >= STATUS_EVERY) {
                        last_status = Some(Instant::now());
                        progress.status(&run.status(driver.now()));
                    }
                    let now = driver.now();
                    match run.poll(now) {
                        Action::Submit(phase) => {
                            let request = workload.request(next_request);
                            next_request += 1;
                            match driver.submit(request) {
                                Ok(id) => run.on_submitted(id, phase, now),
                                Err(e) => run.on_rejected(&e, now),
                            }
                        }
                        Action::Wait(until) => driver.wait(until).map_err(|Stalled| {
                            RunError::Internal(format!(
                                "benchmark {} is waiting with nothing scheduled ({} in flight)",
                                run.name(),
                                run.in_flight()
                            ))
                        })?,
                        Action::Done => break,
                    }
                }
                let now = driver.now();
                progress.benchmark_done(&run.status(now));
                let mut finished = run.finish(now);
                if let Some(j) = jsonl.as_deref_mut() {
                    for record in &finished.records {
                        j.write(record)?;
                    }
                }
                if let Some(c) = segment.label {
                    finished.result.matrix = Some(MatrixPoint {
                        combination: c.label().to_owned(),
                        values: c.values().to_vec(),
                        pareto_front: false,
                    });
                }
                if round == 0 {
                    state.1 = finished.result.requests_per_s;
                }
                benchmarks.push(finished.result);
                if finished.ends_run {
                    incomplete = true;
                    break 'rounds;
                }
            }
        }
    }
    mark_pareto_front(&mut benchmarks);

    progress.engine_step("stopping engine");
    if let Err(e) = driver.shutdown() {
        tracing::error!(error = %e, "engine shutdown failed");
    }
    Ok(DriverResult { engine: info, benchmarks, interrupted, incomplete, error: None })
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
