//! The engine boundary.
//!
//! Every engine (the simulated one, vLLM and any Python engine through pyo3, the OpenAI-compatible
//! HTTP engine, a library caller's own) implements [`Engine`]. The trait is blocking on purpose:
//! its `start`, `generate` and `shutdown` are called from one dedicated engine thread, because
//! vLLM's synchronous `LLM` is not safe for overlapping calls. The start hands out, once, what
//! the engine can do besides ([`Started`]): an engine that runs several generates at once (the
//! HTTP engine, vLLM with continuous admission) gives a [`Concurrent`] face, through which the
//! batcher hands it up to `batching.max_in_flight` batches without waiting, their results coming
//! back through `done` on the engine's own threads. The face's capabilities (it runs here and so
//! is stall-watched, its servers' counters, its own steps) travel with it as data, so a wrapper
//! (`faults`) replaces the face alone and cannot lose them. Everything an engine reports is
//! optional where a real engine may omit it, so the metrics mapper can make a missing value an
//! absent metric instead of a wrong zero.
//!
//! # Files
//! - `concurrent`: what a start hands out (`Started`, `Concurrent`: the concurrent face and its
//!   capabilities, `ConcurrentEngine`, `EngineStep`, `ServerCounters`).
//! - `error`: the boundary's errors (`EngineError`, `EngineDeath`, a remote engine's
//!   `RemoteError` by `RemoteErrorKind`).
//! - `chat`: chat prompts (`Prompt::Chat`: messages and the template to apply, `RequestFormat`,
//!   the `plain` rendering, `ChatTemplate` compiled with minijinja so that a broken one is reported
//!   with its line).
//! - `step_tokens`: per-token times for an engine whose tokens come out at step ends a batch shares
//!   (`StepEnds`, read on our clock once per batch; a request's runs of steps, `StepTokens`:
//!   `EngineStats::token_steps`, the simulator's form of `token_ts`).
//! - `tokens`: batchlab's one rule for counting text without a tokenizer (4 bytes a token: the
//!   simulator, dataset length filters, synthetic chat lengths).
//! - `faults`: the fault-injecting wrapper around any engine (`FaultyEngine`, virtual time
//!   included, and its concurrent face) and its config type `Faults`.
//! - `sim/`: the simulated engine (`SimConfig`: time mode, cost model, scheduler limits; see its
//!   module doc). `ResolvedEngineConfig` (here) is the scheduler and KV configuration an engine
//!   resolved, reported in `EngineInfo`.
//! - `openai/`: the HTTP engine (`engine.kind = "openai"`, docs/http.md).
//! - `python/`: the pyo3 engine (feature `vllm`), vLLM's continuous admission included.
//!
//! Knows nothing of `scenario/`, `metrics/` or `run/`: engines get their own config types
//! (`SimConfig`, `PythonConfig`, `VllmConfig`, `OpenAiConfig`, `Faults`), which the plan holds.
//! The request, output and stats types are `#[non_exhaustive]`: other crates make them with
//! `EngineOutput::new(..).with_*`, `EngineInfo::new`, `EngineRequest::new`, `EngineDeath::new`,
//! `EngineStats::default()`; an engine's start gives `EngineInfo::new(..).into()` (one generate at
//! a time) or `Started { info, concurrent: Some(Concurrent::new(face)) }`.

#[doc(hidden)]
pub mod chat;
mod concurrent;
mod error;
#[doc(hidden)]
pub mod faults;
#[doc(hidden)]
pub mod image;
#[doc(hidden)]
pub mod openai;
#[doc(hidden)]
pub mod python;
#[doc(hidden)]
pub mod sim;
mod step_tokens;
#[doc(hidden)]
pub mod tokenizer;
#[doc(hidden)]
pub mod tokens;

pub use concurrent::{
    Concurrent, ConcurrentEngine, EngineStep, GenerateDone, ReadCounters, ServerCounters, Started, TakeSteps,
};
pub use error::{EngineDeath, EngineError, RemoteError, RemoteErrorKind};
pub use step_tokens::{StepEnds, StepTokens};

use serde::{Deserialize, Serialize};

use crate::time::VirtualClock;
#[cfg(doc)]
use crate::time::WallAnchor;

/// Our id for a request. The batcher chooses it when the request is submitted
/// (`BatcherCore::submit`: 0, 1, 2, ... in submit order), so it is unique within one batcher; no
/// caller makes one up.
pub type RequestId = u64;

