//! Arbitrary bytes in arbitrary reads through the HTTP engine's SSE parser, against a reference.
#![no_main]

use batchlab_fuzz::sse::{Input, check};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| check(&input));
