//! The words the core and its drivers speak: batches, their results, a request's outcome, and
//! the [`Event`]s of a trace.

use serde::Serialize;

use super::super::error::RequestError;
use super::super::lifecycle::State;
use super::BatchId;
use crate::engine::{EngineError, EngineOutput, EngineRequest, RequestId};
use crate::time::Timestamp;

/// Why a batch left the queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushReason {
    /// `batch_size` requests were waiting.
    Full,
    /// The oldest request had waited `batch_timeout`.
    Timeout,
    /// Shutdown is draining the queue.
    Drain,
    /// Not a batch the batcher made: one step of an engine that batches by itself (vLLM with
    /// continuous admission), which chose what to run in it.
    Step,
}

/// A batch for the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Numbers this batch in dispatch order.
    pub id: BatchId,
    /// The requests, oldest first; at most `batch_size` of them.
    pub requests: Vec<EngineRequest>,
    /// Why the batch was dispatched now.
    pub reason: FlushReason,
    /// When the batch left the queue, on the batcher's clock.
    pub dispatched_at: Timestamp,
}

/// One generate as a driver ran it: for batching statistics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchRun {
    /// The batch's [`BatchId`].
    pub id: BatchId,
    /// How many requests the batch held.
    pub size: usize,
    /// Why it was dispatched.
    pub reason: FlushReason,
    /// When it left the queue, on the driver's clock.
    pub dispatched_at: Timestamp,
    /// When generate returned (or panicked).
    pub returned_at: Timestamp,
    /// An engine step's requests by phase ([`FlushReason::Step`]), where the engine says.
    pub phases: Option<StepPhases>,
}

/// What an engine step served, by phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StepPhases {
    /// Requests that got their first token in the step.
    pub prefill: u32,
    /// Requests that got a further token.
    pub decode: u32,
}

/// How a generate call ended, as the driver saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum GenerateResult {
    /// The engine returned outputs (still to be matched to the batch's requests).
    Outputs(Vec<EngineOutput>),
    /// The engine returned an error; every request of the batch fails with it.
    Error(EngineError),
    /// The engine panicked, with the panic's message; every request of the batch fails.
    Panicked(String),
}

impl From<Result<Vec<EngineOutput>, EngineError>> for GenerateResult {
    fn from(r: Result<Vec<EngineOutput>, EngineError>) -> Self {
        match r {
            Ok(o) => GenerateResult::Outputs(o),
            Err(e) => GenerateResult::Error(e),
        }
    }
}

/// Our clock's view of one request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestTimes {
    /// When the request entered the queue.
    pub submitted: Timestamp,
    /// When its batch was handed to the engine.
    pub dispatched: Timestamp,
    /// When its batch's generate returned.
    pub completed: Timestamp,
}

/// A request's output, with where and when it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// What the engine returned for this request.
    pub output: EngineOutput,
    /// When it was queued, dispatched and completed, on the batcher's clock.
    pub times: RequestTimes,
    /// The batch it ran in.
    pub batch_id: BatchId,
    /// How many requests that batch held.
    pub batch_size: usize,
}

/// The one outcome of one request.
pub type Outcome = Result<Completion, RequestError>;

/// What happened, for traces and batching statistics. Recorded only when enabled.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A request entered the queue.
    Submitted {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The id the core gave the request.
        id: RequestId,
    },
    /// A submit was refused: engine not started, shutting down, or engine unusable.
    Rejected {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The id the refused submit took (no other request ever gets it).
        id: RequestId,
        /// The [`RequestError`] it got, as text.
        error: String,
    },
    /// A queued request was cancelled before its batch was dispatched.
    Cancelled {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The cancelled request.
        id: RequestId,
    },
    /// A batch was handed to the engine.
    Dispatched {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The batch.
        batch: BatchId,
        /// Its requests, in the order the engine sees them.
        ids: Vec<RequestId>,
        /// Why it left the queue now.
        reason: FlushReason,
    },
    /// A batch's generate returned outputs that matched its requests.
    BatchCompleted {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The batch.
        batch: BatchId,
    },
    /// A batch failed (engine error, panic, timeout or mismatched outputs); its requests failed.
    BatchFailed {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// The batch.
        batch: BatchId,
        /// Why, as text.
        error: String,
    },
    /// The engine became unusable (failed start or death); queued requests failed.
    EngineFailed {
        /// When, in nanoseconds on the batcher's clock.
        at: u64,
        /// Why, as text.
        error: String,
    },
    /// The lifecycle moved to a new state.
    State {
        /// The state entered.
        to: State,
    },
    /// The batcher asked the driver to shut the engine down (once per run).
    EngineShutdown,
}
