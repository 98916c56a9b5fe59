//! [`VirtualTimeDriver`]: an engine that passes time by hand on the discrete-event
//! [`VirtualTimeBatcher`]. One thread, no sleeping, deterministic: waiting jumps to the next event.

use std::collections::VecDeque;

use super::driver::{Driver, DriverEvent, Stalled};
use crate::batcher::virtual_time::VirtualTimeBatcher;
use crate::batcher::{BatchConfig, BatchRun, ConfigError, RequestError};
use crate::engine::{
    ClockDomain, Engine, EngineError, EngineRequest, RequestId, RequestPrep, Started, VirtualTimeEngine,
};
use crate::time::{Timestamp, VirtualClock, WallAnchor};

/// Virtual time over the single-threaded batcher.
pub(super) struct VirtualTimeDriver<E> {
    inner: VirtualTimeBatcher<E>,
    domain: ClockDomain,
    batches: VecDeque<BatchRun>,
    /// The engine's work on each request alone, done where the requests are made.
    prep: Option<RequestPrep>,
}

impl<E: VirtualTimeEngine> VirtualTimeDriver<E> {
    /// `engine` on a fresh virtual clock; `prep`, what it would do on each request alone (the
    /// plan's simulator's [`crate::engine::sim::request_prep`]), or `None`.
    pub(super) fn new(mut engine: E, config: BatchConfig, prep: Option<RequestPrep>) -> Self {
        let clock = VirtualClock::new();
        engine.use_virtual_clock(clock.clone());
        let domain = engine.clock_domain();
        VirtualTimeDriver {
            inner: VirtualTimeBatcher::new(engine, config, clock),
            domain,
            batches: VecDeque::new(),
            prep,
        }
    }
}

impl<E: Engine> Driver for VirtualTimeDriver<E> {
    /// One generate at a time: no concurrent face, nor anything that comes with one.
    fn start(&mut self) -> Result<Started, EngineError> {
        self.inner.start().map(Started::blocking)
    }

    fn now(&self) -> Timestamp {
        self.inner.now()
    }

    fn clock_domain(&self) -> ClockDomain {
        self.domain
    }

    fn wall_anchor(&self) -> WallAnchor {
        WallAnchor::VIRTUAL
    }

    fn virtual_time(&self) -> bool {
        true
    }

    fn request_prep(&self) -> Option<RequestPrep> {
        self.prep.clone()
    }

    fn submit(&mut self, request: EngineRequest<()>) -> Result<RequestId, RequestError> {
        self.inner.submit(request)
    }

    fn cancel(&mut self, id: RequestId) {
        self.inner.cancel(id);
    }

    fn poll_event(&mut self) -> Option<DriverEvent> {
        if self.batches.is_empty() {
            self.batches.extend(self.inner.take_batches());
        }
        if let Some(b) = self.batches.pop_front() {
            return Some(DriverEvent::Batch(b));
        }
        let now = self.inner.now();
        self.inner.poll_outcome().map(|(id, outcome)| DriverEvent::Outcome(id, outcome, now))
    }

    fn wait(&mut self, until: Option<Timestamp>) -> Result<(), Stalled> {
        let next = match (self.inner.next_event(), until) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).ok_or(Stalled)?,
        };
        self.inner.advance_to(next);
        Ok(())
    }

    fn reconfigure(&mut self, config: BatchConfig) -> Result<(), ConfigError> {
        self.inner.reconfigure(config)
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.inner.shutdown()
    }
}
