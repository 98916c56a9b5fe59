//! Reading a saved `report.json` back into a [`Report`] (`batchlab report`, re-rendering).
//!
//! The schema version is checked before anything else, so an old report gets "re-run with this
//! batchlab", not a confusing "missing field".

use std::path::{Path, PathBuf};

use super::{JSON_FILE, Report, ReportError, SCHEMA_VERSION};

/// `path` itself when it is a file, else `path/report.json`.
pub fn report_path(path: &Path) -> PathBuf {
    if path.is_dir() { path.join(JSON_FILE) } else { path.to_path_buf() }
}

/// Reads a report from a `report.json` file or from a directory holding one.
pub fn read_report(path: &Path) -> Result<Report, ReportError> {
    let path = report_path(path);
    let text = std::fs::read_to_string(&path).map_err(|source| ReportError::Read { path: path.clone(), source })?;
    parse_report(&text, &path)
}

/// Parses `report.json` text; `path` is for messages.
pub fn parse_report(text: &str, path: &Path) -> Result<Report, ReportError> {
    let parse_error = |e: serde_json::Error| ReportError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string().rsplit_once(" at line ").map_or_else(|| e.to_string(), |(m, _)| m.to_string()),
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(parse_error)?;
    let found = value.get("schema_version").and_then(serde_json::Value::as_u64).unwrap_or(0);
    if found != u64::from(SCHEMA_VERSION) {
        let written_by = value.get("batchlab_version").and_then(serde_json::Value::as_str).unwrap_or("unknown");
        return Err(ReportError::Schema {
            path: path.to_path_buf(),
            found,
            expected: SCHEMA_VERSION,
            written_by: written_by.to_string(),
            ours: env!("CARGO_PKG_VERSION"),
        });
    }
    // Parsed from the text, not the value, so that errors keep their line and column.
    serde_json::from_str(text).map_err(parse_error)
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

    /// `(report.json text, expected error message)`.
    fn check_error(text: &str, expected: &str) {
        let err = parse_report(text, Path::new("out/report.json")).unwrap_err().to_string();
        assert_eq!(err, expected, "{text}");
    }

    #[test]
    fn bad_reports_say_where_and_what() {
        let ours = env!("CARGO_PKG_VERSION");
        check_error(
            r#"{"schema_version": 0, "batchlab_version": "0.0.1"}"#,
            &format!(
                "out/report.json: report schema version 0 (written by batchlab 0.0.1), but this batchlab ({ours}) \
                 reads version {SCHEMA_VERSION} only: re-run the scenario with this batchlab to get a new report"
            ),
        );
        check_error(
            "{}",
            &format!(
                "out/report.json: report schema version 0 (written by batchlab unknown), but this batchlab ({ours}) \
                 reads version {SCHEMA_VERSION} only: re-run the scenario with this batchlab to get a new report"
            ),
        );
        check_error(
            "{\n  \"schema_version\": \n",
            "out/report.json:3:0: not a batchlab report.json: EOF while parsing a value",
        );
        check_error(
            &format!("{{\n  \"schema_version\": {SCHEMA_VERSION},\n  \"incomplete\": 3\n}}"),
            "out/report.json:3:17: not a batchlab report.json: invalid type: integer `3`, expected a boolean",
        );
    }

    #[test]
    fn a_directory_means_its_report_json() {
        let dir = std::env::temp_dir().join(format!("batchlab-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(report_path(&dir), dir.join(JSON_FILE));
        let err = read_report(&dir).unwrap_err().to_string();
        assert!(err.starts_with(&format!("cannot read {}", dir.join(JSON_FILE).display())), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
