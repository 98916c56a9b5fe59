//! The discrete-event driver: the batcher and an engine in virtual time, on one thread.
//!
//! Nothing here sleeps or reads a wall clock. The driver keeps its own `now` and processes events
//! (a due partial batch, a generate deadline, a generate completion) in time order; the engine
//! runs synchronously at dispatch and reports how long it took by advancing the shared
//! [`VirtualClock`]; its completion is then applied at that later time, after any arrivals the
//! caller feeds in between. The same inputs always give the same outputs, byte for byte, and a
//! simulated hour takes milliseconds.
//!
//! One generate at a time: an engine runs here on the caller's thread, synchronously, so
//! `batching.max_in_flight` above 1 (several generates out at once, through a concurrent face the
//! simulator does not have) is refused at [`start`](VirtualTimeBatcher::start) and
//! [`reconfigure`](VirtualTimeBatcher::reconfigure).

use super::engine_call::{catch_engine_panic, panic_message};

use super::core::{BatchConfig, BatchId, BatchRun, BatcherCore, Event, GenerateResult, Outcome};
use super::error::{ConfigError, RequestError};
use super::lifecycle::State;
use crate::engine::{Engine, EngineDeath, EngineError, EngineInfo, EngineRequest, RequestId};
use crate::time::{Clock, Timestamp, VirtualClock};

/// A generate that ran and whose result applies at `at`.
struct Pending {
    at: Timestamp,
    batch_id: BatchId,
    result: GenerateResult,
}

/// The batcher core and an engine driven in virtual time on the caller's thread: see the module docs.
pub struct VirtualTimeBatcher<E> {
    core: BatcherCore,
    engine: E,
    clock: VirtualClock,
    now: Timestamp,
    pending: Option<Pending>,
    batches: Vec<BatchRun>,
    start_info: Option<Result<EngineInfo, EngineError>>,
    engine_shutdown: Option<Result<(), EngineError>>,
    peeked: std::collections::VecDeque<(RequestId, Outcome)>,
}

impl<E: Engine> VirtualTimeBatcher<E> {
    /// `clock` must be the clock the engine sleeps on.
    pub fn new(engine: E, config: BatchConfig, clock: VirtualClock) -> Self {
        let now = clock.now();
        VirtualTimeBatcher {
            core: BatcherCore::new(config),
            engine,
            clock,
            now,
            pending: None,
            batches: Vec::new(),
            start_info: None,
            engine_shutdown: None,
            peeked: std::collections::VecDeque::new(),
        }
    }

    /// Records core [`Event`]s (for traces).
    pub fn with_events(mut self) -> Self {
        self.core = std::mem::replace(&mut self.core, BatcherCore::new(BatchConfig::default())).with_events();
        self
    }

    /// Takes the core events recorded since the last call; empty unless [`with_events`](Self::with_events).
    pub fn take_events(&mut self) -> Vec<Event> {
        self.core.take_events()
    }

    /// The driver's current virtual time.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Where the batcher is in its lifecycle.
    pub fn state(&self) -> State {
        self.core.state()
    }

    /// The engine, for inspecting it after a run.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    /// Batches run since the last call.
    pub fn take_batches(&mut self) -> Vec<BatchRun> {
        std::mem::take(&mut self.batches)
    }

    /// Loads the engine; virtual time advances by however long the load took. With
    /// `max_in_flight > 1` nothing is loaded and the start fails ([`ConfigError::NotConcurrent`]).
    pub fn start(&mut self) -> Result<EngineInfo, EngineError> {
        if let Some(r) = &self.start_info {
            return r.clone();
        }
        if let Some(refusal) = refusal(self.core.config()) {
            let refused = Err(EngineError::Start(refusal.to_string()));
            self.start_info = Some(refused.clone());
            return refused;
        }
        if !self.core.begin_start() {
            return Err(EngineError::Start(format!("cannot start in state {:?}", self.core.state())));
        }
        self.clock.advance_to(self.now);
        // One generate at a time (`max_in_flight` 1, checked above): a concurrent face goes unused.
        let result = catch_engine_panic(|| self.engine.start().map(|started| started.info))
            .unwrap_or_else(|p| Err(EngineError::Start(format!("start panicked: {}", panic_message(&*p)))));
        self.now = self.now.max(self.clock.now());
        self.core.handle_start_result(result.clone(), self.now);
        self.start_info = Some(result.clone());
        result
    }

    /// Submits at the current time; returns the id the core gave the request.
    pub fn submit(&mut self, request: EngineRequest<()>) -> Result<RequestId, RequestError> {
        self.core.submit(request, self.now)
    }

