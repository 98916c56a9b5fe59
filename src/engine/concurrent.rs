//! What a start hands out: [`Started`], the engine's info and, for an engine that runs several
//! generates at once, its [`Concurrent`] face with the capabilities that come with it.
//!
//! The capabilities are data, handed out once at the start, not methods a wrapper must remember
//! to forward: a layer around an engine (the fault injection of `engine::faults`) replaces only
//! what it wraps, the face, and every other capability passes through as it is
//! (`Concurrent { face: wrapped, ..concurrent }`), so a capability added later cannot go missing
//! under a wrapper (issue 36: `runs_here` and the steps once did, under `[faults]`).

use std::sync::Arc;

use serde::Serialize;

use super::{EngineError, EngineInfo, EngineOutput, EngineRequest};

/// What a successful [`Engine::start`](super::Engine::start) hands out, once.
#[derive(Clone, Debug)]
pub struct Started {
    /// What the engine says about itself.
    pub info: EngineInfo,
    /// Its concurrent face, when it can run several generates at once (`batching.max_in_flight >
    /// 1`). `None`: one generate at a time, on the engine thread, and `max_in_flight` must be 1.
    pub concurrent: Option<Concurrent>,
}

impl Started {
    /// An engine that runs one generate at a time, on the engine thread.
    pub fn blocking(info: EngineInfo) -> Self {
        Started { info, concurrent: None }
    }
}

impl From<EngineInfo> for Started {
    fn from(info: EngineInfo) -> Self {
        Started::blocking(info)
    }
}

/// Where a concurrent generate's result goes: called exactly once, on any thread, possibly before
/// [`ConcurrentEngine::generate`] has returned. It must not be called with a lock of the engine's
/// held that the batcher could wait on.
pub type GenerateDone = Box<dyn FnOnce(Result<Vec<EngineOutput>, EngineError>) + Send>;

/// The face of an engine that runs several generates at once, from any thread: an HTTP engine,
/// where each batch is one request on the wire and the server does the batching, or vLLM with
/// continuous admission. Handed out by the start ([`Concurrent::face`]); the batcher then
/// dispatches up to `batching.max_in_flight` batches through it, while start and shutdown stay on
/// the engine thread, and the shutdown still runs only after every generate it started has called
/// `done`.
pub trait ConcurrentEngine: Send + Sync {
    /// Starts a generate of `batch` and returns without waiting for it; `done` gets its result
    /// (one output per request, or one error for the whole batch) exactly once.
    fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone);
}

/// Reads the servers' own counters now (their Prometheus `/metrics`), one entry per endpoint that
/// has them. A run reads them before and after each benchmark and reports the deltas; never
/// during one (it may take a request per endpoint).
pub type ReadCounters = Arc<dyn Fn() -> Vec<ServerCounters> + Send + Sync>;

/// Takes the steps an engine that batches by itself ran since the last call, each what it ran at
/// once.
pub type TakeSteps = Arc<dyn Fn() -> Vec<EngineStep> + Send + Sync>;

/// A started engine's concurrent face and what comes with it. A wrapper replaces the face and
/// keeps the rest: `Concurrent { face: wrapped, ..concurrent }`.
#[derive(Clone)]
pub struct Concurrent {
    /// Where the batcher hands each batch.
    pub face: Arc<dyn ConcurrentEngine>,
    /// Whether the generates run in this machine's processes, those the engine names in
    /// [`EngineInfo::processes`] and its [`EngineInfo::engine_thread`] (vLLM with continuous
    /// admission), so that their CPU time is its sign of life and the batcher's stall watch
    /// applies with several in flight. `false`: the work is elsewhere (a server).
    pub runs_here: bool,
    /// The servers' counters, where the engine's servers have them (the HTTP engine).
    pub counters: Option<ReadCounters>,
    /// For an engine that batches by itself (vLLM with continuous admission): its steps, which the
    /// run's batching statistics count instead of the hand-overs. `None`: the engine runs the
    /// batches it is given, and those are the batches.
    pub steps: Option<TakeSteps>,
}

impl Concurrent {
    /// `face`, with nothing else: the work runs elsewhere, without counters or steps of its own.
    pub fn new(face: Arc<dyn ConcurrentEngine>) -> Self {
        Concurrent { face, runs_here: false, counters: None, steps: None }
    }
}

impl std::fmt::Debug for Concurrent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Concurrent")
            .field("runs_here", &self.runs_here)
            .field("counters", &self.counters.is_some())
            .field("steps", &self.steps.is_some())
            .finish_non_exhaustive()
    }
}

/// One step of an engine that batches by itself: when it ran, on the monotonic clock, and the
/// requests it served, by phase, as far as its outputs show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStep {
    /// When the step was called.
    pub started: crate::time::Timestamp,
    /// When it returned.
    pub ended: crate::time::Timestamp,
    /// Requests that got their first token in the step (their prefill ended in it).
    pub prefill: u32,
    /// Requests that got a further token (decode).
    pub decode: u32,
}

impl EngineStep {
    /// A step from `started` to `ended` that served `prefill` and `decode` requests.
    pub fn new(started: crate::time::Timestamp, ended: crate::time::Timestamp, prefill: u32, decode: u32) -> Self {
        EngineStep { started, ended, prefill, decode }
    }
}

/// One server's counters at one moment, by batchlab's names (`prompt_tokens`,
/// `generation_tokens`, `prefix_cache_queries`, `prefix_cache_hits`, `preemptions`, …): what a
/// report subtracts to give a benchmark's deltas.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ServerCounters {
    /// The endpoint's base URL.
    pub endpoint: String,
    /// Counter values by name; a counter the server does not have is absent.
    pub counters: std::collections::BTreeMap<String, f64>,
}
