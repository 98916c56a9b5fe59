//! The load generator's errors: one enum for the workload and the profile, because the runner
//! builds both from the same plan before anything runs and reports either the same way.

use std::fmt::Write as _;
use std::path::PathBuf;

/// At most this many bad lines of a workload file are reported; the rest are only counted.
pub const MAX_REPORTED_LINES: usize = 20;

/// Why a workload or profile could not be turned into requests.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A synthetic workload with `vocab_size = 0` has no tokens to draw.
    #[error("workload: vocab_size must be at least 1, found 0")]
    EmptyVocab,
    /// `[workload.sessions]` replays a file's conversations: every entry must be one.
    #[error(
        "workload: sessions replay conversations, but the file's entry {entry} (0-based, after filtering) is no \
         conversation (`messages`, or ShareGPT)"
    )]
    SessionsNeedConversations {
        /// The entry, 0-based, after filtering.
        entry: usize,
    },
    /// Images go after a chat turn's text: token or plain-text prompts cannot carry them.
    #[error("workload: images need chat prompts (`workload.chat = true`, a `request_format` other than \"plain\")")]
    ImagesNeedChat,
    /// `workload.tokenizer` sizes text only: images beside it would be left out of the prompt.
    #[error(
        "workload: `workload.tokenizer` and `[workload.images]` together are not supported yet (the tokenizer sizes text prompts only); drop one of them"
    )]
    ImagesWithTokenizer,
    #[error("cannot read workload file {}: {source}", path.display())]
    /// A workload file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// A workload file holds no prompt lines.
    #[error(
        "workload file {} has no prompts: expected one per line, such as \
         {{\"prompt\": \"Hello\", \"max_tokens\": 64}} (or a ShareGPT conversation, or a line of text, \
         as `workload.format` says)",
        path.display()
    )]
    EmptyFile {
        /// The file.
        path: PathBuf,
    },
    #[error("{}", bad_lines_message(path, problems, *omitted))]
    /// Lines of a workload file that are not valid requests; all of them, up to a limit.
    BadLines {
        /// The file.
        path: PathBuf,
        /// The first [`MAX_REPORTED_LINES`] problems, in file order.
        problems: Vec<LineProblem>,
        /// Bad lines found beyond those reported.
        omitted: usize,
    },
    /// A profile parameter (burstiness, time scale, ...) that is out of range.
    #[error("step {step}: {what} must be a finite number above 0, found {value}")]
    InvalidParameter {
        /// The step, by name.
        step: String,
        /// The parameter.
        what: &'static str,
        /// The value found.
        value: f64,
    },
    /// Skipped bad lines and the length filters left no prompt of a workload file.
    #[error(
        "workload file {} has no prompts left: of its {} entries, {} were bad lines (skipped), {} shorter \
         than `min_prompt_tokens` and {} longer than `max_prompt_tokens` (lengths {counting}; \
         docs/scenarios.md)",
        stats.path.display(), stats.entries, stats.skipped_bad_lines, stats.dropped_short, stats.dropped_long
    )]
    NoPromptsLeft {
        /// What reading the file found.
        stats: Box<super::file::DatasetStats>,
        /// How the lengths were counted: "by batchlab's rule, 4 bytes a token", or in the tokens
        /// of `workload.tokenizer` (named by its path).
        counting: String,
    },
    /// A rate that is not finite and positive.
    #[error("step {step}: rate must be a finite number of requests/s above 0, found {rate}")]
    InvalidRate {
        /// The step, by name.
        step: String,
        /// The rate found.
        rate: f64,
    },
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
