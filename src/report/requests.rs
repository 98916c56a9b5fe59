//! `requests.jsonl`: one JSON object per request, written as requests finish.
//!
//! Streaming keeps memory flat however long the run. Each line holds the request's id, its
//! benchmark and phase, how it ended, our timestamps (ns on the run's monotonic clock) and, for a
//! completed request, its metrics in milliseconds.
//!
//! The file has one record type, [`RequestRecord`], with its writer ([`RequestsJsonl`]) and its
//! reader ([`read_records`]) side by side: `compare` and `calibrate` read the rows back as the run
//! wrote them, never as loose JSON. [`Phase`] lives here rather than in `run/` so that the
//! arrow points down: `run/` produces records, `report/` defines them.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ReportError;
use crate::batcher::{Completion, RequestTimes};
use crate::engine::image::ImageSummary;
use crate::engine::{RequestId, TokenCountSource};
use crate::metrics::RequestMetrics;
use crate::time::Timestamp;

/// The per-request file's name in the output directory (one [`RequestRecord`] per line).
pub const REQUESTS_FILE: &str = "requests.jsonl";

/// Which part of a benchmark a request belonged to. Only `measure` counts in the metrics.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the measurement; not measured.
    Warmup,
    /// Measured.
    Measure,
    /// After the measurement; not measured.
    Cooldown,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RequestOutcome {
    /// The request got an output.
    Completed,
    /// `kind` is [`crate::batcher::RequestError::kind`].
    Error {
        /// The error kind, written as `error_kind`.
        #[serde(rename = "error_kind")]
        kind: String,
    },
    /// Cancelled before dispatch.
    Cancelled,
    /// Still running when its benchmark ended.
    Incomplete,
}

/// One line of `requests.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// When the load profile meant the request to arrive, in ns on the monotonic clock
    /// (`metrics::client`); `None` in files written before batchlab recorded it.
    #[serde(default)]
    pub intended_ns: Option<Timestamp>,
    /// When it left batchlab, as the engine says (`sent_ts`: an HTTP engine's send), in ns; left
    /// out when the engine gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_ns: Option<Timestamp>,
    /// A completed request's dispatch delay, ms: intended arrival → sent (`sent_ns`, else
    /// `dispatched_ns`); `None` otherwise.
    #[serde(default)]
    pub dispatch_delay_ms: Option<f64>,
    /// A completed request's submit → first token, ms, for an engine that sends itself (HTTP:
    /// `ttft_ms` runs from the send); left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_from_submit_ms: Option<f64>,
    /// The prompts of the HTTP request that carried it (next to `batch_size`, its micro-batch's),
    /// when the engine says; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_batch: Option<u32>,
    /// When each of its tokens arrived, in ns on the monotonic clock, for an engine that times on
    /// the client's side (the HTTP engine: its chunks' arrivals); left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ns: Option<Vec<Timestamp>>,
    /// The endpoint that served it (or failed it), when the engine names one; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Where its token counts came from, when the engine says; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_count_source: Option<TokenCountSource>,
    /// Its images (`[workload.images]`): count, pixels, encoded bytes, those from the media
    /// pool; left out for a request without images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageSummary>,
    /// Its images the engine's encoder cache held, when the engine says; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_cache_hits: Option<u32>,
    /// The prompt length the workload sized it to, for the engine's `prompt_tokens` to match
    /// (`workload.tokenizer`, or `[workload.images] count_in_prompt`); left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_target: Option<u32>,
    /// The length of its embedding, for a pooling request (`engine.openai.api = "embeddings"`,
    /// vLLM's `LLM.embed`); left out for a generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embedding_dims: Option<u32>,
    /// With `[workload.sessions]`: the session this request is a turn of, the turn's 0-based
    /// index, the history's tokens before the new user turn (as the session counts them) and
    /// the user/reply pairs dropped from it so far (`context_full = "drop_oldest"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// See `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// See `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_tokens: Option<u32>,
    /// See `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_turns: Option<u32>,
    /// In a shard's records (`batchlab run --shard`): a completed request's gaps between tokens as
    /// runs `[gap ns, how many in a row]`, so that `batchlab merge` rebuilds the ITL distribution
    /// exactly; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_runs_ns: Option<Vec<[u64; 2]>>,
    /// A completed request's timings (flattened); `None` otherwise.
    #[serde(flatten)]
    pub metrics: Option<MetricsMs>,
}

