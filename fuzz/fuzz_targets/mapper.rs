//! Arbitrary engine stats, timestamps, token counts, clock domain and anchor through `map_request`.
#![no_main]

use batchlab_fuzz::mapper::{Input, check};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| check(&input));
