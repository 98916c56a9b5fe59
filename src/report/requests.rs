//! `requests.jsonl`: one JSON object per request, written as requests finish.
//!
//! Streaming keeps memory flat however long the run. Each line holds the request's id, its
//! benchmark and phase, how it ended, our timestamps (ns on the run's monotonic clock) and, for a
//! completed request, its metrics in milliseconds.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::ReportError;
use crate::batcher::{Completion, RequestTimes};
use crate::engine::RequestId;
use crate::metrics::RequestMetrics;
pub use crate::run::Phase;
use crate::time::Timestamp;

/// The per-request file's name in the output directory (one [`RequestRecord`] per line).
pub const REQUESTS_FILE: &str = "requests.jsonl";

/// How a request ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RequestOutcome {
    /// The request got an output.
    Completed,
    /// `kind` is [`crate::batcher::RequestError::kind`].
    Error {
        /// The error kind, written as `error_kind`.
        #[serde(rename = "error_kind")]
        kind: &'static str,
    },
    /// Cancelled before dispatch.
    Cancelled,
    /// Still running when its benchmark ended.
    Incomplete,
}

/// One line of `requests.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// The request's id, unique within the run.
    pub id: RequestId,
    /// The benchmark (step) it belongs to.
    pub benchmark: String,
    /// Which run of the benchmark (`--repeat`), 0-based.
    pub repeat: u32,
    /// Warm-up, measured or cool-down.
    pub phase: Phase,
    /// How it ended (flattened: `outcome`, and `error_kind` for an error).
    #[serde(flatten)]
    pub outcome: RequestOutcome,
    /// When it was submitted, in ns on the monotonic clock.
    pub submitted_ns: Option<Timestamp>,
    /// When its batch was dispatched; `None` if it never was.
    pub dispatched_ns: Option<Timestamp>,
    /// When it completed, failed or was cancelled.
    pub finished_ns: Option<Timestamp>,
    /// Which generate call it ran in: the batch's id, 0-based in dispatch order, unique within the
    /// run (one engine start). `None` unless completed.
    pub batch: Option<u64>,
    /// How many requests that generate call held.
    pub batch_size: Option<usize>,
    /// The engine's `scheduled_ts`, in ns on the monotonic clock (as sent: for calibration fits).
    pub engine_scheduled_ns: Option<Timestamp>,
    /// The engine's `first_token_ts`, in ns on the monotonic clock.
    pub engine_first_token_ns: Option<Timestamp>,
    /// The engine's `last_token_ts`, in ns on the monotonic clock.
    pub engine_last_token_ns: Option<Timestamp>,
    /// Prompt tokens the engine served from its prefix cache, where it says.
    pub cached_tokens: Option<u32>,
    /// A completed request's timings (flattened); `None` otherwise.
    #[serde(flatten)]
    pub metrics: Option<MetricsMs>,
}

/// A completed request's metrics in milliseconds; see `metrics::mapper` for definitions.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricsMs {
    /// Our submit to our completion.
    pub latency_ms: f64,
    /// Our submit to the dispatch of its batch.
    pub batch_wait_ms: f64,
    /// The engine's `queued_ts` to `scheduled_ts`.
    pub engine_queue_ms: Option<f64>,
    /// Our submit to the first token.
    pub ttft_ms: Option<f64>,
    /// vLLM's TPOT: `(last_token − first_token) / (n − 1)`.
    pub tpot_ms: Option<f64>,
    /// The longest gap between two consecutive tokens; `None` without per-token times.
    pub itl_max_ms: Option<f64>,
    /// Latency divided by generated tokens, the first included (guidellm's TPOT).
    pub latency_per_token_ms: Option<f64>,
    /// Prompt length in tokens, as the engine counted it.
    pub prompt_tokens: Option<u32>,
    /// Generated tokens, as the engine counted them.
    pub output_tokens: Option<u32>,
    /// Names of the anomalies found in the engine's stats; empty when none.
    pub anomalies: Vec<&'static str>,
}