/// What the model is asked to continue.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Prompt {
    /// A text prompt, tokenized by the engine.
    Text(String),
    /// Token ids, given to the engine as they are.
    Tokens(Vec<u32>),
    /// Chat messages, templated and tokenized by the engine ([`chat`]).
    Chat(chat::ChatPrompt),
}

impl Prompt {
    /// The prompt's length in tokens when it is given as tokens.
    pub fn token_len(&self) -> Option<usize> {
        match self {
            Prompt::Text(_) | Prompt::Chat(_) => None,
            Prompt::Tokens(t) => Some(t.len()),
        }
    }
}

/// One request as the engine sees it.
///
/// `Id` is the request's id slot: `()` while a caller builds the request, a [`RequestId`] once the
/// batcher numbered it at submit. Engines only ever see numbered requests (`EngineRequest`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EngineRequest<Id = RequestId> {
    /// Unique within one batcher, which chose it; an output names its request by this.
    pub id: Id,
    /// What to continue.
    pub prompt: Prompt,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Generate at least this many tokens before an end-of-sequence may stop generation.
    pub min_tokens: u32,
    /// Ignore end-of-sequence entirely: generate exactly `max_tokens`.
    pub ignore_eos: bool,
    /// Sampling temperature; 0 is greedy.
    pub temperature: f32,
    /// Per-request sampling seed; `None` leaves sampling to the engine's own seed.
    pub seed: Option<u64>,
    /// The session this request is a turn of (`[workload.sessions]`); an HTTP engine sends it as
    /// a header and may route by it. `None` for a request that is no turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// What the plan's simulator works out from this request alone, worked out where the request
    /// was made ([`RequestPrep`]); `None` for the engine to work it out itself.
    #[serde(skip)]
    pub(crate) prepared: Option<PreparedPrompt>,
}

/// A prompt as the simulated engine reads it, worked out ahead ([`RequestPrep`]):
/// its length and its prefix-cache block hashes under the settings it was worked out for. The
/// engine takes it only under those same settings, and the result is then exactly what it would
/// have worked out itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreparedPrompt {
    /// The block size and prefix caching it was worked out under.
    pub(crate) block_size: u32,
    pub(crate) prefix_caching: bool,
    /// The prompt's length in token ids.
    pub(crate) prompt_len: u32,
    /// Its full blocks' chained hashes (none without prefix caching).
    pub(crate) hashes: Vec<u64>,
}

/// Work the engine would do on each request from the request alone, done instead where the
/// request is made: a run in virtual time makes its requests ahead on another thread
/// (`run/ahead.rs`) and does this there, so the engine's own thread is spared it. The engine's
/// results are the same with it as without. Crate-private: only the plan's own simulator has one
/// (`engine::sim::request_prep`, which the run's session takes for it).
pub(crate) type RequestPrep = std::sync::Arc<dyn Fn(&mut EngineRequest<()>) + Send + Sync>;

impl EngineRequest<()> {
    /// A request for `max_tokens` tokens after `prompt`, greedy, EOS ignored; the other fields
    /// are public to change. Not numbered yet: submitting it to a batcher gives it its id
    /// (`with_id` numbers it for a caller that drives an engine without a batcher).
    pub fn new(prompt: Prompt, max_tokens: u32) -> Self {
        EngineRequest {
            id: (),
            prompt,
            max_tokens,
            min_tokens: 0,
            ignore_eos: true,
            temperature: 0.0,
            seed: None,
            session: None,
            prepared: None,
        }
    }

    /// A request for `max_tokens` tokens after a prompt of token ids, greedy, EOS ignored. Not
    /// numbered yet.
    pub fn tokens(prompt: Vec<u32>, max_tokens: u32) -> Self {
        EngineRequest::new(Prompt::Tokens(prompt), max_tokens)
    }

    /// The request numbered `id`. The batcher numbers the requests submitted to it; this is for
    /// whoever calls an engine directly, without a batcher, and so plays its part.
    pub fn with_id(self, id: RequestId) -> EngineRequest {
        let EngineRequest { id: (), prompt, max_tokens, min_tokens, ignore_eos, temperature, seed, session, prepared } =
            self;
        EngineRequest { id, prompt, max_tokens, min_tokens, ignore_eos, temperature, seed, session, prepared }
    }
}

/// Why generation stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// `max_tokens` reached.
    Length,
    /// End of sequence or a stop string.
    Stop,
    /// The engine aborted the request.
    Abort,
    /// Anything else the engine said, verbatim.
    Other(String),
    /// The engine gave no finish reason.
    Unknown,
}

