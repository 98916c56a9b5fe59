//! [`RealTimeDriver`]: any engine on the threaded [`Batcher`] and the monotonic clock. Outcomes
//! and batches arrive from the batcher's threads over a channel; waiting blocks on that channel
//! until the next message, the step's deadline or the interrupt, whichever comes first.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use super::driver::{Driver, DriverEvent, Stalled};
use super::interrupt::{Interrupt, WakerGuard};
use crate::batcher::{BatchConfig, BatchRun, Batcher, RequestError};
use crate::engine::{ClockDomain, Engine, EngineError, EngineInfo, EngineRequest, RequestId};
use crate::time::{Clock, MonotonicClock, Timestamp, WallAnchor};

/// What the channel carries: an event, or `None` when the interrupt fired (stop waiting).
type Message = Option<DriverEvent>;

/// Real time over the threaded batcher.
pub(super) struct RealTimeDriver {
    batcher: Batcher,
    domain: ClockDomain,
    tx: Sender<Message>,
    rx: Receiver<Message>,
    /// Events received while waiting, not yet polled.
    ready: VecDeque<DriverEvent>,
    _wake_on_interrupt: WakerGuard,
}

impl RealTimeDriver {
    pub(super) fn new<E: Engine + 'static>(engine: E, config: BatchConfig, interrupt: &Interrupt) -> Self {
        let domain = engine.clock_domain();
        let (tx, rx) = mpsc::channel::<Message>();
        let batch_tx = tx.clone();
        let batcher = Batcher::spawn_observed(
            engine,
            config,
            Arc::new(MonotonicClock),
            Some(Box::new(move |b: &BatchRun| {
                let _ = batch_tx.send(Some(DriverEvent::Batch(b.clone())));
            })),
        );
        let wake_tx = tx.clone();
        let guard = interrupt.on_fire(move || {
            let _ = wake_tx.send(None);
        });
        RealTimeDriver { batcher, domain, tx, rx, ready: VecDeque::new(), _wake_on_interrupt: guard }
    }
}

impl Driver for RealTimeDriver {
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        self.batcher.preload().map_err(|e| match e {
            RequestError::StartFailed(m) => EngineError::Start(m),
            other => EngineError::Start(other.to_string()),
        })
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

    fn submit(&mut self, request: EngineRequest) -> Result<RequestId, RequestError> {
        let tx = self.tx.clone();
        let complete = Box::new(move |id, outcome| {
            let _ = tx.send(Some(DriverEvent::Outcome(id, outcome, MonotonicClock::read())));
        });
        self.batcher.submit_with(request, complete)
    }

    fn cancel(&mut self, id: RequestId) {
        self.batcher.cancel(id);
    }

    fn poll_event(&mut self) -> Option<DriverEvent> {
        if let Some(e) = self.ready.pop_front() {
            return Some(e);
        }
        // Skips interrupt wake-ups.
        std::iter::from_fn(|| self.rx.try_recv().ok()).flatten().next()
    }

    fn wait(&mut self, until: Option<Timestamp>) -> Result<(), Stalled> {
        // The driver holds a sender itself, so the channel never disconnects.
        let message = match until {
            None => self.rx.recv().ok(),
            Some(t) => self.rx.recv_timeout(t.saturating_since(MonotonicClock::read())).ok(),
        };
        self.ready.extend(message.flatten());
        Ok(())
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.batcher.shutdown()
    }
}