impl From<&RequestMetrics> for MetricsMs {
    fn from(m: &RequestMetrics) -> Self {
        let ms = |d: std::time::Duration| d.as_nanos() as f64 / 1e6;
        let a = &m.anomalies;
        let flags = [
            (a.non_finite, "non_finite"),
            (a.first_token_before_arrival, "first_token_before_arrival"),
            (a.last_before_first, "last_before_first"),
            (a.scheduled_before_queued, "scheduled_before_queued"),
            (a.token_after_completion, "token_after_completion"),
            (a.impossible_timestamp, "impossible_timestamp"),
            (a.token_count_mismatch, "token_count_mismatch"),
            (a.token_times_inconsistent, "token_times_inconsistent"),
        ];
        MetricsMs {
            latency_ms: ms(m.latency),
            batch_wait_ms: ms(m.batch_wait),
            engine_queue_ms: m.engine_queue.map(ms),
            ttft_ms: m.ttft.map(ms),
            tpot_ms: m.tpot.map(ms),
            itl_max_ms: m.itl_max().map(ms),
            latency_per_token_ms: m.latency_per_token.map(ms),
            prompt_tokens: m.prompt_tokens,
            output_tokens: m.output_tokens,
            anomalies: flags.into_iter().filter(|(on, _)| *on).map(|(_, name)| name).collect(),
        }
    }
}

impl RequestRecord {
    /// The record of a completed request, its metrics converted to milliseconds.
    pub fn completed(
        id: RequestId,
        benchmark: &str,
        phase: Phase,
        completion: &Completion,
        metrics: &RequestMetrics,
    ) -> Self {
        let times: &RequestTimes = &completion.times;
        RequestRecord {
            id,
            benchmark: benchmark.to_owned(),
            repeat: 0,
            phase,
            outcome: RequestOutcome::Completed,
            submitted_ns: Some(times.submitted),
            dispatched_ns: Some(times.dispatched),
            finished_ns: Some(times.completed),
            batch: Some(completion.batch_id),
            batch_size: Some(completion.batch_size),
            engine_scheduled_ns: metrics.engine_scheduled,
            engine_first_token_ns: metrics.engine_first_token,
            engine_last_token_ns: metrics.engine_last_token,
            cached_tokens: metrics.cached_tokens,
            metrics: Some(metrics.into()),
        }
    }

    /// A request without metrics (error, cancelled, incomplete); unknown times are `None`.
    pub fn unfinished(
        id: RequestId,
        benchmark: &str,
        phase: Phase,
        outcome: RequestOutcome,
        submitted: Option<Timestamp>,
        finished: Option<Timestamp>,
    ) -> Self {
        RequestRecord {
            id,
            benchmark: benchmark.to_owned(),
            repeat: 0,
            phase,
            outcome,
            submitted_ns: submitted,
            dispatched_ns: None,
            finished_ns: finished,
            batch: None,
            batch_size: None,
            engine_scheduled_ns: None,
            engine_first_token_ns: None,
            engine_last_token_ns: None,
            cached_tokens: None,
            metrics: None,
        }
    }
}

/// Streams [`RequestRecord`]s to a JSONL file. Call [`finish`](Self::finish) to flush; errors
/// name the file.
pub struct RequestsJsonl<W: Write = BufWriter<File>> {
    out: W,
    path: PathBuf,
    lines: u64,
}

impl RequestsJsonl {
    /// Creates (or truncates) `dir/requests.jsonl`, creating `dir` if needed.
    pub fn create(dir: &Path) -> Result<Self, ReportError> {
        std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir { path: dir.to_path_buf(), source })?;
        let path = dir.join(REQUESTS_FILE);
        let file = File::create(&path).map_err(|source| ReportError::Write { path: path.clone(), source })?;
        Ok(Self::from_writer(BufWriter::new(file), path))
    }
}

impl<W: Write> RequestsJsonl<W> {
    /// Streams into any writer; `path` is only used in error messages.
    pub fn from_writer(out: W, path: PathBuf) -> Self {
        RequestsJsonl { out, path, lines: 0 }
    }

