//! The threaded batcher with several batches in flight (`batching.max_in_flight`) on a concurrent
//! engine: its `ConcurrentEngine` face answers each batch through `done`, on threads of its own,
//! inside `generate`, late, or never.
//!
//! Nothing sleeps to let things settle: every wait is on an outcome, a join, or a condition with a
//! bound (`LIMIT`), and the only real-time waits are the generate timeouts under test.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::Duration;

use batchlab::batcher::virtual_time::VirtualTimeBatcher;
use batchlab::batcher::{BatchConfig, BatchRun, Batcher, ConfigError, Outcome, RequestError, State};
use batchlab::engine::sim::{SimConfig, SimEngine};
use batchlab::engine::{
    ConcurrentEngine, Engine, EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, GenerateDone,
    RequestId, Started,
};
use batchlab::time::MonotonicClock;

mod common;
use common::echo;

/// Far above any legitimate wait here; reaching it means a waiter hangs.
const LIMIT: Duration = Duration::from_secs(20);

/// What the concurrent face does with each batch.
type Behaviour = Box<dyn Fn(Vec<EngineRequest>, GenerateDone) + Send + Sync>;

struct Face {
    behave: Behaviour,
    generates: AtomicUsize,
}

impl ConcurrentEngine for Face {
    fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
        self.generates.fetch_add(1, Ordering::SeqCst);
        (self.behave)(batch, done)
    }
}

/// How many times the engine was shut down, to wait on.
#[derive(Default)]
struct Shutdowns {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Shutdowns {
    fn add(&self) {
        *self.count.lock().unwrap() += 1;
        self.changed.notify_all();
    }

    fn count(&self) -> usize {
        *self.count.lock().unwrap()
    }

    /// Waits until the engine was shut down, at most `LIMIT`; the count then.
    fn wait(&self) -> usize {
        let c = self.count.lock().unwrap();
        *self.changed.wait_timeout_while(c, LIMIT, |c| *c == 0).unwrap().0
    }
}

/// An engine with a concurrent face; its own blocking `generate` answers as an engine that runs
/// one batch at a time would, and is counted.
struct Concurrent {
    face: Arc<Face>,
    blocking_generates: Arc<AtomicUsize>,
    shutdowns: Arc<Shutdowns>,
}

impl Engine for Concurrent {
    fn start(&mut self) -> Result<Started, EngineError> {
        let concurrent = batchlab::engine::Concurrent::new(self.face.clone());
        Ok(Started { info: EngineInfo::new("concurrent-mock", "0"), concurrent: Some(concurrent) })
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.blocking_generates.fetch_add(1, Ordering::SeqCst);
        Ok(echo(batch))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.shutdowns.add();
        Ok(())
    }
}

/// A concurrent engine behaving as `behave`, and its face and counters.
fn concurrent(behave: Behaviour) -> (Concurrent, Arc<Face>, Arc<AtomicUsize>, Arc<Shutdowns>) {
    let face = Arc::new(Face { behave, generates: AtomicUsize::new(0) });
    let (blocking, shutdowns) = (Arc::new(AtomicUsize::new(0)), Arc::new(Shutdowns::default()));
    let engine = Concurrent { face: face.clone(), blocking_generates: blocking.clone(), shutdowns: shutdowns.clone() };
    (engine, face, blocking, shutdowns)
}

fn config(batch_size: usize, max_in_flight: usize) -> BatchConfig {
    BatchConfig::new(batch_size, Duration::from_millis(1)).and_then(|c| c.with_max_in_flight(max_in_flight)).unwrap()
}

fn req() -> EngineRequest<()> {
    EngineRequest::tokens(vec![1, 2], 3)
}

fn wait(ticket: batchlab::batcher::Ticket) -> Outcome {
    ticket.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang"))
}

/// How many generates are out right now and the most ever, with a condvar to wait on them.
#[derive(Default)]
struct Overlap {
    counts: Mutex<(usize, usize)>,
    changed: Condvar,
}

impl Overlap {
    fn enter(&self) {
        let mut c = self.counts.lock().unwrap();
        c.0 += 1;
        c.1 = c.1.max(c.0);
        self.changed.notify_all();
    }

