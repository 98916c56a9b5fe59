//! Scenario text and `--set` arguments, as `batchlab check` takes them: never a panic, never a
//! slow answer (run with `-timeout=2`), never a report that floods or drives the terminal.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: batchlab_fuzz::cli::Input| {
    batchlab_fuzz::cli::check(&input);
});
