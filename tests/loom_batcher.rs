//! Model checking of the threaded batcher with loom: every interleaving (up to the preemption
//! bound) of submitters, the engine thread, a shutdown and an engine death reported by a watcher.
//!
//! Run with `just test-loom` (`RUSTFLAGS="--cfg loom" cargo test --release --test loom_batcher`).
//! A lost wake-up or a waiter left hanging shows up as a loom deadlock; a lock-order violation
//! panics in `batchlab::sync::ordered`. Every model here fails against a broken variant of the
//! shell or the core kept in `scripts/mutants.py` (docs/testing.md lists which).
//!
//! The engine is moved into the one engine thread and every engine call takes `&mut self`, so no
//! variant of the shell that compiles can run two blocking generates at the same instant. What the
//! shell *can* break about its generates is what other threads see while one runs: that a running
//! generate holds no batcher lock (others submit and shut down meanwhile, and the next generate
//! waits for it), that the engine's shutdown and its result come after the last generate, and that
//! a dead engine's generate returning late is still followed by the engine's one shutdown. The
//! engines below record their calls in loom atomics shared with the test threads, which check them.
//!
//! With `max_in_flight > 1` the engine thread hands batches to a concurrent engine's face, and
//! their results come back through `done` on the engine's own threads: the last models run two
//! batches in flight on such an engine, answered on a server thread newest first, racing a submit,
//! the shutdown and a death. There the shell can match a result to the wrong batch, lose the wake-up
//! a freed slot owes the engine thread, or shut the engine down (or leave it without its shutdown)
//! while a `done` is still to come.
#![cfg(loom)]

use std::time::Duration;

use batchlab::batcher::{BatchConfig, Batcher, RequestError};
use batchlab::engine::{Engine, EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, Started};
use batchlab::sync::atomic::{AtomicUsize, Ordering};
use batchlab::sync::{Arc, Condvar, Mutex};
use batchlab::time::{Clock, Timestamp};
use loom::thread;

mod common;

/// Time stands still: only full batches and shutdown dispatch. Timed paths are tested elsewhere.
struct Frozen;

impl Clock for Frozen {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(1)
    }
    fn sleep(&self, _: Duration) {}
}

/// A one-way signal between threads: `open` once, `wait` until it was opened.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn open(&self) {
        let (open, cv) = &*self.0;
        *open.lock().unwrap() = true;
        cv.notify_all();
    }

    fn wait(&self) {
        let (open, cv) = &*self.0;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
    }
}

/// What the engine saw, in loom atomics the test threads read.
#[derive(Clone, Default)]
struct Probe {
    starts: Arc<AtomicUsize>,
    generates: Arc<AtomicUsize>,
    /// Generates running right now.
    in_generate: Arc<AtomicUsize>,
    shutdowns: Arc<AtomicUsize>,
    /// How many generates had returned when the engine's shutdown ran.
    generates_at_shutdown: Arc<AtomicUsize>,
}

impl Probe {
    fn enter_generate(&self) {
        assert_eq!(self.in_generate.fetch_add(1, Ordering::SeqCst), 0, "two generates at once");
        assert_eq!(self.shutdowns.load(Ordering::SeqCst), 0, "generate after engine shutdown");
    }

    fn leave_generate(&self) {
        self.generates.fetch_add(1, Ordering::SeqCst);
        self.in_generate.fetch_sub(1, Ordering::SeqCst);
    }

    fn shutdown(&self) {
        assert_eq!(self.in_generate.load(Ordering::SeqCst), 0, "shutdown during generate");
        self.generates_at_shutdown.store(self.generates.load(Ordering::SeqCst), Ordering::SeqCst);
        assert_eq!(self.shutdowns.fetch_add(1, Ordering::SeqCst), 0, "engine shut down twice");
    }
}

struct LoomEngine {
    probe: Probe,
    fail: bool,
    shutdown_fails: bool,
}

impl Engine for LoomEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        self.probe.starts.fetch_add(1, Ordering::SeqCst);
        Ok(EngineInfo::new("loom", "0").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.probe.enter_generate();
        self.probe.leave_generate();
        if self.fail {
            return Err(EngineError::Generate("injected".into()));
        }
        Ok(common::echo(batch))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.probe.shutdown();
        if self.shutdown_fails {
            return Err(EngineError::Shutdown("injected".into()));
        }
        Ok(())
    }
}

fn config(batch_size: usize) -> BatchConfig {
    BatchConfig::new(batch_size, Duration::from_secs(3600)).unwrap()
}

