//! `engine.kind = "openai"`: any OpenAI-compatible server (vLLM, SGLang, `batchlab serve`, a
//! gateway in front of many) as a batchlab engine, over HTTP (docs/http.md).
//!
//! A batch is one streamed `POST /v1/completions` with the batch's prompts as a list (one HTTP
//! request per distinct set of sampling settings, [`request`]); the chat API takes one
//! conversation per request; the embeddings API takes a batch as one list of inputs ([`embed`]).
//! The server batches what arrives; batchlab's micro-batcher decides
//! what arrives together, and with `batching.max_in_flight` how many batches are on the wire at
//! once ([`ConcurrentEngine`](crate::engine::ConcurrentEngine)).
//!
//! Files by concern: [`config`] the settings (the scenario's `[engine.openai]`), [`request`] the
//! bodies, [`embed`] the embeddings API's body and answer, [`sse`] the event-stream parser, [`stream`] one response's per-choice timing and
//! counts (`chunk` reads the common chunk's shape without a JSON tree, its hot path), [`route`] endpoint choice and backoff, `scrape` the servers' `/metrics`, `client` the
//! HTTP client over stamped connections, `engine` the engine itself (a batch on the wire in
//! `engine/batch`, the endpoints' checks in `engine/check`). All but the last three are sans IO, and built in every configuration; the client
//! needs tokio's sockets, which a loom build (`--cfg loom`) lacks.
//!
//! **Timing** is the client's, on `CLOCK_MONOTONIC` ([`ClockDomain::Monotonic`]
//! (crate::engine::ClockDomain)): `sent_ts` just before the request is handed to the connection,
//! each token at the arrival of the chunk that carried it ([`stream`] says how a chunk of several
//! tokens is timed), `queued_ts = sent_ts`, `arrival_wall` the wall clock then, `scheduled_ts`
//! unknown. **Errors** fail the batch with [`RemoteError`](crate::engine::RemoteError) of a
//! kind, never `EngineError::Died`: one server failing never stops the run.

mod chunk;
#[cfg(not(loom))]
mod client;
pub mod config;
pub mod embed;
#[cfg(not(loom))]
mod engine;
pub mod request;
pub mod route;
#[cfg(not(loom))]
pub mod scrape;
pub mod sse;
pub mod stream;

pub use config::{Api, OpenAiConfig, Routing};
#[cfg(not(loom))]
pub use engine::{CHECK_TIMEOUT, CONNECT_TIMEOUT, OpenAiEngine, SHUTDOWN_GRACE};
