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

/// Writes `dir/report.json` (pretty-printed, arrays of numbers on one line) and returns its
/// path. Creates `dir` if needed.
pub fn write_json(report: &Report, dir: &Path) -> Result<PathBuf, ReportError> {
    let path = dir.join(JSON_FILE);
    let text = render_json(report).map_err(|source| ReportError::Serialize {
        what: "the report",
        path: path.clone(),
        source,
    })?;
    write_atomically(dir, &path, text.as_bytes())?;
    Ok(path)
}

/// The text of `report.json`: pretty-printed, arrays of numbers on one line, a final newline.
pub fn render_json(report: &Report) -> Result<String, serde_json::Error> {
    let mut text = inline_scalar_arrays(&serde_json::to_string_pretty(report)?);
    text.push('\n');
    Ok(text)
}

/// Puts every JSON array that holds no array or object on one line (`[1, 2, 3]`): the time
/// series and histograms stay readable instead of taking a line per number.
fn inline_scalar_arrays(json: &str) -> String {
    let bytes = json.as_bytes();
    let mut out = String::with_capacity(json.len());
    let mut i = 0;
    let mut copied = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'['
            && let Some(end) = scalar_array_end(bytes, i)
        {
            out.push_str(&json[copied..i]);
            out.push_str(&collapse(&json[i..=end]));
            i = end + 1;
            copied = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&json[copied..]);
    out
}

/// The index of the `]` closing the array opened at `open`, when it holds only scalars.
fn scalar_array_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut in_string = false;
    let mut i = open + 1;
    while i < bytes.len() {
        match (in_string, bytes[i]) {
            (true, b'\\') => i += 1,
            (true, b'"') => in_string = false,
            (false, b'"') => in_string = true,
            (false, b'[' | b'{') => return None,
            (false, b']') => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// A scalar array's text without its line breaks and indentation: `[1, 2]`.
fn collapse(array: &str) -> String {
    let mut out = String::with_capacity(array.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in array.chars() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
            if c == ',' {
                out.push(' ');
            }
        }
    }
    out
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

pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
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
    fn scalar_arrays_go_on_one_line() {
        let value = serde_json::json!({
            "a": [1, 2.5, null],
            "b": [{"c": ["x, \"y\"]", "[z]"]}, []],
            "d": "[not, an array]",
        });
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let inline = inline_scalar_arrays(&pretty);
        assert_eq!(
            inline,
            "{\n  \"a\": [1, 2.5, null],\n  \"b\": [\n    {\n      \"c\": [\"x, \\\"y\\\"]\", \"[z]\"]\n    },\n    []\n  ],\n  \"d\": \"[not, an array]\"\n}"
        );
        assert_eq!(serde_json::from_str::<serde_json::Value>(&inline).unwrap(), value);
    }

    #[test]
    fn csv_header_and_rows() {
        let report = sample_report();
        let text = render_csv(&report);
        let lines: Vec<&str> = text.split("\r\n").collect();
        assert_eq!(lines.len(), 2 + report.benchmarks.len(), "header, rows, trailing empty: {text}");
        assert_eq!(lines.last(), Some(&""));
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(header.len(), 2 + 100 + 1);
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
        // The client's lag: each sample request was meant to arrive 1 ms before its submit.
        assert_eq!([cell("client_lag_p50_ms"), cell("client_lag_max_ms")], ["1", "1"]);
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
