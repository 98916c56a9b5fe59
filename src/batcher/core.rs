//! The sans-IO micro-batcher.
//!
//! [`BatcherCore`] is a plain state machine in the style of quinn-proto: it never reads a clock,
//! never blocks and never calls the engine. Drivers (the threaded shell, the virtual-time
//! driver, the fuzzer, proptest) only move data between this and the world, so all of the logic
//! that must never hang or lose a request lives here, in one place.
//!
//! # The driver contract
//!
//! A driver owns the clock and the engine. It runs the engine's start and shutdown alone, and up
//! to [`max_in_flight`](BatchConfig::max_in_flight) generates at once (one, by default: then every
//! engine call is alone). It passes `now` with every input, never earlier than the `now` it
//! passed before.
//!
//! **Inputs.**
//! - [`begin_start`](BatcherCore::begin_start): when it returns `true`, the driver calls the
//!   engine's start and reports its result with
//!   [`handle_start_result`](BatcherCore::handle_start_result).
//! - [`submit`](BatcherCore::submit) and [`cancel`](BatcherCore::cancel), from callers. `submit`
//!   returns the id the core gave the request (see "Request ids" below). A rejected submit returns
//!   its error and never produces an outcome.
//! - [`handle_generate_result`](BatcherCore::handle_generate_result), once for every batch that
//!   [`poll_dispatch`](BatcherCore::poll_dispatch) gave out, when the engine's generate returned
//!   (or panicked), even if the batch was failed meanwhile: only then is its slot free. With
//!   several in flight, in whatever order they return.
//! - [`handle_timeout`](BatcherCore::handle_timeout), when the time from
//!   [`poll_timeout`](BatcherCore::poll_timeout) has come.
//! - [`handle_engine_died`](BatcherCore::handle_engine_died) and
//!   [`abort_in_flight`](BatcherCore::abort_in_flight), whenever they happen, in any state, also
//!   while a generate runs (the driver must be able to take them while its engine thread is stuck).
//! - [`begin_shutdown`](BatcherCore::begin_shutdown), then
//!   [`handle_engine_shutdown_done`](BatcherCore::handle_engine_shutdown_done) when the engine's
//!   shutdown returned.
//!
//! **After every input**, the driver polls, in this order:
//! 1. [`poll_dispatch`](BatcherCore::poll_dispatch)`(now)` until `None`: the batches to run on the
//!    engine, outside any lock. At most `max_in_flight` are in flight (given out, not yet
//!    returned); with 1, the default, never more than one.
//! 2. [`poll_engine_shutdown`](BatcherCore::poll_engine_shutdown): `true` exactly once, when the
//!    driver must call the engine's shutdown. Never while a start or generate is running.
//! 3. [`poll_outcome`](BatcherCore::poll_outcome) until `None`: every request's one outcome, for
//!    the driver to hand to its waiter.
//! 4. [`poll_timeout`](BatcherCore::poll_timeout): when to call `handle_timeout` and poll again if
//!    no other input comes first. A time at or before `now` means at once: a full batch or a
//!    draining queue is due ([`dispatch_deadline`](BatcherCore::dispatch_deadline)).
//!
//! **Request ids are the core's.** A caller submits a request without an id
//! (`EngineRequest<()>`); [`submit`](BatcherCore::submit) numbers it and returns the id it chose,
//! as quinn-proto's `streams().open()` returns the stream id it chose. Every submit, admitted or
//! not, takes the next id (0, 1, 2, ...), so a driver's `k`-th submit is request `k`, and no two
//! requests of one core ever share an id. The engine sees the id on the request; the outcome,
//! [`cancel`](BatcherCore::cancel) and every [`Event`] name the request by it. A driver keeps the
//! returned id to hand the outcome to its waiter; it never makes one up. (The ids of a run's
//! `requests.jsonl` are these: request `k` is the workload's `k`-th request.)
//!
//! A driver is done when the state is [`State::Stopped`], or may stop waiting when
//! [`is_wedged`](BatcherCore::is_wedged): every request is answered and only engine calls that
//! may never return are left (the driver abandons the thread stuck in them).
//!
//! # Several batches in flight
//!
//! `max_in_flight` slots: a batch takes one when `poll_dispatch` gives it out and frees it when
//! its result comes in, whatever the result and whether or not the batch was failed meanwhile.
//! What holds for one batch in flight holds for each of them:
//! - **Every request one outcome.** A result is matched to its batch by [`BatchId`], never to
//!   another batch in flight; a late result of an abandoned batch is discarded.
//! - **Batches as with one in flight.** Each batch is the queue's front, at most `batch_size`,
//!   with its own [`FlushReason`]: the slots change when a batch may go, never what it holds.
//! - **No unbounded wait.** `generate_timeout` is per batch: an overrunning generate fails only
//!   its own batch and keeps its slot until it returns (so a server that hangs every request can
//!   hold at most `max_in_flight` of them). While every slot is held by such a generate, queued
//!   requests fail after waiting `generate_timeout`, as they do behind the one stuck generate.
//! - **Death and abort** fail every running batch and the queue at once, and the engine's
//!   shutdown waits for every generate to return (never while one is out), as for one.
//! - **The stall watch runs with `max_in_flight = 1`, or for an engine that runs here.** It judges
//!   a generate by the CPU time of the engine's processes and engine thread. Several in flight
//!   usually means an engine that runs its generates elsewhere (an HTTP server): the client
//!   waiting on the network uses no CPU, so the watch would take any long generate for a frozen
//!   engine. There, `generate_timeout` bounds each batch instead, and `stall_deadline` and
//!   `stall_watched_batch` are `None`. An engine whose concurrent face works in this machine's
//!   processes (vLLM with continuous admission: [`set_engine_runs_here`](BatcherCore::set_engine_runs_here))
//!   is watched through its oldest running generate, and any generate's result is its progress
//!   too: one engine serves them all.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::error::{ConfigError, RequestError};
use super::lifecycle::{Lifecycle, State};
use crate::engine::{EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, RequestId};
use crate::time::Timestamp;

/// Numbers the batches of one batcher in dispatch order, from 0.
pub type BatchId = u64;

/// A map keyed by [`RequestId`], for the per-request tables of the batcher and the runner.
pub type IdMap<V> = std::collections::HashMap<RequestId, V, BuildIdHasher>;

/// Hashes a [`RequestId`] with one multiplication. Ids are the core's counter, not an attacker's,
/// so SipHash's flooding resistance buys nothing and costs a measurable share of a request.
#[derive(Copy, Clone, Debug, Default)]
pub struct BuildIdHasher;

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// The [`std::hash::Hasher`] that [`BuildIdHasher`] builds: one multiplication per `u64` key.
#[derive(Copy, Clone, Debug, Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are expected; anything else still hashes, byte by byte.
        for &b in bytes {
            self.write_u64(u64::from(b) ^ self.0.rotate_left(8));
        }
    }
    fn write_u64(&mut self, n: u64) {
        // An odd constant (2^64 / golden ratio): a bijection that spreads consecutive ids over
        // the high bits as well as the low ones.
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// Batching settings, validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BatchConfig {
    batch_size: usize,
    batch_timeout: Duration,
    generate_timeout: Option<Duration>,
    stall_timeout: Option<Duration>,
    max_in_flight: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            batch_size: 32,
            batch_timeout: Duration::from_millis(10),
            generate_timeout: None,
            stall_timeout: None,
            max_in_flight: 1,
        }
    }
}

/// A real engine's default `generate_timeout`: no unbounded wait by default (docs/scenarios.md).
pub const REAL_ENGINE_GENERATE_TIMEOUT: Duration = Duration::from_secs(600);

/// A real engine's default `stall_timeout`, and the floor of the derived limit
/// ([`BatchConfig::stall_limit`]): long enough for any pause a healthy engine makes (a slow first
/// step, a garbage collection, a 10 ms CPU-time tick), short enough that a frozen EngineCore is
/// noticed within a minute.
pub const REAL_ENGINE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The engine counts as busy, which is progress, when its CPU time grew by at least this share of
/// the wall time since the last progress (a tenth of one CPU). Less is what a waiting process does
/// (vLLM's worker polling its queue while the EngineCore is stopped uses under 2 %), not work.
pub const BUSY_CPU_SHARE: f64 = 0.1;

/// A running generate is given at least this many times the longest generate of the run so far
/// before it counts as stalled: a batch that legitimately takes longer than the floor (a big
/// batch on a slow machine) is not mistaken for a stall.
pub const STALL_FACTOR: u32 = 4;

