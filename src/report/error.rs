//! The report boundary's errors. Each names the file it was about.

use std::path::PathBuf;

/// Why a report file could not be written or read back.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The output directory could not be created.
    #[error("cannot create report directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why creating it failed.
        source: std::io::Error,
    },
    /// A report file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why writing failed.
        source: std::io::Error,
    },
    /// The output directory exists but no file can be written in it.
    #[error("cannot write in the output directory {path}: {source}")]
    Unwritable {
        /// The directory.
        path: PathBuf,
        /// Why the test write failed.
        source: std::io::Error,
    },
    /// A record could not be serialized to JSON.
    #[error("cannot serialize {what} for {path}: {source}")]
    Serialize {
        /// What was being serialized, e.g. `report`.
        what: &'static str,
        /// The file it was for.
        path: PathBuf,
        /// serde_json's error.
        source: serde_json::Error,
    },
    /// A report file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// A report file is not JSON of the expected shape.
    #[error("cannot read {path} as a report: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// serde_json's error, with line and column.
        source: serde_json::Error,
    },
    /// A `requests.jsonl` line that is not a [`super::RequestRecord`].
    #[error("{path}:{line}: not a requests.jsonl record: {source}")]
    Record {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// serde_json's error, with the column.
        source: serde_json::Error,
    },
    /// A `report.json` of another schema version.
    #[error(
        "{path}: {}, this batchlab reads schema {expected}: re-run the scenario with this batchlab to get a report it can read",
        found.map_or_else(|| "report.json has no schema_version".to_string(), |v| format!("report.json schema {v}"))
    )]
    Schema {
        /// The file.
        path: PathBuf,
        /// The version it has, if any.
        found: Option<u64>,
        /// [`super::SCHEMA_VERSION`].
        expected: u32,
    },
}
