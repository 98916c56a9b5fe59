//! The engine boundary's errors: [`EngineError`], an engine process's death ([`EngineDeath`]),
//! and a remote engine's failed request ([`RemoteError`], by [`RemoteErrorKind`]).

use serde::{Deserialize, Serialize};

/// An engine process that exited while the engine was in use, as whoever saw it describes it.
///
/// Displays as `VLLM::EngineCore (pid 1234) killed by SIGKILL`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EngineDeath {
    /// The process's name, e.g. `VLLM::EngineCore`.
    pub process: String,
    /// Its pid, where known (an in-process engine error has none).
    pub pid: Option<u32>,
    /// How it ended, e.g. `killed by SIGKILL`, `exited with status 1`.
    pub status: String,
}

impl EngineDeath {
    /// `process` (with its pid, where known) ended as `status` says.
    pub fn new(process: impl Into<String>, pid: Option<u32>, status: impl Into<String>) -> Self {
        EngineDeath { process: process.into(), pid, status: status.into() }
    }
}

impl std::fmt::Display for EngineDeath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "{} (pid {pid}) {}", self.process, self.status),
            None => write!(f, "{} {}", self.process, self.status),
        }
    }
}

/// The engine boundary's errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// `start` failed, with the engine's message.
    #[error("engine failed to start: {0}")]
    Start(String),
    /// `generate` failed for the whole batch, with the engine's message.
    #[error("generate failed: {0}")]
    Generate(String),
    /// `shutdown` failed, with the engine's message.
    #[error("engine shutdown failed: {0}")]
    Shutdown(String),
    /// The engine is dead for good (e.g. vLLM raised its engine-dead error): the batcher fails
    /// everything in flight and queued, and rejects all later work.
    #[error("engine died: {0}")]
    Died(EngineDeath),
    /// The engine cannot be built here (e.g. a feature this binary was built without).
    #[error("{0}")]
    Unsupported(String),
    /// A remote engine's request for the batch failed (an HTTP engine): only this batch's
    /// requests fail, each with the error's kind; the engine goes on.
    #[error("{0}")]
    Remote(RemoteError),
}

/// Why a request to a remote engine (an HTTP server) failed: reports count errors by these kinds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RemoteErrorKind {
    /// No connection could be made.
    ConnectFailed,
    /// The server answered 5xx.
    Http5xx,
    /// The server answered 429 (too many requests).
    Http429,
    /// Any other status that is not success (4xx but 429).
    Http4xx,
    /// The stream ended before every choice finished, or the connection dropped mid-stream.
    StreamDropped,
    /// The request's `timeout` elapsed.
    Timeout,
    /// The endpoint sent nothing new for `stall_timeout` (a hung server): it leaves the rotation.
    Stalled,
    /// The server sent something that is not the API's shape.
    BadResponse,
}

impl RemoteErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [RemoteErrorKind] = &[
        RemoteErrorKind::ConnectFailed,
        RemoteErrorKind::Http5xx,
        RemoteErrorKind::Http429,
        RemoteErrorKind::Http4xx,
        RemoteErrorKind::StreamDropped,
        RemoteErrorKind::Timeout,
        RemoteErrorKind::Stalled,
        RemoteErrorKind::BadResponse,
    ];

    /// The kind's name in reports (`connect_failed`, `http_5xx`, …).
    pub fn name(self) -> &'static str {
        match self {
            RemoteErrorKind::ConnectFailed => "connect_failed",
            RemoteErrorKind::Http5xx => "http_5xx",
            RemoteErrorKind::Http429 => "http_429",
            RemoteErrorKind::Http4xx => "http_4xx",
            RemoteErrorKind::StreamDropped => "stream_dropped",
            RemoteErrorKind::Timeout => "timeout",
            RemoteErrorKind::Stalled => "stalled",
            RemoteErrorKind::BadResponse => "bad_response",
        }
    }
}

/// A failed request to a remote engine: its kind, the endpoint and what happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RemoteError {
    /// What kind of failure.
    pub kind: RemoteErrorKind,
    /// The endpoint's base URL.
    pub endpoint: String,
    /// What happened, for people (never holds an API key).
    pub message: String,
}

impl RemoteError {
    /// A `kind` failure at `endpoint`.
    pub fn new(kind: RemoteErrorKind, endpoint: impl Into<String>, message: impl Into<String>) -> Self {
        RemoteError { kind, endpoint: endpoint.into(), message: message.into() }
    }
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}: {}", self.kind.name(), self.endpoint, self.message)
    }
}
