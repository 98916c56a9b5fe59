//! Model checking of the threaded batcher with loom: every interleaving (up to the preemption
//! bound) of submitters, the engine thread, a shutdown and an engine death reported by a watcher.
//!
//! Run with `just test-loom` (`RUSTFLAGS="--cfg loom" cargo test --release --test loom_batcher`).
//! A lost wake-up or a waiter left hanging shows up as a loom deadlock; two generates at once,
//! a generate after the engine's shutdown, or a second engine shutdown fail the engine's own
//! assertions; a lock-order violation panics in `batchlab::sync::ordered`.
#![cfg(loom)]

use std::time::Duration;

use batchlab::batcher::{BatchConfig, Batcher, RequestError};
use batchlab::engine::{Engine, EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest};
use batchlab::sync::Arc;
use batchlab::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

#[derive(Clone, Default)]
struct Probe {
    starts: Arc<AtomicUsize>,
    generates: Arc<AtomicUsize>,
    in_generate: Arc<AtomicBool>,
    shutdowns: Arc<AtomicUsize>,
}

struct LoomEngine {
    probe: Probe,
    fail: bool,
}

impl Engine for LoomEngine {
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        self.probe.starts.fetch_add(1, Ordering::SeqCst);
        Ok(EngineInfo { name: "loom".into(), version: "0".into(), resolved_config: None })
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        assert!(!self.probe.in_generate.swap(true, Ordering::SeqCst), "two generates at once");
        assert_eq!(self.probe.shutdowns.load(Ordering::SeqCst), 0, "generate after engine shutdown");
        self.probe.generates.fetch_add(1, Ordering::SeqCst);
        self.probe.in_generate.store(false, Ordering::SeqCst);
        if self.fail {
            return Err(EngineError::Generate("injected".into()));
        }
        Ok(common::echo(batch))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        assert!(!self.probe.in_generate.load(Ordering::SeqCst), "shutdown during generate");
        assert_eq!(self.probe.shutdowns.fetch_add(1, Ordering::SeqCst), 0, "engine shut down twice");
        Ok(())
    }
}

fn batcher(batch_size: usize, fail: bool) -> (Batcher, Probe) {
    let probe = Probe::default();
    let config = BatchConfig::new(batch_size, Duration::from_secs(3600)).unwrap();
    let b = Batcher::spawn(LoomEngine { probe: probe.clone(), fail }, config, std::sync::Arc::new(Frozen));
    (b, probe)
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// A submitter: returns whether its request was admitted and how it ended.
fn submit_and_wait(b: &Batcher) -> Option<Result<(), RequestError>> {
    match b.submit(EngineRequest::tokens(0, vec![1], 1)) {
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
            if let Ok(t) = b2.submit(EngineRequest::tokens(0, vec![1], 1)) {
                drop(t);
            }
        });
        let mine = b.submit(EngineRequest::tokens(0, vec![1], 1)).unwrap();
        canceller.join().unwrap();
        // Time is frozen, so a lone request can only leave the queue through a full batch or the
        // drain at shutdown; waiting before shutdown could (rightly) wait forever.
        b.shutdown().unwrap();
        let mine = Some(mine.wait().map(|_| ()));
        assert!(matches!(mine, Some(Ok(()))), "{mine:?}");
    });
}

/// An engine whose generate blocks until the test opens the gate: as stuck as a dead engine's
/// generate for as long as the test wants.
struct GatedEngine {
    gate: Arc<(loom::sync::Mutex<bool>, loom::sync::Condvar)>,
    shutdowns: Arc<AtomicUsize>,
    in_generate: Arc<AtomicBool>,
}

impl Engine for GatedEngine {
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        Ok(EngineInfo { name: "loom".into(), version: "0".into(), resolved_config: None })
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.in_generate.store(true, Ordering::SeqCst);
        let (open, cv) = &*self.gate;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
        self.in_generate.store(false, Ordering::SeqCst);
        Ok(common::echo(batch))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        assert!(!self.in_generate.load(Ordering::SeqCst), "shutdown during a stuck generate");
        assert_eq!(self.shutdowns.fetch_add(1, Ordering::SeqCst), 0, "engine shut down twice");
        Ok(())
    }
}

#[test]
fn engine_death_from_a_watcher_releases_shutdown_while_generate_is_stuck() {
    model(|| {
        let gate = Arc::new((loom::sync::Mutex::new(false), loom::sync::Condvar::new()));
        let shutdowns = Arc::new(AtomicUsize::new(0));
        let engine = GatedEngine {
            gate: gate.clone(),
            shutdowns: shutdowns.clone(),
            in_generate: Arc::new(AtomicBool::new(false)),
        };
        let config = BatchConfig::new(1, Duration::from_secs(3600)).unwrap();
        let b = Batcher::spawn(engine, config, std::sync::Arc::new(Frozen));
        let ticket = b.submit(EngineRequest::tokens(0, vec![1], 1)).unwrap();
        let death = EngineDeath { process: "core".into(), pid: None, status: "killed by SIGKILL".into() };
        let (b2, d2) = (b.clone(), death.clone());
        let watcher = thread::spawn(move || b2.engine_died(d2));
        // Shutdown cannot wait for the generate (the gate opens only after it returns): only the
        // death can end its wait. A lost wake-up is a loom deadlock.
        b.shutdown().unwrap();
        watcher.join().unwrap();
        // Whether the death came before the dispatch or during the generate, it is the answer.
        assert_eq!(ticket.wait().err(), Some(RequestError::EngineDied(death.clone())));
        assert_eq!(b.submit(EngineRequest::tokens(0, vec![1], 1)).err(), Some(RequestError::EngineDied(death)));
        let (open, cv) = &*gate;
        *open.lock().unwrap() = true;
        cv.notify_all();
    });
}