/// Per-request timing the engine reports, in the shape vLLM's `RequestStateStats` gives.
///
/// `arrival_wall` is wall-clock seconds since the Unix epoch. The `*_ts` fields are seconds on the
/// engine's monotonic clock (see [`ClockDomain`]). Every field is optional; values are kept as the
/// engine sent them (NaN included) and judged by the metrics mapper.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EngineStats {
    /// Wall-clock seconds since the Unix epoch when the engine saw the request arrive.
    pub arrival_wall: Option<f64>,
    /// Engine-clock seconds when the request entered the engine's queue.
    pub queued_ts: Option<f64>,
    /// Engine-clock seconds when the engine first scheduled the request.
    pub scheduled_ts: Option<f64>,
    /// Engine-clock seconds when the first output token was produced.
    pub first_token_ts: Option<f64>,
    /// Engine-clock seconds when the last output token was produced.
    pub last_token_ts: Option<f64>,
    /// Engine-clock seconds of every output token, in order (the first is `first_token_ts`, the
    /// last `last_token_ts`), where the engine times each token (the simulator gives them as
    /// `token_steps`); offline vLLM does not. The per-gap inter-token latency (`itl`) comes from
    /// these (or `token_steps`) alone.
    pub token_ts: Option<Vec<f64>>,
    /// The same per-token times, for an engine whose tokens come out at step ends that a whole
    /// batch shares (the simulator): the batch's step ends once and each request's runs of steps,
    /// instead of a time per token. An engine gives `token_ts` or this, not both (`token_ts` is
    /// taken when both are there).
    pub token_steps: Option<StepTokens>,
    /// Prompt tokens served from the engine's prefix cache (vLLM's `num_cached_tokens`).
    pub cached_tokens: Option<u32>,
    /// The request's images its encoder cache already held (the simulator's); `None` for a
    /// request without images, or an engine that does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_cache_hits: Option<u32>,
    /// Engine-clock seconds when the request left batchlab (an HTTP engine: the request was
    /// written to the connection). The run's `dispatch_delay` is the intended arrival to this.
    pub sent_ts: Option<f64>,
    /// The endpoint that served the request (an HTTP engine's base URL).
    pub endpoint: Option<String>,
    /// Where the token counts came from, when the engine did not count them itself.
    pub token_count_source: Option<TokenCountSource>,
    /// The prompts of the request on the wire that carried this one (an HTTP engine sends a batch
    /// as one request per distinct `max_tokens`, seed, …, so this may be less than the batch).
    pub wire_batch: Option<u32>,
}

/// One output per request.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct EngineOutput {
    /// The id of the request this answers, where the engine returns ids.
    pub request_id: Option<RequestId>,
    /// Prompt length in tokens, as the engine counted it.
    pub prompt_tokens: Option<u32>,
    /// The engine's count of generated tokens.
    pub output_tokens: Option<u32>,
    /// The generated token ids, where the engine returns them (a fallback for the count).
    pub output_token_ids: Option<Vec<u32>>,
    /// The generated text, where the engine returns it.
    pub text: Option<String>,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// The engine's timing of this request, for TTFT, ITL and queueing metrics.
    pub stats: EngineStats,
    /// This request failed at a remote engine while others of its batch did not (an HTTP engine
    /// sends a batch as several requests): it fails alone, with this error's kind and endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<RemoteError>,
    /// The length of the embedding vector the engine returned: set for an embedding (a pooling
    /// request, which generates no tokens), absent for a generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_dims: Option<u32>,
}

impl EngineOutput {
    /// An output that stopped for `finish_reason`, answering `request_id` (`None`: matched by
    /// position), with nothing else known yet; the `with_*` methods add the rest. The one way to
    /// make an output outside batchlab (the type is `#[non_exhaustive]`).
    pub fn new(request_id: Option<RequestId>, finish_reason: FinishReason) -> Self {
        EngineOutput {
            request_id,
            prompt_tokens: None,
            output_tokens: None,
            output_token_ids: None,
            text: None,
            finish_reason,
            stats: EngineStats::default(),
            failure: None,
            embedding_dims: None,
        }
    }

    /// The output of request `request_id` that failed remotely with `error` (the rest of its
    /// batch may have succeeded).
    pub fn failed(request_id: Option<RequestId>, error: RemoteError) -> Self {
        EngineOutput { failure: Some(error), ..EngineOutput::new(request_id, FinishReason::Unknown) }
    }