impl BatchConfig {
    /// Checks the two required settings: `batch_size` and `batch_timeout` must be non-zero. No generate timeout.
    pub fn new(batch_size: usize, batch_timeout: Duration) -> Result<Self, ConfigError> {
        if batch_size == 0 {
            return Err(ConfigError::ZeroBatchSize);
        }
        if batch_timeout.is_zero() {
            return Err(ConfigError::ZeroBatchTimeout);
        }
        Ok(BatchConfig { batch_size, batch_timeout, generate_timeout: None, stall_timeout: None, max_in_flight: 1 })
    }

    /// Up to this many batches in flight at once (`batching.max_in_flight`, at least 1; 1 is the
    /// default and runs one generate at a time). More than 1 needs an engine with a concurrent
    /// face ([`Engine::concurrent`](crate::engine::Engine::concurrent)): an HTTP engine.
    pub fn with_max_in_flight(mut self, n: usize) -> Result<Self, ConfigError> {
        if n == 0 {
            return Err(ConfigError::ZeroMaxInFlight);
        }
        self.max_in_flight = n;
        Ok(self)
    }

    /// A generate running longer than this fails its batch; while it stays stuck, queued requests
    /// fail once they waited as long.
    pub fn with_generate_timeout(mut self, t: Option<Duration>) -> Result<Self, ConfigError> {
        if t.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroGenerateTimeout);
        }
        self.generate_timeout = t;
        Ok(self)
    }

    /// A generate that makes no progress (no output, and no CPU time in the engine's processes,
    /// when the driver samples it) for [`stall_limit`](Self::stall_limit) fails its batch, the
    /// queue and every later request with [`RequestError::EngineStalled`]: the engine is frozen.
    pub fn with_stall_timeout(mut self, t: Option<Duration>) -> Result<Self, ConfigError> {
        if t.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroStallTimeout);
        }
        self.stall_timeout = t;
        Ok(self)
    }

    /// A real engine's defaults for what is not set: [`REAL_ENGINE_GENERATE_TIMEOUT`] and
    /// [`REAL_ENGINE_STALL_TIMEOUT`]. The plan's real engines get them when the scenario is read;
    /// a library caller's real-time engine gets them at the run.
    pub fn with_real_engine_defaults(mut self) -> Self {
        self.generate_timeout = self.generate_timeout.or(Some(REAL_ENGINE_GENERATE_TIMEOUT));
        self.stall_timeout = self.stall_timeout.or(Some(REAL_ENGINE_STALL_TIMEOUT));
        self
    }

    /// Most requests in one batch; a batch this full is dispatched at once.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
    /// How long the oldest queued request waits before a partial batch is dispatched.
    pub fn batch_timeout(&self) -> Duration {
        self.batch_timeout
    }
    /// Most batches in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
    /// How long a generate may run before its batch fails; `None` waits forever.
    pub fn generate_timeout(&self) -> Option<Duration> {
        self.generate_timeout
    }
    /// The configured stall timeout: the floor of [`stall_limit`](Self::stall_limit); `None`
    /// watches for no stall.
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }
    /// How long a generate may go without progress: `stall_timeout`, or [`STALL_FACTOR`] times
    /// `expected` (the longest generate so far) when that is longer.
    pub fn stall_limit(&self, expected: Duration) -> Option<Duration> {
        self.stall_timeout.map(|floor| floor.max(expected.saturating_mul(STALL_FACTOR)))
    }
}

/// Why a batch left the queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushReason {
    /// `batch_size` requests were waiting.
    Full,
    /// The oldest request had waited `batch_timeout`.
    Timeout,
    /// Shutdown is draining the queue.
    Drain,
    /// Not a batch the batcher made: one step of an engine that batches by itself (vLLM with
    /// continuous admission), which chose what to run in it.
    Step,
}

/// A batch for the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Numbers this batch in dispatch order.
    pub id: BatchId,
    /// The requests, oldest first; at most `batch_size` of them.
    pub requests: Vec<EngineRequest>,
    /// Why the batch was dispatched now.
    pub reason: FlushReason,
    /// When the batch left the queue, on the batcher's clock.
    pub dispatched_at: Timestamp,
}

/// One generate as a driver ran it: for batching statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchRun {
    /// The batch's [`BatchId`].
    pub id: BatchId,
    /// How many requests the batch held.
    pub size: usize,
    /// Why it was dispatched.
    pub reason: FlushReason,
    /// When it left the queue, on the driver's clock.
    pub dispatched_at: Timestamp,
    /// When generate returned (or panicked).
    pub returned_at: Timestamp,
    /// An engine step's requests by phase ([`FlushReason::Step`]), where the engine says.
    pub phases: Option<StepPhases>,
}

/// What an engine step served, by phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StepPhases {
    /// Requests that got their first token in the step.
    pub prefill: u32,
    /// Requests that got a further token.
    pub decode: u32,
}

/// How a generate call ended, as the driver saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum GenerateResult {
    /// The engine returned outputs (still to be matched to the batch's requests).
    Outputs(Vec<EngineOutput>),
    /// The engine returned an error; every request of the batch fails with it.
    Error(EngineError),
    /// The engine panicked, with the panic's message; every request of the batch fails.
    Panicked(String),
}

impl From<Result<Vec<EngineOutput>, EngineError>> for GenerateResult {
    fn from(r: Result<Vec<EngineOutput>, EngineError>) -> Self {
        match r {
            Ok(o) => GenerateResult::Outputs(o),
            Err(e) => GenerateResult::Error(e),
        }
    }
}

/// Our clock's view of one request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestTimes {
    /// When the request entered the queue.
    pub submitted: Timestamp,
    /// When its batch was handed to the engine.
    pub dispatched: Timestamp,
    /// When its batch's generate returned.
    pub completed: Timestamp,
}

/// A request's output, with where and when it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// What the engine returned for this request.
    pub output: EngineOutput,
    /// When it was queued, dispatched and completed, on the batcher's clock.
    pub times: RequestTimes,
    /// The batch it ran in.
    pub batch_id: BatchId,
    /// How many requests that batch held.
    pub batch_size: usize,
}

/// The one outcome of one request.
pub type Outcome = Result<Completion, RequestError>;

/// What happened, for traces and batching statistics. Recorded only when enabled.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A request entered the queue.
    Submitted {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The id the core gave the request.
        id: RequestId,
    },
    /// A submit was refused: engine not started, shutting down, or engine unusable.
    Rejected {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The id the refused submit took (no other request ever gets it).
        id: RequestId,
        /// The [`RequestError`] it got, as text.
        error: String,
    },
    /// A queued request was cancelled before its batch was dispatched.
    Cancelled {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The cancelled request.
        id: RequestId,
    },
    /// A batch was handed to the engine.
    Dispatched {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The batch.
        batch: BatchId,
        /// Its requests, in the order the engine sees them.
        ids: Vec<RequestId>,
        /// Why it left the queue now.
        reason: FlushReason,
    },
    /// A batch's generate returned outputs that matched its requests.
    BatchCompleted {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The batch.
        batch: BatchId,
    },
    /// A batch failed (engine error, panic, timeout or mismatched outputs); its requests failed.
    BatchFailed {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The batch.
        batch: BatchId,
        /// Why, as text.
        error: String,
    },
    /// The engine became unusable (failed start or death); queued requests failed.
    EngineFailed {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// Why, as text.
        error: String,
    },
    /// The lifecycle moved to a new state.
    State {
        /// The state entered.
        to: State,
    },
    /// The batcher asked the driver to shut the engine down (once per run).
    EngineShutdown,
}

struct Queued {
    request: EngineRequest,
    submitted_at: Timestamp,
}

struct InFlight {
    batch_id: BatchId,
    members: Vec<(RequestId, Timestamp)>,
    dispatched_at: Timestamp,
    /// Its waiters were already failed by the generate timeout; the result is discarded.
    abandoned: bool,
    /// The last sign of life: the dispatch, or a CPU-time sample that showed the engine busy.
    last_progress: Timestamp,
    /// The engine's CPU time, and when it was sampled, at this generate's first sample or its
    /// last progress since: what later samples are measured against.
    cpu_baseline: Option<(Duration, Timestamp)>,
}

