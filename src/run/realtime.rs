//! [`RealTimeDriver`]: any engine on the threaded [`Batcher`] and the monotonic clock. Batches
//! and outcomes arrive from the batcher's threads over a channel, a batch's outcomes in one
//! message (the batcher's [`OutcomeSink`]): one wake-up of the waiting loop per batch, not per
//! request. Waiting blocks on that channel until the next message, the step's deadline or the
//! interrupt, whichever comes first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use super::driver::{Driver, DriverEvent, Stalled};
use super::engine_guard::{AbortAfterGrace, DeathWatch, EngineProcesses, engine_cpu_probe, shutdown_bounded};
use super::interrupt::{Interrupt, WakerGuard};
use crate::batcher::{
    BatchConfig, BatchRun, Batcher, ConfigError, FlushReason, Outcome, OutcomeSink, RequestError, StepPhases,
};
use crate::engine::{ClockDomain, Engine, EngineError, EngineInfo, EngineRequest, RequestId, Started, TakeSteps};
use crate::time::{Clock, MonotonicClock, Timestamp, WallAnchor};

/// What the channel carries.
enum Message {
    /// The engine ran a batch (sent before the batch's outcomes).
    Batch(BatchRun),
    /// Outcomes made ready together (a batch's), and when they were handed out: one clock reading
    /// for all, as they arrive at once.
    Outcomes(Vec<(RequestId, Outcome)>, Timestamp),
    /// The interrupt fired: stop waiting.
    Interrupted,
}

/// Real time over the threaded batcher.
pub(super) struct RealTimeDriver {
    /// Unset timeouts get a real engine's defaults, at every reconfigure too.
    real_engine: bool,
    batcher: Batcher,
    domain: ClockDomain,
    /// Held so that the channel never disconnects: `wait` always blocks.
    _tx: Sender<Message>,
    rx: Receiver<Message>,
    /// Messages received while waiting, not yet polled.
    ready: VecDeque<Message>,
    /// The outcomes of the message being polled, and when they arrived.
    outcomes: std::vec::IntoIter<(RequestId, Outcome)>,
    outcomes_at: Timestamp,
    _wake_on_interrupt: WakerGuard,
    guard: EngineGuard,
    /// An engine that batches by itself (vLLM with continuous admission): its steps are the
    /// batches, and the batcher's hand-overs are not counted.
    steps: Option<EngineSteps>,
    /// Whether the batcher's batches are the batches (cleared for an engine that reports steps).
    hand_overs_count: Arc<AtomicBool>,
}

/// Where an engine's steps are taken from, and the next step's number.
struct EngineSteps {
    take: TakeSteps,
    next_id: u64,
}

/// What keeps the engine from hanging the run (see [`super::engine_guard`]): the death watch
/// and the stall probe from start to shutdown, and the grace after the first interrupt.
struct EngineGuard {
    /// Whether an engine that does not name its processes runs some of its own all the same (the
    /// plan's Python engines): then the descendants alive at its start are taken for them.
    guess_processes: bool,
    death_watch: Option<DeathWatch>,
    interrupt: Interrupt,
    /// The engine started: from now on an interrupt starts the grace.
    started: Arc<AtomicBool>,
    grace: Arc<Mutex<Option<AbortAfterGrace>>>,
    _grace_on_interrupt: WakerGuard,
}

impl EngineGuard {
    fn new(batcher: &Batcher, interrupt: &Interrupt, guess_processes: bool) -> Self {
        let started = Arc::new(AtomicBool::new(false));
        let grace: Arc<Mutex<Option<AbortAfterGrace>>> = Arc::default();
        let (b, s, g) = (batcher.clone(), started.clone(), grace.clone());
        let guard = interrupt.on_fire(move || {
            if s.load(Ordering::SeqCst) {
                start_grace(&g, &b);
            }
        });
        EngineGuard {
            guess_processes,
            death_watch: None,
            interrupt: interrupt.clone(),
            started,
            grace,
            _grace_on_interrupt: guard,
        }
    }

