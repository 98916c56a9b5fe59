//! `report.json` and `report.csv`.
//!
//! Both are written to a temporary file in the target directory and renamed into place, so a
//! reader never sees half a report. Output is deterministic: struct fields serialize in
//! declaration order, maps are `BTreeMap`s, floats use Rust's shortest round-trip form.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::{Report, ReportError};
use crate::metrics::result::{BenchmarkResult, metric_names};

/// The JSON report's name in the output directory.
pub const JSON_FILE: &str = "report.json";
/// The CSV report's name: one row per benchmark, one column per metric.
pub const CSV_FILE: &str = "report.csv";

/// Writes `dir/report.json` (pretty-printed) and returns its path. Creates `dir` if needed.
pub fn write_json(report: &Report, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join(JSON_FILE);
    let mut bytes = serde_json::to_vec_pretty(report).map_err(|source| ReportError::Serialize {
        what: "the report",
        path: path.clone(),
        source,
    })?;
    bytes.push(b'\n');
    write_atomically(dir, &path, &bytes)?;
    Ok(path)
}

/// The CSV header: `benchmark`, `submitted`, every metric of [`metric_names`] in order, then
/// `errors_by_kind` (`kind=count` pairs joined by `;`).
pub fn csv_columns() -> Vec<String> {
    let mut columns = vec!["benchmark".to_string(), "submitted".to_string()];
    columns.extend(metric_names().iter().cloned());
    columns.push("errors_by_kind".to_string());
    columns
}

/// One CSV row, as unquoted cells; an unmeasured value is an empty cell.
fn csv_row(b: &BenchmarkResult) -> Vec<String> {
    let mut row = vec![b.name.clone(), b.counts.submitted.to_string()];
    row.extend(metric_names().iter().map(|m| b.metric(m).map(|v| v.to_string()).unwrap_or_default()));
    let kinds: Vec<String> = b.counts.errors_by_kind.iter().map(|(k, n)| format!("{k}={n}")).collect();
    row.push(kinds.join(";"));
    row
}

/// RFC 4180 quoting: a cell with a comma, quote or line break is quoted, quotes doubled.
fn csv_cell(cell: &str) -> String {
    if cell.contains([',', '"', '\n', '\r']) { format!("\"{}\"", cell.replace('"', "\"\"")) } else { cell.to_string() }
}

fn csv_line(cells: &[String]) -> String {
    let mut line = cells.iter().map(|c| csv_cell(c)).collect::<Vec<_>>().join(",");
    line.push_str("\r\n");
    line
}

/// The CSV text for `report`: a header, then one row per benchmark.
pub fn render_csv(report: &Report) -> String {
    let mut out = csv_line(&csv_columns());
    for b in &report.benchmarks {
        out.push_str(&csv_line(&csv_row(b)));
    }
    out
}

/// Writes `dir/report.csv` and returns its path. Creates `dir` if needed.
pub fn write_csv(report: &Report, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join(CSV_FILE);
    write_atomically(dir, &path, render_csv(report).as_bytes())?;
    Ok(path)
}

/// Creates `dir` and checks a file can be written in it, before a run starts: an unwritable
/// output directory is found before the engine is loaded, not after the run.
pub fn prepare_output_dir(dir: &Path) -> Result<(), ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir { path: dir.to_path_buf(), source })?;
    let probe = dir.join(".batchlab-write-test");
    let write = || -> std::io::Result<()> {
        fs::File::create(&probe)?.write_all(b"batchlab checks it can write here\n")?;
        fs::remove_file(&probe)
    };
    write().map_err(|source| {
        let _ = fs::remove_file(&probe);
        ReportError::Unwritable { path: dir.to_path_buf(), source }
    })
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir { path: dir.to_path_buf(), source })?;
    let file_name = path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|source| {
        let _ = fs::remove_file(&tmp);
        ReportError::Write { path: path.to_path_buf(), source }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    /// A fresh directory under the system temp dir, unique to this test and process.
    fn scratch_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("batchlab-report-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn json_file_snapshot() {
        let dir = scratch_dir("json");
        let path = write_json(&sample_report(), &dir.join("nested")).unwrap();
        assert_eq!(path, dir.join("nested").join(JSON_FILE));
        let text = fs::read_to_string(&path).unwrap();
        insta::assert_snapshot!("report_json_file", text);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn csv_header_and_rows() {
        let report = sample_report();
        let text = render_csv(&report);
        let lines: Vec<&str> = text.split("\r\n").collect();
        assert_eq!(lines.len(), 2 + report.benchmarks.len(), "header, rows, trailing empty: {text}");
        assert_eq!(lines.last(), Some(&""));
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(header.len(), 2 + 82 + 1);
        assert_eq!(&header[..4], ["benchmark", "submitted", "completed", "errors"]);
        assert!(header.contains(&"ttft_p99_ms"));
        assert_eq!(header.last(), Some(&"errors_by_kind"));
        let row: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(row.len(), header.len());
        let cell = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(
            [cell("benchmark"), cell("submitted"), cell("completed"), cell("lost"), cell("requests_per_s")],
            ["throughput", "7", "4", "0", "4"]
        );
        assert_eq!(
            [cell("concurrency_mean"), cell("latency_max_ms"), cell("errors_by_kind")],
            ["1.02", "350", "engine_error=1"]
        );
    }

    #[test]
    fn csv_quoting_and_empty_cells() {
        let cases = [
            ("plain", "plain"),
            ("a,b", "\"a,b\""),
            ("say \"hi\"", "\"say \"\"hi\"\"\""),
            ("two\nlines", "\"two\nlines\""),
            ("", ""),
        ];
        for (raw, quoted) in cases {
            assert_eq!(csv_cell(raw), quoted, "{raw:?}");
        }
        let mut report = sample_report();
        report.benchmarks.truncate(1);
        report.benchmarks[0].name = "odd,name".into();
        report.benchmarks[0].requests_per_s = None;
        let text = render_csv(&report);
        let row = text.split("\r\n").nth(1).unwrap();
        let rest = row.strip_prefix("\"odd,name\",").unwrap_or_else(|| panic!("{row}"));
        let cells: Vec<&str> = rest.split(',').collect();
        let column = csv_columns().iter().position(|c| c == "requests_per_s").unwrap();
        assert_eq!(cells[column - 1], "", "{row}");
    }

    #[test]
    fn unwritable_directory_names_the_path() {
        let dir = scratch_dir("blocked");
        fs::create_dir_all(&dir).unwrap();
        let blocker = dir.join("file");
        fs::write(&blocker, "not a directory").unwrap();
        let err = write_csv(&sample_report(), &blocker).unwrap_err();
        assert!(err.to_string().contains(&blocker.display().to_string()), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
