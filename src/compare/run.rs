//! The runs compare reads: a report and, when it was written, its `requests.jsonl`, each
//! measured request and batch as a [`Sample`] and a [`BatchSpan`] of one benchmark's [`Samples`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{CompareError, PER_REQUEST};
use crate::report::{Phase, Report, RequestOutcome, RequestRecord, read_records, read_report, report_path};

/// One measured request of `requests.jsonl`, as compare reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Its repeat.
    pub repeat: u32,
    /// Its generate call, when it completed.
    pub batch: Option<u64>,
    /// When its batch was dispatched (ns), when it was.
    pub dispatched_ns: Option<u64>,
    /// Whether it failed (an error outcome).
    pub failed: bool,
    /// A completed request's timings, in [`PER_REQUEST`]'s order.
    pub timings: [Option<f64>; 7],
}

/// One batch of measured requests: its repeat, id, dispatch (ns) and dispatch-to-last-completion
/// time (ms).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchSpan {
    /// Its repeat.
    pub repeat: u32,
    /// The batch's id.
    pub batch: u64,
    /// Its dispatch, ns.
    pub dispatched_ns: u64,
    /// Its dispatch to its last measured completion, ms.
    pub generate_ms: f64,
}

/// The measured requests of one benchmark in `requests.jsonl`, every repeat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Samples {
    /// Every measured request that completed or failed.
    pub requests: Vec<Sample>,
    /// Every batch of measured, completed requests.
    pub batches: Vec<BatchSpan>,
}

/// One run: its report and, when it was written, its `requests.jsonl`.
#[derive(Clone, Debug)]
pub struct Run {
    /// How the run is named in output: the path it was read from.
    pub label: String,
    /// The directory its report is in (where `compare.html` goes when this run is B).
    pub dir: PathBuf,
    /// The report.
    pub report: Report,
    /// Per benchmark name: its measured requests; `None` without `requests.jsonl`.
    pub requests: Option<BTreeMap<String, Samples>>,
}

impl Run {
    /// Reads a run from its `report.json` or output directory, and the `requests.jsonl` next to
    /// the report if there is one.
    pub fn load(path: &Path) -> Result<Run, CompareError> {
        let report = read_report(path)?;
        let json = report_path(path);
        let jsonl = json.with_file_name(crate::report::requests::REQUESTS_FILE);
        let requests = if jsonl.is_file() { Some(read_requests(&jsonl)?) } else { None };
        let dir = json.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        Ok(Run { label: path.display().to_string(), dir, report, requests })
    }
}

/// Per repeat and batch: its dispatch and its last completion, ns.
type BatchWindows = BTreeMap<(u32, u64), (u64, u64)>;

/// The measured requests of `path`, by benchmark, and per batch its generate time.
fn read_requests(path: &Path) -> Result<BTreeMap<String, Samples>, CompareError> {
    let mut out: BTreeMap<String, Samples> = BTreeMap::new();
    // Per benchmark, repeat and batch: its dispatch and its last completion, ns.
    let mut spans: BTreeMap<String, BatchWindows> = BTreeMap::new();
    for record in read_records(path)? {
        let RequestRecord { benchmark, repeat, phase, outcome, metrics, batch, dispatched_ns, finished_ns, .. } =
            record?;
        if phase != Phase::Measure {
            continue;
        }
        let failed = matches!(outcome, RequestOutcome::Error { .. });
        let completed = matches!(outcome, RequestOutcome::Completed);
        if !failed && !completed {
            continue;
        }
        let mut timings = [None; 7];
        if let (true, Some(m)) = (completed, &metrics) {
            for (i, (_, _, value)) in PER_REQUEST.iter().enumerate() {
                timings[i] = value(m).filter(|v| v.is_finite());
            }
            if let (Some(batch), Some(d), Some(f)) = (batch, dispatched_ns, finished_ns) {
                let span = spans.entry(benchmark.clone()).or_default().entry((repeat, batch)).or_insert((u64::MAX, 0));
                *span = (span.0.min(d.as_nanos()), span.1.max(f.as_nanos()));
            }
        }
        let dispatched_ns = dispatched_ns.map(|d| d.as_nanos());
        let batch = if completed { batch } else { None };
        out.entry(benchmark).or_default().requests.push(Sample { repeat, batch, dispatched_ns, failed, timings });
    }
    for (benchmark, spans) in spans {
        let batches = spans.into_iter().map(|((repeat, batch), (from, to))| BatchSpan {
            repeat,
            batch,
            dispatched_ns: from,
            generate_ms: to.saturating_sub(from) as f64 / 1e6,
        });
        out.entry(benchmark).or_default().batches = batches.collect();
    }
    Ok(out)
}
