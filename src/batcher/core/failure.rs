//! The engine made unusable: a death, an abort, a stall or a failed start. What fails at once
//! (the running batches, the queue), what is kept (the first cause, refined by a process's
//! death), and the state the lifecycle moves to.

use super::super::error::RequestError;
use super::super::lifecycle::State;
use super::{BatcherCore, Event};
use crate::engine::EngineDeath;
use crate::time::Timestamp;

impl BatcherCore {
    /// The engine died (reported by a process watcher, on any thread, or by a generate that
    /// returned [`EngineError::Died`]). Every running batch and every queued request fail with
    /// [`RequestError::EngineDied`]; every later submit is rejected with it. The generates still
    /// running are abandoned: their results, should they ever come, are discarded, and the
    /// engine's shutdown waits for them. Harmless when repeated, after another failure or after
    /// shutdown.
    pub fn handle_engine_died(&mut self, death: EngineDeath, now: Timestamp) {
        self.fail_for_good(RequestError::EngineDied(death), now);
    }

    /// The user interrupted a run whose generate may never return (the first Ctrl-C): every running
    /// batch and every queued request fail with [`RequestError::Aborted`], and the engine is
    /// unusable, as after a death. A driver may then stop as soon as [`is_wedged`](Self::is_wedged).
    /// Harmless when repeated, after a failure or after shutdown.
    pub fn abort_in_flight(&mut self, now: Timestamp) {
        self.fail_for_good(RequestError::Aborted, now);
    }

    /// A death or an abort: the engine can never serve again.
    pub(super) fn fail_for_good(&mut self, error: RequestError, now: Timestamp) {
        match self.state() {
            // Nothing was loaded, so there is nothing to release.
            State::Created => {
                self.record(|| Event::EngineFailed { at: now.as_nanos(), error: error.to_string() });
                self.failure = Some(error);
                self.set_state(State::Stopped);
            }
            // The load is still running: fail what waits now, the state follows when it returns.
            State::Starting | State::StartingThenDrain if self.failure.is_none() => {
                self.fail_queue(&error, now);
                self.failure = Some(error);
            }
            State::Ready | State::Draining => {
                self.abandon_in_flight(&error, now);
                self.fail_engine(error, now);
            }
            // The engine's shutdown runs (nothing is queued or running): the state stays, the
            // cause is kept for what later asks.
            State::EngineStopping if self.failure.is_none() => {
                self.fail_queue(&error, now);
                self.failure = Some(error);
            }
            State::Starting
            | State::StartingThenDrain
            | State::Failed
            | State::FailedClosing
            | State::EngineStopping
            | State::Stopped => {
                if self.refines_failure(&error) {
                    // The engine said it was dead before the watch saw which process died: the
                    // process's own end is the cause to report (what failed already keeps its
                    // error).
                    tracing::error!(cause = %error, "the engine's death, by its process");
                    self.failure = Some(error);
                } else {
                    tracing::debug!(cause = %error, state = ?self.state(), "engine already unusable or stopped");
                }
            }
        }
    }

    /// Whether `error` names the cause of the current failure better: a process's death (with
    /// its pid, from a process watch) after a death the engine reported itself (an exception
    /// saying it is dead, which names no process).
    fn refines_failure(&self, error: &RequestError) -> bool {
        matches!(
            (&self.failure, error),
            (Some(RequestError::EngineDied(known)), RequestError::EngineDied(seen))
                if known.pid.is_none() && seen.pid.is_some()
        )
    }

    /// Fails the waiters of every running batch now, in dispatch order; their generates' results
    /// will be discarded.
    fn abandon_in_flight(&mut self, error: &RequestError, now: Timestamp) {
        for i in 0..self.in_flight.len() {
            self.abandon(i, error, now);
        }
    }

    /// Fails the waiters of the running batch at `index` of `in_flight` now (unless it was
    /// abandoned already); its generate's result will be discarded.
    pub(super) fn abandon(&mut self, index: usize, error: &RequestError, now: Timestamp) {
        let Some(f) = self.in_flight.get_mut(index).filter(|f| !f.abandoned) else { return };
        f.abandoned = true;
        let batch_id = f.batch_id;
        let members = std::mem::take(&mut f.members);
        tracing::error!(batch_id, batch_size = members.len(), cause = %error, "batch failed");
        self.record(|| Event::BatchFailed { at: now.as_nanos(), batch: batch_id, error: error.to_string() });
        for (id, _) in members {
            self.outcomes.push_back((id, Err(error.clone())));
        }
    }

    fn fail_queue(&mut self, error: &RequestError, now: Timestamp) {
        while let Some(q) = self.queue.pop_front() {
            self.outcomes.push_back((q.request.id, Err(error.clone())));
        }
        self.record(|| Event::EngineFailed { at: now.as_nanos(), error: error.to_string() });
    }

    /// The engine is unusable: fail what is queued and reject everything from now on.
    pub(super) fn fail_engine(&mut self, error: RequestError, now: Timestamp) {
        let to = if self.state().shutdown_requested() { State::FailedClosing } else { State::Failed };
        self.set_state(to);
        // A death or abort during the load already failed the queue (and recorded it).
        if self.failure.is_none() {
            self.fail_queue(&error, now);
        }
        self.failure = Some(error);
    }
}