/// A completed request's metrics in milliseconds; see `metrics::mapper` for definitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    pub anomalies: Vec<String>,
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
            anomalies: flags.into_iter().filter(|(on, _)| *on).map(|(_, name)| name.to_owned()).collect(),
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
            intended_ns: None,
            sent_ns: metrics.sent,
            token_ns: metrics.client_token_times.clone(),
            dispatch_delay_ms: None,
            ttft_from_submit_ms: None,
            wire_batch: None,
            endpoint: metrics.endpoint.clone(),
            token_count_source: metrics.token_count_source,
            images: None,
            image_cache_hits: None,
            prompt_tokens_target: None,
            embedding_dims: metrics.embedding_dims,
            session: None,
            turn: None,
            history_tokens: None,
            dropped_turns: None,
            itl_runs_ns: None,
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
            intended_ns: None,
            sent_ns: None,
            token_ns: None,
            dispatch_delay_ms: None,
            ttft_from_submit_ms: None,
            wire_batch: None,
            endpoint: None,
            token_count_source: None,
            images: None,
            image_cache_hits: None,
            prompt_tokens_target: None,
            embedding_dims: None,
            session: None,
            turn: None,
            history_tokens: None,
            dropped_turns: None,
            itl_runs_ns: None,
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

/// Reads the [`RequestRecord`]s of a `requests.jsonl` one line at a time, so memory stays flat
/// however long the run; blank lines are skipped. Errors name the file, and a line that is not a
/// record its line number. See [`Records`].
pub fn read_records(path: &Path) -> Result<Records, ReportError> {
    let file = File::open(path).map_err(|source| ReportError::Read { path: path.to_path_buf(), source })?;
    Ok(Records::from_reader(BufReader::new(file), path.to_path_buf()))
}

/// The records of a `requests.jsonl`, in file order: an iterator of `Result<RequestRecord, _>`
/// (from [`read_records`]).
pub struct Records<R: BufRead = BufReader<File>> {
    lines: std::io::Lines<R>,
    path: PathBuf,
    line: usize,
}

impl<R: BufRead> Records<R> {
    /// Reads from any reader; `path` is only used in error messages.
    pub fn from_reader(reader: R, path: PathBuf) -> Self {
        Records { lines: reader.lines(), path, line: 0 }
    }
}

