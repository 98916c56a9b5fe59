//! Arbitrary bytes as a scenario file: never a panic; what parses round-trips through `to_toml`.
#![no_main]

use batchlab::scenario::Overrides;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(source) = std::str::from_utf8(data) {
        batchlab_fuzz::scenario::check(source, &Overrides::default());
    }
});