    /// The engine started: watch its processes, sample its CPU time for the stall watch, and give
    /// an interrupt that came during the start its grace now.
    fn started(&mut self, batcher: &Batcher, info: &EngineInfo) {
        let processes = EngineProcesses::of(info, self.guess_processes);
        if let Some(processes) = &processes {
            self.death_watch = Some(DeathWatch::arm(batcher, processes));
        }
        let pids = processes.map(|p| p.pids).unwrap_or_default();
        let thread = info.engine_thread.or_else(|| batcher.engine_thread_id());
        batcher.set_progress_probe(engine_cpu_probe(thread, pids));
        self.started.store(true, Ordering::SeqCst);
        if self.interrupt.is_fired() {
            start_grace(&self.grace, batcher);
        }
    }

    /// Before a normal shutdown, whose processes exit on purpose.
    fn stand_down(&mut self) {
        self.started.store(false, Ordering::SeqCst);
        self.grace.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(watch) = self.death_watch.take() {
            watch.disarm();
        }
    }
}

fn start_grace(slot: &Mutex<Option<AbortAfterGrace>>, batcher: &Batcher) {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        *slot = Some(AbortAfterGrace::start(batcher));
    }
}

impl RealTimeDriver {
    /// `guess_processes`: the engine runs processes of its own (a Python engine), so when it does
    /// not name them, the descendants alive at its start are its processes. `real_engine`: the
    /// engine is a real one (not the simulator), so timeouts the plan left unset get a real
    /// engine's defaults ([`BatchConfig::with_real_engine_defaults`]), a library caller's engine
    /// included.
    pub(super) fn new<E: Engine + 'static>(
        engine: E,
        config: BatchConfig,
        interrupt: &Interrupt,
        guess_processes: bool,
        real_engine: bool,
    ) -> Self {
        let config = if real_engine { config.with_real_engine_defaults() } else { config };
        let domain = engine.clock_domain();
        let (tx, rx) = mpsc::channel::<Message>();
        let batch_tx = tx.clone();
        let outcome_tx = tx.clone();
        let sink: OutcomeSink = Arc::new(move |outcomes| {
            let _ = outcome_tx.send(Message::Outcomes(outcomes, MonotonicClock::read()));
        });
        let hand_overs_count = Arc::new(AtomicBool::new(true));
        let counting = hand_overs_count.clone();
        let batcher = Batcher::spawn_with_sink(
            engine,
            config,
            Arc::new(MonotonicClock),
            Some(Box::new(move |b: &BatchRun| {
                if counting.load(Ordering::SeqCst) {
                    let _ = batch_tx.send(Message::Batch(b.clone()));
                }
            })),
            Some(sink),
        );
        let wake_tx = tx.clone();
        let guard = interrupt.on_fire(move || {
            let _ = wake_tx.send(Message::Interrupted);
        });
        let engine_guard = EngineGuard::new(&batcher, interrupt, guess_processes);
        RealTimeDriver {
            real_engine,
            batcher,
            domain,
            _tx: tx,
            rx,
            ready: VecDeque::new(),
            outcomes: Vec::new().into_iter(),
            outcomes_at: Timestamp::ZERO,
            _wake_on_interrupt: guard,
            guard: engine_guard,
            steps: None,
            hand_overs_count,
        }
    }

    /// The engine's steps since the last call, as batches, ahead of the events already received:
    /// a step is recorded before the outcomes it produced are delivered.
    fn take_steps(&mut self) {
        let Some(steps) = &mut self.steps else { return };
        let taken = (steps.take)();
        let mut batches: Vec<Message> = taken
            .into_iter()
            .map(|step| {
                let id = steps.next_id;
                steps.next_id += 1;
                Message::Batch(BatchRun {
                    id,
                    size: (step.prefill + step.decode) as usize,
                    reason: FlushReason::Step,
                    dispatched_at: step.started,
                    returned_at: step.ended,
                    phases: Some(StepPhases { prefill: step.prefill, decode: step.decode }),
                })
            })
            .collect();
        while let Some(batch) = batches.pop() {
            self.ready.push_front(batch);
        }
    }
}

