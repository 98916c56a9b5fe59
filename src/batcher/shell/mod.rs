//! The threaded shell around [`BatcherCore`]: the batcher as callers use it.
//!
//! One mutex (`Shared::inner`) guards the core and the table of waiters. Three kinds of thread
//! meet there:
//! - **callers** submit, cancel (by dropping a [`Ticket`]), preload and shut down; a process
//!   watcher or a signal handler reports an engine death or aborts the running generate;
//! - **the engine thread** owns the engine: it runs the one start, every generate and the one
//!   shutdown, always with the lock released, and sleeps on `engine_cv` until work is due. With
//!   `max_in_flight > 1` it hands each batch to the engine's [`ConcurrentEngine`] face instead
//!   and goes straight on to the next: up to `max_in_flight` generates are then out at once;
//! - **wherever a concurrent engine calls `done`** (its own threads, or the engine thread inside
//!   `generate`), the batch's result is delivered: the observer is told, then the core, under the
//!   lock, exactly once per batch (a `done` dropped uncalled, or a panic in `generate`, fails the
//!   batch instead);
//! - **the watchdog thread**, only when a `generate_timeout` or a `stall_timeout` is set, fails a
//!   generate that overran while the engine thread is stuck inside it, and, while a generate runs,
//!   samples the engine's CPU time through the [`ProgressProbe`] a driver installed (with the lock
//!   released: reading /proc is IO) and hands each sample to the core, which decides whether the
//!   engine stalled.
//!
//! Outcomes leave the core under the lock and are handed to their completers after it is released
//! (lock order in [`crate::sync`]): each request's own [`Completer`], or, for the requests of
//! [`Batcher::submit_to_sink`], the batcher's [`OutcomeSink`], once with all of them (a batch's
//! outcomes in one call, one wake-up of whoever waits for them). Every state change notifies every
//! condvar that has a waiter, so no waiter can miss the change it waits for (loom checks this:
//! `tests/loom_batcher.rs`). Waiters are counted under the lock, so a condvar nobody waits on costs
//! no futex call. The exceptions are the hot path's, each a wake-up per request or per batch
//! saved:
//! - a submit that neither starts the engine, nor makes the queue non-empty (a new dispatch or
//!   watchdog deadline), nor fills a batch changes nothing any waiter waits for, and notifies
//!   nobody;
//! - a thread asleep until a time of its own (the engine thread until a dispatch deadline or its
//!   idle tick, the watchdog until a generate's deadline or its next sample) is woken only when
//!   the change brings a deadline of the core's before that time, or the batcher is closing
//!   ([`Inner::engine_must_wake`], [`Inner::watchdog_must_wake`]): a deadline that comes later
//!   finds it awake by then. A start and a shutdown notify everyone.
//!
//! # Files
//! - `mod`: `Batcher`, the shared state behind the lock (`Inner`, `Shared`) and its wake-ups.
//! - `engine_thread`: the engine thread, and a batch handed to a concurrent face.
//! - `watchdog`: the watchdog thread: generate timeouts and CPU-time samples.
//! - `delivery`: outcomes on their way out: a concurrent result delivered once (`Delivery`), the
//!   ready outcomes with their waiters (`Ready`), `Ticket` and its slot.

mod delivery;
mod engine_thread;
mod watchdog;

use std::time::Duration;

use self::delivery::Slot;
pub use self::delivery::Ticket;
use self::engine_thread::engine_thread;
use self::watchdog::watchdog_thread;
use super::core::{BatchConfig, BatchRun, BatcherCore, IdMap, Outcome};
use super::error::{ConfigError, RequestError};
use super::lifecycle::State;
use crate::engine::{
    Concurrent, ConcurrentEngine, Engine, EngineDeath, EngineError, EngineInfo, EngineRequest, RequestId,
};
use crate::sync::{self, Arc, Condvar, Level, Mutex, MutexGuard};
use crate::time::{Clock, Timestamp};

/// Called exactly once with a request's outcome, on whichever thread produced it.
pub type Completer = Box<dyn FnOnce(RequestId, Outcome) + Send>;

/// Takes the outcomes of the requests submitted with [`Batcher::submit_to_sink`]: every one that
/// a state change made ready, in one call (a batch's, when its generate returns), with no batcher
/// lock held, on whichever thread produced them (calls may overlap with several batches in
/// flight). One call per batch instead of one per request: whoever waits for the outcomes is
/// woken once per batch, and no request carries a callback of its own.
pub type OutcomeSink = std::sync::Arc<dyn Fn(Vec<(RequestId, Outcome)>) + Send + Sync>;