    /// With the prompt's length in tokens, as the engine counted it (a `u32`, or an `Option`).
    pub fn with_prompt_tokens(self, prompt_tokens: impl Into<Option<u32>>) -> Self {
        EngineOutput { prompt_tokens: prompt_tokens.into(), ..self }
    }

    /// With the engine's count of generated tokens (a `u32`, or an `Option`).
    pub fn with_output_tokens(self, output_tokens: impl Into<Option<u32>>) -> Self {
        EngineOutput { output_tokens: output_tokens.into(), ..self }
    }

    /// With the generated token ids (a `Vec`, or an `Option`).
    pub fn with_output_token_ids(self, ids: impl Into<Option<Vec<u32>>>) -> Self {
        EngineOutput { output_token_ids: ids.into(), ..self }
    }

    /// With the generated text.
    pub fn with_text(self, text: impl Into<String>) -> Self {
        EngineOutput { text: Some(text.into()), ..self }
    }

    /// With the engine's timing of the request.
    pub fn with_stats(self, stats: EngineStats) -> Self {
        EngineOutput { stats, ..self }
    }

    /// An embedding of `dims` dimensions: the request was pooled, and generated nothing.
    pub fn with_embedding_dims(self, dims: u32) -> Self {
        EngineOutput { embedding_dims: Some(dims), ..self }
    }

    /// Generated tokens: the engine's count, else the length of the returned token ids; a count
    /// of 0 next to token ids gives the ids' length (as guidellm does: vLLM leaves the count at 0
    /// when it kept no stats).
    pub fn generated_tokens(&self) -> Option<u32> {
        match (self.output_tokens, self.output_token_ids_len()) {
            (Some(0), Some(ids)) if ids > 0 => Some(ids),
            (Some(count), _) => Some(count),
            (None, ids) => ids,
        }
    }

    /// Whether the engine's count and its token ids disagree (both given, different lengths).
    pub fn token_count_mismatch(&self) -> bool {
        matches!((self.output_tokens, self.output_token_ids_len()), (Some(count), Some(ids)) if count != ids)
    }

    fn output_token_ids_len(&self) -> Option<u32> {
        self.output_token_ids.as_ref().map(|ids| u32::try_from(ids.len()).unwrap_or(u32::MAX))
    }
}

/// Whether an engine's `*_ts` stats are on our clock.
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ClockDomain {
    /// `CLOCK_MONOTONIC` seconds, directly comparable with [`crate::time::Timestamp`] (vLLM, sim).
    Monotonic,
    /// An unrelated clock: timestamps are anchored on the wall-clock arrival time.
    Foreign,
}

/// What an engine says about itself once started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EngineInfo {
    /// The engine's name as reports show it (`environment.engine_name`), e.g. `vllm`.
    pub name: String,
    /// The engine's version, as reports show it.
    pub version: String,
    /// The scheduler and KV-cache configuration the engine actually resolved (`report.json`'s
    /// `environment.engine_config`); `None` when the engine cannot say.
    pub resolved_config: Option<ResolvedEngineConfig>,
    /// The processes that are the engine (vLLM's EngineCore and workers), by pid: while the engine
    /// is in use, any of them exiting is its death, and their CPU time is its sign of life
    /// (`run::engine_guard`). `Some(vec![])`: it runs none (in-process). `None`: it did not say.
    /// Not part of the report.
    #[serde(skip)]
    pub processes: Option<Vec<u32>>,
    /// The thread (kernel thread id) that runs the engine's calls, when it is not the one that
    /// calls [`Engine::generate`] (an engine behind `shared::SharedEngine`): an in-process engine's
    /// CPU time is this thread's. Not part of the report.
    #[serde(skip)]
    pub engine_thread: Option<i32>,
}

impl EngineInfo {
    /// An engine called `name` at `version`, whose resolved configuration is unknown.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        EngineInfo {
            name: name.into(),
            version: version.into(),
            resolved_config: None,
            processes: None,
            engine_thread: None,
        }
    }

    /// With the pids of the processes that are the engine (see [`EngineInfo::processes`]).
    pub fn with_processes(self, pids: Vec<u32>) -> Self {
        EngineInfo { processes: Some(pids), ..self }
    }

    /// With the configuration the engine resolved.
    pub fn with_resolved_config(self, config: ResolvedEngineConfig) -> Self {
        EngineInfo { resolved_config: Some(config), ..self }
    }
}