    /// Waits until `n` generates were out at once (at some moment), at most `LIMIT`.
    fn wait_for_peak(&self, n: usize) -> bool {
        let c = self.counts.lock().unwrap();
        let (c, _) = self.changed.wait_timeout_while(c, LIMIT, |c| c.1 < n).unwrap();
        c.1 >= n
    }

    fn leave(&self) {
        self.counts.lock().unwrap().0 -= 1;
    }

    fn peak(&self) -> usize {
        self.counts.lock().unwrap().1
    }
}

/// Batches really overlap: each generate, on a thread of the engine's, answers only once two
/// generates were out at the same moment, which a batcher running one at a time never gets to
/// (the first would wait `LIMIT` and fail its batch). Never more than `max_in_flight` are out;
/// every request gets one outcome, its own output, and its batch was told to the observer before
/// its outcome.
#[test]
fn batches_overlap_up_to_max_in_flight_and_each_request_gets_its_own_outcome_once() {
    let overlap = Arc::new(Overlap::default());
    let o = overlap.clone();
    let (engine, face, blocking, shutdowns) = concurrent(Box::new(move |batch, done| {
        o.enter();
        let o = o.clone();
        std::thread::spawn(move || {
            let overlapped = o.wait_for_peak(2);
            o.leave();
            done(if overlapped { Ok(echo(&batch)) } else { Err(EngineError::Generate("ran alone".into())) });
        });
    }));
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let l = log.clone();
    let observer = Box::new(move |b: &BatchRun| l.lock().unwrap().push(format!("batch {}", b.id)));
    let b = Batcher::spawn_observed(engine, config(2, 2), Arc::new(MonotonicClock), Some(observer));
    b.preload().expect("preload");
    let answers = Arc::new(Mutex::new(Vec::<(RequestId, Outcome)>::new()));
    let (all_in, all_in_rx) = mpsc::channel();
    let ids: Vec<RequestId> = (0..12)
        .map(|_| {
            let (answers, log, all_in) = (answers.clone(), log.clone(), all_in.clone());
            let complete = Box::new(move |id, outcome: Outcome| {
                if let Ok(c) = &outcome {
                    log.lock().unwrap().push(format!("outcome of batch {}", c.batch_id));
                }
                let mut a = answers.lock().unwrap();
                a.push((id, outcome));
                if a.len() == 12 {
                    let _ = all_in.send(());
                }
            });
            b.submit_with(req(), complete).expect("submit")
        })
        .collect();
    all_in_rx.recv_timeout(LIMIT).expect("every request answered");
    b.shutdown().expect("shutdown");
    let answers = answers.lock().unwrap();
    let mut answered: Vec<RequestId> = answers.iter().map(|a| a.0).collect();
    answered.sort_unstable();
    assert_eq!(answered, ids, "one outcome for each request, and none for another");
    for (id, outcome) in answers.iter() {
        let c = outcome.as_ref().unwrap_or_else(|e| panic!("request {id}: {e}"));
        assert_eq!(c.output.request_id, Some(*id), "an output given to the wrong request");
        assert_eq!(c.batch_size, 2, "batches are as full as batch_size");
    }
    assert_eq!(overlap.peak(), 2, "never more than max_in_flight generates out");
    assert_eq!(face.generates.load(Ordering::SeqCst), 6);
    assert_eq!(blocking.load(Ordering::SeqCst), 0, "with max_in_flight > 1, batches go to the concurrent face");
    assert_eq!(shutdowns.count(), 1);
    let log = log.lock().unwrap();
    for (i, line) in log.iter().enumerate() {
        if let Some(batch) = line.strip_prefix("outcome of ") {
            assert!(log[..i].iter().any(|l| l == batch), "{batch}'s outcome came before the observer heard of it");
        }
    }
}

/// A generate that never answers fails only its own batch at `generate_timeout`; the other slot
/// goes on serving. The late `done` is discarded, and the engine is shut down once, after it.
#[test]
fn a_generate_timeout_fails_only_its_batch_and_the_shutdown_waits_for_its_late_done() {
    let held: Arc<Mutex<Vec<GenerateDone>>> = Arc::default();
    let h = held.clone();
    let (engine, _face, _, shutdowns) = concurrent(Box::new(move |batch, done| {
        if batch[0].id == 0 {
            h.lock().unwrap().push(done);
        } else {
            done(Ok(echo(&batch)));
        }
    }));
    let config = config(1, 2).with_generate_timeout(Some(Duration::from_millis(50))).unwrap();
    let b = Batcher::spawn(engine, config, Arc::new(MonotonicClock));
    let stuck = b.submit(req()).expect("submit");
    let served: Vec<_> = (0..3).map(|_| b.submit(req()).expect("submit")).collect();
    for t in served {
        assert!(wait(t).is_ok(), "the free slot serves while the other generate is stuck");
    }
    assert!(matches!(wait(stuck), Err(RequestError::GenerateTimedOut { batch_size: 1, .. })));
    // Shutdown returns (everyone is answered, only the abandoned generate is out) without the
    // engine's shutdown: a generate is still out.
    let (closed, closed_rx) = mpsc::channel();
    let closer = b.clone();
    std::thread::spawn(move || closed.send(closer.shutdown()));
    closed_rx.recv_timeout(LIMIT).expect("shutdown returned").expect("shutdown");
    assert_eq!(shutdowns.count(), 0, "the engine shut down under a generate");
    // The late answer is discarded, and the engine thread shuts the engine down then.
    let late = held.lock().unwrap().pop().expect("the held done");
    late(Ok(Vec::new()));
    assert_eq!(shutdowns.wait(), 1, "the engine is shut down once, after its last generate");
}

/// `done` may come inside `generate`, on another thread, after a panic, or never (dropped): each
/// batch gets exactly one result, and a panic or a dropped `done` fails only its batch.
#[test]
fn done_inside_generate_on_another_thread_a_panic_or_a_dropped_done_each_answer_once() {
    let (engine, _face, _, shutdowns) = concurrent(Box::new(|batch, done| match batch[0].id % 5 {
        0 => done(Ok(echo(&batch))),
        1 => {
            std::thread::spawn(move || done(Ok(echo(&batch))));
        }
        2 => panic!("the engine broke"),
        3 => drop(done),
        _ => {
            done(Ok(echo(&batch)));
            panic!("after answering");
        }
    }));
    let b = Batcher::spawn(engine, config(1, 3), Arc::new(MonotonicClock));
    let tickets: Vec<_> = (0..10).map(|_| b.submit(req()).expect("submit")).collect();
    for t in tickets {
        let id = t.id();
        match (id % 5, wait(t)) {
            (0 | 1 | 4, Ok(c)) => assert_eq!(c.output.request_id, Some(id)),
            (2, Err(RequestError::EnginePanicked { message, .. })) => assert_eq!(message, "the engine broke"),
            (3, Err(RequestError::Engine { message, .. })) => assert!(message.contains("uncalled"), "{message}"),
            (_, other) => panic!("request {id}: {other:?}"),
        }
    }
    b.shutdown().expect("shutdown");
    assert_eq!(shutdowns.count(), 1);
}

/// An engine death fails every batch out and the queue at once; the engine's shutdown waits for
/// every generate to return.
#[test]
fn a_death_fails_every_batch_in_flight_and_the_queue() {
    let held: Arc<Mutex<Vec<GenerateDone>>> = Arc::default();
    let h = held.clone();
    let (entered, entered_rx) = mpsc::channel::<()>();
    let entered = Mutex::new(entered);
    let (engine, _face, _, shutdowns) = concurrent(Box::new(move |_batch, done| {
        h.lock().unwrap().push(done);
        let _ = entered.lock().unwrap().send(());
    }));
    let b = Batcher::spawn(engine, config(1, 2), Arc::new(MonotonicClock));
    let mut tickets: Vec<_> = (0..2).map(|_| b.submit(req()).expect("submit")).collect();
    for _ in 0..2 {
        entered_rx.recv_timeout(LIMIT).expect("both batches out");
    }
    tickets.push(b.submit(req()).expect("queued behind two generates"));
    let death = EngineDeath::new("server", None, "killed");
    b.engine_died(death.clone());
    for mut t in tickets {
        assert_eq!(t.try_take().expect("answered by the death").err(), Some(RequestError::EngineDied(death.clone())));
    }
    b.shutdown().expect("shutdown returns with both generates out");
    let dones: Vec<GenerateDone> = held.lock().unwrap().drain(..).collect();
    for (k, done) in dones.into_iter().enumerate() {
        assert_eq!(shutdowns.count(), 0, "shut down with {} generates out", 2 - k);
        done(Ok(Vec::new()));
    }
    assert_eq!(shutdowns.wait(), 1, "the engine is shut down once, after its last generate");
}

/// An engine that runs one generate at a time.
struct OneAtATime {
    shutdowns: Arc<AtomicUsize>,
}

impl Engine for OneAtATime {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("one-at-a-time", "0").into())
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        Ok(echo(batch))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn more_than_one_in_flight_is_refused_by_an_engine_that_runs_one_generate_at_a_time() {
    let shutdowns = Arc::new(AtomicUsize::new(0));
    let b = Batcher::spawn(OneAtATime { shutdowns: shutdowns.clone() }, config(1, 2), Arc::new(MonotonicClock));
    let refusal = "batching.max_in_flight = 2 needs an engine that runs several generates at once (an HTTP engine); \
                   one-at-a-time runs one at a time";
    assert_eq!(b.preload().err(), Some(RequestError::StartFailed(refusal.into())));
    assert_eq!(b.concurrent_engine().map(|_| ()), None);
    b.shutdown().expect("shutdown");
    assert_eq!(shutdowns.load(Ordering::SeqCst), 1, "the engine started, so it is shut down");
    // Started with one in flight, it is refused more later (a `[matrix]` of max_in_flight).
    let b = Batcher::spawn(OneAtATime { shutdowns: shutdowns.clone() }, config(1, 1), Arc::new(MonotonicClock));
    b.preload().expect("preload");
    assert_eq!(
        b.reconfigure(config(1, 3)),
        Err(ConfigError::NotConcurrent { max_in_flight: 3, engine: "one-at-a-time".into() })
    );
    assert!(wait(b.submit(req()).expect("submit")).is_ok(), "the refused settings changed nothing");
    b.shutdown().expect("shutdown");
    // Virtual time runs one generate at a time, whatever the engine: nothing is started.
    let (sim, clock) = SimEngine::virtual_time(SimConfig::default());
    let mut v = VirtualTimeBatcher::new(sim, config(1, 2), clock);
    let refused = v.start().expect_err("refused");
    assert!(refused.to_string().contains("virtual time runs one at a time"), "{refused}");
    assert_eq!(v.state(), State::Created);
    assert!(v.reconfigure(config(1, 4)).is_err());
    v.shutdown().expect("shutdown");
}

/// With max_in_flight = 1 a concurrent engine runs as today, one blocking generate at a time on
/// the engine thread; reconfigured above 1, batches go to its face. Its face is there from the
/// start to the shutdown, whatever max_in_flight says (the report reads the servers' counters).
#[test]
fn a_concurrent_engine_runs_one_generate_at_a_time_with_max_in_flight_one() {
    let (engine, face, blocking, _) = concurrent(Box::new(|batch, done| done(Ok(echo(&batch)))));
    let b = Batcher::spawn(engine, config(1, 1), Arc::new(MonotonicClock));
    assert!(b.concurrent_engine().is_none(), "no face before the start");
    b.preload().expect("preload");
    assert!(b.concurrent_engine().is_some());
    assert!(wait(b.submit(req()).expect("submit")).is_ok());
    assert_eq!((blocking.load(Ordering::SeqCst), face.generates.load(Ordering::SeqCst)), (1, 0));
    b.reconfigure(config(1, 4)).expect("a concurrent engine takes several in flight");
    assert!(wait(b.submit(req()).expect("submit")).is_ok());
    assert_eq!((blocking.load(Ordering::SeqCst), face.generates.load(Ordering::SeqCst)), (1, 1));
    b.shutdown().expect("shutdown");
    assert!(b.concurrent_engine().is_none(), "no face after the shutdown");
}
