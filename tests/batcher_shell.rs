//! The threaded batcher with real threads: lifecycle, cancellation, fan-out of failures, logging.
//!
//! Engines here are mockall mocks or small hand-written engines. Nothing sleeps to let things
//! settle: every test waits on an outcome or on a join, and the only real-time waits are the
//! timeouts under test (tens of milliseconds).

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::Duration;

use batchlab::batcher::virtual_time::VirtualTimeBatcher;
use batchlab::batcher::{BatchConfig, BatchRun, Batcher, Outcome, OutcomeSink, RequestError, State};
use batchlab::engine::faults::{FaultTrigger, Faults, FaultyEngine};
use batchlab::engine::sim::{CostModel, SimConfig, SimEngine};
use batchlab::engine::{
    ClockDomain, Engine, EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, RequestId, Started,
};
use batchlab::time::MonotonicClock;
use mockall::mock;

mod common;
use common::echo;

mock! {
    pub Eng {}
    impl Engine for Eng {
        fn start(&mut self) -> Result<Started, EngineError>;
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError>;
        fn shutdown(&mut self) -> Result<(), EngineError>;
        fn clock_domain(&self) -> ClockDomain;
    }
}

/// Far above any legitimate wait here; reaching it means a waiter hangs.
const LIMIT: Duration = Duration::from_secs(20);

fn info() -> EngineInfo {
    EngineInfo::new("mock", "0")
}

fn req() -> EngineRequest<()> {
    EngineRequest::tokens(vec![1, 2], 3)
}

fn config(batch_size: usize, timeout: Duration) -> BatchConfig {
    BatchConfig::new(batch_size, timeout).expect("valid config")
}

fn spawn(engine: impl Engine + 'static, config: BatchConfig) -> Batcher {
    Batcher::spawn(engine, config, Arc::new(MonotonicClock))
}

/// Eight threads race to preload and submit: one load, one shutdown. The first generate waits,
/// inside the engine, until a submit from another thread got in while it runs (the engine thread
/// holds no batcher lock during a generate; the next batch waits for this one). With the lock held
/// that submit could not get in: the generate gives up after `LIMIT` and its batch fails.
#[test]
fn mock_engine_loads_once_lets_submits_in_during_a_generate_and_shuts_down_once() {
    let generates = Arc::new(AtomicUsize::new(0));
    // The first generate says it is running, then waits for one submit made meanwhile.
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (admitted_tx, admitted_rx) = mpsc::channel::<()>();
    let (entered_tx, admitted_rx) = (Mutex::new(entered_tx), Mutex::new(admitted_rx));
    let mut e = MockEng::new();
    e.expect_start().times(1).returning(|| Ok(info().into()));
    let count = generates.clone();
    e.expect_generate().returning(move |b| {
        if count.fetch_add(1, Ordering::SeqCst) == 0 {
            entered_tx.lock().unwrap().send(()).expect("the test waits for the first generate");
            admitted_rx
                .lock()
                .unwrap()
                .recv_timeout(LIMIT)
                .unwrap_or_else(|_| panic!("no submit got in during a generate within {LIMIT:?}"));
        }
        Ok(echo(b))
    });
    e.expect_shutdown().times(1).returning(|| Ok(()));
    e.expect_clock_domain().return_const(ClockDomain::Monotonic);

    let b = spawn(e, config(4, Duration::from_millis(1)));
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (b, barrier) = (b.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                b.preload().expect("preload");
                let tickets: Vec<_> = (0..25).map(|_| b.submit(req()).expect("submit")).collect();
                tickets
                    .into_iter()
                    .map(|t| {
                        t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")).is_ok()
                    })
                    .filter(|ok| *ok)
                    .count()
            })
        })
        .collect();
    entered_rx.recv_timeout(LIMIT).expect("a first generate");
    let during = b.submit(req()).expect("a submit while a generate runs");
    admitted_tx.send(()).expect("the first generate waits for it");
    let ok: usize = handles.into_iter().map(|h| h.join().expect("submitter")).sum();
    assert!(during.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}")).is_ok());
    assert_eq!(ok, 200, "every request of the racing submitters completes");
    b.shutdown().expect("shutdown");
    b.shutdown().expect("second shutdown is harmless");
    assert_eq!(b.state(), State::Stopped);
}