/// The micro-batcher's state machine. See the module docs.
pub struct BatcherCore {
    config: BatchConfig,
    lifecycle: Lifecycle,
    /// Why the engine is unusable; what later submits are rejected with. Set together with a
    /// failed state, or during a load that a death or abort interrupted.
    failure: Option<RequestError>,
    engine_shutdown_issued: bool,
    queue: VecDeque<Queued>,
    /// The generates out, in dispatch order: at most `config.max_in_flight` (abandoned ones
    /// included, until they return).
    in_flight: Vec<InFlight>,
    outcomes: VecDeque<(RequestId, Outcome)>,
    /// The id the next submit gets. Only `submit` moves it, by one each time, so no two requests
    /// of this batcher ever share an id.
    next_request_id: RequestId,
    next_batch_id: BatchId,
    events: Option<Vec<Event>>,
    /// The longest generate that returned: what a batch is expected to take, for the stall limit.
    longest_generate: Duration,
    /// The engine's concurrent face works here: the stall watch applies with several in flight.
    engine_runs_here: bool,
    /// When the last generate returned: the engine's last sign of life through its outputs.
    last_result_at: Option<Timestamp>,
}

impl BatcherCore {
    /// A batcher in [`State::Created`] with an empty queue; events are off (see [`with_events`](Self::with_events)).
    pub fn new(config: BatchConfig) -> Self {
        BatcherCore {
            config,
            lifecycle: Lifecycle::default(),
            failure: None,
            engine_shutdown_issued: false,
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            outcomes: VecDeque::new(),
            next_request_id: 0,
            next_batch_id: 0,
            events: None,
            longest_generate: Duration::ZERO,
            engine_runs_here: false,
            last_result_at: None,
        }
    }

    /// The started engine's concurrent face works in this machine's processes (its CPU time is
    /// its sign of life), so the stall watch applies with several generates in flight too: see
    /// "Several batches in flight" in the module docs. A driver says so after the start.
    pub fn set_engine_runs_here(&mut self, runs_here: bool) {
        self.engine_runs_here = runs_here;
    }

    /// Record [`Event`]s, for traces and tests.
    pub fn with_events(mut self) -> Self {
        self.events = Some(Vec::new());
        self
    }

    /// Takes the events recorded since the last call; empty unless [`with_events`](Self::with_events) was called.
    pub fn take_events(&mut self) -> Vec<Event> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn record(&mut self, e: impl FnOnce() -> Event) {
        if let Some(ev) = self.events.as_mut() {
            ev.push(e());
        }
    }

    fn set_state(&mut self, to: State) {
        // Every caller checked the source state; a failure here is a bug in this file.
        let r = self.lifecycle.transition(to);
        debug_assert!(r.is_ok(), "{r:?}");
        if r.is_ok() {
            self.record(|| Event::State { to });
        }
    }

