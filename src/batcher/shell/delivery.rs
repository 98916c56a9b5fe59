//! Outcomes on their way to their waiters: a concurrent generate's result delivered to the core
//! once ([`Delivery`], [`DoneGuard`]), the ready outcomes taken out of the core with their waiters
//! (`Ready`), and a request's outcome in its [`Ticket`]'s slot.

use std::time::Duration;

use super::super::core::{BatchId, BatchRun, GenerateResult, Outcome};
use super::super::engine_call::in_engine_call;
use super::{Completer, Inner, Shared, cancel};
use crate::engine::{EngineError, RequestId};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{self, Arc, Condvar, Level, Mutex};

/// The outcomes one critical section made ready: those with a callback of their own, and those
/// for the sink.
#[derive(Default)]
pub(super) struct Ready {
    pub(super) completers: Vec<(RequestId, Completer, Outcome)>,
    pub(super) sunk: Vec<(RequestId, Outcome)>,
}

impl Shared {
    /// Takes every ready outcome out of the core, paired with its waiter.
    pub(super) fn collect(inner: &mut Inner) -> Ready {
        let mut ready = Ready::default();
        while let Some((id, outcome)) = inner.core.poll_outcome() {
            match inner.waiters.remove(&id) {
                Some(c) => ready.completers.push((id, c, outcome)),
                None => ready.sunk.push((id, outcome)),
            }
        }
        ready
    }
}

/// One concurrent generate's result on its way to the core: delivered once, whoever comes first
/// (the engine's `done`, a panic caught around `generate`, or a `done` dropped uncalled).
pub(super) struct Delivery {
    pub(super) shared: Arc<Shared>,
    pub(super) batch: BatchId,
    pub(super) size: usize,
    pub(super) reason: super::super::core::FlushReason,
    pub(super) dispatched_at: crate::time::Timestamp,
    pub(super) delivered: AtomicBool,
}

impl Delivery {
    /// Tells the observer, then the core (taking the lock), then hands out the outcomes, unless
    /// the batch's result was delivered already (then returns `false`). Called with no batcher
    /// lock held.
    pub(super) fn deliver(&self, result: GenerateResult) -> bool {
        if self.delivered.swap(true, Ordering::SeqCst) {
            return false;
        }
        let returned_at = self.shared.clock.now();
        self.shared.observe(&BatchRun {
            id: self.batch,
            size: self.size,
            reason: self.reason,
            dispatched_at: self.dispatched_at,
            returned_at,
            phases: None,
        });
        let mut locked = self.shared.lock();
        locked.guard.core.handle_generate_result(self.batch, result, returned_at);
        self.shared.release(locked);
        true
    }
}

/// Rides in a concurrent generate's `done`: should the engine drop `done` without calling it,
/// the batch fails instead of waiting for its generate timeout. A `done` dropped by a panic inside
/// `generate` on the engine thread is left to the catch around it, which has the panic's message.
pub(super) struct DoneGuard(pub(super) Arc<Delivery>);

impl Drop for DoneGuard {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        if panicking && in_engine_call() {
            return;
        }
        let _ = self.0.deliver(match panicking {
            true => GenerateResult::Panicked("a thread of the engine panicked with the batch's `done`".into()),
            false => {
                GenerateResult::Error(EngineError::Generate("the engine dropped the batch's `done` uncalled".into()))
            }
        });
    }
}

pub(super) struct Slot {
    pub(super) outcome: Mutex<Option<Outcome>>,
    pub(super) ready: Condvar,
}

impl Slot {
    pub(super) fn fill(&self, outcome: Outcome) {
        let _order = sync::ordered(Level::Slot);
        *sync::lock(&self.outcome) = Some(outcome);
        self.ready.notify_all();
    }
}

/// A submitted request's claim on its outcome.
pub struct Ticket {
    pub(super) id: RequestId,
    pub(super) slot: Arc<Slot>,
    pub(super) batcher: Option<Arc<Shared>>,
}

impl Ticket {
    /// The id the batcher gave the request this ticket waits for.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Blocks until the outcome is there. Never hangs: every path of the batcher answers.
    pub fn wait(mut self) -> Outcome {
        let outcome = {
            let _order = sync::ordered(Level::Slot);
            let mut g = sync::lock(&self.slot.outcome);
            loop {
                if let Some(o) = g.take() {
                    break o;
                }
                g = self.slot.ready.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        };
        self.batcher = None;
        outcome
    }

    /// [`wait`](Self::wait), giving up after `timeout`: `Err(self)` to try again later. For
    /// callers (and tests) that must never block unboundedly, whatever the engine does.
    pub fn wait_timeout(mut self, timeout: Duration) -> Result<Outcome, Ticket> {
        let outcome = {
            let _order = sync::ordered(Level::Slot);
            let deadline = std::time::Instant::now() + timeout;
            let mut g = sync::lock(&self.slot.outcome);
            loop {
                if let Some(o) = g.take() {
                    break Some(o);
                }
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break None;
                }
                g = self.slot.ready.wait_timeout(g, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
            }
        };
        match outcome {
            Some(o) => {
                self.batcher = None;
                Ok(o)
            }
            None => Err(self),
        }
    }

    /// The outcome if it is there already.
    pub fn try_take(&mut self) -> Option<Outcome> {
        let _order = sync::ordered(Level::Slot);
        let o = sync::lock(&self.slot.outcome).take();
        if o.is_some() {
            self.batcher = None;
        }
        o
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(shared) = self.batcher.take() {
            cancel(&shared, self.id);
        }
    }
}