impl Driver for RealTimeDriver {
    fn start(&mut self) -> Result<Started, EngineError> {
        let info = self.batcher.preload().map_err(|e| match e {
            RequestError::StartFailed(m) => EngineError::Start(m),
            other => EngineError::Start(other.to_string()),
        })?;
        self.guard.started(&self.batcher, &info);
        let concurrent = self.batcher.concurrent_engine();
        // The engine's work runs elsewhere (a server): this loop keeps the books, and its wake-ups
        // must not preempt the client thread on its core (crate::sys::sched).
        if concurrent.as_ref().is_some_and(|c| !c.runs_here) {
            if let Err(e) = crate::sys::sched::yield_on_wakeup() {
                tracing::debug!(error = %e, "the run's loop keeps the default scheduling policy");
            }
        }
        if let Some(take) = concurrent.as_ref().and_then(|c| c.steps.clone()) {
            self.hand_overs_count.store(false, Ordering::SeqCst);
            self.steps = Some(EngineSteps { take, next_id: 0 });
        }
        Ok(Started { info, concurrent })
    }

    fn now(&self) -> Timestamp {
        MonotonicClock.now()
    }

    fn clock_domain(&self) -> ClockDomain {
        self.domain
    }

    fn wall_anchor(&self) -> WallAnchor {
        WallAnchor::now()
    }

    fn submit(&mut self, request: EngineRequest<()>) -> Result<RequestId, RequestError> {
        self.batcher.submit_to_sink(request)
    }

    fn cancel(&mut self, id: RequestId) {
        self.batcher.cancel(id);
    }

    fn poll_event(&mut self) -> Option<DriverEvent> {
        self.take_steps();
        loop {
            if let Some((id, outcome)) = self.outcomes.next() {
                return Some(DriverEvent::Outcome(id, outcome, self.outcomes_at));
            }
            let message = self.ready.pop_front().or_else(|| self.rx.try_recv().ok())?;
            match message {
                Message::Batch(b) => return Some(DriverEvent::Batch(b)),
                Message::Outcomes(outcomes, at) => (self.outcomes, self.outcomes_at) = (outcomes.into_iter(), at),
                // Only a wake-up.
                Message::Interrupted => {}
            }
        }
    }

    fn wait(&mut self, until: Option<Timestamp>) -> Result<(), Stalled> {
        // The driver holds a sender itself, so the channel never disconnects.
        let message = match until {
            None => self.rx.recv().ok(),
            Some(t) => self.rx.recv_timeout(t.saturating_since(MonotonicClock::read())).ok(),
        };
        self.ready.extend(message);
        Ok(())
    }

    fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError> {
        let config = if self.real_engine { config.with_real_engine_defaults() } else { config };
        self.batcher.reconfigure(config)
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.guard.stand_down();
        shutdown_bounded(&self.batcher)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::engine::faults::{FaultTrigger, Faults, FaultyEngine};
    use crate::engine::{
        Concurrent, ConcurrentEngine, EngineOutput, EngineStep, FinishReason, GenerateDone, ServerCounters,
    };

    fn answer(batch: &[EngineRequest]) -> Vec<EngineOutput> {
        batch.iter().map(|r| EngineOutput::new(Some(r.id), FinishReason::Length)).collect()
    }

    /// The concurrent face of [`Remote`]: answers at once.
    struct Face;

    impl ConcurrentEngine for Face {
        fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
            done(Ok(answer(&batch)));
        }
    }

    /// An engine with a concurrent face whose one server has counted 7 prompt tokens, and whose
    /// start succeeds unless told otherwise.
    struct Remote {
        start_fails: bool,
    }

