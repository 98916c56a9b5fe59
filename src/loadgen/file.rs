//! What a workload file is and what reading it found: its format (`workload.format`) and the
//! counts the report shows as `dataset`. Plain data at the bottom of the file reader, so the error
//! (which carries the counts when nothing is left), the reader and the report all name it from
//! here, and no two of them name each other both ways.

use std::path::PathBuf;

use serde::Serialize;

/// What a workload file holds: `workload.format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// One JSON object per line: `prompt`, `prompt_token_ids` or `messages`, and `max_tokens`.
    #[default]
    Jsonl,
    /// ShareGPT conversations (`conversations` of `{from, value}`), as a JSON array or JSONL.
    #[serde(rename = "sharegpt")]
    ShareGpt,
    /// One text prompt per line.
    Text,
}

/// What reading a workload file found; in the report as `dataset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct DatasetStats {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: FileFormat,
    /// Entries (lines, or conversations of a JSON array) in the file, bad ones included.
    pub entries: usize,
    /// Bad entries skipped (`skip_bad_lines = true`).
    pub skipped_bad_lines: usize,
    /// Prompts dropped below `min_prompt_tokens`.
    pub dropped_short: usize,
    /// Prompts dropped above `max_prompt_tokens`.
    pub dropped_long: usize,
    /// Prompts cut to `max_prompt_tokens` (`truncate = true`).
    pub truncated: usize,
    /// Prompts the workload uses, in file order (then again, cyclically).
    pub prompts: usize,
}