    /// Takes new batching settings while idle (see [`BatcherCore::reconfigure`]); a
    /// `max_in_flight` above 1 is refused.
    pub fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError> {
        match refusal(&config) {
            Some(refusal) => Err(refusal),
            None => self.core.reconfigure(config),
        }
    }

    /// Cancels a queued request at the current time; `false` if it was already dispatched or unknown.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        self.core.cancel(id, self.now)
    }

    /// The engine died (see [`BatcherCore::handle_engine_died`]); outcomes follow at once.
    pub fn engine_died(&mut self, death: EngineDeath) {
        self.core.handle_engine_died(death, self.now);
    }

    /// Abandons the running generate (see [`BatcherCore::abort_in_flight`]).
    pub fn abort_in_flight(&mut self) {
        self.core.abort_in_flight(self.now);
    }

    /// The time of the next internal event, if any: a generate's completion or the core's next
    /// deadline (which says "now" for a full batch or a draining queue).
    pub fn next_event(&mut self) -> Option<Timestamp> {
        let pending = self.pending.as_ref().map(|p| p.at);
        match (pending, self.core.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Processes every internal event at or before `t`, then sets the time to `t`.
    pub fn advance_to(&mut self, t: Timestamp) {
        while let Some(at) = self.next_event().filter(|&at| at <= t) {
            self.now = self.now.max(at);
            self.process_now();
        }
        self.now = self.now.max(t);
    }

    /// Processes events until an outcome is ready or nothing more can happen. Returns whether an
    /// outcome is ready.
    pub fn advance_until_outcome(&mut self) -> bool {
        loop {
            if self.core_has_outcome() {
                return true;
            }
            match self.next_event() {
                Some(at) => {
                    self.now = self.now.max(at);
                    self.process_now();
                }
                None => return self.core_has_outcome(),
            }
        }
    }

    fn core_has_outcome(&mut self) -> bool {
        // poll_outcome is destructive; peek through a one-slot buffer.
        if let Some(o) = self.core.poll_outcome() {
            self.peeked.push_back(o);
        }
        !self.peeked.is_empty()
    }

    /// Everything due at `now`: timeouts, a completion, then a dispatch.
    fn process_now(&mut self) {
        self.core.handle_timeout(self.now);
        if self.pending.as_ref().is_some_and(|p| p.at <= self.now) {
            if let Some(p) = self.pending.take() {
                self.core.handle_generate_result(p.batch_id, p.result, self.now);
            }
        }
        if self.pending.is_none() {
            if let Some(batch) = self.core.poll_dispatch(self.now) {
                self.clock.advance_to(self.now);
                let result = match catch_engine_panic(|| self.engine.generate(&batch.requests)) {
                    Ok(r) => GenerateResult::from(r),
                    Err(p) => GenerateResult::Panicked(panic_message(&*p)),
                };
                let at = self.clock.now().max(self.now);
                self.batches.push(BatchRun {
                    id: batch.id,
                    size: batch.requests.len(),
                    reason: batch.reason,
                    dispatched_at: self.now,
                    returned_at: at,
                    phases: None,
                });
                self.pending = Some(Pending { at, batch_id: batch.id, result });
            }
        }
        if self.core.poll_engine_shutdown() {
            self.clock.advance_to(self.now);
            let r = catch_engine_panic(|| self.engine.shutdown())
                .unwrap_or_else(|p| Err(EngineError::Shutdown(panic_message(&*p))));
            self.now = self.now.max(self.clock.now());
            self.engine_shutdown = Some(r);
            self.core.handle_engine_shutdown_done();
        }
    }

    /// The next outcome, if one is ready.
    #[must_use]
    pub fn poll_outcome(&mut self) -> Option<(RequestId, Outcome)> {
        self.peeked.pop_front().or_else(|| self.core.poll_outcome())
    }

    /// Begins shutdown and runs until the engine is shut down (or wedged for good). Outcomes stay
    /// available through `poll_outcome`.
    pub fn shutdown(&mut self) -> Result<(), EngineError> {
        self.core.begin_shutdown(self.now);
        loop {
            self.process_now();
            match self.next_event() {
                Some(at) => self.now = self.now.max(at),
                None => break,
            }
        }
        self.engine_shutdown.clone().unwrap_or(Ok(()))
    }
}

/// Why virtual time cannot run `config`: several generates in flight.
fn refusal(config: &BatchConfig) -> Option<ConfigError> {
    let max_in_flight = config.max_in_flight();
    (max_in_flight > 1).then(|| ConfigError::NotConcurrent { max_in_flight, engine: "virtual time".into() })
}
