//! Arbitrary driver sequences on the sans-IO batcher core; see `batchlab_fuzz::batcher`.
#![no_main]

use batchlab_fuzz::batcher::{Input, check};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| check(&input));