impl<R: BufRead> Iterator for Records<R> {
    type Item = Result<RequestRecord, ReportError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let text = self.lines.next()?;
            self.line += 1;
            let text = match text {
                Ok(text) => text,
                Err(source) => return Some(Err(ReportError::Read { path: self.path.clone(), source })),
            };
            if text.trim().is_empty() {
                continue;
            }
            return Some(serde_json::from_str(&text).map_err(|source| ReportError::Record {
                path: self.path.clone(),
                line: self.line,
                source,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

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
            itl: vec![Duration::from_micros(500), Duration::from_micros(1500)].into(),
            prompt_tokens: Some(16),
            output_tokens: Some(6),
            ..RequestMetrics::default()
        };
        metrics.anomalies.scheduled_before_queued = true;
        metrics.engine_scheduled = Some(t(3));
        metrics.engine_first_token = Some(t(4));
        metrics.engine_last_token = Some(t(9));
        metrics.cached_tokens = Some(0);
        metrics.sent = Some(t(2));
        metrics.endpoint = Some("http://127.0.0.1:8000".into());
        metrics.token_count_source = Some(TokenCountSource::Usage);
        let completion = Completion { output: output(), times, batch_id: 7, batch_size: 3 };
        let mut completed = RequestRecord::completed(1, "throughput", Phase::Measure, &completion, &metrics);
        completed.intended_ns = Some(t(0));
        completed.dispatch_delay_ms = Some(2.0);
        let error = RequestOutcome::Error { kind: "engine_error".into() };
        let mut failed = RequestRecord::unfinished(2, "throughput", Phase::Warmup, error, Some(t(1)), Some(t(3)));
        failed.intended_ns = Some(t(1));
        let records = [
            completed,
            failed,
            RequestRecord::unfinished(3, "concurrent@4", Phase::Measure, RequestOutcome::Incomplete, Some(t(5)), None),
        ];
        let mut out = RequestsJsonl::from_writer(Vec::new(), PathBuf::from("requests.jsonl"));
        for record in &records {
            out.write(record).unwrap();
        }
        assert_eq!(out.lines(), 3);
        let text = String::from_utf8(out.finish().unwrap()).unwrap();
        insta::assert_snapshot!(text, @r#"
        {"id":1,"benchmark":"throughput","repeat":0,"phase":"measure","outcome":"completed","submitted_ns":1000000000000,"dispatched_ns":1000002000000,"finished_ns":1000012000000,"batch":7,"batch_size":3,"engine_scheduled_ns":1000003000000,"engine_first_token_ns":1000004000000,"engine_last_token_ns":1000009000000,"cached_tokens":0,"intended_ns":1000000000000,"sent_ns":1000002000000,"dispatch_delay_ms":2.0,"endpoint":"http://127.0.0.1:8000","token_count_source":"usage","latency_ms":12.0,"batch_wait_ms":2.0,"engine_queue_ms":null,"ttft_ms":4.5,"tpot_ms":1.0,"itl_max_ms":1.5,"latency_per_token_ms":2.0,"prompt_tokens":16,"output_tokens":6,"anomalies":["scheduled_before_queued"]}
        {"id":2,"benchmark":"throughput","repeat":0,"phase":"warmup","outcome":"error","error_kind":"engine_error","submitted_ns":1000001000000,"dispatched_ns":null,"finished_ns":1000003000000,"batch":null,"batch_size":null,"engine_scheduled_ns":null,"engine_first_token_ns":null,"engine_last_token_ns":null,"cached_tokens":null,"intended_ns":1000001000000,"dispatch_delay_ms":null}
        {"id":3,"benchmark":"concurrent@4","repeat":0,"phase":"measure","outcome":"incomplete","submitted_ns":1000005000000,"dispatched_ns":null,"finished_ns":null,"batch":null,"batch_size":null,"engine_scheduled_ns":null,"engine_first_token_ns":null,"engine_last_token_ns":null,"cached_tokens":null,"intended_ns":null,"dispatch_delay_ms":null}
        "#);
        // The reader gives back exactly what was written.
        let read: Vec<RequestRecord> =
            Records::from_reader(text.as_bytes(), PathBuf::from("requests.jsonl")).collect::<Result<_, _>>().unwrap();
        assert_eq!(read, records);
    }

    #[test]
    fn a_bad_line_is_named_by_file_and_line() {
        let good = r#"{"id":3,"benchmark":"b","repeat":0,"phase":"measure","outcome":"incomplete","submitted_ns":5,"dispatched_ns":null,"finished_ns":null,"batch":null,"batch_size":null,"engine_scheduled_ns":null,"engine_first_token_ns":null,"engine_last_token_ns":null,"cached_tokens":null}"#;
        let cases = [
            ("not json", "runs/a/requests.jsonl:3: not a requests.jsonl record: expected ident"),
            (r#"{"id":1}"#, "runs/a/requests.jsonl:3: not a requests.jsonl record: missing field `benchmark`"),
            (
                &good.replace("measure", "measuring"),
                "unknown variant `measuring`, expected one of `warmup`, `measure`, `cooldown`",
            ),
            (&good.replace("incomplete", "lost"), "unknown variant `lost`"),
        ];
        for (line, expected) in cases {
            let text = format!("{good}\n\n{line}\n{good}\n");
            let mut records = Records::from_reader(text.as_bytes(), PathBuf::from("runs/a/requests.jsonl"));
            assert_eq!(records.next().unwrap().unwrap().outcome, RequestOutcome::Incomplete, "a blank line is skipped");
            let err = records.next().unwrap().unwrap_err().to_string();
            assert!(err.contains(expected), "{err}");
        }
        let missing = Path::new("/nonexistent/requests.jsonl");
        let err = read_records(missing).err().unwrap().to_string();
        assert!(err.starts_with("cannot read /nonexistent/requests.jsonl"), "{err}");
    }

    #[test]
    fn a_line_written_before_the_client_fields_still_reads() {
        // A completed row as batchlab wrote it before intended_ns, dispatch_delay_ms, sent_ns,
        // endpoint and token_count_source.
        let old = r#"{"id":1,"benchmark":"throughput","repeat":0,"phase":"measure","outcome":"completed","submitted_ns":1000000000000,"dispatched_ns":1000002000000,"finished_ns":1000012000000,"batch":7,"batch_size":3,"engine_scheduled_ns":null,"engine_first_token_ns":null,"engine_last_token_ns":null,"cached_tokens":0,"latency_ms":12.0,"batch_wait_ms":2.0,"engine_queue_ms":null,"ttft_ms":4.5,"tpot_ms":1.0,"itl_max_ms":1.5,"latency_per_token_ms":2.0,"prompt_tokens":16,"output_tokens":6,"anomalies":[]}"#;
        let record = Records::from_reader(old.as_bytes(), PathBuf::from("requests.jsonl")).next().unwrap().unwrap();
        assert_eq!((record.intended_ns, record.dispatch_delay_ms, record.sent_ns), (None, None, None));
        assert_eq!((record.endpoint, record.token_count_source), (None, None));
        assert_eq!(record.metrics.map(|m| m.latency_ms), Some(12.0));
    }

    fn any_record() -> impl Strategy<Value = RequestRecord> {
        let ts = || proptest::option::of(any::<u64>().prop_map(Timestamp::from_nanos));
        let ms = || proptest::option::of(0.0f64..1e9);
        let phase = prop_oneof![Just(Phase::Warmup), Just(Phase::Measure), Just(Phase::Cooldown)];
        let outcome = prop_oneof![
            Just(RequestOutcome::Completed),
            "[a-z_]{1,20}".prop_map(|kind| RequestOutcome::Error { kind }),
            Just(RequestOutcome::Cancelled),
            Just(RequestOutcome::Incomplete),
        ];
        let metrics = proptest::option::of(
            (
                (0.0f64..1e9, 0.0f64..1e9, ms(), ms(), ms()),
                (ms(), ms(), proptest::option::of(any::<u32>()), proptest::option::of(any::<u32>())),
                proptest::collection::vec("[a-z_]{1,30}", 0..3),
            )
                .prop_map(
                    |((latency_ms, batch_wait_ms, engine_queue_ms, ttft_ms, tpot_ms), rest, anomalies)| {
                        let (itl_max_ms, latency_per_token_ms, prompt_tokens, output_tokens) = rest;
                        MetricsMs {
                            latency_ms,
                            batch_wait_ms,
                            engine_queue_ms,
                            ttft_ms,
                            tpot_ms,
                            itl_max_ms,
                            latency_per_token_ms,
                            prompt_tokens,
                            output_tokens,
                            anomalies,
                        }
                    },
                ),
        );
        let head = (any::<u64>(), ".{0,12}", any::<u32>(), phase, outcome);
        let times = (ts(), ts(), ts(), proptest::option::of(any::<u64>()), proptest::option::of(any::<usize>()));
        let engine = (ts(), ts(), ts(), proptest::option::of(any::<u32>()));
        let source = prop_oneof![
            Just(TokenCountSource::Usage),
            Just(TokenCountSource::TokenIds),
            Just(TokenCountSource::Chunks),
            Just(TokenCountSource::UsageShare)
        ];
        let client = (ts(), ts(), ms(), proptest::option::of("[a-z:/.0-9]{1,24}"), proptest::option::of(source));
        let token_ns = proptest::option::of(proptest::collection::vec(ts().prop_filter_map("a time", |t| t), 0..4));
        (head, times, engine, client, metrics, token_ns).prop_map(
            |((id, benchmark, repeat, phase, outcome), times, engine, client, metrics, token_ns)| {
                let (submitted_ns, dispatched_ns, finished_ns, batch, batch_size) = times;
                let (engine_scheduled_ns, engine_first_token_ns, engine_last_token_ns, cached_tokens) = engine;
                let (intended_ns, sent_ns, dispatch_delay_ms, endpoint, token_count_source) = client;
                RequestRecord {
                    id,
                    benchmark,
                    repeat,
                    phase,
                    outcome,
                    submitted_ns,
                    dispatched_ns,
                    finished_ns,
                    batch,
                    batch_size,
                    engine_scheduled_ns,
                    engine_first_token_ns,
                    engine_last_token_ns,
                    cached_tokens,
                    intended_ns,
                    sent_ns,
                    token_ns,
                    dispatch_delay_ms,
                    ttft_from_submit_ms: None,
                    wire_batch: None,
                    endpoint,
                    token_count_source,
                    images: None,
                    image_cache_hits: None,
                    prompt_tokens_target: None,
                    embedding_dims: None,
                    session: None,
                    turn: None,
                    history_tokens: None,
                    dropped_turns: None,
                    itl_runs_ns: None,
                    metrics,
                }
            },
        )
    }

    proptest! {
        /// Whatever the writer writes, the reader reads back the same.
        #[test]
        fn records_round_trip(records in proptest::collection::vec(any_record(), 0..8)) {
            let mut out = RequestsJsonl::from_writer(Vec::new(), PathBuf::from("requests.jsonl"));
            for record in &records {
                out.write(record).unwrap();
            }
            let bytes = out.finish().unwrap();
            let read: Vec<RequestRecord> =
                Records::from_reader(bytes.as_slice(), PathBuf::from("requests.jsonl")).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(read, records);
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