    /// The batching settings this batcher was built with.
    pub fn config(&self) -> &BatchConfig {
        &self.config
    }
    /// Where the batcher is in its lifecycle.
    pub fn state(&self) -> State {
        self.lifecycle.state()
    }
    /// How many requests are waiting for a batch (not counting the running ones).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
    /// A generate is running (or abandoned but not yet returned).
    pub fn generate_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }
    /// How many generates are out (running, or abandoned but not yet returned): at most
    /// `max_in_flight`.
    pub fn generates_in_flight(&self) -> usize {
        self.in_flight.len()
    }
    /// Nothing queued, nothing running, no outcome undelivered.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_empty() && self.outcomes.is_empty()
    }

    /// Takes new batching settings (a `[matrix]` run changes them between benchmarks, in one
    /// engine start). Only while idle: a queued request was admitted under the old settings, and
    /// a running batch was sized by them, so changing them then would mix two settings in one
    /// measurement. Refused otherwise with [`ConfigError::Busy`], changing nothing.
    pub fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError> {
        if !self.is_idle() {
            return Err(ConfigError::Busy { queued: self.queue.len(), running: !self.in_flight.is_empty() });
        }
        self.config = config;
        Ok(())
    }

    // ---- lifecycle -------------------------------------------------------------------------

    /// Created → Starting. Returns `false` (and changes nothing) in any other state, so concurrent
    /// callers can race on it and exactly one wins: start is single-flight.
    pub fn begin_start(&mut self) -> bool {
        if self.state() != State::Created {
            return false;
        }
        self.set_state(State::Starting);
        true
    }

    /// Why the engine is unusable, once it is.
    pub fn failure(&self) -> Option<&RequestError> {
        self.failure.as_ref()
    }

    /// The engine load ended. After a death or abort reported during the load, the engine is
    /// failed whatever the result.
    pub fn handle_start_result(&mut self, result: Result<EngineInfo, EngineError>, now: Timestamp) {
        let draining = match self.state() {
            State::Starting => false,
            State::StartingThenDrain => true,
            _ => return,
        };
        if let Some(error) = self.failure.clone() {
            self.fail_engine(error, now);
            return;
        }
        match result {
            Ok(_) => self.set_state(if draining { State::Draining } else { State::Ready }),
            Err(e) => {
                let message = match e {
                    EngineError::Start(m) => m,
                    other => other.to_string(),
                };
                self.fail_engine(RequestError::StartFailed(message), now);
            }
        }
    }

    /// Stop admitting. Pending requests are still dispatched; then the engine is shut down.
    /// Harmless when repeated.
    pub fn begin_shutdown(&mut self, _now: Timestamp) {
        let to = match self.state() {
            State::Created => State::Stopped,
            // Drains once the load ends.
            State::Starting => State::StartingThenDrain,
            State::Ready => State::Draining,
            State::Failed => State::FailedClosing,
            State::StartingThenDrain | State::Draining | State::FailedClosing | State::Stopped => return,
        };
        self.set_state(to);
    }

    /// True exactly once: when the driver must call the engine's shutdown now. That is after
    /// shutdown was requested of a started engine, nothing is queued and no generate is running
    /// (every generate given out has returned, however many were in flight). A dead engine's
    /// shutdown is still called if and when no generate is stuck in it (it releases what is left
    /// of the engine); while one is stuck, never.
    #[must_use]
    pub fn poll_engine_shutdown(&mut self) -> bool {
        let due = !self.engine_shutdown_issued
            && self.in_flight.is_empty()
            && self.queue.is_empty()
            && matches!(self.state(), State::Draining | State::FailedClosing);
        if due {
            self.engine_shutdown_issued = true;
            self.record(|| Event::EngineShutdown);
        }
        due
    }

    /// The engine's shutdown returned (its error, if any, is the driver's to report).
    pub fn handle_engine_shutdown_done(&mut self) {
        if self.engine_shutdown_issued && self.state() != State::Stopped {
            self.set_state(State::Stopped);
        }
    }

    /// The engine died (reported by a process watcher, on any thread, or by a generate that
    /// returned [`EngineError::Died`]). Every running batch and every queued request fail with
    /// [`RequestError::EngineDied`]; every later submit is rejected with it. The generates still
    /// running are abandoned: their results, should they ever come, are discarded, and the
    /// engine's shutdown waits for them. Harmless when repeated, after another failure or after
    /// shutdown.
    pub fn handle_engine_died(&mut self, death: EngineDeath, now: Timestamp) {
        self.fail_for_good(RequestError::EngineDied(death), now);
    }

    /// The user interrupted a run whose generate may never return (the first Ctrl-C): every running
    /// batch and every queued request fail with [`RequestError::Aborted`], and the engine is
    /// unusable, as after a death. A driver may then stop as soon as [`is_wedged`](Self::is_wedged).
    /// Harmless when repeated, after a failure or after shutdown.
    pub fn abort_in_flight(&mut self, now: Timestamp) {
        self.fail_for_good(RequestError::Aborted, now);
    }

    /// A death or an abort: the engine can never serve again.
    fn fail_for_good(&mut self, error: RequestError, now: Timestamp) {
        match self.state() {
            // Nothing was loaded, so there is nothing to release.
            State::Created => {
                self.record(|| Event::EngineFailed { at: now.as_nanos(), error: error.to_string() });
                self.failure = Some(error);
                self.set_state(State::Stopped);
            }
            // The load is still running: fail what waits now, the state follows when it returns.
            State::Starting | State::StartingThenDrain if self.failure.is_none() => {
                self.fail_queue(&error, now);
                self.failure = Some(error);
            }
            State::Ready | State::Draining => {
                self.abandon_in_flight(&error, now);
                self.fail_engine(error, now);
            }
            State::Starting | State::StartingThenDrain | State::Failed | State::FailedClosing | State::Stopped => {
                if self.refines_failure(&error) {
                    // The engine said it was dead before the watch saw which process died: the
                    // process's own end is the cause to report (what failed already keeps its
                    // error).
                    tracing::error!(cause = %error, "the engine's death, by its process");
                    self.failure = Some(error);
                } else {
                    tracing::debug!(cause = %error, state = ?self.state(), "engine already unusable or stopped");
                }
            }
        }
    }

    /// Whether `error` names the cause of the current failure better: a process's death (with
    /// its pid, from a process watch) after a death the engine reported itself (an exception
    /// saying it is dead, which names no process).
    fn refines_failure(&self, error: &RequestError) -> bool {
        matches!(
            (&self.failure, error),
            (Some(RequestError::EngineDied(known)), RequestError::EngineDied(seen))
                if known.pid.is_none() && seen.pid.is_some()
        )
    }

    /// Fails the waiters of every running batch now, in dispatch order; their generates' results
    /// will be discarded.
    fn abandon_in_flight(&mut self, error: &RequestError, now: Timestamp) {
        for i in 0..self.in_flight.len() {
            self.abandon(i, error, now);
        }
    }

    /// Fails the waiters of the running batch at `index` of `in_flight` now (unless it was
    /// abandoned already); its generate's result will be discarded.
    fn abandon(&mut self, index: usize, error: &RequestError, now: Timestamp) {
        let Some(f) = self.in_flight.get_mut(index).filter(|f| !f.abandoned) else { return };
        f.abandoned = true;
        let batch_id = f.batch_id;
        let members = std::mem::take(&mut f.members);
        tracing::error!(batch_id, batch_size = members.len(), cause = %error, "batch failed");
        self.record(|| Event::BatchFailed { at: now.as_nanos(), batch: batch_id, error: error.to_string() });
        for (id, _) in members {
            self.outcomes.push_back((id, Err(error.clone())));
        }
    }

    fn fail_queue(&mut self, error: &RequestError, now: Timestamp) {
        while let Some(q) = self.queue.pop_front() {
            self.outcomes.push_back((q.request.id, Err(error.clone())));
        }
        self.record(|| Event::EngineFailed { at: now.as_nanos(), error: error.to_string() });
    }

    /// The engine is unusable: fail what is queued and reject everything from now on.
    fn fail_engine(&mut self, error: RequestError, now: Timestamp) {
        let to = if self.state().shutdown_requested() { State::FailedClosing } else { State::Failed };
        self.set_state(to);
        // A death or abort during the load already failed the queue (and recorded it).
        if self.failure.is_none() {
            self.fail_queue(&error, now);
        }
        self.failure = Some(error);
    }

    // ---- requests --------------------------------------------------------------------------

    /// Admit a request, numbered here: returns the id its outcome will carry. Every submit, admitted
    /// or not, takes the next id (0, 1, 2, ...), so ids never repeat, in the outcomes or in the
    /// [`Event`]s, and a driver's `k`-th submit is request `k`. A rejection is returned here and
    /// produces no outcome.
    pub fn submit(&mut self, request: EngineRequest<()>, now: Timestamp) -> Result<RequestId, RequestError> {
        let rejection = match (self.state(), &self.failure) {
            (_, Some(failure)) => Some(failure.clone()),
            (State::Starting | State::Ready, None) => None,
            (State::Created, None) => Some(RequestError::EngineNotStarted),
            (State::StartingThenDrain | State::Draining | State::Stopped, None) => Some(RequestError::ShuttingDown),
            (State::Failed | State::FailedClosing, None) => Some(RequestError::EngineFailed("unknown".into())),
        };
        let id = self.next_request_id;
        self.next_request_id += 1;
        if let Some(error) = rejection {
            self.record(|| Event::Rejected { at: now.as_nanos(), id, error: error.to_string() });
            return Err(error);
        }
        self.record(|| Event::Submitted { at: now.as_nanos(), id });
        self.queue.push_back(Queued { request: request.with_id(id), submitted_at: now });
        Ok(id)
    }

    /// The caller gave up on `id`. A queued request is removed and gets a `Cancelled` outcome;
    /// a dispatched one cannot be recalled (returns `false`).
    pub fn cancel(&mut self, id: RequestId, now: Timestamp) -> bool {
        let Some(pos) = self.queue.iter().position(|q| q.request.id == id) else {
            return false;
        };
        self.queue.remove(pos);
        self.record(|| Event::Cancelled { at: now.as_nanos(), id });
        self.outcomes.push_back((id, Err(RequestError::Cancelled)));
        true
    }

    /// When the driver must call [`handle_timeout`](Self::handle_timeout) and poll again: the
    /// earlier of [`dispatch_deadline`](Self::dispatch_deadline) and
    /// [`watchdog_deadline`](Self::watchdog_deadline). A time at or before the driver's `now`
    /// means at once.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match (self.dispatch_deadline(), self.watchdog_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When [`poll_dispatch`](Self::poll_dispatch) gives the next batch, if nothing else happens
    /// first: `None` while `max_in_flight` generates are out, the engine is not ready or nothing
    /// is queued. Otherwise the earliest of: the oldest request's arrival plus `batch_timeout`;
    /// the arrival that filled a batch; and, while draining, the oldest arrival. The last two are
    /// in the past, which tells the driver "now". So `poll_dispatch(now)` returns a batch exactly
    /// when this is `Some(t)` with `t <= now`, and a driver never needs to know the dispatch rules.
    pub fn dispatch_deadline(&self) -> Option<Timestamp> {
        if !self.slot_free() {
            return None;
        }
        let oldest = self.queue.front()?.submitted_at;
        match self.state() {
            State::Draining => Some(oldest),
            State::Ready => {
                let timed_out = oldest.saturating_add(self.config.batch_timeout);
                let filled = self.queue.get(self.config.batch_size - 1).map(|q| q.submitted_at);
                Some(filled.map_or(timed_out, |f| f.min(timed_out)))
            }
            _ => None,
        }
    }

    /// Fewer than `max_in_flight` generates are out: another batch may go.
    fn slot_free(&self) -> bool {
        self.in_flight.len() < self.config.max_in_flight
    }

    /// Every one of the `max_in_flight` slots is held by an abandoned generate: no batch can leave
    /// the queue until one of them returns, which it may never do.
    fn every_slot_abandoned(&self) -> bool {
        !self.slot_free() && self.in_flight.iter().all(|f| f.abandoned)
    }

    /// The deadlines `generate_timeout` enforces while generates run: each running generate's own
    /// (the timeout is per batch), and, while every slot is held by an abandoned generate, the
    /// oldest queued request's (nobody waits longer than `generate_timeout` for an engine that
    /// does not come back). Then the stall deadline.
    pub fn watchdog_deadline(&self) -> Option<Timestamp> {
        let generate = self.config.generate_timeout.and_then(|limit| {
            let running =
                self.in_flight.iter().filter(|f| !f.abandoned).map(|f| f.dispatched_at.saturating_add(limit)).min();
            let queued = match self.every_slot_abandoned() {
                true => self.queue.front().map(|q| q.submitted_at.saturating_add(limit)),
                false => None,
            };
            earliest(running, queued)
        });
        earliest(generate, self.stall_deadline())
    }

    /// The running generate the stall watch judges: the one in flight, with `max_in_flight = 1`.
    /// With several in flight there is none: see "Several batches in flight" in the module docs.
    fn stall_watched(&self) -> Option<&InFlight> {
        if self.config.max_in_flight > 1 && !self.engine_runs_here {
            return None;
        }
        self.in_flight.iter().find(|f| !f.abandoned)
    }

    /// The watched generate's last sign of life: its own (its dispatch, a busy CPU sample), or
    /// any generate's result since.
    fn last_progress(&self, f: &InFlight) -> Timestamp {
        self.last_result_at.map_or(f.last_progress, |r| r.max(f.last_progress))
    }

    /// When the running generate counts as stalled if no sign of life comes first: its last
    /// progress plus [`BatchConfig::stall_limit`]. `None` without a stall timeout, when no
    /// generate runs (or it was abandoned), or with `max_in_flight > 1` on an engine that does not
    /// run here.
    pub fn stall_deadline(&self) -> Option<Timestamp> {
        let f = self.stall_watched()?;
        let limit = self.config.stall_limit(self.longest_generate)?;
        Some(self.last_progress(f).saturating_add(limit))
    }

    /// The batch whose generate runs and is watched for a stall: the driver samples the engine's
    /// CPU time while this is `Some` and reports it with
    /// [`handle_cpu_sample`](Self::handle_cpu_sample). Always `None` with `max_in_flight > 1`,
    /// unless the engine runs here: then the oldest running generate.
    pub fn stall_watched_batch(&self) -> Option<BatchId> {
        self.config.stall_timeout?;
        self.stall_watched().map(|f| f.batch_id)
    }

    /// The engine's CPU time (its processes', its engine thread's) was `cpu` at `now`, while
    /// `batch_id` ran. The engine was busy, which is progress and moves the stall deadline, when
    /// its CPU time since the baseline grew by at least [`BUSY_CPU_SHARE`] of the time passed:
    /// the baseline then moves to this sample. The first sample of a generate only sets the
    /// baseline; a sample of a batch not watched is ignored.
    pub fn handle_cpu_sample(&mut self, batch_id: BatchId, cpu: Duration, now: Timestamp) {
        let watched = self.stall_watched().map(|f| f.batch_id);
        if watched != Some(batch_id) {
            return;
        }
        let Some(f) = self.in_flight.iter_mut().find(|f| f.batch_id == batch_id) else { return };
        let Some((base_cpu, base_at)) = f.cpu_baseline else {
            f.cpu_baseline = Some((cpu, now));
            return;
        };
        let used = cpu.saturating_sub(base_cpu);
        let busy =
            !used.is_zero() && used.as_secs_f64() >= now.saturating_since(base_at).as_secs_f64() * BUSY_CPU_SHARE;
        if busy {
            f.last_progress = f.last_progress.max(now);
            f.cpu_baseline = Some((cpu, now));
        }
    }

    /// Generates are out and every one of them was abandoned (it overran `generate_timeout`, or
    /// the engine died or was aborted under it): none has returned.
    pub fn engine_unresponsive(&self) -> bool {
        !self.in_flight.is_empty() && self.in_flight.iter().all(|f| f.abandoned)
    }

    /// Shutdown was requested, every request has its outcome, and the engine is stuck inside
    /// abandoned generates (every one still out), or inside a load during which a death or abort
    /// was reported: nothing more can happen until (unless) one returns, so a driver may stop
    /// waiting for it.
    pub fn is_wedged(&self) -> bool {
        let start_stuck = self.state() == State::StartingThenDrain && self.failure.is_some();
        self.state().shutdown_requested() && self.queue.is_empty() && (self.engine_unresponsive() || start_stuck)
    }

    /// Time passed. A generate past its [`stall_deadline`](Self::stall_deadline) (no progress for
    /// the stall limit) makes the engine unusable, as a death does: its batch, the queue and every
    /// later submit fail with [`RequestError::EngineStalled`]. Each generate that overran
    /// `generate_timeout` fails its own batch (the engine stays inside it: its slot is not free
    /// until it returns). While every slot is held by such a generate, queued requests that waited
    /// `generate_timeout` fail too. Partial batches whose `batch_timeout` passed are then returned
    /// by `poll_dispatch`.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if let Some(deadline) = self.stall_deadline()
            && now >= deadline
            && let Some(f) = self.stall_watched()
        {
            let error = RequestError::EngineStalled {
                batch_id: f.batch_id,
                batch_size: f.members.len(),
                stalled_for: now.saturating_since(self.last_progress(f)),
            };
            self.fail_for_good(error, now);
            return;
        }
        let Some(limit) = self.config.generate_timeout else { return };
        for i in 0..self.in_flight.len() {
            let f = &self.in_flight[i];
            if !f.abandoned && now >= f.dispatched_at.saturating_add(limit) {
                let error =
                    RequestError::GenerateTimedOut { batch_id: f.batch_id, batch_size: f.members.len(), after: limit };
                self.abandon(i, &error, now);
            }
        }
        if !self.every_slot_abandoned() {
            return;
        }
        while let Some(q) = self.queue.front() {
            let waited = now.saturating_since(q.submitted_at);
            if waited < limit {
                break;
            }
            let id = q.request.id;
            self.queue.pop_front();
            self.outcomes.push_back((id, Err(RequestError::EngineUnresponsive { waited })));
        }
    }

    /// The next batch to run, if one is due at `now` and fewer than `max_in_flight` are out. A
    /// driver calls it until it returns `None`: with `max_in_flight > 1`, several may be due at once.
    #[must_use]
    pub fn poll_dispatch(&mut self, now: Timestamp) -> Option<Batch> {
        if !self.slot_free() || self.queue.is_empty() {
            return None;
        }
        let reason = match self.state() {
            State::Ready | State::Draining if self.queue.len() >= self.config.batch_size => FlushReason::Full,
            State::Draining => FlushReason::Drain,
            State::Ready => {
                let oldest = self.queue.front()?.submitted_at;
                if now < oldest.saturating_add(self.config.batch_timeout) {
                    return None;
                }
                FlushReason::Timeout
            }
            _ => return None,
        };
        let n = self.queue.len().min(self.config.batch_size);
        let mut requests = Vec::with_capacity(n);
        let mut members = Vec::with_capacity(n);
        for q in self.queue.drain(..n) {
            members.push((q.request.id, q.submitted_at));
            requests.push(q.request);
        }
        let id = self.next_batch_id;
        self.next_batch_id += 1;
        self.record(|| Event::Dispatched {
            at: now.as_nanos(),
            batch: id,
            ids: members.iter().map(|m| m.0).collect(),
            reason,
        });
        self.in_flight.push(InFlight {
            batch_id: id,
            members,
            dispatched_at: now,
            abandoned: false,
            last_progress: now,
            cpu_baseline: None,
        });
        Some(Batch { id, requests, reason, dispatched_at: now })
    }

    /// The generate for `batch_id` returned (or failed, or panicked). Fans out one outcome to
    /// every request of that batch, whichever of the batches in flight it is and in whatever order
    /// they return. A result for a batch that is not in flight is ignored.
    pub fn handle_generate_result(&mut self, batch_id: BatchId, result: GenerateResult, now: Timestamp) {
        let Some(at) = self.in_flight.iter().position(|f| f.batch_id == batch_id) else { return };
        let f = self.in_flight.remove(at);
        self.last_result_at = Some(self.last_result_at.map_or(now, |r| r.max(now)));
        if f.abandoned {
            let late = now.saturating_since(f.dispatched_at);
            if self.failure.is_some() {
                tracing::warn!(batch_id, ?late, "the unusable engine returned from an abandoned generate");
            } else {
                tracing::warn!(batch_id, ?late, "the engine returned from an abandoned generate; batching resumes");
            }
            return;
        }
        self.longest_generate = self.longest_generate.max(now.saturating_since(f.dispatched_at));
        let batch_size = f.members.len();
        let failure = match result {
            GenerateResult::Outputs(outputs) => match match_outputs(batch_id, &f.members, outputs) {
                Ok(matched) => {
                    self.record(|| Event::BatchCompleted { at: now.as_nanos(), batch: batch_id });
                    for ((id, submitted), mut output) in f.members.iter().zip(matched) {
                        // A request that failed alone (one of an HTTP batch's several requests).
                        if let Some(error) = output.failure.take() {
                            self.outcomes.push_back((*id, Err(RequestError::Remote { batch_id, batch_size, error })));
                            continue;
                        }
                        let times = RequestTimes { submitted: *submitted, dispatched: f.dispatched_at, completed: now };
                        self.outcomes.push_back((*id, Ok(Completion { output, times, batch_id, batch_size })));
                    }
                    return;
                }
                Err(e) => e,
            },
            GenerateResult::Error(EngineError::Died(death)) => RequestError::EngineDied(death),
            GenerateResult::Error(EngineError::Remote(error)) => RequestError::Remote { batch_id, batch_size, error },
            GenerateResult::Error(e) => RequestError::Engine { batch_id, batch_size, message: e.to_string() },
            GenerateResult::Panicked(message) => RequestError::EnginePanicked { batch_id, batch_size, message },
        };
        tracing::error!(batch_id, batch_size, cause = %failure, "batch failed");
        self.record(|| Event::BatchFailed { at: now.as_nanos(), batch: batch_id, error: failure.to_string() });
        for (id, _) in f.members {
            self.outcomes.push_back((id, Err(failure.clone())));
        }
        if matches!(failure, RequestError::EngineDied(_)) {
            self.fail_for_good(failure, now);
        }
    }

    /// The next request outcome to deliver.
    #[must_use]
    pub fn poll_outcome(&mut self) -> Option<(RequestId, Outcome)> {
        self.outcomes.pop_front()
    }
}

