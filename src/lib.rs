//! batchlab: benchmark and test batched LLM inference.
//!
//! See ARCHITECTURE.md for the map and the invariants.
#![warn(missing_docs)]
pub mod batcher;
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
#[doc(hidden)]
pub mod sync;
#[doc(hidden)]
pub mod sys;
pub mod time;
#[doc(hidden)]
pub mod tune;