fn spawn(engine: impl Engine + 'static, batch_size: usize) -> Batcher {
    Batcher::spawn(engine, config(batch_size), std::sync::Arc::new(Frozen))
}

fn batcher(batch_size: usize, fail: bool) -> (Batcher, Probe) {
    let probe = Probe::default();
    let b = spawn(LoomEngine { probe: probe.clone(), fail, shutdown_fails: false }, batch_size);
    (b, probe)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

fn request() -> EngineRequest<()> {
    EngineRequest::tokens(vec![1], 1)
}

/// A submitter: returns whether its request was admitted and how it ended.
fn submit_and_wait(b: &Batcher) -> Option<Result<(), RequestError>> {
    match b.submit(request()) {
        Ok(t) => Some(t.wait().map(|_| ())),
        Err(e) => {
            assert_eq!(e, RequestError::ShuttingDown);
            None
        }
    }
}

#[test]
fn submitters_racing_shutdown_all_get_answers_and_engine_stops_once() {
    model(|| {
        let (b, probe) = batcher(2, false);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || submit_and_wait(&b))
            })
            .collect();
        b.shutdown().unwrap();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let admitted = results.iter().flatten().count();
        assert!(results.iter().flatten().all(|r| r.is_ok()), "{results:?}");
        // The engine was started iff something was admitted, and then stopped exactly once.
        let started = probe.starts.load(Ordering::SeqCst);
        assert!(started <= 1);
        assert_eq!(probe.shutdowns.load(Ordering::SeqCst), started);
        if admitted > 0 {
            assert_eq!(started, 1);
            assert!(probe.generates.load(Ordering::SeqCst) >= 1);
        }
    });
}

#[test]
fn engine_failure_answers_every_waiter() {
    model(|| {
        let (b, probe) = batcher(2, true);
        b.preload().unwrap();
        let b2 = b.clone();
        let other = thread::spawn(move || submit_and_wait(&b2));
        let mine = submit_and_wait(&b);
        let theirs = other.join().unwrap();
        for r in [mine, theirs].into_iter().flatten() {
            assert!(matches!(r, Err(RequestError::Engine { .. })), "{r:?}");
        }
        b.shutdown().unwrap();
        assert_eq!(probe.shutdowns.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn concurrent_preload_loads_once() {
    model(|| {
        let (b, probe) = batcher(1, false);
        let b2 = b.clone();
        let t = thread::spawn(move || b2.preload().is_ok());
        assert!(b.preload().is_ok());
        assert!(t.join().unwrap());
        assert_eq!(probe.starts.load(Ordering::SeqCst), 1);
        b.shutdown().unwrap();
    });
}

#[test]
fn cancel_racing_dispatch_never_hangs() {
    model(|| {
        let (b, _probe) = batcher(2, false);
        b.preload().unwrap();
        let b2 = b.clone();
        let canceller = thread::spawn(move || {
            if let Ok(t) = b2.submit(request()) {
                drop(t);
            }
        });
        let mine = b.submit(request()).unwrap();
        canceller.join().unwrap();
        // Time is frozen, so a lone request can only leave the queue through a full batch or the
        // drain at shutdown; waiting before shutdown could (rightly) wait forever.
        b.shutdown().unwrap();
        let mine = Some(mine.wait().map(|_| ()));
        assert!(matches!(mine, Some(Ok(()))), "{mine:?}");
    });
}

/// An engine whose first generate tells the test it is running (`entered`), then waits until the
/// test opens `gate`.
struct HeldEngine {
    probe: Probe,
    entered: Gate,
    gate: Gate,
}

impl Engine for HeldEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("loom", "0").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.probe.enter_generate();
        if self.probe.generates.load(Ordering::SeqCst) == 0 {
            self.entered.open();
            self.gate.wait();
        }
        self.probe.leave_generate();
        Ok(common::echo(batch))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.probe.shutdown();
        Ok(())
    }
}

/// While a generate runs on the engine thread, another thread's submit gets in (queued behind
/// it) and a third thread's shutdown waits for both generates, one after the other. A generate
/// run with the batcher lock held blocks that submit: a loom deadlock.
#[test]
fn a_running_generate_lets_others_submit_and_shut_down_and_the_next_waits_for_it() {
    model(|| {
        let probe = Probe::default();
        let (entered, gate) = (Gate::default(), Gate::default());
        let engine = HeldEngine { probe: probe.clone(), entered: entered.clone(), gate: gate.clone() };
        let b = spawn(engine, 1);
        let b1 = b.clone();
        let first = thread::spawn(move || submit_and_wait(&b1));
        entered.wait();
        let second = b.submit(request()).expect("a submit is admitted while a generate runs");
        let b2 = b.clone();
        let stopper = thread::spawn(move || b2.shutdown());
        gate.open();
        assert_eq!(first.join().unwrap(), Some(Ok(())));
        assert!(second.wait().is_ok());
        stopper.join().unwrap().unwrap();
        assert_eq!(probe.generates.load(Ordering::SeqCst), 2);
        assert_eq!(probe.generates_at_shutdown.load(Ordering::SeqCst), 2, "engine shut down before the last generate");
        assert_eq!(probe.shutdowns.load(Ordering::SeqCst), 1);
    });
}

/// A submit racing shutdown, with an engine whose shutdown fails: the engine's shutdown runs once,
/// after the last generate, and `Batcher::shutdown` (another thread) returns its error. A shell
/// that reports the engine stopped before its shutdown returned lets `Batcher::shutdown` read no
/// result, and return `Ok`, in some interleaving.
#[test]
fn engine_shutdown_follows_the_last_generate_and_its_error_reaches_shutdown() {
    model(|| {
        let probe = Probe::default();
        let b = spawn(LoomEngine { probe: probe.clone(), fail: false, shutdown_fails: true }, 1);
        let b2 = b.clone();
        let submitter = thread::spawn(move || submit_and_wait(&b2));
        let result = b.shutdown();
        let answer = submitter.join().unwrap();
        let generates = probe.generates.load(Ordering::SeqCst);
        if probe.starts.load(Ordering::SeqCst) == 0 {
            assert_eq!(answer, None, "admitted without an engine start");
            assert_eq!(result, Ok(()));
            assert_eq!(probe.shutdowns.load(Ordering::SeqCst), 0);
            return;
        }
        assert_eq!(result, Err(EngineError::Shutdown("injected".into())), "the engine's shutdown error is lost");
        assert_eq!(probe.shutdowns.load(Ordering::SeqCst), 1);
        assert_eq!(probe.generates_at_shutdown.load(Ordering::SeqCst), generates, "a generate after the shutdown");
        assert_eq!(generates, usize::from(answer.is_some()));
        assert_eq!(answer.unwrap_or(Ok(())), Ok(()));
    });
}

/// An engine whose generate blocks until the test opens the gate: as stuck as a dead engine's
/// generate for as long as the test wants. Dropping it opens `dropped`.
struct GatedEngine {
    gate: Gate,
    dropped: Gate,
    probe: Probe,
}

impl Engine for GatedEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("loom", "0").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.probe.enter_generate();
        self.gate.wait();
        self.probe.leave_generate();
        Ok(common::echo(batch))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.probe.shutdown();
        Ok(())
    }
}