    impl Engine for Remote {
        fn start(&mut self) -> Result<Started, EngineError> {
            if self.start_fails {
                return Err(EngineError::Start("refused".into()));
            }
            let counters = Arc::new(|| {
                let counters = [("prompt_tokens".to_owned(), 7.0)].into();
                vec![ServerCounters { endpoint: "http://127.0.0.1:9".into(), counters }]
            });
            let concurrent = Concurrent { counters: Some(counters), ..Concurrent::new(Arc::new(Face)) };
            Ok(Started { info: EngineInfo::new("remote", "0"), concurrent: Some(concurrent) })
        }
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
            Ok(answer(batch))
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            Ok(())
        }
    }

    fn driver(start_fails: bool) -> RealTimeDriver {
        RealTimeDriver::new(Remote { start_fails }, BatchConfig::default(), &Interrupt::never(), false, false)
    }

    #[test]
    fn server_counters_come_from_the_started_engines_concurrent_face() {
        let mut d = driver(false);
        let started = d.start().unwrap();
        let counters = (started.concurrent.and_then(|c| c.counters).expect("the face's counters"))();
        assert_eq!(counters.len(), 1);
        assert_eq!(
            (counters[0].endpoint.as_str(), counters[0].counters.get("prompt_tokens")),
            ("http://127.0.0.1:9", Some(&7.0))
        );
        d.shutdown().unwrap();

        let mut failed = driver(true);
        assert!(failed.start().is_err());
        failed.shutdown().unwrap();
    }

    /// With the engine's work elsewhere (a server), the run's loop and the batcher's engine thread
    /// keep the books, and their wake-ups yield to the client thread on their core; an engine
    /// that runs here (continuous admission) keeps the default policy on both.
    #[test]
    fn the_book_keeping_threads_yield_on_wakeup_only_when_the_work_runs_elsewhere() {
        use crate::sys::sched::yields_on_wakeup;
        std::thread::spawn(move || {
            let mut d =
                RealTimeDriver::new(Remote { start_fails: false }, in_flight(4), &Interrupt::never(), false, false);
            assert!(!yields_on_wakeup(0));
            d.start().unwrap();
            assert!(yields_on_wakeup(0), "the run's loop");
            let engine = d.batcher.engine_thread_id().expect("the engine thread's id");
            assert!(yields_on_wakeup(engine), "the engine thread");
            d.shutdown().unwrap();
        })
        .join()
        .unwrap();
        std::thread::spawn(move || {
            let mut d = RealTimeDriver::new(Stepping::new(false), in_flight(4), &Interrupt::never(), false, false);
            d.start().unwrap();
            assert!(!yields_on_wakeup(0), "an engine that runs here leaves the loop as it was");
            let engine = d.batcher.engine_thread_id().expect("the engine thread's id");
            assert!(!yields_on_wakeup(engine), "and its engine thread");
            d.shutdown().unwrap();
        })
        .join()
        .unwrap();
    }

    /// What [`Stepping`]'s face has run: a step per hand-over, taken by the run.
    type StepLog = Arc<Mutex<Vec<EngineStep>>>;

    /// The face of an engine that batches by itself and runs here (vLLM with continuous
    /// admission): each hand-over is one step, recorded before its answer, or, when `frozen`,
    /// never answered (nor stepped): only the stall watch can fail it.
    struct SteppingFace {
        steps: StepLog,
        frozen: bool,
        held: Mutex<Vec<GenerateDone>>,
    }

    impl ConcurrentEngine for SteppingFace {
        fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
            if self.frozen {
                self.held.lock().unwrap().push(done);
                return;
            }
            let at = MonotonicClock::read();
            self.steps.lock().unwrap().push(EngineStep::new(at, at, batch.len() as u32, 0));
            done(Ok(answer(&batch)));
        }
    }

    struct Stepping {
        face: Arc<SteppingFace>,
    }

    impl Stepping {
        fn new(frozen: bool) -> Self {
            Stepping { face: Arc::new(SteppingFace { steps: StepLog::default(), frozen, held: Mutex::default() }) }
        }
    }

    impl Engine for Stepping {
        fn start(&mut self) -> Result<Started, EngineError> {
            let steps = self.face.steps.clone();
            let concurrent = Concurrent {
                runs_here: true,
                steps: Some(Arc::new(move || std::mem::take(&mut *steps.lock().unwrap()))),
                ..Concurrent::new(self.face.clone())
            };
            Ok(Started { info: EngineInfo::new("stepping", "0"), concurrent: Some(concurrent) })
        }
        fn generate(&mut self, _: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
            unreachable!("with max_in_flight > 1 every batch goes to the concurrent face")
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            // A frozen face's held generates end with the engine.
            let held = std::mem::take(&mut *self.face.held.lock().unwrap());
            held.into_iter().for_each(|done| done(Err(EngineError::Generate("shut down".into()))));
            Ok(())
        }
    }

    /// `engine` under two layers of faults, each with a key that leaves every batch intact (a
    /// slow factor of 1: held back for no time).
    fn twice_faulty<E: Engine>(engine: E) -> FaultyEngine<FaultyEngine<E>> {
        let faults = Faults { slow: FaultTrigger::every(1), slow_factor: 1.0, ..Faults::default() };
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock);
        FaultyEngine::new(FaultyEngine::new(engine, faults.clone(), 1, clock.clone()), faults, 2, clock)
    }

    fn in_flight(n: usize) -> BatchConfig {
        BatchConfig::new(1, Duration::from_millis(1)).unwrap().with_max_in_flight(n).unwrap()
    }

    /// Issue 36, item 1: the steps of an engine that batches by itself reach the run through any
    /// stack of wrappers: through two fault layers, the run counts the engine's steps as its
    /// batches, not the batcher's hand-overs.
    #[test]
    fn the_steps_reach_the_run_through_two_fault_layers() {
        let mut d =
            RealTimeDriver::new(twice_faulty(Stepping::new(false)), in_flight(2), &Interrupt::never(), false, true);
        let started = d.start().unwrap();
        assert!(started.concurrent.as_ref().is_some_and(|c| c.runs_here && c.steps.is_some()));
        let ids: Vec<RequestId> = (0..3).map(|_| d.submit(EngineRequest::tokens(vec![1; 4], 2)).unwrap()).collect();
        let (mut batches, mut outcomes) = (Vec::new(), 0);
        while outcomes < ids.len() {
            match d.poll_event() {
                Some(DriverEvent::Batch(b)) => batches.push(b),
                Some(DriverEvent::Outcome(..)) => outcomes += 1,
                None => d.wait(None).unwrap(),
            }
        }
        assert_eq!(batches.len(), 3, "one step per hand-over: {batches:?}");
        assert!(batches.iter().all(|b| b.reason == FlushReason::Step && b.size == 1), "{batches:?}");
        assert_eq!(batches.iter().map(|b| b.id).collect::<Vec<_>>(), [0, 1, 2], "numbered as the run's steps");
        d.shutdown().unwrap();
    }

    /// A clock that moves 400 ms forward at every reading: a stall limit passes after a few
    /// readings, whatever the machine's speed.
    #[derive(Default)]
    struct Ticking(std::sync::atomic::AtomicU64);

    impl Clock for Ticking {
        fn now(&self) -> Timestamp {
            let step = Duration::from_millis(400).as_nanos() as u64;
            Timestamp::from_nanos(self.0.fetch_add(step, Ordering::SeqCst) + step)
        }
        fn sleep(&self, _: Duration) {}
    }

    /// Issue 36, item 1: `runs_here` reaches the batcher through any stack of wrappers, so the
    /// stall watch applies with several batches in flight: a frozen engine (its generate never
    /// answers, its CPU time never moves) under two fault layers is failed as stalled. Had
    /// `runs_here` been lost on the way, nothing would answer the request.
    #[test]
    fn the_stall_watch_applies_through_two_fault_layers() {
        let config = in_flight(2).with_stall_timeout(Some(Duration::from_secs(1))).unwrap();
        let b = Batcher::spawn(twice_faulty(Stepping::new(true)), config, Arc::new(Ticking::default()));
        b.preload().unwrap();
        b.set_progress_probe(Arc::new(|| Some(Duration::ZERO)));
        let ticket = b.submit(EngineRequest::tokens(vec![1; 4], 2)).unwrap();
        let outcome = ticket.wait_timeout(Duration::from_secs(60)).map_err(|_| "nothing answered the frozen generate");
        assert!(matches!(outcome.unwrap(), Err(RequestError::EngineStalled { batch_size: 1, .. })));
        b.shutdown().unwrap();
    }
}
