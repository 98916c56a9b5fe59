//! The checks behind batchlab's fuzz targets, one module per target.
//!
//! Each `fuzz_targets/*.rs` is a thin `fuzz_target!` around a `check` function here, so the
//! property a target asserts can be read (and reused) without libFuzzer in the way. Inputs are
//! either raw bytes or an [`arbitrary::Arbitrary`] description that is interpreted step by step.
//! A failed check panics with enough context to turn the input into a regression test in
//! `tests/fuzz_regressions.rs` (see docs/fuzzing.md).

pub mod aggregation;
pub mod batcher;
pub mod cli;
pub mod mapper;
pub mod scenario;
pub mod sse;
