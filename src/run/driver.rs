//! The one step loop, written against [`Driver`]: how time passes and where requests go.
//!
//! A driver owns the clock and the batcher ([`super::realtime`]: threads and a real clock;
//! [`super::virtual_driver`]: one thread and virtual time). The loop owns everything else:
//! `run_steps` takes the benchmarks in the order of the `StepSchedule` (rounds, segments,
//! steps) and runs each with `run_step`: the sans-IO [`StepRun`], the interrupt, writing the
//! `requests.jsonl` rows the step returns and handing its [`StepStatus`](super::status::StepStatus)
//! to the display. The engine's start and shutdown ([`start_engine`], [`stop_engine`]) are the
//! [`EngineSession`](super::EngineSession)'s, around one run or several.
//!
//! # The driver contract
//! [`Driver::start`] is called once, before anything else; then, per step, repeatedly:
//! [`Driver::poll_event`] until it returns `None` (a batch is always given before the outcomes of
//! its requests), then [`Driver::submit`] or [`Driver::wait`] as the step asks, [`Driver::cancel`]
//! on interruption, [`Driver::reconfigure`] between steps; and finally [`Driver::shutdown`] once,
//! whatever happened before (at once after a failed start). The engine's capabilities are not the
//! driver's: its start hands them out ([`Started`]), and the session gives the loop what it uses,
//! the servers' counters, read before and after each step (the loop reports their deltas, the
//! server's own view of the benchmark).

use std::time::{Duration, Instant};

use super::RunError;
use super::ahead::RequestsAhead;
use super::interrupt::Interrupt;
use super::progress::Progress;
pub(super) use super::schedule::Segment;
use super::schedule::{ScheduledStep, StepSchedule};
use super::step::{Action, Finished, StepRun};
use crate::batcher::{BatchConfig, BatchRun, ConfigError, Outcome, RequestError};
use crate::engine::{
    ClockDomain, EngineError, EngineInfo, EngineRequest, ReadCounters, RequestId, RequestPrep, Started,
};
use crate::loadgen::shard::Shard;
use crate::metrics::result::{BenchmarkResult, MatrixPoint};
use crate::metrics::server::server_deltas;
use crate::report::RequestsJsonl;
use crate::time::{Timestamp, WallAnchor};

/// Something that happened in the batcher, for the step.
#[derive(Debug)]
// An outcome is moved, not boxed: a box was an allocation and a free per request, for a copy of a
// few hundred bytes.
#[allow(clippy::large_enum_variant)]
pub enum DriverEvent {
    /// The engine ran a batch.
    Batch(BatchRun),
    /// A request's outcome, and when it arrived.
    Outcome(RequestId, Outcome, Timestamp),
}

/// Nothing can ever happen: no event is scheduled and the step gave no deadline (a driver bug or
/// a wedged virtual engine).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stalled;

/// How time passes and where requests go; see the module docs for the calling order.
pub trait Driver {
    /// Loads the engine: what it is and what else it can do, as its start handed them out. Called
    /// once, before anything else.
    fn start(&mut self) -> Result<Started, EngineError>;
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
    /// `[matrix]` run's next combination, an engine session's next run); the engine stays loaded.
    fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError>;
    /// Whether time is virtual: the loop never waits in real time, so requests may be made
    /// ahead on another thread (they take nothing from an engine's real time).
    fn virtual_time(&self) -> bool {
        false
    }
    /// In virtual time, the engine's work on each request alone ([`RequestPrep`]), done where
    /// the requests are made.
    fn request_prep(&self) -> Option<RequestPrep> {
        None
    }
    /// Shuts the engine down; every request still queued gets its outcome first.
    fn shutdown(&mut self) -> Result<(), EngineError>;
}

/// Where the loop's outputs go.
pub(super) struct Sinks<'a> {
    pub jsonl: Option<&'a mut RequestsJsonl>,
    pub progress: &'a mut Progress,
    pub interrupt: &'a Interrupt,
}

