//! The report boundary's errors. Each names the file it was about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot create report directory {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot serialize {what} for {path}: {source}")]
    Serialize { what: &'static str, path: PathBuf, source: serde_json::Error },
    #[error("cannot serialize the scenario plan: {0}")]
    Plan(serde_json::Error),
    #[error("the printed scenario does not read back as TOML: {0}")]
    Scenario(String),
}
