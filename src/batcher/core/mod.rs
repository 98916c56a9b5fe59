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

mod config;
mod failure;
mod ids;
mod matching;
mod stall;
mod vocab;

use std::collections::VecDeque;
use std::time::Duration;

use self::stall::StallWatch;
use super::error::{ConfigError, RequestError};
use super::lifecycle::{Lifecycle, State};
use crate::engine::{EngineError, EngineInfo, EngineRequest, RequestId};
use crate::time::Timestamp;

pub use self::config::{
    BUSY_CPU_SHARE, BatchConfig, REAL_ENGINE_GENERATE_TIMEOUT, REAL_ENGINE_STALL_TIMEOUT, STALL_FACTOR,
};
pub use self::ids::{BatchId, BuildIdHasher, IdHasher, IdMap};
pub use self::vocab::{
    Batch, BatchRun, Completion, Event, FlushReason, GenerateResult, Outcome, RequestTimes, StepPhases,
};

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
    /// The stall watch's state beyond each generate's own, and its decision.
    stall: StallWatch,
}

impl BatcherCore {
    /// A batcher in [`State::Created`] with an empty queue; events are off (see [`with_events`](Self::with_events)).
    pub fn new(config: BatchConfig) -> Self {
        BatcherCore {
            config,
            lifecycle: Lifecycle::default(),
            failure: None,
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            outcomes: VecDeque::new(),
            next_request_id: 0,
            next_batch_id: 0,
            events: None,
            stall: StallWatch::default(),
        }
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
    #[must_use]
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
            State::StartingThenDrain
            | State::Draining
            | State::FailedClosing
            | State::EngineStopping
            | State::Stopped => return,
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
        let due = matches!(self.state(), State::Draining | State::FailedClosing)
            && self.in_flight.is_empty()
            && self.queue.is_empty();
        if due {
            // Entering `EngineStopping` is recorded as the run's one `EngineShutdown` event, not
            // as a state change.
            let r = self.lifecycle.transition(State::EngineStopping);
            debug_assert!(r.is_ok(), "{r:?}");
            self.record(|| Event::EngineShutdown);
        }
        due
    }

    /// The engine's shutdown returned (its error, if any, is the driver's to report).
    pub fn handle_engine_shutdown_done(&mut self) {
        if self.state() == State::EngineStopping {
            self.set_state(State::Stopped);
        }
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
            (State::StartingThenDrain | State::Draining | State::EngineStopping | State::Stopped, None) => {
                Some(RequestError::ShuttingDown)
            }
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
        if self.fail_if_stalled(now) {
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

#[cfg(test)]
mod tests;