/// Which of the schedule's requests a run sends, and how often.
#[derive(Copy, Clone, Debug)]
pub(super) struct RunShape {
    /// Every benchmark this many times (at least once).
    pub repeats: u32,
    /// Only this shard's requests (`--shard`); `None` sends them all.
    pub shard: Option<Shard>,
}

/// How often, at most, the loop builds a status for the display.
const STATUS_EVERY: Duration = Duration::from_millis(50);

/// The token count of a KV block, the unit a prefix cache hits in: the engine's, where it says;
/// else 1 (the designed hit rate then counts the shared prefix token by token).
fn kv_block_size(info: &EngineInfo) -> u32 {
    info.resolved_config.map_or(1, |c| c.block_size)
}

/// Loads the engine and says what it is ([`Driver::start`]), shown on the display. A failed start
/// shuts the driver down at once: the engine is unusable, and the driver is shut down only once.
pub(super) fn start_engine(driver: &mut dyn Driver, progress: &mut Progress) -> Result<Started, EngineError> {
    progress.engine_step("loading engine");
    driver.start().inspect_err(|_| {
        if let Err(e) = driver.shutdown() {
            tracing::error!(error = %e, "engine shutdown after a failed start failed");
        }
    })
}

/// Shuts the engine down ([`Driver::shutdown`]), once, after the last step of its last run; shown
/// on the display when a run's display is still there.
pub(super) fn stop_engine(driver: &mut dyn Driver, progress: Option<&mut Progress>) -> Result<(), EngineError> {
    if let Some(progress) = progress {
        progress.engine_step("stopping engine");
    }
    driver.shutdown().inspect_err(|e| tracing::error!(error = %e, "engine shutdown failed"))
}

/// What a started engine carries from one run to the next ([`super::EngineSession`]).
pub(super) struct Carried {
    /// The batching the batcher has now.
    pub batching: BatchConfig,
    /// The next request of the engine's life: the batcher numbers every submit from 0, over every
    /// run on it.
    pub next_request: u64,
}

/// What [`run_steps`] hands back.
pub(super) struct Steps {
    /// Every benchmark, in run order.
    pub benchmarks: Vec<BenchmarkResult>,
    /// Each benchmark's measured window on the run's clock, `(start, end)`, in run order.
    pub windows: Vec<(Timestamp, Timestamp)>,
    /// The interrupt fired.
    pub interrupted: bool,
    /// A step ended the run early (engine unusable, or interrupted).
    pub incomplete: bool,
}