impl Drop for GatedEngine {
    fn drop(&mut self) {
        self.dropped.open();
    }
}

/// A watcher reports the engine's death while its generate may be stuck: shutdown returns without
/// waiting for the generate. When the generate returns after all, its result is discarded and the
/// engine is shut down then, once, on the engine thread, before the engine is dropped; never while
/// the generate is stuck (invariant 3).
#[test]
fn engine_death_from_a_watcher_releases_shutdown_and_a_late_generate_is_followed_by_the_shutdown() {
    model(|| {
        let (gate, dropped, probe) = (Gate::default(), Gate::default(), Probe::default());
        let engine = GatedEngine { gate: gate.clone(), dropped: dropped.clone(), probe: probe.clone() };
        let b = spawn(engine, 1);
        let ticket = b.submit(request()).unwrap();
        let death = EngineDeath::new("core", None, "killed by SIGKILL");
        let (b2, d2) = (b.clone(), death.clone());
        let watcher = thread::spawn(move || b2.engine_died(d2));
        // Shutdown cannot wait for the generate (the gate opens only after it returns): only the
        // death can end its wait. A lost wake-up is a loom deadlock.
        b.shutdown().unwrap();
        watcher.join().unwrap();
        // Whether the death came before the dispatch or during the generate, it is the answer.
        assert_eq!(ticket.wait().err(), Some(RequestError::EngineDied(death.clone())));
        assert_eq!(b.submit(request()).err(), Some(RequestError::EngineDied(death)));
        // The stuck generate (if one was dispatched) returns now; the engine thread must still
        // shut the engine down before it lets the engine go.
        gate.open();
        dropped.wait();
        assert_eq!(probe.shutdowns.load(Ordering::SeqCst), 1, "the engine was dropped without its shutdown");
        assert_eq!(probe.generates_at_shutdown.load(Ordering::SeqCst), probe.generates.load(Ordering::SeqCst));
    });
}

