//! The batcher boundary's errors: why a request got no output.

use std::time::Duration;

use crate::engine::{EngineDeath, RemoteError};

/// Numbers the batches of one batcher in dispatch order, from 0. (Here, below the core, because
/// an error names the batch it failed; the core re-exports it.)
pub type BatchId = u64;

/// Why a request failed. Every submitted request ends in exactly one output or one of these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Submitted to a [`super::BatcherCore`] (or a [`super::virtual_time::VirtualTimeBatcher`]) before
    /// its engine start began. The threaded [`super::Batcher`] never gives it: its first submit
    /// starts the engine.
    #[error(
        "engine not started: begin its start first (`BatcherCore::begin_start`, `VirtualTimeBatcher::start`; \
         a `Batcher` starts it at `preload` or the first submit)"
    )]
    EngineNotStarted,
    /// The engine's `start` failed, with its message; no request can run.
    #[error("engine failed to start: {0}")]
    StartFailed(String),
    /// The engine became unusable earlier in the run (the message says why).
    #[error("engine is unusable: {0}")]
    EngineFailed(String),
    /// Submitted after shutdown began.
    #[error("rejected: the batcher is shutting down")]
    ShuttingDown,
    /// Cancelled by the caller while still queued.
    #[error("cancelled before dispatch")]
    Cancelled,
    #[error("batch {batch_id} of {batch_size} failed in the engine: {message}")]
    /// The engine's `generate` returned an error for the request's batch.
    Engine {
        /// The failed batch.
        batch_id: BatchId,
        /// How many requests it held (all of them failed).
        batch_size: usize,
        /// The engine's error, as text.
        message: String,
    },
    #[error("batch {batch_id}: engine returned {got} outputs for {expected} requests")]
    /// The engine returned a different number of outputs than the batch had requests.
    OutputCountMismatch {
        /// The failed batch.
        batch_id: BatchId,
        /// Requests in the batch.
        expected: usize,
        /// Outputs returned.
        got: usize,
    },
    #[error("batch {batch_id}: outputs do not match requests: {detail}")]
    /// The outputs' request ids do not match the batch's requests one to one.
    OutputIdMismatch {
        /// The failed batch.
        batch_id: BatchId,
        /// Which ids were missing, repeated or unknown.
        detail: String,
    },
    #[error("batch {batch_id} of {batch_size}: engine panicked: {message}")]
    /// The engine panicked in `generate`.
    EnginePanicked {
        /// The failed batch.
        batch_id: BatchId,
        /// How many requests it held (all of them failed).
        batch_size: usize,
        /// The panic's message.
        message: String,
    },
    #[error("batch {batch_id} of {batch_size}: generate did not return within {after:?}")]
    /// The batch's `generate` overran the generate timeout; its result, if any, is discarded.
    GenerateTimedOut {
        /// The failed batch.
        batch_id: BatchId,
        /// How many requests it held (all of them failed).
        batch_size: usize,
        /// The generate timeout that elapsed.
        after: Duration,
    },
    #[error("waited {waited:?} for an engine stuck in an overrunning generate")]
    /// Still queued after waiting a generate timeout behind a generate that never returned.
    EngineUnresponsive {
        /// How long the request waited.
        waited: Duration,
    },
    #[error(
        "engine stalled: batch {batch_id} of {batch_size} made no progress (no output, no CPU time) for {stalled_for:?}"
    )]
    /// The running generate made no progress for the stall limit (`batching.stall_timeout`): the
    /// engine is frozen (a stopped EngineCore, a deadlock). Like a death, the running batch, the
    /// queue and every later submit get this.
    EngineStalled {
        /// The batch whose generate stalled.
        batch_id: BatchId,
        /// How many requests it held.
        batch_size: usize,
        /// How long the engine had shown no sign of life.
        stalled_for: Duration,
    },
    /// The engine died: the running batch, the queue and every later submit get this.
    #[error("engine died: {0}")]
    EngineDied(EngineDeath),
    #[error("batch {batch_id} of {batch_size}: {error}")]
    /// A remote engine's request for the batch failed (an HTTP server that refused, dropped the
    /// stream, answered 5xx or 429, or overran the request timeout). Counted by the error's own
    /// kind (`connect_failed`, `http_5xx`, ...); the engine goes on.
    Remote {
        /// The failed batch.
        batch_id: BatchId,
        /// How many requests it held (all of them failed).
        batch_size: usize,
        /// What failed, and where.
        error: RemoteError,
    },
    /// The run was interrupted while a generate was running; the engine is unusable.
    #[error("aborted: the running generate was abandoned after an interrupt")]
    Aborted,
}