/// Runs every step of every segment on `driver`, whose engine is started (`engine` is what it said
/// about itself; `counters` read its servers' counters, where it has them), `shape.repeats` times (at least once; only `shape.shard`'s requests when given), in the order of the [`StepSchedule`]. Before a
/// step whose segment has other `[batching]` than the batcher, the batcher takes it while idle
/// ([`Driver::reconfigure`]); the engine stays loaded. Starting and stopping the engine is the
/// caller's ([`start_engine`], [`stop_engine`]), so several runs can share one engine start.
pub(super) fn run_steps(
    segments: &[Segment<'_>],
    driver: &mut dyn Driver,
    engine: &EngineInfo,
    counters: Option<ReadCounters>,
    carried: &mut Carried,
    sinks: Sinks<'_>,
    shape: RunShape,
) -> Result<Steps, RunError> {
    let RunShape { repeats, shard } = shape;
    let Sinks { jsonl, progress, interrupt } = sinks;
    let mut steps = StepLoop {
        domain: driver.clock_domain(),
        anchor: Some(driver.wall_anchor()),
        block_size: kv_block_size(engine),
        driver,
        counters,
        jsonl,
        progress,
        interrupt,
        next_request: carried.next_request,
        next_workload: carried.next_request,
        interrupted: false,
        last_status: None,
        waited: false,
        since_status_check: 0,
        shard,
    };
    let mut schedule = StepSchedule::new(segments, repeats);
    let (mut benchmarks, mut windows) = (Vec::new(), Vec::new());
    let mut incomplete = false;
    let mut result = Ok(());
    while let Some(scheduled) = schedule.next_step() {
        let batching = scheduled.segment.plan.batching();
        if carried.batching != *batching {
            if let Err(e) = steps.driver.reconfigure(batching.clone()) {
                result = Err(RunError::Internal(e.to_string()));
                break;
            }
            carried.batching = batching.clone();
        }
        let finished = match steps.run_step(scheduled) {
            Ok(finished) => finished,
            Err(e) => {
                result = Err(e);
                break;
            }
        };
        schedule.measured(finished.result.requests_per_s);
        windows.push(finished.window);
        benchmarks.push(finished.result);
        if finished.ends_run {
            incomplete = true;
            break;
        }
    }
    // The ids the batcher gave are gone, whatever happened: a later run goes on from them.
    carried.next_request = steps.next_request;
    result?;
    mark_pareto_front(&mut benchmarks);
    Ok(Steps { benchmarks, windows, interrupted: steps.interrupted, incomplete })
}

/// The loop's side of every step: the driver, where outputs go, and what carries over from one
/// step to the next.
struct StepLoop<'d, 's> {
    driver: &'d mut dyn Driver,
    /// Reads the engine's servers' counters, where it has them.
    counters: Option<ReadCounters>,
    jsonl: Option<&'s mut RequestsJsonl>,
    progress: &'s mut Progress,
    interrupt: &'s Interrupt,
    domain: ClockDomain,
    anchor: Option<WallAnchor>,
    /// The engine's KV block size, for a workload's designed prefix-cache hits.
    block_size: u32,
    /// The workload's next request (its index, which the batcher's id then equals), numbered over
    /// the engine's life.
    next_request: u64,
    /// The workload's next request: `next_request`, except in a shard, which passes over the
    /// other shards' requests (their index in the single-process run goes by unsent).
    next_workload: u64,
    /// The interrupt fired: every later step starts interrupted.
    interrupted: bool,
    /// When the display was last given a status.
    last_status: Option<Instant>,
    /// The last turn of the loop waited (which may take any time).
    waited: bool,
    /// Turns of the loop since the clock was last read for the display.
    since_status_check: u32,
    /// The shard this run sends (`--shard`): the loop passes over the others' requests.
    shard: Option<Shard>,
}

/// Turns of the loop that submit without waiting, at most, between two readings of the clock for
/// the display: a turn is well under a microsecond, so the display stays within [`STATUS_EVERY`]
/// while the loop does not read the clock a second time per request for it.
const STATUS_CHECK_EVERY: u32 = 64;

impl StepLoop<'_, '_> {
    /// Whether the display is due a status: checked after every wait, and every
    /// [`STATUS_CHECK_EVERY`] turns in between.
    fn status_due(&mut self) -> bool {
        self.since_status_check += 1;
        if !self.waited && self.last_status.is_some() && self.since_status_check < STATUS_CHECK_EVERY {
            return false;
        }
        self.since_status_check = 0;
        self.last_status.is_none_or(|t| t.elapsed() >= STATUS_EVERY)
    }

    /// The servers' own counters now, one entry per endpoint that has them; empty for an engine
    /// without servers. Read before and after each step, never during one (it may take a request
    /// per endpoint).
    fn server_counters(&self) -> Vec<crate::engine::ServerCounters> {
        self.counters.as_ref().map(|read| read()).unwrap_or_default()
    }

    /// Runs one benchmark to its end: the step asks, the driver submits and waits, events go back
    /// to the step, its rows to requests.jsonl and its status to the display. The servers'
    /// counters are read before its clock starts and after it ends; their deltas are its
    /// `server` result.
    fn run_step(&mut self, scheduled: ScheduledStep<'_, '_>) -> Result<Finished, RunError> {
        let segment = scheduled.segment;
        // A session's turns depend on its replies: none can be made ahead.
        // A shard takes every n-th request: making them ahead in order would not pay.
        if !self.driver.virtual_time() || segment.plan.sessions().is_some() || self.shard.is_some() {
            return self.run_step_with(scheduled, None);
        }
        std::thread::scope(|scope| {
            let ahead = RequestsAhead::spawn(scope, segment.workload, self.next_request, self.driver.request_prep());
            self.run_step_with(scheduled, Some(ahead))
        })
    }

    /// [`run_step`](Self::run_step), taking the requests from `ahead` when it has them.
    fn run_step_with(
        &mut self,
        scheduled: ScheduledStep<'_, '_>,
        mut ahead: Option<RequestsAhead>,
    ) -> Result<Finished, RunError> {
        let segment = scheduled.segment;
        let counters_before = self.server_counters();
        let mut run = self.start_step(scheduled)?;
        loop {
            self.take_events(&mut run)?;
            if !self.interrupted && self.interrupt.is_fired() {
                self.interrupted = true;
                self.interrupt_step(&mut run);
            }
            if self.status_due() {
                self.last_status = Some(Instant::now());
                self.progress.status(&run.status(self.driver.now()));
            }
            let now = self.driver.now();
            let action = run.poll(now);
            self.waited = matches!(action, Action::Wait(_));
            match action {
                Action::Submit(phase) => {
                    // The batcher numbers every submit from 0 and this loop is its only caller,
                    // so workload request k is request id k (the prefix design and requests.jsonl
                    // rely on it).
                    let k = self.next_workload;
                    let turn = run.take_turn_request();
                    let target = if turn.is_some() { None } else { segment.workload.prompt_target(k) };
                    let mut request = turn
                        .or_else(|| ahead.as_mut().and_then(|a| a.take(k)))
                        .unwrap_or_else(|| segment.workload.request(k));
                    // A virtual-time engine draws a request's random output length from its seed,
                    // else from its id (the batcher's, which in a shard is not the request's index
                    // in the single-process run): a shard seeds it with that index, so it draws
                    // what the single-process run drew (docs/distributed.md).
                    if self.shard.is_some() && self.driver.virtual_time() && request.seed.is_none() {
                        request.seed = Some(k);
                    }
                    self.next_request += 1;
                    self.next_workload += 1;
                    let images = crate::engine::image::summary(&request.prompt);
                    match self.driver.submit(request) {
                        Ok(id) => {
                            debug_assert!(
                                self.shard.is_some() || id + 1 == self.next_request,
                                "workload request and id differ"
                            );
                            run.on_submitted(id, phase, now);
                            if let Some(images) = images {
                                run.on_images(id, images);
                            }
                            if let Some(target) = target {
                                run.on_prompt_target(id, target);
                            }
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
                // Another shard's request: its index goes by unsent.
                Action::Pass => self.next_workload += 1,
                Action::Done => break,
            }
        }
        let now = self.driver.now();
        self.progress.benchmark_done(&run.status(now));
        let mut finished = run.finish(now);
        finished.result.server = server_deltas(&counters_before, &self.server_counters());
        if let Some(j) = self.jsonl.as_deref_mut() {
            finished.records.iter().try_for_each(|record| j.write(record))?;
        }
        if let Some(c) = segment.label {
            let (combination, values) = (c.label(), c.values());
            finished.result.matrix =
                Some(MatrixPoint { combination: combination.to_owned(), values: values.to_vec(), pareto_front: false });
        }
        Ok(finished)
    }

    /// The step's [`StepRun`], positioned in the run; interrupted at once after an interrupt.
    fn start_step(&mut self, scheduled: ScheduledStep<'_, '_>) -> Result<StepRun, RunError> {
        let ScheduledStep { step, segment, index, count, round, repeats } = scheduled;
        let now = self.driver.now();
        let step = match self.shard {
            Some(shard) => shard.step(&step)?,
            None => step,
        };
        let mut run = StepRun::for_plan(step, segment.plan, now, self.domain, self.anchor)?
            .with_position(index, count)
            .with_repeat(round, repeats);
        if let Some(shard) = self.shard {
            run = run.with_shard(shard, self.next_workload);
        }
        if self.jsonl.is_some() {
            run = run.with_records();
        }
        match segment.plan.sessions() {
            Some(spec) => {
                let sessions = crate::loadgen::sessions::Sessions::new(
                    spec,
                    segment.plan.workload(),
                    segment.workload,
                    self.next_request,
                )?;
                run = run.with_sessions(sessions);
            }
            None => {
                if let Some(design) = segment.workload.prefix_design() {
                    run = run.with_prefix_design(design, self.block_size);
                }
            }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::engine::{Engine, EngineOutput, FinishReason, ServerCounters, VirtualTimeEngine};
    use crate::loadgen::Workload;
    use crate::run::progress::{ProgressMode, Screen};
    use crate::run::virtual_driver::VirtualTimeDriver;
    use crate::scenario::Scenario;
    use crate::scenario::plan::Plan;
    use crate::time::{Clock, VirtualClock};

    /// Answers every batch 5 ms after it was dispatched, in virtual time.
    struct Quick {
        clock: VirtualClock,
    }

    impl Engine for Quick {
        fn start(&mut self) -> Result<Started, EngineError> {
            Ok(EngineInfo::new("quick", "0").into())
        }
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<crate::engine::EngineOutput>, EngineError> {
            self.clock.sleep(Duration::from_millis(5));
            Ok(batch
                .iter()
                .map(|r| EngineOutput::new(Some(r.id), FinishReason::Length).with_output_tokens(4))
                .collect())
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            Ok(())
        }
    }

    impl VirtualTimeEngine for Quick {
        fn use_virtual_clock(&mut self, clock: VirtualClock) {
            self.clock = clock;
        }
    }

    fn quick() -> VirtualTimeDriver<Quick> {
        let plan = scenario(&[100.0]).build().unwrap();
        VirtualTimeDriver::new(Quick { clock: VirtualClock::new() }, plan.batching().clone(), None)
    }

    /// 20 requests at each of `rates`, one per batch.
    fn scenario(rates: &[f64]) -> crate::scenario::ScenarioBuilder {
        Scenario::builder().sim_virtual().synthetic(16, 4).batch_size(1).profile_constant(rates).max_requests(20)
    }

    /// Runs `plan`'s steps on `driver` through the one step loop, and returns the benchmarks.
    fn run_on(driver: &mut dyn Driver, plan: &Plan) -> Vec<BenchmarkResult> {
        run_with_counters(driver, plan, None)
    }

    /// [`run_on`], the servers' counters read by `counters`.
    fn run_with_counters(driver: &mut dyn Driver, plan: &Plan, counters: Option<ReadCounters>) -> Vec<BenchmarkResult> {
        let workload = Workload::from_plan(plan.workload()).unwrap();
        let info = driver.start().unwrap().info;
        let mut carried = Carried { batching: plan.batching().clone(), next_request: 0 };
        let mut progress = Progress::new(ProgressMode::Off, &Screen::stderr());
        let interrupt = Interrupt::never();
        let sinks = Sinks { jsonl: None, progress: &mut progress, interrupt: &interrupt };
        let segments = [Segment { plan, workload: &workload, label: None }];
        let steps =
            run_steps(&segments, driver, &info, counters, &mut carried, sinks, RunShape { repeats: 1, shard: None })
                .unwrap();
        driver.shutdown().unwrap();
        steps.benchmarks
    }

    /// A client whose every submit takes `submit_cost` of (virtual) time.
    struct SlowClient<D> {
        inner: D,
        submit_cost: Duration,
    }

    impl<D: Driver> Driver for SlowClient<D> {
        fn start(&mut self) -> Result<Started, EngineError> {
            self.inner.start()
        }
        fn now(&self) -> Timestamp {
            self.inner.now()
        }
        fn clock_domain(&self) -> ClockDomain {
            self.inner.clock_domain()
        }
        fn wall_anchor(&self) -> WallAnchor {
            self.inner.wall_anchor()
        }
        fn submit(&mut self, request: EngineRequest<()>) -> Result<RequestId, RequestError> {
            let id = self.inner.submit(request)?;
            let done = self.inner.now().saturating_add(self.submit_cost);
            while self.inner.now() < done {
                self.inner.wait(Some(done)).expect("a deadline always lets time pass");
            }
            Ok(id)
        }
        fn cancel(&mut self, id: RequestId) {
            self.inner.cancel(id)
        }
        fn poll_event(&mut self) -> Option<DriverEvent> {
            self.inner.poll_event()
        }
        fn wait(&mut self, until: Option<Timestamp>) -> Result<(), Stalled> {
            self.inner.wait(until)
        }
        fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError> {
            self.inner.reconfigure(config)
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            self.inner.shutdown()
        }
    }

    fn slow(submit_cost: Duration) -> SlowClient<VirtualTimeDriver<Quick>> {
        SlowClient { inner: quick(), submit_cost }
    }

    #[test]
    fn a_client_whose_submits_are_slower_than_the_schedule_falls_behind_and_says_so() {
        // 100/s is one arrival every 10 ms; a submit that takes 20 ms falls 10 ms further behind
        // with each request.
        let b = &run_on(&mut slow(Duration::from_millis(20)), &scenario(&[100.0]).build().unwrap())[0];
        assert_eq!((b.counts.completed, b.counts.lost), (20, 0));
        // The 20th request went at 380 ms instead of 190 ms.
        assert_eq!(b.metric("client_lag_max_ms"), Some(190.0));
        let kinds: Vec<_> = b.validity_warnings.iter().map(|w| w.kind.as_str()).collect();
        assert_eq!(kinds, ["client_lag"]);

        // Submits within the schedule: no lag, no warning.
        let b = &run_on(&mut slow(Duration::from_millis(5)), &scenario(&[100.0]).build().unwrap())[0];
        assert_eq!(b.metric("client_lag_max_ms"), Some(0.0));
        assert!(b.validity_warnings.is_empty(), "{:?}", b.validity_warnings);
        let b = &run_on(&mut quick(), &scenario(&[100.0]).build().unwrap())[0];
        assert_eq!((b.metric("client_lag_max_ms"), b.metric("dispatch_delay_max_ms")), (Some(0.0), Some(0.0)));
    }

    #[test]
    fn server_counters_are_read_around_each_step_and_reported_as_deltas() {
        // Servers whose counters grow by 100 prompt tokens at every reading.
        let readings = Arc::new(AtomicU32::new(0));
        let r = readings.clone();
        let counters: ReadCounters = Arc::new(move || {
            let n = r.fetch_add(1, Ordering::SeqCst);
            let counters = [("prompt_tokens".to_owned(), f64::from(n) * 100.0)].into();
            vec![ServerCounters { endpoint: "http://127.0.0.1:8000".into(), counters }]
        });
        let benchmarks =
            run_with_counters(&mut slow(Duration::ZERO), &scenario(&[100.0, 200.0]).build().unwrap(), Some(counters));
        assert_eq!(benchmarks.len(), 2);
        for b in &benchmarks {
            let [delta] = b.server.as_slice() else { panic!("one endpoint: {:?}", b.server) };
            assert_eq!(delta.endpoint, "http://127.0.0.1:8000");
            // Read once before and once after: 100 more each time.
            assert_eq!(delta.counters.get("prompt_tokens"), Some(&100.0), "{}", b.name);
        }
        assert_eq!(readings.load(Ordering::SeqCst), 4, "before and after each of the two steps");
        // A virtual-time engine has no servers: nothing is reported.
        assert!(run_on(&mut quick(), &scenario(&[100.0]).build().unwrap())[0].server.is_empty());
    }
}