#[test]
fn submit_starts_the_engine_lazily_and_once() {
    let starts = Arc::new(AtomicUsize::new(0));
    let mut e = MockEng::new();
    let s = starts.clone();
    e.expect_start().returning(move || {
        s.fetch_add(1, Ordering::SeqCst);
        Ok(info().into())
    });
    e.expect_generate().returning(|b| Ok(echo(b)));
    e.expect_shutdown().times(1).returning(|| Ok(()));
    let b = spawn(e, config(2, Duration::from_millis(1)));
    let tickets: Vec<_> = (0..5).map(|_| b.submit(req()).expect("submit")).collect();
    for t in tickets {
        assert!(t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")).is_ok());
    }
    b.shutdown().expect("shutdown");
    assert_eq!(starts.load(Ordering::SeqCst), 1);
}

#[test]
fn submit_after_shutdown_is_rejected_and_start_after_stop_fails() {
    let mut e = MockEng::new();
    e.expect_start().times(1).returning(|| Ok(info().into()));
    e.expect_shutdown().times(1).returning(|| Ok(()));
    let b = spawn(e, config(2, Duration::from_millis(1)));
    b.preload().expect("preload");
    b.shutdown().expect("shutdown");
    assert_eq!(b.submit(req()).err(), Some(RequestError::ShuttingDown));
    assert!(b.preload().is_err(), "start after stop is an error");
}

#[test]
fn shutdown_before_start_never_loads_or_stops_the_engine() {
    let mut e = MockEng::new();
    e.expect_start().times(0);
    e.expect_shutdown().times(0);
    let b = spawn(e, config(2, Duration::from_millis(1)));
    b.shutdown().expect("shutdown");
    assert_eq!(b.state(), State::Stopped);
}

#[test]
fn failed_start_answers_every_waiter() {
    let mut e = MockEng::new();
    e.expect_start().times(1).returning(|| Err(EngineError::Start("no model".into())));
    e.expect_shutdown().times(1).returning(|| Ok(()));
    let b = spawn(e, config(8, Duration::from_secs(60)));
    let tickets: Vec<_> = (0..3).filter_map(|_| b.submit(req()).ok()).collect();
    for t in tickets {
        assert_eq!(
            t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")).err(),
            Some(RequestError::StartFailed("no model".into()))
        );
    }
    assert_eq!(b.preload().err(), Some(RequestError::StartFailed("no model".into())));
    b.shutdown().expect("shutdown");
}

#[test]
fn shutdown_dispatches_pending_then_stops_engine() {
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut e = MockEng::new();
    e.expect_start().returning(|| Ok(info().into()));
    let o = order.clone();
    e.expect_generate().returning(move |b| {
        o.lock().unwrap().push(format!("generate {}", b.len()));
        Ok(echo(b))
    });
    let o = order.clone();
    e.expect_shutdown().times(1).returning(move || {
        o.lock().unwrap().push("shutdown".into());
        Ok(())
    });
    // A huge timeout: only shutdown can flush the partial batch.
    let b = spawn(e, config(10, Duration::from_secs(3600)));
    let tickets: Vec<_> = (0..3).map(|_| b.submit(req()).expect("submit")).collect();
    b.shutdown().expect("shutdown");
    for t in tickets {
        assert!(t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")).is_ok());
    }
    assert_eq!(*order.lock().unwrap(), ["generate 3", "shutdown"]);
}

#[test]
fn dropped_ticket_is_never_sent_to_the_engine() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut e = MockEng::new();
    e.expect_start().returning(|| Ok(info().into()));
    let s = seen.clone();
    e.expect_generate().returning(move |b| {
        s.lock().unwrap().extend(b.iter().map(|r| r.id));
        Ok(echo(b))
    });
    e.expect_shutdown().returning(|| Ok(()));
    let b = spawn(e, config(2, Duration::from_secs(3600)));
    b.preload().expect("preload");
    let dropped = b.submit(req()).expect("submit");
    let dropped_id = dropped.id();
    drop(dropped);
    let kept: Vec<_> = (0..2).map(|_| b.submit(req()).expect("submit")).collect();
    let kept_ids: Vec<_> = kept.iter().map(|t| t.id()).collect();
    for t in kept {
        assert!(t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")).is_ok());
    }
    b.shutdown().expect("shutdown");
    assert_eq!(*seen.lock().unwrap(), kept_ids);
    assert!(!seen.lock().unwrap().contains(&dropped_id));
}

#[test]
fn engine_panic_fans_out_to_every_waiter() {
    let mut e = MockEng::new();
    e.expect_start().returning(|| Ok(info().into()));
    e.expect_generate().returning(|_| panic!("kaboom"));
    e.expect_shutdown().returning(|| Ok(()));
    let b = spawn(e, config(3, Duration::from_millis(1)));
    let tickets: Vec<_> = (0..3).map(|_| b.submit(req()).expect("submit")).collect();
    for t in tickets {
        match t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")) {
            Err(RequestError::EnginePanicked { batch_size: 3, message, .. }) => assert_eq!(message, "kaboom"),
            other => panic!("expected a panic outcome, got {other:?}"),
        }
    }
    b.shutdown().expect("shutdown");
}

#[test]
fn output_count_mismatch_fans_out_to_every_waiter() {
    let mut e = MockEng::new();
    e.expect_start().returning(|| Ok(info().into()));
    e.expect_generate().returning(|b| Ok(echo(&b[1..])));
    e.expect_shutdown().returning(|| Ok(()));
    let b = spawn(e, config(3, Duration::from_millis(1)));
    let tickets: Vec<_> = (0..3).map(|_| b.submit(req()).expect("submit")).collect();
    for t in tickets {
        assert!(matches!(
            t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")),
            Err(RequestError::OutputCountMismatch { expected: 3, got: 2, .. })
        ));
    }
    b.shutdown().expect("shutdown");
}

/// An engine whose generate blocks until released: a hang, as far as any timeout can tell.
struct Stuck {
    release: Mutex<mpsc::Receiver<()>>,
}

impl Engine for Stuck {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(info().into())
    }
    fn generate(&mut self, b: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let _ = self.release.lock().unwrap().recv();
        Ok(echo(b))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

#[test]
fn hung_generate_is_failed_by_the_watchdog_and_shutdown_does_not_hang() {
    let (tx, rx) = mpsc::channel();
    let config = config(2, Duration::from_millis(1)).with_generate_timeout(Some(Duration::from_millis(30))).unwrap();
    let b = spawn(Stuck { release: Mutex::new(rx) }, config);
    let hung: Vec<_> = (0..2).map(|_| b.submit(req()).expect("submit")).collect();
    for t in hung {
        assert!(matches!(
            t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")),
            Err(RequestError::GenerateTimedOut { batch_size: 2, .. })
        ));
    }
    // The engine thread is still stuck: a new request waits at most generate_timeout.
    let waiting = b.submit(req()).expect("admitted while the engine is stuck");
    assert!(matches!(
        waiting.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")),
        Err(RequestError::EngineUnresponsive { .. })
    ));
    b.shutdown().expect("shutdown returns with the engine wedged");
    let _ = tx.send(());
}

#[test]
fn hung_partial_batch_is_caught_by_the_watchdog() {
    // The partial batch goes out on its batch timeout, 20 ms after the last notification: by
    // then the watchdog sleeps with no deadline, so it must be woken by the dispatch itself.
    let (tx, rx) = mpsc::channel();
    let config = config(2, Duration::from_millis(20)).with_generate_timeout(Some(Duration::from_millis(30))).unwrap();
    let b = spawn(Stuck { release: Mutex::new(rx) }, config);
    let lone = b.submit(req()).expect("submit");
    let outcome = lone.wait_timeout(Duration::from_secs(5)).unwrap_or_else(|_| panic!("the watchdog never fired"));
    assert!(matches!(outcome, Err(RequestError::GenerateTimedOut { batch_size: 1, .. })), "{outcome:?}");
    b.shutdown().expect("shutdown");
    let _ = tx.send(());
}

#[test]
fn engine_that_comes_back_after_a_timeout_serves_again() {
    let (tx, rx) = mpsc::channel();
    let config = config(1, Duration::from_millis(1)).with_generate_timeout(Some(Duration::from_millis(200))).unwrap();
    let b = spawn(Stuck { release: Mutex::new(rx) }, config);
    let first = b.submit(req()).expect("submit");
    assert!(matches!(
        first.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang")),
        Err(RequestError::GenerateTimedOut { .. })
    ));
    // Release the stuck generate (its late result is discarded) and the next one in advance:
    // the second request is served well within its 200 ms bound.
    tx.send(()).unwrap();
    tx.send(()).unwrap();
    let second = b.submit(req()).expect("submit");
    let second_id = second.id();
    let c = second
        .wait_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang"))
        .expect("served after the engine came back");
    assert_eq!(c.output.request_id, Some(second_id));
    b.shutdown().expect("shutdown");
}

/// An engine whose generate says it entered, then blocks until the test releases it (or drops the
/// release sender: a generate that never returns while the test runs), then answers `answer`.
struct Gated {
    entered: mpsc::Sender<()>,
    release: Mutex<mpsc::Receiver<()>>,
    answer: fn(&[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError>,
    shutdowns: Arc<AtomicUsize>,
}

impl Engine for Gated {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(info().into())
    }
    fn generate(&mut self, b: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let _ = self.entered.send(());
        let _ = self.release.lock().unwrap().recv();
        (self.answer)(b)
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A gated batcher (batch_size 2, no generate timeout) with a full batch stuck inside generate
/// and one request queued behind it. Returns the batcher, the two stuck and the one queued
/// tickets, the release sender and the engine's shutdown count.
#[allow(clippy::type_complexity)]
fn stuck_batcher(
    answer: fn(&[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError>,
) -> (Batcher, Vec<batchlab::batcher::Ticket>, mpsc::Sender<()>, Arc<AtomicUsize>) {
    let (entered_tx, entered) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let shutdowns = Arc::new(AtomicUsize::new(0));
    let engine = Gated { entered: entered_tx, release: Mutex::new(release_rx), answer, shutdowns: shutdowns.clone() };
    let b = spawn(engine, config(2, Duration::from_secs(3600)));
    let mut tickets: Vec<_> = (0..2).map(|_| b.submit(req()).expect("submit")).collect();
    entered.recv_timeout(LIMIT).expect("the full batch reached generate");
    tickets.push(b.submit(req()).expect("queued behind the stuck generate"));
    (b, tickets, release, shutdowns)
}

fn death() -> EngineDeath {
    EngineDeath::new("VLLM::EngineCore", Some(4242), "killed by SIGKILL")
}

/// `shutdown` on another thread, which must return within `LIMIT` however stuck the engine is.
fn shutdown_returns(b: &Batcher) -> Result<(), EngineError> {
    let (done, result) = mpsc::channel();
    let b = b.clone();
    std::thread::spawn(move || {
        let _ = done.send(b.shutdown());
    });
    result.recv_timeout(LIMIT).unwrap_or_else(|_| panic!("shutdown did not return within {LIMIT:?}: a hang"))
}

#[test]
fn engine_death_from_another_thread_answers_everyone_while_generate_never_returns() {
    let (b, tickets, release, shutdowns) = stuck_batcher(|b| Ok(echo(b)));
    let watcher = b.clone();
    std::thread::spawn(move || watcher.engine_died(death())).join().expect("watcher");
    // Answers come from the call that caused them: they are there when it returns.
    for mut t in tickets {
        let outcome = t.try_take().expect("answered by the death itself");
        assert_eq!(outcome.err(), Some(RequestError::EngineDied(death())));
    }
    assert_eq!(b.submit(req()).err(), Some(RequestError::EngineDied(death())), "later submits fail at once");
    assert_eq!(b.state(), State::Failed);
    b.engine_died(death());
    shutdown_returns(&b).expect("shutdown");
    b.engine_died(death());
    assert_eq!(shutdowns.load(Ordering::SeqCst), 0, "the engine was shut down under a running generate");
    assert_eq!(b.preload().err(), Some(RequestError::EngineDied(death())));
    drop(release);
}

#[test]
fn engine_death_releases_a_shutdown_that_waits_for_a_stuck_generate() {
    let (b, tickets, release, _) = stuck_batcher(|b| Ok(echo(b)));
    // Shutdown (the first Ctrl-C) waits for the stuck generate until the watcher sees the death;
    // either order of the two must end with everyone answered.
    let (done, result) = mpsc::channel();
    let closer = b.clone();
    std::thread::spawn(move || {
        let _ = done.send(closer.shutdown());
    });
    b.engine_died(death());
    result.recv_timeout(LIMIT).expect("shutdown returned after the death").expect("shutdown");
    // Answers come from the call that caused them: they are there when it returns.
    for mut t in tickets {
        let outcome = t.try_take().expect("answered by the death itself");
        assert_eq!(outcome.err(), Some(RequestError::EngineDied(death())));
    }
    drop(release);
}

#[test]
fn abort_in_flight_abandons_the_stuck_generate_and_shutdown_returns() {
    let (b, tickets, release, shutdowns) = stuck_batcher(|b| Ok(echo(b)));
    b.abort_in_flight();
    for mut t in tickets {
        let outcome = t.try_take().expect("answered by the abort itself");
        assert_eq!(outcome.err(), Some(RequestError::Aborted));
    }
    assert_eq!(b.submit(req()).err(), Some(RequestError::Aborted));
    b.abort_in_flight();
    shutdown_returns(&b).expect("shutdown");
    assert_eq!(shutdowns.load(Ordering::SeqCst), 0);
    drop(release);
}

#[test]
fn generate_reporting_death_fails_batch_and_queue_and_the_engine_is_released_once() {
    let (b, tickets, release, shutdowns) = stuck_batcher(|_| Err(EngineError::Died(death())));
    release.send(()).expect("release the generate");
    for t in tickets {
        let outcome = t.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}: a hang"));
        assert_eq!(outcome.err(), Some(RequestError::EngineDied(death())));
    }
    assert_eq!(b.submit(req()).err(), Some(RequestError::EngineDied(death())));
    shutdown_returns(&b).expect("shutdown");
    // No generate was stuck, so the dead engine's shutdown ran, once, before shutdown returned.
    assert_eq!(shutdowns.load(Ordering::SeqCst), 1);
    assert_eq!(b.state(), State::Stopped);
}

#[test]
fn completer_may_submit_again() {
    // A closed-loop client submits its next request from the completion callback: completers run
    // with no batcher lock held, so this must neither deadlock nor violate the lock order.
    let mut e = MockEng::new();
    e.expect_start().returning(|| Ok(info().into()));
    e.expect_generate().returning(|b| Ok(echo(b)));
    e.expect_shutdown().returning(|| Ok(()));
    let b = spawn(e, config(1, Duration::from_millis(1)));
    let (done_tx, done_rx) = mpsc::channel();
    fn chain(b: Batcher, left: u32, done: mpsc::Sender<u32>) {
        let next = b.clone();
        b.submit_with(
            req(),
            Box::new(move |_, outcome| {
                assert!(outcome.is_ok());
                if left == 0 {
                    let _ = done.send(0);
                } else {
                    chain(next, left - 1, done);
                }
            }),
        )
        .expect("submit");
    }
    chain(b.clone(), 5, done_tx);
    assert_eq!(done_rx.recv_timeout(LIMIT), Ok(0));
    b.shutdown().expect("shutdown");
}

/// What a sink and an observer saw, in order: `batch N` for the observer, the ids of a sink call.
#[derive(Debug, PartialEq)]
enum Seen {
    Batch(u64),
    Outcomes(Vec<RequestId>),
}

/// The log of what the observer and the sink saw, shared with them.
type SeenLog = Arc<Mutex<Vec<Seen>>>;

/// A batcher whose observer and sink log into one list, the list, and each sink call's outcomes.
/// A batcher whose sink sends each call's outcomes down the channel, and records the thread it
/// was called on (the engine thread, for an engine without a concurrent face).
fn sunk(batch_size: usize, timeout: Duration) -> (Batcher, SeenLog, mpsc::Receiver<Vec<Outcome>>, Arc<AtomicI32>) {
    let mut e = MockEng::new();
    e.expect_start().times(1).returning(|| Ok(info().into()));
    e.expect_generate().returning(|b| Ok(echo(b)));
    e.expect_shutdown().times(1).returning(|| Ok(()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s, o) = (seen.clone(), seen.clone());
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let sink_thread = Arc::new(AtomicI32::new(0));
    let t = sink_thread.clone();
    let observer = Box::new(move |b: &BatchRun| s.lock().unwrap().push(Seen::Batch(b.id)));
    let sink: OutcomeSink = Arc::new(move |outcomes: Vec<(RequestId, Outcome)>| {
        t.store(batchlab::sys::current_thread_id(), Ordering::SeqCst);
        o.lock().unwrap().push(Seen::Outcomes(outcomes.iter().map(|(id, _)| *id).collect()));
        let _ = tx.lock().unwrap().send(outcomes.into_iter().map(|(_, outcome)| outcome).collect());
    });
    let b =
        Batcher::spawn_with_sink(e, config(batch_size, timeout), Arc::new(MonotonicClock), Some(observer), Some(sink));
    (b, seen, rx, sink_thread)
}

/// Waits until thread `tid` of this process sleeps (`S` in `/proc/self/task/<tid>/stat`). Nothing
/// else holds the batcher's lock in these tests, so an engine thread asleep is one in its timed wait.
fn wait_until_asleep(tid: i32) {
    let start = std::time::Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).expect("the thread's stat");
        // The state follows the command's closing parenthesis.
        let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
        if state == Some(Some('S')) {
            return;
        }
        assert!(start.elapsed() < LIMIT, "thread {tid} never slept: {stat}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_sink_gets_a_batchs_outcomes_in_one_call_after_the_observer_and_each_once() {
    let (b, seen, rx, sink_thread) = sunk(4, Duration::from_secs(3600));
    // Two full batches, the second submitted once the first was answered and the engine thread is
    // asleep until its idle tick, an hour away: only the full batch can wake it. (Submitted while
    // the engine thread was still on its way to sleep, the batch would be seen without a wake.) A
    // request with a callback of its own among them still gets it there.
    let ids: Vec<RequestId> = (0..4).map(|_| b.submit_to_sink(req()).expect("submit")).collect();
    let first = rx.recv_timeout(LIMIT).expect("the first batch's outcomes");
    wait_until_asleep(sink_thread.load(Ordering::SeqCst));
    let ticket = b.submit(req()).expect("submit");
    let more: Vec<RequestId> = (0..3).map(|_| b.submit_to_sink(req()).expect("submit")).collect();
    let second = rx.recv_timeout(LIMIT).expect("the second batch's outcomes");
    for outcomes in [first, second] {
        assert!(outcomes.iter().all(|o| o.as_ref().is_ok_and(|c| c.batch_size == 4)), "{outcomes:?}");
    }
    assert_eq!(ticket.wait_timeout(LIMIT).ok().and_then(|o| o.ok()).map(|c| c.batch_id), Some(1));
    b.shutdown().expect("shutdown");
    // A rejected submit never reaches the sink.
    assert_eq!(b.submit_to_sink(req()), Err(RequestError::ShuttingDown));
    assert_eq!(*seen.lock().unwrap(), [Seen::Batch(0), Seen::Outcomes(ids), Seen::Batch(1), Seen::Outcomes(more)]);
    assert!(rx.try_recv().is_err(), "one call per batch");
}

#[test]
fn a_partial_batch_after_a_busy_spell_still_leaves_at_its_batch_timeout() {
    // After a full batch the engine thread sleeps one batch_timeout at most, and a submit into the
    // empty queue does not wake it: the partial batch must still leave, at its own deadline.
    let timeout = Duration::from_millis(30);
    let (b, seen, rx, _) = sunk(4, timeout);
    for _ in 0..4 {
        b.submit_to_sink(req()).expect("submit");
    }
    let full = rx.recv_timeout(LIMIT).expect("the full batch");
    assert_eq!(full.len(), 4);
    for round in 0..3 {
        let submitted = std::time::Instant::now();
        let id = b.submit_to_sink(req()).expect("submit");
        let partial = rx.recv_timeout(LIMIT).expect("the partial batch leaves");
        let c = partial[0].as_ref().expect("served");
        assert_eq!((partial.len(), c.output.request_id), (1, Some(id)), "round {round}");
        assert!(submitted.elapsed() >= timeout, "round {round}: left before its batch_timeout");
        assert!(c.times.dispatched.saturating_since(c.times.submitted) >= timeout, "round {round}");
    }
    b.shutdown().expect("shutdown");
    assert_eq!(seen.lock().unwrap().len(), 8, "four batches, each observed then sunk");
}

#[tracing_test::traced_test]
#[test]
fn failed_batch_logs_one_error_with_size_and_cause() {
    // On the test's own thread (the virtual driver), so the log lands in this test's scope.
    let faults = Faults { fail_batch: FaultTrigger::every(1), ..Faults::default() };
    let (engine, clock) =
        SimEngine::virtual_time(SimConfig { seed: 1, cost: CostModel::default(), ..SimConfig::default() });
    let engine = FaultyEngine::new(engine, faults, 1, std::sync::Arc::new(clock.clone()));
    let mut d = VirtualTimeBatcher::new(engine, config(3, Duration::from_millis(1)), clock);
    d.start().expect("start");
    for _ in 0..3 {
        d.submit(req()).expect("submit");
    }
    d.shutdown().expect("shutdown");
    logs_assert(|lines: &[&str]| {
        let errors: Vec<_> = lines.iter().filter(|l| l.contains("ERROR")).collect();
        match errors.as_slice() {
            [one] if one.contains("batch_size=3") && one.contains("injected failure") => Ok(()),
            other => Err(format!("expected one error naming batch_size=3 and the cause, got {other:?}")),
        }
    });
}

/// The engine starts lazily, at the first submit (there is no `start()` to call), and the one
/// error about an unstarted engine names only methods that exist.
#[test]
fn first_submit_starts_the_engine_and_the_not_started_text_names_real_methods() {
    let mut e = MockEng::new();
    e.expect_start().times(1).returning(|| Ok(info().into()));
    e.expect_generate().returning(|b| Ok(echo(b)));
    e.expect_shutdown().times(1).returning(|| Ok(()));
    e.expect_clock_domain().return_const(ClockDomain::Monotonic);
    let b = spawn(e, config(1, Duration::from_millis(1)));
    assert_eq!(b.state(), State::Created);
    let ticket = b.submit(req()).expect("a submit starts the engine; no start() comes first");
    let outcome = ticket.wait_timeout(LIMIT).unwrap_or_else(|_| panic!("no outcome within {LIMIT:?}"));
    assert!(outcome.is_ok(), "{outcome:?}");
    b.shutdown().expect("shutdown");
    let text = RequestError::EngineNotStarted.to_string();
    assert!(!text.contains("start()"), "there is no start(): {text}");
    assert!(text.contains("preload") && text.contains("first submit"), "{text}");
}