/// The scheduler and KV-cache settings an engine actually runs with, not the ones it was asked
/// for: vLLM's resolved `SchedulerConfig` and `CacheConfig`, or the simulator's own. A calibration
/// fit replays batches under exactly these limits (docs/simulation.md).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ResolvedEngineConfig {
    /// Most sequences running at once (`scheduler_config.max_num_seqs`).
    pub max_num_seqs: u32,
    /// Most tokens scheduled in one engine step (`scheduler_config.max_num_batched_tokens`).
    pub max_num_batched_tokens: u32,
    /// KV-cache blocks the engine got (`cache_config.num_gpu_blocks`, on CPU too).
    pub num_kv_blocks: u32,
    /// Tokens per KV-cache block (`cache_config.block_size`).
    pub block_size: u32,
    /// Whether full prompt blocks are cached and reused across requests (`enable_prefix_caching`).
    pub prefix_caching: bool,
    /// Whether a prompt may be prefilled over several steps (`enable_chunked_prefill`).
    pub chunked_prefill: bool,
}

/// A blocking inference engine, driven from one dedicated thread.
pub trait Engine: Send {
    /// Loads the engine. Expensive, may fail; called at most once. Says what the engine is and
    /// hands out, once, what else it can do ([`Started`]: its concurrent face and the capabilities
    /// that come with it).
    fn start(&mut self) -> Result<Started, EngineError>;
    /// Runs one batch. Returns one output per request, or one error for the whole batch;
    /// [`EngineError::Died`] when the engine knows it can never serve again.
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError>;
    /// Releases the engine. Called at most once, after the last generate.
    fn shutdown(&mut self) -> Result<(), EngineError>;
    /// The clock of the `*_ts` fields in [`EngineStats`].
    fn clock_domain(&self) -> ClockDomain {
        ClockDomain::Monotonic
    }
}

/// Where an output's token counts came from, for an engine that does not count them itself (an
/// HTTP server): the report says which was used. For an embedding, where its input count came
/// from (it generates none).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TokenCountSource {
    /// The server's `usage`, per choice.
    Usage,
    /// The token ids the server returned.
    TokenIds,
    /// Counted chunks (one token each unless the server said otherwise).
    Chunks,
    /// An embeddings request's `usage` (the whole list's) shared over its text inputs by their
    /// bytes: the sum is the server's count, each input's an estimate (`engine::openai::embed`).
    UsageShare,
}

/// An engine that can also run in virtual time: it lets time pass by advancing a
/// [`VirtualClock`] instead of sleeping, so a run is deterministic and takes no wall time.
pub trait VirtualTimeEngine: Engine {
    /// Puts the engine on `clock`; called once, before `start`. From then on every cost advances
    /// `clock`, and wall-clock times the engine reports derive from [`WallAnchor::VIRTUAL`].
    fn use_virtual_clock(&mut self, clock: VirtualClock);
}

impl<E: VirtualTimeEngine + ?Sized> VirtualTimeEngine for Box<E> {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        (**self).use_virtual_clock(clock)
    }
}

/// An engine and the time it runs in: what `batchlab::run::run_with` takes. Any engine converts
/// into real time with `From`.
#[non_exhaustive]
pub enum TimedEngine {
    /// Real time, on the threaded batcher: any engine.
    RealTime(Box<dyn Engine>),
    /// Virtual time, on one thread, deterministic: an engine that can pass time by hand.
    VirtualTime(Box<dyn VirtualTimeEngine>),
}

impl TimedEngine {
    /// `engine` in real time.
    pub fn real_time(engine: impl Engine + 'static) -> Self {
        TimedEngine::RealTime(Box::new(engine))
    }

    /// `engine` in virtual time.
    pub fn virtual_time(engine: impl VirtualTimeEngine + 'static) -> Self {
        TimedEngine::VirtualTime(Box::new(engine))
    }
}

impl<E: Engine + 'static> From<E> for TimedEngine {
    fn from(engine: E) -> Self {
        TimedEngine::real_time(engine)
    }
}

impl std::fmt::Debug for TimedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimedEngine::RealTime(_) => "TimedEngine::RealTime(..)",
            TimedEngine::VirtualTime(_) => "TimedEngine::VirtualTime(..)",
        })
    }
}

impl<E: Engine + ?Sized> Engine for Box<E> {
    fn start(&mut self) -> Result<Started, EngineError> {
        (**self).start()
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        (**self).generate(batch)
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        (**self).shutdown()
    }
    fn clock_domain(&self) -> ClockDomain {
        (**self).clock_domain()
    }
}
