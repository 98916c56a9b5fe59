//! A shipped scenario edited by arbitrary `--set`s: reaches deep validation paths that random
//! bytes rarely get to, with the same round-trip check as `scenario`.
#![no_main]

use batchlab_fuzz::scenario::{Edit, check};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|edit: Edit| {
    check(edit.source(), &edit.overrides());
});