/// The earlier of two optional times; `None` only when both are.
fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Outputs in request order. By id when every output has one, else by position when none has;
/// anything else fails the whole batch: an output is never given to the wrong request.
fn match_outputs(
    batch_id: BatchId,
    members: &[(RequestId, Timestamp)],
    outputs: Vec<EngineOutput>,
) -> Result<Vec<EngineOutput>, RequestError> {
    if outputs.len() != members.len() {
        return Err(RequestError::OutputCountMismatch { batch_id, expected: members.len(), got: outputs.len() });
    }
    let with_ids = outputs.iter().filter(|o| o.request_id.is_some()).count();
    if with_ids == 0 {
        return Ok(outputs);
    }
    if with_ids != outputs.len() {
        return Err(RequestError::OutputIdMismatch {
            batch_id,
            detail: format!("{with_ids} of {} outputs carry a request id", outputs.len()),
        });
    }
    // Fast path: engines such as vLLM return outputs in input order.
    if outputs.iter().zip(members).all(|(o, m)| o.request_id == Some(m.0)) {
        return Ok(outputs);
    }
    let mut slots: Vec<Option<EngineOutput>> = (0..members.len()).map(|_| None).collect();
    let index: std::collections::HashMap<RequestId, usize> =
        members.iter().enumerate().map(|(i, m)| (m.0, i)).collect();
    for o in outputs {
        let id = o.request_id.unwrap_or_default();
        let Some(&i) = index.get(&id) else {
            return Err(RequestError::OutputIdMismatch {
                batch_id,
                detail: format!("output for unknown request {id}"),
            });
        };
        if slots[i].is_some() {
            return Err(RequestError::OutputIdMismatch { batch_id, detail: format!("two outputs for request {id}") });
        }
        slots[i] = Some(o);
    }
    // Equal counts and no duplicates: every slot is filled.
    slots
        .into_iter()
        .map(|s| s.ok_or_else(|| RequestError::OutputIdMismatch { batch_id, detail: "a request got no output".into() }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    /// A started core (batch_size 3, batch_timeout 10 ms) with requests arriving at `arrivals` ms,
    /// then `then` applied at the last arrival: its dispatch deadline must be `expected` ms, and
    /// `poll_dispatch` must give a batch at the deadline and not a moment before.
    fn check(arrivals: &[u64], then: impl FnOnce(&mut BatcherCore, Timestamp), expected: Option<u64>) {
        let mut core = BatcherCore::new(BatchConfig::new(3, Duration::from_millis(10)).unwrap());
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        for (i, &t) in arrivals.iter().enumerate() {
            assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(t)), Ok(i as u64), "ids count submits");
        }
        let last = at(arrivals.last().copied().unwrap_or(0));
        then(&mut core, last);
        let deadline = core.dispatch_deadline();
        assert_eq!(deadline, expected.map(at), "arrivals {arrivals:?}");
        assert_eq!(core.poll_timeout(), deadline, "no generate timeout: the dispatch deadline is the timeout");
        if let Some(d) = deadline.filter(|&d| d > last) {
            assert_eq!(core.poll_dispatch(Timestamp::from_nanos(d.as_nanos() - 1)), None, "dispatched before {d:?}");
        }
        if let Some(d) = deadline {
            assert!(core.poll_dispatch(d.max(last)).is_some(), "nothing dispatched at the deadline {d:?}");
        }
    }

    fn nothing(_: &mut BatcherCore, _: Timestamp) {}

    #[test]
    fn dispatch_deadline_says_when_and_now_means_now() {
        check(&[], nothing, None);
        // A partial batch waits batch_timeout after its oldest request.
        check(&[5], nothing, Some(15));
        check(&[5, 6], nothing, Some(15));
        // A full batch is due since it filled: in the past, that is, now.
        check(&[5, 6, 7], nothing, Some(7));
        check(&[5, 6, 7, 8], nothing, Some(7));
        // ... unless its oldest request timed out even earlier.
        check(&[1, 2, 30], nothing, Some(11));
        // Draining: due at once, full or not.
        check(&[5], |c, now| c.begin_shutdown(now), Some(5));
        check(&[5, 6, 7, 8], |c, now| c.begin_shutdown(now), Some(5));
        // Nothing is due while a generate runs, or once the engine is unusable.
        check(
            &[5, 6, 7, 8],
            |c, now| {
                let _batch = c.poll_dispatch(now).expect("full");
            },
            None,
        );
        check(&[5], |c, now| c.handle_engine_died(death(), now), None);
        check(&[5], |c, now| c.abort_in_flight(now), None);
    }

    fn death() -> EngineDeath {
        EngineDeath { process: "VLLM::EngineCore".into(), pid: Some(7), status: "killed by SIGKILL".into() }
    }

    #[test]
    fn death_fails_everything_once_and_rejects_later_submits() {
        let mut core = BatcherCore::new(BatchConfig::new(2, Duration::from_millis(10)).unwrap());
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        for _ in 0..3 {
            core.submit(EngineRequest::tokens(vec![1], 1), at(1)).unwrap();
        }
        let batch = core.poll_dispatch(at(1)).expect("a full batch");
        core.handle_engine_died(death(), at(2));
        core.handle_engine_died(death(), at(3));
        core.abort_in_flight(at(3));
        let died = RequestError::EngineDied(death());
        let outcomes: Vec<_> = std::iter::from_fn(|| core.poll_outcome()).collect();
        assert_eq!(outcomes, [(0, Err(died.clone())), (1, Err(died.clone())), (2, Err(died.clone()))]);
        assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(4)), Err(died.clone()));
        assert_eq!(core.state(), State::Failed);
        // Shutdown needs nothing from the stuck generate, and never shuts the engine down under it.
        core.begin_shutdown(at(5));
        assert!(core.is_wedged());
        assert!(!core.poll_engine_shutdown());
        // Should the generate ever return, its result is discarded and the engine is released.
        core.handle_generate_result(batch.id, GenerateResult::Outputs(Vec::new()), at(6));
        assert_eq!(core.poll_outcome(), None);
        assert!(core.poll_engine_shutdown());
        core.handle_engine_shutdown_done();
        assert_eq!(core.state(), State::Stopped);
        assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(7)), Err(died));
    }

    /// An engine that raised "dead" (no process named) before the process watch saw its worker
    /// die: the failed batch keeps the engine's error, and the watch's death, which names the
    /// process, becomes the failure later submits get. Never the other way round.
    #[test]
    fn a_process_death_names_the_cause_of_an_engines_own_death() {
        let mut core = BatcherCore::new(BatchConfig::new(1, Duration::from_millis(10)).unwrap());
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        core.submit(EngineRequest::tokens(vec![1], 1), at(1)).unwrap();
        let batch = core.poll_dispatch(at(1)).expect("a full batch");
        let raised = EngineDeath { process: "VllmEngine".into(), pid: None, status: "raised EngineDeadError".into() };
        core.handle_generate_result(batch.id, GenerateResult::Error(EngineError::Died(raised.clone())), at(2));
        assert_eq!(core.poll_outcome(), Some((0, Err(RequestError::EngineDied(raised.clone())))));
        core.handle_engine_died(death(), at(3));
        assert_eq!(core.poll_outcome(), None, "what failed keeps its error");
        assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(4)), Err(RequestError::EngineDied(death())));
        // A later unnamed death, or another process's, changes nothing.
        core.handle_engine_died(raised, at(5));
        let other = EngineDeath { pid: Some(8), ..death() };
        core.handle_engine_died(other, at(5));
        assert_eq!(core.failure(), Some(&RequestError::EngineDied(death())));
    }

    /// The core names every request: each submit, admitted or not, gets the next id, and a
    /// cancel, a reconfigure or a failure never makes one come back.
    #[test]
    fn the_core_numbers_every_submit_and_never_repeats_an_id() {
        let mut core = BatcherCore::new(BatchConfig::new(2, Duration::from_millis(10)).unwrap()).with_events();
        let submit = |core: &mut BatcherCore, t| core.submit(EngineRequest::tokens(vec![1], 1), at(t));
        assert_eq!(submit(&mut core, 0), Err(RequestError::EngineNotStarted));
        assert!(core.begin_start());
        assert_eq!(submit(&mut core, 0), Ok(1), "a rejected submit used id 0");
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        assert_eq!(submit(&mut core, 1), Ok(2));
        let batch = core.poll_dispatch(at(1)).expect("a full batch");
        assert_eq!(batch.requests.iter().map(|r| r.id).collect::<Vec<_>>(), [1, 2], "the engine sees the core's ids");
        assert_eq!(submit(&mut core, 2), Ok(3));
        assert!(core.cancel(3, at(2)));
        core.handle_generate_result(batch.id, GenerateResult::Outputs(Vec::new()), at(3));
        while core.poll_outcome().is_some() {}
        core.reconfigure(BatchConfig::new(4, Duration::from_millis(10)).unwrap()).unwrap();
        assert_eq!(submit(&mut core, 4), Ok(4), "a cancelled id is not given again");
        core.handle_engine_died(death(), at(5));
        assert!(submit(&mut core, 6).is_err());
        let mut named = Vec::new();
        for event in core.take_events() {
            if let Event::Submitted { id, .. } | Event::Rejected { id, .. } = event {
                named.push(id);
            }
        }
        assert_eq!(named, [0, 1, 2, 3, 4, 5], "every submit named once, in order");
    }

    /// A started core with batch_size 2 and a stall timeout of 1 s.
    fn stall_watched() -> BatcherCore {
        let config = BatchConfig::new(2, Duration::from_millis(10))
            .and_then(|c| c.with_stall_timeout(Some(Duration::from_secs(1))))
            .unwrap();
        let mut core = BatcherCore::new(config);
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        core
    }

    #[test]
    fn a_generate_without_progress_stalls_the_engine_for_good() {
        let mut core = stall_watched();
        for _ in 0..3 {
            core.submit(EngineRequest::tokens(vec![1], 1), at(0)).unwrap();
        }
        assert_eq!(core.stall_watched_batch(), None, "nothing runs");
        let batch = core.poll_dispatch(at(0)).expect("a full batch");
        assert_eq!(core.stall_watched_batch(), Some(batch.id));
        assert_eq!(core.stall_deadline(), Some(at(1000)), "the dispatch is the first sign of life");
        assert_eq!(core.poll_timeout(), Some(at(1000)), "the driver is woken for it");
        // The first sample of a generate is its baseline; only a busy engine (CPU time grown by a
        // tenth of the time passed) makes progress.
        let cpu = Duration::from_millis;
        core.handle_cpu_sample(batch.id, cpu(5), at(100));
        assert_eq!(core.stall_deadline(), Some(at(1000)));
        core.handle_cpu_sample(batch.id, cpu(60), at(500));
        assert_eq!(core.stall_deadline(), Some(at(1500)), "55 ms of CPU in 400 ms is busy: progress at 500 ms");
        core.handle_cpu_sample(batch.id, cpu(66), at(900));
        assert_eq!(core.stall_deadline(), Some(at(1500)), "6 ms in 400 ms is a poller waiting, not work");
        core.handle_cpu_sample(batch.id, cpu(66), at(1400));
        core.handle_cpu_sample(batch.id + 1, cpu(900), at(1450));
        assert_eq!(core.stall_deadline(), Some(at(1500)), "flat CPU time, or another batch's, is no progress");
        core.handle_timeout(at(1499));
        assert_eq!(core.poll_outcome(), None, "not stalled a moment early");
        core.handle_timeout(at(1500));
        let stalled =
            RequestError::EngineStalled { batch_id: batch.id, batch_size: 2, stalled_for: Duration::from_secs(1) };
        let outcomes: Vec<_> = std::iter::from_fn(|| core.poll_outcome()).collect();
        assert_eq!(outcomes, [(0, Err(stalled.clone())), (1, Err(stalled.clone())), (2, Err(stalled.clone()))]);
        assert_eq!(stalled.kind(), "engine_stalled");
        assert!(stalled.engine_unusable());
        assert_eq!(core.state(), State::Failed, "a frozen engine is not used again");
        assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(1600)), Err(stalled));
        assert_eq!((core.stall_deadline(), core.stall_watched_batch()), (None, None), "the generate is abandoned");
        // Should the frozen generate return (a SIGCONT), its result is discarded.
        core.handle_generate_result(batch.id, GenerateResult::Outputs(Vec::new()), at(2000));
        assert_eq!(core.poll_outcome(), None);
    }

    #[test]
    fn the_stall_limit_is_the_floor_or_a_multiple_of_the_longest_generate() {
        let mut core = stall_watched();
        for _ in 0..2 {
            core.submit(EngineRequest::tokens(vec![1], 1), at(0)).unwrap();
        }
        let first = core.poll_dispatch(at(0)).expect("a full batch");
        let outputs = vec![EngineOutput::new(None, crate::engine::FinishReason::Length); 2];
        core.handle_generate_result(first.id, GenerateResult::Outputs(outputs), at(600));
        while core.poll_outcome().is_some() {}
        for _ in 0..2 {
            core.submit(EngineRequest::tokens(vec![1], 1), at(700)).unwrap();
        }
        let _second = core.poll_dispatch(at(700)).expect("a full batch");
        // 4 × 600 ms is longer than the 1 s floor.
        assert_eq!(core.stall_deadline(), Some(at(700 + 2400)));
        let config = core.config().clone();
        assert_eq!(config.stall_limit(Duration::from_millis(100)), Some(Duration::from_secs(1)), "the floor");
        assert_eq!(BatchConfig::default().stall_limit(Duration::from_secs(9)), None, "no stall timeout, no limit");
        assert_eq!(BatchConfig::default().with_stall_timeout(Some(Duration::ZERO)), Err(ConfigError::ZeroStallTimeout));
    }

    #[test]
    fn real_engine_defaults_fill_only_what_is_unset() {
        let d = BatchConfig::default().with_real_engine_defaults();
        assert_eq!(d.generate_timeout(), Some(REAL_ENGINE_GENERATE_TIMEOUT));
        assert_eq!(d.stall_timeout(), Some(REAL_ENGINE_STALL_TIMEOUT));
        let set = BatchConfig::default()
            .with_stall_timeout(Some(Duration::from_secs(2)))
            .unwrap()
            .with_real_engine_defaults();
        assert_eq!(set.stall_timeout(), Some(Duration::from_secs(2)));
    }

    /// A started core with batch_size 2, a long batch timeout, `max_in_flight` slots and the given
    /// generate timeout.
    fn several(max_in_flight: usize, generate_timeout: Option<Duration>) -> BatcherCore {
        let config = BatchConfig::new(2, Duration::from_secs(60))
            .and_then(|c| c.with_max_in_flight(max_in_flight))
            .and_then(|c| c.with_generate_timeout(generate_timeout))
            .unwrap();
        let mut core = BatcherCore::new(config).with_events();
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        core
    }

    fn submit_n(core: &mut BatcherCore, n: usize, t: u64) {
        for _ in 0..n {
            core.submit(EngineRequest::tokens(vec![1], 1), at(t)).unwrap();
        }
    }

    fn echo(batch: &Batch) -> GenerateResult {
        let outputs = batch.requests.iter().map(|r| EngineOutput::new(Some(r.id), crate::engine::FinishReason::Length));
        GenerateResult::Outputs(outputs.collect())
    }

    fn outcomes(core: &mut BatcherCore) -> Vec<(RequestId, Outcome)> {
        std::iter::from_fn(|| core.poll_outcome()).collect()
    }

    #[test]
    fn up_to_max_in_flight_batches_go_out_and_return_in_any_order() {
        let mut core = several(2, None);
        submit_n(&mut core, 7, 1);
        let first = core.poll_dispatch(at(1)).expect("a full batch");
        let second = core.poll_dispatch(at(1)).expect("a second full batch: a slot is free");
        assert_eq!((first.reason, second.reason), (FlushReason::Full, FlushReason::Full));
        assert_eq!(core.generates_in_flight(), 2);
        assert_eq!(core.dispatch_deadline(), None, "both slots taken: nothing is due");
        assert_eq!(core.poll_dispatch(at(1)), None, "no third batch beyond max_in_flight");
        // The second batch returns first: its requests, and only they, are answered.
        core.handle_generate_result(second.id, echo(&second), at(5));
        let got = outcomes(&mut core);
        assert_eq!(got.iter().map(|o| o.0).collect::<Vec<_>>(), [2, 3]);
        for (id, outcome) in got {
            let c = outcome.expect("completed");
            assert_eq!((c.output.request_id, c.batch_id, c.batch_size), (Some(id), second.id, 2));
            assert_eq!((c.times.dispatched, c.times.completed), (at(1), at(5)));
        }
        // Its slot is free: the next full batch goes at once, the first still running.
        let third = core.poll_dispatch(at(5)).expect("the freed slot takes the next batch");
        assert_eq!(third.requests.iter().map(|r| r.id).collect::<Vec<_>>(), [4, 5], "the queue's front");
        // A result for a batch that is not in flight (returned already, or never given out) is ignored.
        core.handle_generate_result(second.id, echo(&second), at(6));
        core.handle_generate_result(99, GenerateResult::Outputs(Vec::new()), at(6));
        assert_eq!(outcomes(&mut core), []);
        core.handle_generate_result(first.id, echo(&first), at(7));
        assert_eq!(outcomes(&mut core).iter().map(|o| o.0).collect::<Vec<_>>(), [0, 1]);
        // Shutdown drains the last request as its own batch, then the engine stops once every
        // generate returned.
        core.begin_shutdown(at(8));
        let drained = core.poll_dispatch(at(8)).expect("the drain");
        assert_eq!((drained.reason, drained.requests.len()), (FlushReason::Drain, 1));
        assert!(!core.poll_engine_shutdown(), "two generates are out");
        core.handle_generate_result(drained.id, echo(&drained), at(9));
        assert!(!core.poll_engine_shutdown(), "one generate is out");
        core.handle_generate_result(third.id, GenerateResult::Error(EngineError::Generate("boom".into())), at(10));
        let failed = outcomes(&mut core);
        assert_eq!(failed.len(), 3);
        assert!(matches!(&failed[0], (6, Ok(_))));
        assert!(matches!(&failed[1..], [(4, Err(RequestError::Engine { batch_size: 2, .. })), (5, Err(_))]));
        assert!(core.poll_engine_shutdown());
        core.handle_engine_shutdown_done();
        assert_eq!(core.state(), State::Stopped);
    }

    #[test]
    fn the_generate_timeout_is_per_batch_and_a_stuck_slot_stays_taken() {
        let limit = Duration::from_millis(100);
        let mut core = several(2, Some(limit));
        submit_n(&mut core, 2, 0);
        let a = core.poll_dispatch(at(0)).expect("a");
        submit_n(&mut core, 2, 50);
        let b = core.poll_dispatch(at(50)).expect("b");
        assert_eq!(core.watchdog_deadline(), Some(at(100)), "the oldest generate's own deadline");
        core.handle_timeout(at(100));
        let timed_out = RequestError::GenerateTimedOut { batch_id: a.id, batch_size: 2, after: limit };
        assert_eq!(outcomes(&mut core), [(0, Err(timed_out.clone())), (1, Err(timed_out))], "only batch a fails");
        assert_eq!(core.watchdog_deadline(), Some(at(150)), "b's deadline is its own");
        // a's slot stays taken until its generate returns: no third batch.
        submit_n(&mut core, 2, 120);
        assert_eq!(core.poll_dispatch(at(120)), None);
        core.handle_generate_result(b.id, echo(&b), at(130));
        assert_eq!(outcomes(&mut core).len(), 2, "b completes");
        let c = core.poll_dispatch(at(130)).expect("b's slot takes the next batch");
        submit_n(&mut core, 1, 140);
        core.handle_timeout(at(230));
        assert_eq!(outcomes(&mut core).len(), 2, "c timed out too");
        // Both slots are held by abandoned generates: the queued request fails once it waited
        // generate_timeout, and not a moment before.
        assert!(core.engine_unresponsive());
        assert_eq!(core.watchdog_deadline(), Some(at(240)));
        core.handle_timeout(at(239));
        assert_eq!(outcomes(&mut core), []);
        core.handle_timeout(at(240));
        assert!(matches!(outcomes(&mut core).as_slice(), [(6, Err(RequestError::EngineUnresponsive { .. }))]));
        // A late result of an abandoned batch is discarded and frees its slot.
        core.handle_generate_result(a.id, echo(&a), at(300));
        assert_eq!(outcomes(&mut core), []);
        submit_n(&mut core, 1, 300);
        assert_eq!(core.watchdog_deadline(), None, "a slot is free: the queue moves, no queued deadline");
        core.begin_shutdown(at(300));
        assert!(!core.is_wedged(), "a request is queued");
        let last = core.poll_dispatch(at(300)).expect("the drain takes the free slot");
        assert!(!core.is_wedged(), "the drained batch runs");
        core.handle_generate_result(last.id, echo(&last), at(301));
        assert_eq!(outcomes(&mut core).len(), 1);
        assert!(core.is_wedged(), "everyone is answered; only the abandoned c is out");
        assert!(!core.poll_engine_shutdown(), "c is still out");
        core.handle_generate_result(c.id, echo(&c), at(310));
        assert!(core.poll_engine_shutdown());
    }

    #[test]
    fn death_fails_every_batch_in_flight_and_the_engine_stops_after_the_last_returns() {
        let mut core = several(3, None);
        submit_n(&mut core, 5, 1);
        let batches: Vec<Batch> = std::iter::from_fn(|| core.poll_dispatch(at(1))).collect();
        assert_eq!(batches.len(), 2);
        core.begin_shutdown(at(2));
        let drained = core.poll_dispatch(at(2)).expect("the last request drains into the third slot");
        core.handle_engine_died(death(), at(3));
        let died = RequestError::EngineDied(death());
        assert_eq!(outcomes(&mut core), (0..5).map(|id| (id, Err(died.clone()))).collect::<Vec<_>>());
        assert!(core.is_wedged(), "every generate out is abandoned");
        for (k, batch) in [&batches[1], &drained, &batches[0]].into_iter().enumerate() {
            assert!(!core.poll_engine_shutdown(), "shutdown while {} generates are out", 3 - k);
            core.handle_generate_result(batch.id, echo(batch), at(4 + k as u64));
            assert_eq!(outcomes(&mut core), [], "a late result after the death is discarded");
        }
        assert!(core.poll_engine_shutdown());
        assert!(!core.poll_engine_shutdown(), "once");
    }

    #[test]
    fn the_stall_watch_is_off_with_several_in_flight() {
        let config = BatchConfig::new(1, Duration::from_millis(10))
            .and_then(|c| c.with_stall_timeout(Some(Duration::from_secs(1))))
            .and_then(|c| c.with_max_in_flight(2))
            .unwrap();
        let mut core = BatcherCore::new(config);
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        submit_n(&mut core, 1, 0);
        let batch = core.poll_dispatch(at(0)).expect("a full batch");
        assert_eq!((core.stall_watched_batch(), core.stall_deadline()), (None, None));
        core.handle_cpu_sample(batch.id, Duration::ZERO, at(100));
        core.handle_timeout(at(1_000_000));
        assert_eq!(core.poll_outcome(), None, "a long generate is no stall here");
        assert_eq!(BatchConfig::default().with_max_in_flight(0), Err(ConfigError::ZeroMaxInFlight));
        assert_eq!(BatchConfig::default().max_in_flight(), 1);
    }

    #[test]
    fn an_engine_that_runs_here_is_stall_watched_through_its_oldest_generate_with_several_in_flight() {
        let config = BatchConfig::new(1, Duration::from_millis(10))
            .and_then(|c| c.with_stall_timeout(Some(Duration::from_secs(1))))
            .and_then(|c| c.with_max_in_flight(4))
            .unwrap();
        let mut core = BatcherCore::new(config);
        core.set_engine_runs_here(true);
        assert!(core.begin_start());
        core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
        submit_n(&mut core, 2, 0);
        let first = core.poll_dispatch(at(0)).expect("the first request");
        let second = core.poll_dispatch(at(0)).expect("the second, at once: a slot is free");
        assert_eq!((core.stall_watched_batch(), core.stall_deadline()), (Some(first.id), Some(at(1000))));
        // Another generate's result is the engine's sign of life; the oldest running one is watched.
        core.handle_generate_result(
            first.id,
            GenerateResult::Outputs(vec![EngineOutput::new(Some(0), crate::engine::FinishReason::Length)]),
            at(100),
        );
        assert_eq!(core.poll_outcome().map(|(id, o)| (id, o.is_ok())), Some((0, true)));
        assert_eq!((core.stall_watched_batch(), core.stall_deadline()), (Some(second.id), Some(at(1100))));
        let cpu = Duration::from_millis;
        core.handle_cpu_sample(second.id, cpu(0), at(200));
        core.handle_cpu_sample(second.id, cpu(300), at(700));
        assert_eq!(core.stall_deadline(), Some(at(1700)), "a busy engine is progress");
        core.handle_timeout(at(1699));
        assert_eq!(core.poll_outcome(), None, "not stalled a moment early");
        core.handle_timeout(at(1700));
        let stalled =
            RequestError::EngineStalled { batch_id: second.id, batch_size: 1, stalled_for: Duration::from_secs(1) };
        assert_eq!(core.poll_outcome(), Some((1, Err(stalled))));
        assert_eq!(core.state(), State::Failed);
    }

    #[test]
    fn engine_death_display() {
        assert_eq!(death().to_string(), "VLLM::EngineCore (pid 7) killed by SIGKILL");
        let d = EngineDeath { process: "engine".into(), pid: None, status: "raised EngineDeadError".into() };
        assert_eq!(EngineError::Died(d.clone()).to_string(), "engine died: engine raised EngineDeadError");
        assert_eq!(RequestError::EngineDied(d).kind(), "engine_died");
        assert_eq!(RequestError::Aborted.kind(), "aborted");
    }
}