/// Told about every batch after its generate returned and before its requests' outcomes go out,
/// with no batcher lock held: on the engine thread, or, with several batches in flight, on the
/// thread that delivered the result. Calls never overlap.
pub type BatchObserver = Box<dyn FnMut(&BatchRun) + Send>;

/// The engine's CPU time so far (its processes', its engine thread's), the sign of life of a
/// generate that has no output yet; `None` when it cannot be read. Called on the watchdog thread
/// with no batcher lock held, about [`SAMPLES_PER_STALL_LIMIT`] times per stall limit (at most
/// once per [`MAX_SAMPLE_INTERVAL`]).
pub type ProgressProbe = std::sync::Arc<dyn Fn() -> Option<Duration> + Send + Sync>;

/// How many CPU-time samples the watchdog takes per stall limit: a stall is declared at most a
/// limit and a sample interval after the last sign of life.
pub const SAMPLES_PER_STALL_LIMIT: u32 = 10;

/// The longest wait between two CPU-time samples.
pub const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

struct Inner {
    core: BatcherCore,
    /// The requests with a callback of their own; the others' outcomes go to the sink (no entry
    /// here: a table insert and remove per request saved).
    waiters: IdMap<Completer>,
    /// Threads blocked on each condvar, so `release` only notifies where someone waits.
    waiting: Waiting,
    /// When the waiting engine thread wakes by itself: `None` while it waits until woken.
    engine_until: Option<Timestamp>,
    /// When the waiting watchdog wakes by itself: `None` while it waits for a generate to watch.
    /// A change that brings no deadline of the core's before this need not wake it (see
    /// [`Inner::watchdog_must_wake`]).
    watchdog_until: Option<Timestamp>,
    start_result: Option<Result<EngineInfo, EngineError>>,
    shutdown_result: Option<Result<(), EngineError>>,
    /// Set by `shutdown` once it stops waiting: the helper threads exit.
    closing: bool,
    /// What the watchdog samples while a generate runs; installed by the driver.
    probe: Option<ProgressProbe>,
    /// The engine thread's kernel thread id, once it runs: an in-process engine's CPU time is
    /// its thread's.
    engine_tid: Option<i32>,
    /// The started engine's concurrent face and its capabilities, from its start to its shutdown;
    /// `None` when it runs one generate at a time. The face is used while `max_in_flight > 1`.
    concurrent: Option<Concurrent>,
    /// The started engine's name, from its start to its shutdown, for the refusal of a
    /// `max_in_flight` it cannot take.
    engine_name: Option<String>,
}

impl Inner {
    /// The face to hand batches to: the engine's concurrent one while `max_in_flight > 1`, else
    /// `None` (the engine thread calls `generate` itself, one batch at a time).
    fn concurrent_face(&self) -> Option<std::sync::Arc<dyn ConcurrentEngine>> {
        self.concurrent.as_ref().filter(|_| self.core.config().max_in_flight() > 1).map(|c| c.face.clone())
    }

    /// Whether a state change must wake the waiting engine thread: it waits until woken, the
    /// batcher is closing, or the core's next dispatch comes before its timer. The state changes
    /// that end a timed wait's reason otherwise (a start, a shutdown) notify every condvar
    /// themselves.
    fn engine_must_wake(&self) -> bool {
        match self.engine_until {
            None => true,
            Some(until) => self.closing || self.core.dispatch_deadline().is_some_and(|d| d < until),
        }
    }

    /// Whether a state change must wake the waiting watchdog: it waits for work (no timer), the
    /// batcher is closing, or a deadline of the core's now comes before its timer. Otherwise it
    /// wakes in time by itself: a generate's deadlines only move later (a later dispatch, more
    /// progress, a longer stall limit), so a watchdog asleep until a deadline of the last batch
    /// is not woken for every batch, which cost a futex wake and a context switch per batch.
    fn watchdog_must_wake(&self) -> bool {
        match self.watchdog_until {
            None => true,
            Some(until) => self.closing || self.core.watchdog_deadline().is_some_and(|d| d < until),
        }
    }

    /// Why `config` cannot be used by the engine that started: more than one in flight on an
    /// engine without a concurrent face. Before the start, the start itself checks.
    fn refusal(&self, config: &BatchConfig) -> Option<ConfigError> {
        let engine = self.engine_name.as_ref()?;
        (config.max_in_flight() > 1 && self.concurrent.is_none())
            .then(|| ConfigError::NotConcurrent { max_in_flight: config.max_in_flight(), engine: engine.clone() })
    }
}

