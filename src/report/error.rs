//! The report boundary's errors. Each names the file it was about.

use std::path::PathBuf;

/// Why a report file could not be written.
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
    /// The plan could not be serialized into the report.
    #[error("cannot serialize the scenario plan: {0}")]
    Plan(serde_json::Error),
    /// The resolved scenario printed as TOML failed to parse back (a printer bug).
    #[error("the printed scenario does not read back as TOML: {0}")]
    Scenario(String),
    /// A saved report could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// A saved report is not valid `report.json`.
    #[error("{path}:{line}:{column}: not a batchlab report.json: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What was found and what was expected, from serde_json.
        message: String,
    },
    /// A saved report has another schema version than this batchlab reads.
    #[error(
        "{path}: report schema version {found} (written by batchlab {written_by}), but this batchlab \
         ({ours}) reads version {expected} only: re-run the scenario with this batchlab to get a new report"
    )]
    Schema {
        /// The file.
        path: PathBuf,
        /// Its `schema_version`; 0 when it has none.
        found: u64,
        /// [`super::SCHEMA_VERSION`].
        expected: u32,
        /// Its `batchlab_version`, `unknown` when it has none.
        written_by: String,
        /// This batchlab's version.
        ours: &'static str,
    },
}
