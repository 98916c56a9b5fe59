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
use crate::engine::{
    ClockDomain, ConcurrentEngine, Engine, EngineError, EngineInfo, EngineRequest, RequestId, ServerCounters,
};
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

/// The face that reports an engine's steps, and the next step's number.
struct EngineSteps {
    face: Arc<dyn ConcurrentEngine>,
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
        let Some(taken) = steps.face.take_steps() else { return };
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
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        let info = self.batcher.preload().map_err(|e| match e {
            RequestError::StartFailed(m) => EngineError::Start(m),
            other => EngineError::Start(other.to_string()),
        })?;
        self.guard.started(&self.batcher, &info);
        if let Some(face) = self.batcher.concurrent_engine()
            && face.take_steps().is_some()
        {
            self.hand_overs_count.store(false, Ordering::SeqCst);
            self.steps = Some(EngineSteps { face, next_id: 0 });
        }
        Ok(info)
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

    fn server_counters(&self) -> Vec<ServerCounters> {
        self.batcher.concurrent_engine().map(|engine| engine.server_counters()).unwrap_or_default()
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.guard.stand_down();
        shutdown_bounded(&self.batcher)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::{ConcurrentEngine, EngineOutput, FinishReason, GenerateDone};

    /// The concurrent face of [`Remote`]: answers at once; its one server has counted 7 prompt
    /// tokens.
    struct Face;

    impl ConcurrentEngine for Face {
        fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
            done(Ok(batch.iter().map(|r| EngineOutput::new(Some(r.id), FinishReason::Length)).collect()));
        }
        fn server_counters(&self) -> Vec<ServerCounters> {
            let counters = [("prompt_tokens".to_owned(), 7.0)].into();
            vec![ServerCounters { endpoint: "http://127.0.0.1:9".into(), counters }]
        }
    }

    /// An engine with a concurrent face, whose start succeeds unless told otherwise.
    struct Remote {
        start_fails: bool,
    }

    impl Engine for Remote {
        fn start(&mut self) -> Result<EngineInfo, EngineError> {
            if self.start_fails {
                Err(EngineError::Start("refused".into()))
            } else {
                Ok(EngineInfo::new("remote", "0"))
            }
        }
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
            Ok(batch.iter().map(|r| EngineOutput::new(Some(r.id), FinishReason::Length)).collect())
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            Ok(())
        }
        fn concurrent(&self) -> Option<Arc<dyn ConcurrentEngine>> {
            Some(Arc::new(Face))
        }
    }

    fn driver(start_fails: bool) -> RealTimeDriver {
        RealTimeDriver::new(Remote { start_fails }, BatchConfig::default(), &Interrupt::never(), false, false)
    }

    #[test]
    fn server_counters_come_from_the_started_engines_concurrent_face() {
        let mut d = driver(false);
        assert!(d.server_counters().is_empty(), "not started: no face yet");
        d.start().unwrap();
        let counters = d.server_counters();
        assert_eq!(counters.len(), 1);
        assert_eq!(
            (counters[0].endpoint.as_str(), counters[0].counters.get("prompt_tokens")),
            ("http://127.0.0.1:9", Some(&7.0))
        );
        d.shutdown().unwrap();

        let mut failed = driver(true);
        assert!(failed.start().is_err());
        assert!(failed.server_counters().is_empty(), "a failed start gives no face");
        failed.shutdown().unwrap();
    }
}