/// Which condvar a thread waits on.
#[derive(Copy, Clone)]
enum Cv {
    Engine,
    Watchdog,
    State,
}

#[derive(Copy, Clone, Default)]
struct Waiting {
    engine: u32,
    watchdog: u32,
    state: u32,
}

impl Waiting {
    fn slot(&mut self, cv: Cv) -> &mut u32 {
        match cv {
            Cv::Engine => &mut self.engine,
            Cv::Watchdog => &mut self.watchdog,
            Cv::State => &mut self.state,
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    /// The engine thread waits here for work.
    engine_cv: Condvar,
    /// The watchdog waits here for a generate deadline.
    watchdog_cv: Condvar,
    /// Callers of `preload` and `shutdown` wait here for lifecycle changes.
    state_cv: Condvar,
    clock: std::sync::Arc<dyn Clock>,
    /// Told about every batch; behind its own leaf lock ([`Level::Observer`]), since results may
    /// come in on several threads.
    observer: Option<Mutex<BatchObserver>>,
    /// Where the outcomes of [`Batcher::submit_to_sink`]'s requests go.
    sink: Option<OutcomeSink>,
}

struct Locked<'a> {
    guard: MutexGuard<'a, Inner>,
    _order: sync::Held,
}

impl Shared {
    fn lock(&self) -> Locked<'_> {
        let order = sync::ordered(Level::Batcher);
        Locked { guard: sync::lock(&self.inner), _order: order }
    }

    fn notify_all(&self) {
        self.engine_cv.notify_all();
        self.watchdog_cv.notify_all();
        self.state_cv.notify_all();
    }

    /// Notifies the condvars that had waiters when `waiting` was read (under the lock, after the
    /// state change): a thread that starts waiting later sees the change before it waits.
    fn notify_waiting(&self, waiting: Waiting) {
        if waiting.engine > 0 {
            self.engine_cv.notify_all();
        }
        if waiting.watchdog > 0 {
            self.watchdog_cv.notify_all();
        }
        if waiting.state > 0 {
            self.state_cv.notify_all();
        }
    }

    /// Tells the observer, if any, about a batch whose generate returned. No batcher lock held.
    fn observe(&self, batch: &BatchRun) {
        if let Some(observer) = &self.observer {
            sync::assert_not_held(Level::Batcher);
            let _order = sync::ordered(Level::Observer);
            (sync::lock(observer))(batch);
        }
    }

    fn cv(&self, which: Cv) -> &Condvar {
        match which {
            Cv::Engine => &self.engine_cv,
            Cv::Watchdog => &self.watchdog_cv,
            Cv::State => &self.state_cv,
        }
    }

    /// Ends a critical section: notifies, unlocks, then runs the completers.
    fn release(&self, locked: Locked<'_>) {
        self.release_and_notify(locked, true);
    }

    /// [`release`](Self::release); `notify = false` only when the critical section changed
    /// nothing any waiter waits for (see the module docs).
    fn release_and_notify(&self, mut locked: Locked<'_>, notify: bool) {
        let ready = Self::collect(&mut locked.guard);
        let waiting = Self::to_wake(&locked.guard);
        drop(locked);
        if notify {
            self.notify_waiting(waiting);
        }
        sync::assert_not_held(Level::Batcher);
        for (id, complete, outcome) in ready.completers {
            complete(id, outcome);
        }
        if !ready.sunk.is_empty() {
            let sink = self.sink.as_ref();
            debug_assert!(sink.is_some(), "outcomes without a waiter: {:?}", ready.sunk.iter().map(|o| o.0));
            if let Some(sink) = sink {
                sink(ready.sunk);
            }
        }
    }

    /// The waiters a state change must wake: every one waiting, but the engine thread only when
    /// [`Inner::engine_must_wake`] and the watchdog only when [`Inner::watchdog_must_wake`].
    fn to_wake(inner: &Inner) -> Waiting {
        let mut waiting = inner.waiting;
        if waiting.engine > 0 && !inner.engine_must_wake() {
            waiting.engine = 0;
        }
        if waiting.watchdog > 0 && !inner.watchdog_must_wake() {
            waiting.watchdog = 0;
        }
        waiting
    }