/// A clock that moves 400 ms forward at every reading: a stall limit passes after a few readings.
#[derive(Default)]
struct Ticking(std::sync::atomic::AtomicU64);

impl Clock for Ticking {
    fn now(&self) -> Timestamp {
        let step = Duration::from_millis(400).as_nanos() as u64;
        Timestamp::from_nanos(self.0.fetch_add(step, std::sync::atomic::Ordering::SeqCst) + step)
    }
    fn sleep(&self, _: Duration) {}
}

/// The watchdog's stall path: it samples the engine's CPU time with the batcher lock released
/// (a probe that never moves: a frozen engine), hands the samples to the core, and fails the
/// stuck generate with `engine_stalled`, while the engine thread may be dispatching and the
/// caller waiting. Only the watchdog can answer the request here (the generate never returns
/// before the gate opens); a lost wake-up or a sample applied under the wrong lock is a loom
/// failure. Shutdown then returns, and the late generate is followed by the engine's shutdown.
#[test]
fn a_frozen_generate_is_failed_by_the_watchdogs_stall_samples() {
    model(|| {
        let (gate, dropped, probe) = (Gate::default(), Gate::default(), Probe::default());
        let engine = GatedEngine { gate: gate.clone(), dropped: dropped.clone(), probe: probe.clone() };
        let config = config(1).with_stall_timeout(Some(Duration::from_secs(1))).unwrap();
        let b = Batcher::spawn(engine, config, std::sync::Arc::new(Ticking::default()));
        // Reading /proc is IO: the probe must run with no batcher lock held.
        b.set_progress_probe(std::sync::Arc::new(|| {
            batchlab::sync::assert_not_held(batchlab::sync::Level::Batcher);
            Some(Duration::ZERO)
        }));
        let ticket = b.submit(request()).unwrap();
        assert!(matches!(ticket.wait(), Err(RequestError::EngineStalled { batch_size: 1, .. })));
        assert!(matches!(b.submit(request()), Err(RequestError::EngineStalled { .. })));
        b.shutdown().unwrap();
        gate.open();
        dropped.wait();
        assert_eq!(probe.shutdowns.load(Ordering::SeqCst), 1, "the engine was dropped without its shutdown");
    });
}

/// A concurrent engine's server: generates queue their `done`s here and a server thread of the
/// test's calls them, newest first (out of dispatch order), so results come in on another thread
/// than the engine thread, possibly before `generate` returned. The engine's shutdown closes it.
#[derive(Clone, Default)]
struct Server(Arc<(Mutex<ServerState>, Condvar)>);

#[derive(Default)]
struct ServerState {
    pending: Vec<(Vec<EngineRequest>, batchlab::engine::GenerateDone)>,
    /// Generates handed to the face.
    generates: usize,
    /// `done`s called (counted before the call).
    answered: usize,
    /// The engine's shutdowns, and how many `done`s had been called at the first.
    shutdowns: usize,
    answered_at_shutdown: usize,
}

impl Server {
    fn generate(&self, batch: Vec<EngineRequest>, done: batchlab::engine::GenerateDone) {
        let (state, cv) = &*self.0;
        let mut s = state.lock().unwrap();
        assert_eq!(s.shutdowns, 0, "generate after the engine's shutdown");
        s.generates += 1;
        s.pending.push((batch, done));
        cv.notify_all();
    }

    fn shutdown(&self) {
        let (state, cv) = &*self.0;
        let mut s = state.lock().unwrap();
        assert_eq!(s.generates, s.answered, "the engine shut down with a generate out");
        s.shutdowns += 1;
        assert_eq!(s.shutdowns, 1, "engine shut down twice");
        s.answered_at_shutdown = s.answered;
        cv.notify_all();
    }

    /// The server thread: once `first` generates are out together, answers them newest first,
    /// then every later one, until the engine shuts down. A batcher that never has `first` out at
    /// once leaves it waiting: a loom deadlock.
    fn serve(&self, first: usize) {
        let (state, cv) = &*self.0;
        let mut s = state.lock().unwrap();
        let mut want = first;
        loop {
            if s.pending.len() >= want.max(1) {
                let (batch, done) = s.pending.pop().expect("pending");
                s.answered += 1;
                drop(s);
                // No lock of the engine's held: the batcher may take its own in `done`.
                done(Ok(common::echo(&batch)));
                s = state.lock().unwrap();
                want = want.saturating_sub(1);
                continue;
            }
            if s.shutdowns > 0 {
                return;
            }
            s = cv.wait(s).unwrap();
        }
    }