impl RequestError {
    /// Every kind name [`Self::kind`] gives. Reports count errors by these; `[expect]` names
    /// them `errors_<kind>`.
    pub const KINDS: &'static [&'static str] = &[
        "engine_not_started",
        "start_failed",
        "engine_failed",
        "engine_died",
        "engine_stalled",
        "shutting_down",
        "cancelled",
        "engine_error",
        "output_count_mismatch",
        "output_id_mismatch",
        "engine_panicked",
        "generate_timed_out",
        "engine_unresponsive",
        "aborted",
        "connect_failed",
        "http_5xx",
        "http_429",
        "http_4xx",
        "stream_dropped",
        "timeout",
        "stalled",
        "bad_response",
    ];

    /// A short stable name for counting errors by kind in reports.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestError::EngineNotStarted => "engine_not_started",
            RequestError::StartFailed(_) => "start_failed",
            RequestError::EngineFailed(_) => "engine_failed",
            RequestError::ShuttingDown => "shutting_down",
            RequestError::Cancelled => "cancelled",
            RequestError::Engine { .. } => "engine_error",
            RequestError::OutputCountMismatch { .. } => "output_count_mismatch",
            RequestError::OutputIdMismatch { .. } => "output_id_mismatch",
            RequestError::EnginePanicked { .. } => "engine_panicked",
            RequestError::GenerateTimedOut { .. } => "generate_timed_out",
            RequestError::EngineUnresponsive { .. } => "engine_unresponsive",
            RequestError::EngineDied(_) => "engine_died",
            RequestError::EngineStalled { .. } => "engine_stalled",
            RequestError::Aborted => "aborted",
            RequestError::Remote { error, .. } => error.kind.name(),
        }
    }

    /// The engine can serve nothing more (it died or stalled): a run stops admitting.
    pub fn engine_unusable(&self) -> bool {
        matches!(self, RequestError::EngineDied(_) | RequestError::EngineStalled { .. })
    }
}

/// Invalid batching settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `batch_size` was 0.
    #[error("batch_size must be > 0")]
    ZeroBatchSize,
    /// `batch_timeout` was 0.
    #[error("batch_timeout must be > 0")]
    ZeroBatchTimeout,
    /// `generate_timeout` was set to 0.
    #[error("generate_timeout must be > 0 when set")]
    ZeroGenerateTimeout,
    /// `stall_timeout` was set to 0.
    #[error("stall_timeout must be > 0 when set")]
    ZeroStallTimeout,
    /// `max_in_flight` was 0.
    #[error("max_in_flight must be > 0")]
    ZeroMaxInFlight,
    /// `max_in_flight` above 1 for an engine that runs one generate at a time (it has no
    /// [`ConcurrentEngine`](crate::engine::ConcurrentEngine) face), or in virtual time.
    #[error(
        "batching.max_in_flight = {max_in_flight} needs an engine that runs several generates at once \
         (an HTTP engine); {engine} runs one at a time"
    )]
    NotConcurrent {
        /// The `max_in_flight` asked for.
        max_in_flight: usize,
        /// The engine (its name), or the driver, that runs one generate at a time.
        engine: String,
    },
    /// New settings were given while requests were queued, running or unanswered.
    #[error(
        "batching settings can change only while the batcher is idle ({queued} queued, generate running: {running})"
    )]
    Busy {
        /// Requests in the queue.
        queued: usize,
        /// A generate was in flight.
        running: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed() {
        let d = Duration::ZERO;
        let remote = crate::engine::RemoteErrorKind::ALL.iter().map(|&kind| RequestError::Remote {
            batch_id: 0,
            batch_size: 0,
            error: RemoteError::new(kind, "http://127.0.0.1:1", ""),
        });
        let all: Vec<RequestError> = [
            RequestError::EngineNotStarted,
            RequestError::StartFailed(String::new()),
            RequestError::EngineFailed(String::new()),
            RequestError::ShuttingDown,
            RequestError::Cancelled,
            RequestError::Engine { batch_id: 0, batch_size: 0, message: String::new() },
            RequestError::OutputCountMismatch { batch_id: 0, expected: 0, got: 0 },
            RequestError::OutputIdMismatch { batch_id: 0, detail: String::new() },
            RequestError::EnginePanicked { batch_id: 0, batch_size: 0, message: String::new() },
            RequestError::GenerateTimedOut { batch_id: 0, batch_size: 0, after: d },
            RequestError::EngineUnresponsive { waited: d },
            RequestError::EngineDied(crate::engine::EngineDeath {
                process: String::new(),
                pid: None,
                status: String::new(),
            }),
            RequestError::EngineStalled { batch_id: 0, batch_size: 0, stalled_for: d },
            RequestError::Aborted,
        ]
        .into_iter()
        .chain(remote)
        .collect();
        assert_eq!(all.len(), RequestError::KINDS.len(), "KINDS lists a kind no error has");
        for e in &all {
            assert!(RequestError::KINDS.contains(&e.kind()), "{} is missing from KINDS", e.kind());
        }
    }
}