    /// Writes `record` as one JSON line.
    pub fn write(&mut self, record: &RequestRecord) -> Result<(), ReportError> {
        serde_json::to_writer(&mut self.out, record).map_err(|source| ReportError::Serialize {
            what: "a request record",
            path: self.path.clone(),
            source,
        })?;
        self.out.write_all(b"\n").map_err(|source| ReportError::Write { path: self.path.clone(), source })?;
        self.lines += 1;
        Ok(())
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> Result<W, ReportError> {
        self.out.flush().map_err(|source| ReportError::Write { path: self.path.clone(), source })?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn output() -> crate::engine::EngineOutput {
        crate::engine::EngineOutput::new(Some(1), crate::engine::FinishReason::Length)
            .with_prompt_tokens(16)
            .with_output_tokens(6)
    }

    fn t(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000_000 + ms * 1_000_000)
    }

    #[test]
    fn one_line_per_request() {
        let times = RequestTimes { submitted: t(0), dispatched: t(2), completed: t(12) };
        let mut metrics = RequestMetrics {
            batch_wait: Duration::from_millis(2),
            latency: Duration::from_millis(12),
            engine_queue: None,
            ttft: Some(Duration::from_micros(4500)),
            tpot: Some(Duration::from_millis(1)),
            latency_per_token: Some(Duration::from_millis(2)),
            itl: vec![Duration::from_micros(500), Duration::from_micros(1500)],
            prompt_tokens: Some(16),
            output_tokens: Some(6),
            ..RequestMetrics::default()
        };
        metrics.anomalies.scheduled_before_queued = true;
        metrics.engine_scheduled = Some(t(3));
        metrics.engine_first_token = Some(t(4));
        metrics.engine_last_token = Some(t(9));
        metrics.cached_tokens = Some(0);
        let completion = Completion { output: output(), times, batch_id: 7, batch_size: 3 };
        let mut out = RequestsJsonl::from_writer(Vec::new(), PathBuf::from("requests.jsonl"));
        out.write(&RequestRecord::completed(1, "throughput", Phase::Measure, &completion, &metrics)).unwrap();
        let error = RequestOutcome::Error { kind: "engine_error" };
        out.write(&RequestRecord::unfinished(2, "throughput", Phase::Warmup, error, Some(t(1)), Some(t(3)))).unwrap();
        out.write(&RequestRecord::unfinished(
            3,
            "concurrent@4",
            Phase::Measure,
            RequestOutcome::Incomplete,
            Some(t(5)),
            None,
        ))
        .unwrap();
        assert_eq!(out.lines(), 3);
        let text = String::from_utf8(out.finish().unwrap()).unwrap();
        insta::assert_snapshot!(text, @r#"
        {"id":1,"benchmark":"throughput","repeat":0,"phase":"measure","outcome":"completed","submitted_ns":1000000000000,"dispatched_ns":1000002000000,"finished_ns":1000012000000,"batch":7,"batch_size":3,"engine_scheduled_ns":1000003000000,"engine_first_token_ns":1000004000000,"engine_last_token_ns":1000009000000,"cached_tokens":0,"latency_ms":12.0,"batch_wait_ms":2.0,"engine_queue_ms":null,"ttft_ms":4.5,"tpot_ms":1.0,"itl_max_ms":1.5,"latency_per_token_ms":2.0,"prompt_tokens":16,"output_tokens":6,"anomalies":["scheduled_before_queued"]}
        {"id":2,"benchmark":"throughput","repeat":0,"phase":"warmup","outcome":"error","error_kind":"engine_error","submitted_ns":1000001000000,"dispatched_ns":null,"finished_ns":1000003000000,"batch":null,"batch_size":null,"engine_scheduled_ns":null,"engine_first_token_ns":null,"engine_last_token_ns":null,"cached_tokens":null}
        {"id":3,"benchmark":"concurrent@4","repeat":0,"phase":"measure","outcome":"incomplete","submitted_ns":1000005000000,"dispatched_ns":null,"finished_ns":null,"batch":null,"batch_size":null,"engine_scheduled_ns":null,"engine_first_token_ns":null,"engine_last_token_ns":null,"cached_tokens":null}
        "#);
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
    }

    #[test]
    fn create_names_the_path_on_failure() {
        let dir = std::env::temp_dir().join(format!("batchlab-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let blocker = dir.join("file");
        std::fs::write(&blocker, "x").unwrap();
        let err = RequestsJsonl::create(&blocker).err().unwrap();
        assert!(err.to_string().contains(&blocker.display().to_string()), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
