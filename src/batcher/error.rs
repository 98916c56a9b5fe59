//! The batcher boundary's errors: why a request got no output.

use std::time::Duration;

use super::core::BatchId;
use crate::engine::EngineDeath;

/// Why a request failed. Every submitted request ends in exactly one output or one of these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("engine not started: call start() or preload() first")]
    EngineNotStarted,
    #[error("engine failed to start: {0}")]
    StartFailed(String),
    #[error("engine is unusable: {0}")]
    EngineFailed(String),
    #[error("rejected: the batcher is shutting down")]
    ShuttingDown,
    #[error("cancelled before dispatch")]
    Cancelled,
    #[error("batch {batch_id} of {batch_size} failed in the engine: {message}")]
    Engine { batch_id: BatchId, batch_size: usize, message: String },
    #[error("batch {batch_id}: engine returned {got} outputs for {expected} requests")]
    OutputCountMismatch { batch_id: BatchId, expected: usize, got: usize },
    #[error("batch {batch_id}: outputs do not match requests: {detail}")]
    OutputIdMismatch { batch_id: BatchId, detail: String },
    #[error("batch {batch_id} of {batch_size}: engine panicked: {message}")]
    EnginePanicked { batch_id: BatchId, batch_size: usize, message: String },
    #[error("batch {batch_id} of {batch_size}: generate did not return within {after:?}")]
    GenerateTimedOut { batch_id: BatchId, batch_size: usize, after: Duration },
    #[error("waited {waited:?} for an engine stuck in an overrunning generate")]
    EngineUnresponsive { waited: Duration },
    /// The engine died: the running batch, the queue and every later submit get this.
    #[error("engine died: {0}")]
    EngineDied(EngineDeath),
    /// The run was interrupted while a generate was running; the engine is unusable.
    #[error("aborted: the running generate was abandoned after an interrupt")]
    Aborted,
}

impl RequestError {
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
            RequestError::Aborted => "aborted",
        }
    }
}

/// Invalid batching settings.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("batch_size must be > 0")]
    ZeroBatchSize,
    #[error("batch_timeout must be > 0")]
    ZeroBatchTimeout,
    #[error("generate_timeout must be > 0 when set")]
    ZeroGenerateTimeout,
}
