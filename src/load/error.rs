//! The load generator's errors: one enum for the workload and the profile, because the runner
//! builds both from the same plan before anything runs and reports either the same way.

use std::fmt::Write as _;
use std::path::PathBuf;

/// At most this many bad lines of a workload file are reported; the rest are only counted.
pub const MAX_REPORTED_LINES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("workload: vocab_size must be at least 1, found 0")]
    EmptyVocab,
    #[error("cannot read workload file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "workload file {} has no prompts: expected one JSON object per line, \
         such as {{\"prompt\": \"Hello\", \"max_tokens\": 64}}",
        path.display()
    )]
    EmptyFile { path: PathBuf },
    #[error("{}", bad_lines_message(path, problems, *omitted))]
    BadLines {
        path: PathBuf,
        /// The first [`MAX_REPORTED_LINES`] problems, in file order.
        problems: Vec<LineProblem>,
        /// Bad lines found beyond those reported.
        omitted: usize,
    },
    #[error("step {step}: rate must be a finite number of requests/s above 0, found {rate}")]
    InvalidRate { step: String, rate: f64 },
}

/// One bad line of a workload file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineProblem {
    /// 1-based.
    pub line: usize,
    /// 1-based, where the JSON parser knows it.
    pub column: Option<usize>,
    /// What was found and what was expected.
    pub message: String,
}

fn bad_lines_message(path: &std::path::Path, problems: &[LineProblem], omitted: usize) -> String {
    let total = problems.len() + omitted;
    let mut s = format!("workload file {} has {total} bad line{}:", path.display(), if total == 1 { "" } else { "s" });
    for p in problems {
        // `file:line:column: message`, the shape editors and terminals make clickable.
        let _ = write!(s, "\n  {}:{}", path.display(), p.line);
        if let Some(c) = p.column {
            let _ = write!(s, ":{c}");
        }
        let _ = write!(s, ": {}", p.message);
    }
    if omitted > 0 {
        let _ = write!(s, "\n  ... and {omitted} more");
    }
    s
}