    fn wait<'a>(&self, which: Cv, locked: Locked<'a>, timeout: Option<Duration>) -> Locked<'a> {
        let Locked { mut guard, _order } = locked;
        *guard.waiting.slot(which) += 1;
        let cv = self.cv(which);
        let mut guard = match timeout {
            Some(t) => cv.wait_timeout(guard, t).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0),
            None => cv.wait(guard).unwrap_or_else(|e| e.into_inner()),
        };
        *guard.waiting.slot(which) -= 1;
        Locked { guard, _order }
    }
}

/// A helper thread, and whether it is the engine thread.
type ThreadHandle = (bool, sync::thread::JoinHandle<()>);

/// A handle to the batcher. Cheap to clone; every clone talks to the same engine thread.
///
/// # Starting the engine
/// There is no separate `start()`: the engine starts lazily, on the engine thread, at the first
/// [`preload`](Self::preload) or [`submit`](Self::submit), whichever comes first, and only once.
/// `preload` also waits for the start and returns its result; a submit does not wait, and its
/// request is queued until the engine is ready (or fails with the start's error). A run calls
/// `preload` before its clock starts, so a cold start is never measured.
#[derive(Clone)]
pub struct Batcher {
    shared: Arc<Shared>,
    /// (is the engine thread, handle).
    threads: std::sync::Arc<std::sync::Mutex<Vec<ThreadHandle>>>,
}

