//! The engine thread: the engine's one start, every generate (or, with `max_in_flight > 1`,
//! each batch handed to the engine's concurrent face) and its one shutdown, each with the lock
//! released.

use super::super::core::{Batch, BatchRun, GenerateResult};
use super::super::engine_call::{catch_engine_panic, panic_message};
use super::super::error::ConfigError;
use super::super::lifecycle::State;
use super::delivery::{Delivery, DoneGuard};
use super::{Cv, Shared};
use crate::engine::{ConcurrentEngine, Engine, EngineError, GenerateDone, Started};
use crate::sync::Arc;
use crate::sync::atomic::AtomicBool;

/// The engine thread: start, generates and shutdown, each with the lock released.
pub(super) fn engine_thread<E: Engine>(shared: Arc<Shared>, mut engine: E) {
    // A batch went out since the last idle tick (see the wait at the end of the loop).
    let mut dispatched_since_tick = false;
    let mut locked = shared.lock();
    locked.guard.engine_tid = Some(thread_id());
    loop {
        let now = shared.clock.now();
        let starting = matches!(locked.guard.core.state(), State::Starting | State::StartingThenDrain);
        if starting && locked.guard.start_result.is_none() {
            drop(locked);
            let started = catch_engine_panic(|| engine.start())
                .unwrap_or_else(|p| Err(EngineError::Start(format!("start panicked: {}", panic_message(&*p)))));
            locked = shared.lock();
            let now = shared.clock.now();
            let result = started.and_then(|Started { info, concurrent }| {
                let max_in_flight = locked.guard.core.config().max_in_flight();
                // Started, but it cannot take the batching asked for: a failed start (its shutdown
                // still runs, when the batcher shuts down).
                if max_in_flight > 1 && concurrent.is_none() {
                    let refusal = ConfigError::NotConcurrent { max_in_flight, engine: info.name.clone() };
                    return Err(EngineError::Start(refusal.to_string()));
                }
                locked.guard.core.set_engine_runs_here(concurrent.as_ref().is_some_and(|c| c.runs_here));
                locked.guard.concurrent = concurrent;
                locked.guard.engine_name = Some(info.name.clone());
                Ok(info)
            });
            locked.guard.start_result = Some(result.clone());
            locked.guard.core.handle_start_result(result.clone(), now);
            // A thread that only hands batches to a face whose work runs elsewhere (a server) is a
            // book-keeper, whose wake-ups must not preempt the client; set before anyone learns of
            // the start, so that no batch is handed over before it.
            let elsewhere = locked.guard.concurrent.as_ref().is_some_and(|c| !c.runs_here);
            if elsewhere && locked.guard.concurrent_face().is_some() {
                yield_on_wakeup();
            }
            shared.release(locked);
            if let Err(e) = &result {
                tracing::error!(error = %e, "engine failed to start");
            }
            locked = shared.lock();
            continue;
        }
        if let Some(batch) = locked.guard.core.poll_dispatch(now) {
            dispatched_since_tick = true;
            if let Some(face) = locked.guard.concurrent_face() {
                let waiting = Shared::to_wake(&locked.guard);
                drop(locked);
                shared.notify_waiting(waiting);
                generate_concurrently(&shared, &*face, batch);
                locked = shared.lock();
                continue;
            }
            let waiting = Shared::to_wake(&locked.guard);
            drop(locked);
            // The watchdog must learn the new generate deadline before generate can block.
            shared.notify_waiting(waiting);
            let result = match catch_engine_panic(|| engine.generate(&batch.requests)) {
                Ok(r) => GenerateResult::from(r),
                Err(p) => GenerateResult::Panicked(panic_message(&*p)),
            };
            let returned_at = shared.clock.now();
            shared.observe(&BatchRun {
                id: batch.id,
                size: batch.requests.len(),
                reason: batch.reason,
                dispatched_at: batch.dispatched_at,
                returned_at,
                phases: None,
            });
            locked = shared.lock();
            locked.guard.core.handle_generate_result(batch.id, result, returned_at);
            shared.release(locked);
            locked = shared.lock();
            continue;
        }
        if locked.guard.core.poll_engine_shutdown() {
            drop(locked);
            let result = catch_engine_panic(|| engine.shutdown())
                .unwrap_or_else(|p| Err(EngineError::Shutdown(format!("shutdown panicked: {}", panic_message(&*p)))));
            locked = shared.lock();
            locked.guard.shutdown_result = Some(result);
            (locked.guard.concurrent, locked.guard.engine_name) = (None, None);
            locked.guard.core.handle_engine_shutdown_done();
            shared.release(locked);
            return;
        }
        // Once `shutdown` stopped waiting, a generate still out (a concurrent one, abandoned) is
        // still owed the engine's shutdown when it returns: wait for it here.
        let owed = locked.guard.core.generate_in_flight();
        if locked.guard.core.state() == State::Stopped || (locked.guard.closing && !owed) {
            shared.release(locked);
            return;
        }
        // With nothing due, a batcher that just dispatched sleeps one `batch_timeout` at most: a
        // submit into the empty queue then brings no deadline before this one and need not wake
        // it ([`Inner::engine_must_wake`]), which saves a wake-up per batch under load. A tick
        // that passes with nothing dispatched is the last: then it sleeps until woken.
        let deadline = locked.guard.core.dispatch_deadline();
        let tick = (deadline.is_none() && dispatched_since_tick && locked.guard.core.state() == State::Ready)
            .then(|| now.saturating_add(locked.guard.core.config().batch_timeout()));
        dispatched_since_tick &= tick.is_none();
        let until = deadline.or(tick);
        locked.guard.engine_until = until;
        locked = shared.wait(Cv::Engine, locked, until.map(|t| t.saturating_since(now)));
        locked.guard.engine_until = None;
    }
}

/// Hands `batch` to the engine's concurrent face, with no batcher lock held, and returns without
/// waiting for it: the result comes through `done`, on any thread, possibly before `generate`
/// returns. A panic in `generate` fails the batch unless `done` answered it already.
fn generate_concurrently(shared: &Arc<Shared>, face: &dyn ConcurrentEngine, batch: Batch) {
    let delivery = Arc::new(Delivery {
        shared: shared.clone(),
        batch: batch.id,
        size: batch.requests.len(),
        reason: batch.reason,
        dispatched_at: batch.dispatched_at,
        delivered: AtomicBool::new(false),
    });
    let guard = DoneGuard(delivery.clone());
    let done: GenerateDone = Box::new(move |result| {
        guard.0.deliver(GenerateResult::from(result));
    });
    if let Err(p) = catch_engine_panic(|| face.generate(batch.requests, done)) {
        let message = panic_message(&*p);
        if !delivery.deliver(GenerateResult::Panicked(message.clone())) {
            tracing::warn!(batch_id = batch.id, %message, "generate panicked after its batch was answered");
        }
    }
}

/// Makes the calling thread's wake-ups yield to the thread on its core (loom's threads have no
/// policy): see [`crate::sys::sched`].
fn yield_on_wakeup() {
    #[cfg(not(loom))]
    if let Err(e) = crate::sys::sched::yield_on_wakeup() {
        tracing::debug!(error = %e, "the engine thread keeps the default scheduling policy");
    }
}

/// The calling thread's kernel id (loom's threads have none worth sampling).
pub(super) fn thread_id() -> i32 {
    #[cfg(loom)]
    {
        0
    }
    #[cfg(not(loom))]
    {
        crate::sys::current_thread_id()
    }
}
