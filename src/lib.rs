//! batchlab: benchmark and test batched LLM inference.
//!
//! See ARCHITECTURE.md for the map and the invariants.
#![warn(missing_docs)]
pub mod batcher;
// Calibration from a URL replays its design points on the server's core (`serve`), which a loom
// build lacks.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod calibrate;
#[doc(hidden)]
pub mod compare;
pub mod engine;
#[doc(hidden)]
pub mod loadgen;
#[doc(hidden)]
pub mod metrics;
pub mod report;
#[doc(hidden)]
pub mod rng;
pub mod run;
pub mod scenario;
// The server needs tokio's sockets and signals, which a loom build (`--cfg loom`) lacks.
#[cfg(not(loom))]
#[doc(hidden)]
pub mod serve;
#[doc(hidden)]
pub mod sync;
#[doc(hidden)]
pub mod sys;
pub mod time;
#[doc(hidden)]
pub mod tune;
