//! batchlab: benchmark and test batched LLM inference.
//!
//! See ARCHITECTURE.md for the map and the invariants.
#![warn(missing_docs)]
pub mod batcher;
pub mod calibrate;
pub mod compare;
pub mod engine;
pub mod loadgen;
pub mod metrics;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
// The server needs tokio's sockets and signals, which a loom build (`--cfg loom`) lacks.
#[cfg(not(loom))]
pub mod serve;
pub mod sync;
pub mod sys;
pub mod time;
pub mod tune;
