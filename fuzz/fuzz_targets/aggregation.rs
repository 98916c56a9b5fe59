//! Arbitrary samples and benchmark events through `Distribution` and `BenchmarkAggregator`.
#![no_main]

use batchlab_fuzz::aggregation::{Input, check};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| check(&input));
