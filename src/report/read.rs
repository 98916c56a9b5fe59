//! Reading a `report.json` back: the one reader every command that takes a saved report uses
//! (`batchlab compare`, `batchlab report`, calibration).
//!
//! The schema version is checked before anything else, so a report from another batchlab gets a
//! clear message instead of a confusing "missing field".

use std::path::{Path, PathBuf};

use super::{JSON_FILE, Report, ReportError, SCHEMA_VERSION};

/// `path` itself when it is a file, else `path/report.json` (an output directory).
pub fn report_path(path: &Path) -> PathBuf {
    if path.is_dir() { path.join(JSON_FILE) } else { path.to_path_buf() }
}

/// Reads a `report.json`, or the one in the output directory `path`. Fails with the file's name
/// when it cannot be read, is not JSON, or has another [`SCHEMA_VERSION`].
pub fn read_report(path: &Path) -> Result<Report, ReportError> {
    let path = report_path(path);
    let text = std::fs::read_to_string(&path).map_err(|source| ReportError::Read { path: path.clone(), source })?;
    parse_report(&text, &path)
}

/// Parses the text of a `report.json`; `path` is only used in messages.
pub fn parse_report(text: &str, path: &Path) -> Result<Report, ReportError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|source| ReportError::Parse { path: path.to_path_buf(), source })?;
    let found = value.get("schema_version").and_then(serde_json::Value::as_u64);
    if found != Some(u64::from(SCHEMA_VERSION)) {
        return Err(ReportError::Schema { path: path.to_path_buf(), found, expected: SCHEMA_VERSION });
    }
    // From the text, not the value: serde_json then gives the line and column of a problem.
    serde_json::from_str(text).map_err(|source| ReportError::Parse { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn a_written_report_reads_back_equal() {
        let report = sample_report();
        let text = serde_json::to_string_pretty(&report).unwrap();
        assert_eq!(parse_report(&text, Path::new("r.json")).unwrap(), report);
    }

    #[test]
    fn another_schema_is_refused_with_both_versions() {
        let mut value = serde_json::to_value(sample_report()).unwrap();
        value["schema_version"] = 1.into();
        let err = parse_report(&value.to_string(), Path::new("old/report.json")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "old/report.json: report.json schema 1, this batchlab reads schema {SCHEMA_VERSION}: \
                 re-run the scenario with this batchlab to get a report it can read"
            )
        );
        value.as_object_mut().unwrap().remove("schema_version");
        let err = parse_report(&value.to_string(), Path::new("r.json")).unwrap_err();
        assert!(err.to_string().contains("no schema_version"), "{err}");
    }

    #[test]
    fn bad_json_names_the_file_line_and_column() {
        let err = parse_report("{\n  \"schema_version\": ,\n}", Path::new("x/report.json")).unwrap_err();
        let message = err.to_string();
        assert!(message.starts_with("cannot read x/report.json as a report:"), "{message}");
        assert!(message.contains("line 2 column"), "{message}");
        let err = read_report(Path::new("/nonexistent/batchlab")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/batchlab"), "{err}");
    }
}