    fn state<R>(&self, f: impl FnOnce(&ServerState) -> R) -> R {
        f(&self.0.0.lock().unwrap())
    }
}

struct ServerFace(Server);

impl batchlab::engine::ConcurrentEngine for ServerFace {
    fn generate(&self, batch: Vec<EngineRequest>, done: batchlab::engine::GenerateDone) {
        self.0.generate(batch, done);
    }
}

/// An engine whose generates run on the [`Server`]: several at once, through its concurrent face.
struct ConcurrentLoomEngine {
    server: Server,
    face: std::sync::Arc<ServerFace>,
}

impl ConcurrentLoomEngine {
    fn new(server: &Server) -> Self {
        ConcurrentLoomEngine { server: server.clone(), face: std::sync::Arc::new(ServerFace(server.clone())) }
    }
}

impl Engine for ConcurrentLoomEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        let concurrent = batchlab::engine::Concurrent::new(self.face.clone());
        Ok(Started { info: EngineInfo::new("loom-http", "0"), concurrent: Some(concurrent) })
    }

    fn generate(&mut self, _batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        panic!("with max_in_flight > 1 the batcher hands batches to the concurrent face");
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.server.shutdown();
        Ok(())
    }
}

/// Two batches of one, with two in flight, on a concurrent engine.
fn two_in_flight(server: &Server) -> Batcher {
    let config = config(1).with_max_in_flight(2).unwrap();
    Batcher::spawn(ConcurrentLoomEngine::new(server), config, std::sync::Arc::new(Frozen))
}

/// Two batches are out at once and answered newest first, on the server's thread, while a third
/// submit races the shutdown: every admitted request gets its own answer, and the engine is shut
/// down once, after both (all) `done`s. A batcher that sends the second batch only after the
/// first returned deadlocks the server; a `done` matched to the wrong batch, a lost wake-up of
/// the engine thread when a slot frees, or an engine shutdown before the last `done` fails.
#[test]
fn two_batches_in_flight_answered_out_of_order_on_another_thread_racing_submit_and_shutdown() {
    model(|| {
        let server = Server::default();
        let b = two_in_flight(&server);
        b.preload().unwrap();
        let first = b.submit(request()).unwrap();
        let second = b.submit(request()).unwrap();
        let s = server.clone();
        let server_thread = thread::spawn(move || s.serve(2));
        let b2 = b.clone();
        let submitter = thread::spawn(move || submit_and_wait(&b2));
        b.shutdown().unwrap();
        let third = submitter.join().unwrap();
        for (ticket, id) in [(first, 0), (second, 1)] {
            let c = ticket.wait().expect("answered");
            assert_eq!(c.output.request_id, Some(id), "an answer for another batch");
        }
        assert_eq!(third.unwrap_or(Ok(())), Ok(()));
        server_thread.join().unwrap();
        server.state(|s| {
            assert_eq!(s.shutdowns, 1, "the engine was not shut down");
            assert_eq!(s.answered_at_shutdown, s.generates, "the engine shut down before the last done");
        });
    });
}

/// A death reported by a watcher races two generates out on a concurrent engine (answered on the
/// server's thread, newest first) and the shutdown: everyone is answered (by the engine or by the
/// death), shutdown returns, and the engine is shut down once, only after both `done`s came back
/// (a late result after the death is discarded).
#[test]
fn a_death_racing_two_concurrent_generates_answers_everyone_and_the_engine_stops_after_both_dones() {
    model(|| {
        let server = Server::default();
        let b = two_in_flight(&server);
        b.preload().unwrap();
        let tickets = [b.submit(request()).unwrap(), b.submit(request()).unwrap()];
        let s = server.clone();
        let server_thread = thread::spawn(move || s.serve(1));
        let death = EngineDeath::new("server", None, "killed");
        let (b2, d2) = (b.clone(), death.clone());
        let watcher = thread::spawn(move || b2.engine_died(d2));
        b.shutdown().unwrap();
        watcher.join().unwrap();
        for ticket in tickets {
            match ticket.wait() {
                Ok(_) => {}
                Err(e) => assert_eq!(e, RequestError::EngineDied(death.clone())),
            }
        }
        // The server answers whatever is out, then stops at the engine's shutdown.
        server_thread.join().unwrap();
        server.state(|s| {
            assert_eq!(s.shutdowns, 1, "the engine was not shut down after its generates returned");
            assert_eq!(s.answered_at_shutdown, s.generates);
        });
    });
}
