//! `cli`: the whole input path of `batchlab check` and `run`, up to the engine: scenario text and
//! raw `--set` arguments (and maybe `--seed`) through the size cap, the overrides, validation and
//! the rendered error; for a plan that parses, the run's preflight and the printed plan.
//!
//! Slow inputs are failures too: the text can be repeated up to twice the size cap, so a
//! quadratic step shows up as a libFuzzer timeout (`scripts/fuzz-ci.sh` runs this target with
//! `-timeout=2`), not only a crash.

use std::path::Path;

use arbitrary::Arbitrary;
use batchlab::scenario::plan::WorkloadSpec;
use batchlab::scenario::{MAX_SCENARIO_BYTES, Overrides, parse_str, to_toml};

use crate::scenario::{BASE_DIR, FILE_NAME};

/// Inputs are built up to this size: twice the cap, so the refusal is exercised as well.
pub const MAX_INPUT_BYTES: usize = 2 * MAX_SCENARIO_BYTES;

/// The most lines an error report may have: five problems in full (at most 7 lines each) and a
/// count, or 20 one-line problems, `… and N more` and a count.
pub const MAX_REPORT_LINES: usize = 5 * 7 + 1;

/// What a user can put on the command line.
#[derive(Arbitrary, Debug)]
pub struct Input {
    /// Scenario text, a unit repeated `repeat + 1` times (bounded by [`MAX_INPUT_BYTES`]).
    pub text: String,
    pub repeat: u16,
    /// `--set KEY=VALUE` arguments, as typed.
    pub sets: Vec<String>,
    pub seed: Option<u64>,
}

impl Input {
    /// The scenario text this input stands for.
    pub fn source(&self) -> String {
        let unit = self.text.len().max(1);
        let times = (usize::from(self.repeat) + 1).min(MAX_INPUT_BYTES / unit).max(1);
        self.text.repeat(times)
    }
}

pub fn check(input: &Input) {
    let source = input.source();
    let overrides = Overrides { sets: input.sets.clone(), seed: input.seed };
    let plan = match parse_str(&source, FILE_NAME, Path::new(BASE_DIR), &overrides) {
        Ok(plan) => plan,
        Err(e) => {
            let report = e.to_string();
            assert!(
                !report.chars().any(|c| c.is_control() && c != '\n'),
                "a control character reaches the terminal: {report:?}"
            );
            let lines = report.lines().count();
            assert!(lines <= MAX_REPORT_LINES, "{} problems gave {lines} lines:\n{report}", e.problems.len());
            return;
        }
    };
    assert!(source.len() <= MAX_SCENARIO_BYTES, "a {} byte scenario was accepted", source.len());
    // A file workload reads a file the fuzzer does not control (an absolute path that exists):
    // only the checks that read no file run for it.
    if !matches!(plan.workload(), WorkloadSpec::File { .. }) {
        let _ = batchlab::run::preflight(&plan);
    }
    let _ = to_toml(&plan);
}