impl Batcher {
    /// Spawns the engine thread (and the watchdog when `config` has a generate timeout). The engine
    /// is not loaded until [`preload`](Self::preload) or the first submit.
    pub fn spawn<E: Engine + 'static>(engine: E, config: BatchConfig, clock: std::sync::Arc<dyn Clock>) -> Self {
        Self::spawn_observed(engine, config, clock, None)
    }

    /// [`spawn`](Self::spawn), with an observer told about every batch.
    pub fn spawn_observed<E: Engine + 'static>(
        engine: E,
        config: BatchConfig,
        clock: std::sync::Arc<dyn Clock>,
        observer: Option<BatchObserver>,
    ) -> Self {
        Self::spawn_with_sink(engine, config, clock, observer, None)
    }

    /// [`spawn_observed`](Self::spawn_observed), with a sink that takes the outcomes of the
    /// requests submitted with [`submit_to_sink`](Self::submit_to_sink), a batch's at once.
    pub fn spawn_with_sink<E: Engine + 'static>(
        engine: E,
        config: BatchConfig,
        clock: std::sync::Arc<dyn Clock>,
        observer: Option<BatchObserver>,
        sink: Option<OutcomeSink>,
    ) -> Self {
        let watchdog = config.generate_timeout().is_some() || config.stall_timeout().is_some();
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                core: BatcherCore::new(config),
                waiters: IdMap::default(),
                waiting: Waiting::default(),
                engine_until: None,
                watchdog_until: None,
                start_result: None,
                shutdown_result: None,
                closing: false,
                probe: None,
                engine_tid: None,
                concurrent: None,
                engine_name: None,
            }),
            engine_cv: Condvar::new(),
            watchdog_cv: Condvar::new(),
            state_cv: Condvar::new(),
            clock,
            observer: observer.map(Mutex::new),
            sink,
        });
        let mut threads = Vec::new();
        let s = shared.clone();
        threads.push((true, spawn_named("batchlab-engine", move || engine_thread(s, engine))));
        if watchdog {
            let s = shared.clone();
            threads.push((false, spawn_named("batchlab-watchdog", move || watchdog_thread(s))));
        }
        Batcher { shared, threads: std::sync::Arc::new(std::sync::Mutex::new(threads)) }
    }

    /// Installs what the watchdog samples for signs of life while a generate runs (a
    /// `stall_timeout` must be set for it to be used). Replaces an earlier probe.
    pub fn set_progress_probe(&self, probe: ProgressProbe) {
        let mut locked = self.shared.lock();
        locked.guard.probe = Some(probe);
        let watchdog_waits = locked.guard.waiting.watchdog > 0;
        self.shared.release_and_notify(locked, false);
        // A watchdog asleep until a generate deadline starts sampling now.
        if watchdog_waits {
            self.shared.watchdog_cv.notify_all();
        }
    }

    /// The kernel thread id of the engine thread, once it has started: whose CPU time is an
    /// in-process engine's.
    pub fn engine_thread_id(&self) -> Option<i32> {
        let locked = self.shared.lock();
        let tid = locked.guard.engine_tid;
        self.shared.release_and_notify(locked, false);
        tid
    }

    /// Where the batcher is in its lifecycle.
    pub fn state(&self) -> State {
        self.shared.lock().guard.core.state()
    }

    /// The started engine's concurrent face and its capabilities, as its start handed them out
    /// ([`crate::engine::Started::concurrent`]): the servers' counters and the engine's own steps
    /// for the run. `None` before the engine started, after its shutdown, or when it runs one
    /// generate at a time.
    pub fn concurrent_engine(&self) -> Option<Concurrent> {
        let locked = self.shared.lock();
        let face = locked.guard.concurrent.clone();
        self.shared.release_and_notify(locked, false);
        face
    }

    /// Whether this call started the engine.
    fn begin_start(locked: &mut Locked<'_>) -> bool {
        let started = locked.guard.core.begin_start();
        if started {
            tracing::debug!("engine start requested");
        }
        started
    }

    /// Loads the engine now, before any timed work, and waits for the load. Single-flight: any
    /// number of concurrent callers cause one load and all see its result.
    pub fn preload(&self) -> Result<EngineInfo, RequestError> {
        let mut locked = self.shared.lock();
        Self::begin_start(&mut locked);
        self.shared.notify_all();
        loop {
            let core = &locked.guard.core;
            match core.state() {
                // A death or abort during the load answers at once: the load may never return.
                State::Starting | State::StartingThenDrain if core.failure().is_none() => {
                    locked = self.shared.wait(Cv::State, locked, None)
                }
                State::Created => return Err(RequestError::EngineNotStarted),
                _ => break,
            }
        }
        let core = &locked.guard.core;
        let result = match (core.state(), &locked.guard.start_result, core.failure()) {
            (State::Ready, Some(Ok(info)), None) => Ok(info.clone()),
            (_, _, Some(failure)) => Err(failure.clone()),
            (_, Some(Err(EngineError::Start(m))), None) => Err(RequestError::StartFailed(m.clone())),
            (_, Some(Err(e)), None) => Err(RequestError::StartFailed(e.to_string())),
            // Draining or Stopped: start after stop is an error.
            _ => Err(RequestError::ShuttingDown),
        };
        self.shared.release(locked);
        result
    }

    /// Submits with a callback that receives the outcome exactly once; returns the id the core
    /// gave the request. Starts the engine if it was not started (single-flight). A rejection is
    /// returned here and the callback is dropped.
    pub fn submit_with(&self, request: EngineRequest<()>, complete: Completer) -> Result<RequestId, RequestError> {
        self.submit_for(request, Some(complete))
    }

    /// Submits a request whose outcome goes to the batcher's [`OutcomeSink`], together with the
    /// other outcomes made ready with it; returns the id the core gave the request. A rejection is
    /// returned here and never reaches the sink.
    ///
    /// # Panics
    /// When the batcher was spawned without a sink ([`spawn_with_sink`](Self::spawn_with_sink)):
    /// the outcome would have nowhere to go.
    pub fn submit_to_sink(&self, request: EngineRequest<()>) -> Result<RequestId, RequestError> {
        assert!(self.shared.sink.is_some(), "submit_to_sink on a batcher spawned without a sink");
        self.submit_for(request, None)
    }

    /// Submits with `complete` as the waiter, or the sink when `None`.
    fn submit_for(&self, request: EngineRequest<()>, complete: Option<Completer>) -> Result<RequestId, RequestError> {
        let mut locked = self.shared.lock();
        let started = Self::begin_start(&mut locked);
        let now = self.shared.clock.now();
        let r = locked.guard.core.submit(request, now);
        // Only these change what a waiter waits for: a started engine, a queue that became
        // non-empty (a new dispatch and watchdog deadline) or a full batch (see the module docs).
        let queued = locked.guard.core.queued();
        let notify = started || r.is_err() || queued == 1 || queued >= locked.guard.core.config().batch_size();
        if let (Ok(id), Some(complete)) = (&r, complete) {
            // The core never gives an id twice, so no waiter is ever replaced.
            let replaced = locked.guard.waiters.insert(*id, complete);
            debug_assert!(replaced.is_none(), "request id {id} given twice");
        }
        self.shared.release_and_notify(locked, notify);
        r
    }

    /// Submits and returns a [`Ticket`] to wait on. Dropping the ticket cancels the request if it
    /// was not dispatched yet.
    pub fn submit(&self, request: EngineRequest<()>) -> Result<Ticket, RequestError> {
        let slot = Arc::new(Slot { outcome: Mutex::new(None), ready: Condvar::new() });
        let s = slot.clone();
        let id = self.submit_with(request, Box::new(move |_, outcome| s.fill(outcome)))?;
        Ok(Ticket { id, slot, batcher: Some(self.shared.clone()) })
    }

    /// Cancels a queued request; its outcome becomes `Cancelled`. `false` once it was dispatched.
    pub fn cancel(&self, id: RequestId) -> bool {
        cancel(&self.shared, id)
    }

    /// Takes new batching settings while idle (see [`BatcherCore::reconfigure`]); the engine
    /// thread's next wait uses them. A `max_in_flight` above 1 is refused
    /// ([`ConfigError::NotConcurrent`]) once an engine without a concurrent face has started.
    ///
    /// [`BatcherCore::reconfigure`]: super::core::BatcherCore::reconfigure
    pub fn reconfigure(&self, config: BatchConfig) -> Result<(), crate::batcher::ConfigError> {
        let mut locked = self.shared.lock();
        let result = match locked.guard.refusal(&config) {
            Some(refusal) => Err(refusal),
            None => locked.guard.core.reconfigure(config),
        };
        self.shared.release(locked);
        result
    }

    /// The engine died; callable from any thread, e.g. a process watcher, also while the engine
    /// thread is stuck inside a generate that will never return. The running batch and every
    /// queued request fail with [`RequestError::EngineDied`] at once, later submits are rejected
    /// with it, and [`shutdown`](Self::shutdown) returns without waiting for a stuck generate.
    /// The engine's own shutdown still runs on the engine thread if and when no generate is stuck
    /// in it; never while one is. Harmless when repeated or after shutdown.
    pub fn engine_died(&self, death: EngineDeath) {
        let mut locked = self.shared.lock();
        let now = self.shared.clock.now();
        locked.guard.core.handle_engine_died(death, now);
        self.shared.release(locked);
    }

    /// Abandons the running generate, for the first Ctrl-C while it may be wedged: its batch and
    /// every queued request fail with [`RequestError::Aborted`], the engine is unusable from now
    /// on (as after [`engine_died`](Self::engine_died)), and [`shutdown`](Self::shutdown) returns
    /// without waiting for the stuck generate. Harmless when repeated or after shutdown.
    pub fn abort_in_flight(&self) {
        let mut locked = self.shared.lock();
        let now = self.shared.clock.now();
        locked.guard.core.abort_in_flight(now);
        self.shared.release(locked);
    }

    /// Stops admitting, dispatches what is queued, waits for the running generate, then shuts the
    /// engine down exactly once. Every waiter has its outcome when this returns. A second call is
    /// harmless. With a wedged engine (a generate that overran `generate_timeout`, or that was
    /// abandoned by [`engine_died`](Self::engine_died) or [`abort_in_flight`](Self::abort_in_flight),
    /// and never returned) this returns once every request is answered, without waiting for the
    /// engine thread, which is left behind.
    pub fn shutdown(&self) -> Result<(), EngineError> {
        let mut locked = self.shared.lock();
        let now = self.shared.clock.now();
        locked.guard.core.begin_shutdown(now);
        self.shared.notify_all();
        while !(locked.guard.core.state() == State::Stopped || locked.guard.core.is_wedged()) {
            locked = self.shared.wait(Cv::State, locked, None);
        }
        let wedged = locked.guard.core.is_wedged();
        locked.guard.closing = true;
        let result = locked.guard.shutdown_result.clone().unwrap_or(Ok(()));
        self.shared.release(locked);
        let handles: Vec<_> = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for (is_engine, h) in handles {
            if wedged && is_engine {
                tracing::warn!("engine thread is stuck in generate; leaving it behind");
                continue;
            }
            // A panic on the engine thread outside the engine calls (which are caught), such as
            // an engine whose Drop panics, is a bug: surface it to the caller.
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
        result
    }
}

fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) -> sync::thread::JoinHandle<()> {
    #[cfg(loom)]
    {
        let _ = name;
        loom::thread::spawn(f)
    }
    #[cfg(not(loom))]
    {
        std::thread::Builder::new().name(name.into()).spawn(f).unwrap_or_else(|e| panic!("spawning {name}: {e}"))
    }
}

fn cancel(shared: &Shared, id: RequestId) -> bool {
    let mut locked = shared.lock();
    let now = shared.clock.now();
    let cancelled = locked.guard.core.cancel(id, now);
    shared.release(locked);
    cancelled
}
