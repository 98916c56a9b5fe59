//! A benchmark's measured requests, from their `requests.jsonl` rows, through the very aggregation
//! a run feeds from its outcomes ([`BenchmarkAggregator`], [`MediaTally`], [`PromptTargetTally`]):
//! `batchlab merge` rebuilds every per-request metric of the union of its shards' records here,
//! exact, never from merged histograms.
//!
//! A row gives back what the run fed: its times in ns, its metrics in ms (`ns / 1e6`, which
//! `(ms · 1e6).round()` inverts exactly below about 100 days), its token gaps as a shard wrote them
//! (`itl_runs_ns`), its client timing from `intended_ns` and `sent_ns`. Rows go in the order the
//! runs saw their outcomes: each shard's in its file's order, the shards' interleaved by finish
//! time (then index). Percentiles, counts, sums, min and max do not depend on the order; the
//! running mean and deviation add up in it, so they are the single-process run's to the last bit
//! when the outcomes' order is their finish order (virtual time) and to within rounding (about
//! 1e-15 relative) otherwise.

use std::time::Duration;

use crate::batcher::RequestTimes;
use crate::metrics::aggregate::BenchmarkAggregator;
use crate::metrics::client::ClientTiming;
use crate::metrics::mapper::{Anomalies, Itl, RequestMetrics};
use crate::metrics::media::MediaTally;
use crate::metrics::prompt_target::PromptTargetTally;
use crate::metrics::result::BenchmarkResult;
use crate::metrics::slo::Slo;
use crate::report::{Phase, RequestOutcome, RequestRecord};
use crate::time::Timestamp;

/// The measured part of benchmark `name` (`repeat`) over `window`, from each shard's rows in
/// `parts` (each in its file's order; any phase: only the measured rows count).
pub(crate) fn replay(
    name: &str,
    repeat: u32,
    slo: &Slo,
    window: (Timestamp, Timestamp),
    parts: &[Vec<&RequestRecord>],
) -> BenchmarkResult {
    let measured = interleave(parts, |r| r.phase == Phase::Measure && r.benchmark == name && r.repeat == repeat);
    let mut aggregator = BenchmarkAggregator::new(name).with_slo(slo);
    aggregator.start(window.0);
    let (mut media, mut prompt_targets) = (MediaTally::default(), PromptTargetTally::default());
    for r in &measured {
        aggregator.record_submitted();
        let submitted = r.submitted_ns.unwrap_or(window.0);
        let finished = r.finished_ns.unwrap_or(window.1);
        match &r.outcome {
            RequestOutcome::Completed => {
                let times =
                    RequestTimes { submitted, dispatched: r.dispatched_ns.unwrap_or(submitted), completed: finished };
                let metrics = metrics_of(r);
                aggregator.record_completion(&metrics, &times);
                let client = ClientTiming::new(r.intended_ns.unwrap_or(submitted), &times, r.sent_ns).with_wire(
                    submitted,
                    r.engine_first_token_ns,
                    r.wire_batch,
                    r.batch_size.unwrap_or(1),
                );
                aggregator.record_client_timing(&client);
                if let Some(images) = &r.images {
                    media.record(images, r.image_cache_hits);
                }
                if let Some(target) = r.prompt_tokens_target {
                    prompt_targets.record(target, metrics.prompt_tokens);
                }
            }
            RequestOutcome::Error { kind } => aggregator.record_error(kind, r.endpoint.as_deref(), submitted, finished),
            RequestOutcome::Cancelled => aggregator.record_cancelled(submitted, finished),
            RequestOutcome::Incomplete => aggregator.record_incomplete(submitted),
        }
    }
    let mut result = aggregator.finish(window.1);
    result.images = media.finish(result.duration_s);
    result.prompt_target = prompt_targets.finish();
    result.repeat = repeat;
    result
}

/// The rows of `parts` that `keep`, each part's in its order, the parts' merged by finish time
/// (then index), requests still running last.
fn interleave<'r>(parts: &[Vec<&'r RequestRecord>], keep: impl Fn(&RequestRecord) -> bool) -> Vec<&'r RequestRecord> {
    let parts: Vec<Vec<&RequestRecord>> =
        parts.iter().map(|p| p.iter().copied().filter(|r| keep(r)).collect()).collect();
    let key = |r: &RequestRecord| (r.outcome == RequestOutcome::Incomplete, r.finished_ns, r.id);
    let mut heads = vec![0usize; parts.len()];
    let mut out = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    while let Some(i) = (0..parts.len()).filter(|&i| heads[i] < parts[i].len()).min_by_key(|&i| key(parts[i][heads[i]]))
    {
        out.push(parts[i][heads[i]]);
        heads[i] += 1;
    }
    out
}

/// `ms` as the duration it was printed from (`ns / 1e6`).
fn from_ms(ms: f64) -> Duration {
    Duration::from_nanos((ms * 1e6).round().max(0.0) as u64)
}

/// A completed row's metrics, as the run mapped them.
fn metrics_of(r: &RequestRecord) -> RequestMetrics {
    let m = r.metrics.as_ref();
    let mut itl = Itl::default();
    for &[gap, n] in r.itl_runs_ns.iter().flatten() {
        itl.push_n(Duration::from_nanos(gap), n);
    }
    let flagged = |name: &str| m.is_some_and(|m| m.anomalies.iter().any(|a| a == name));
    RequestMetrics {
        batch_wait: m.map_or(Duration::ZERO, |m| from_ms(m.batch_wait_ms)),
        latency: m.map_or(Duration::ZERO, |m| from_ms(m.latency_ms)),
        engine_queue: m.and_then(|m| m.engine_queue_ms).map(from_ms),
        ttft: m.and_then(|m| m.ttft_ms).map(from_ms),
        tpot: m.and_then(|m| m.tpot_ms).map(from_ms),
        latency_per_token: m.and_then(|m| m.latency_per_token_ms).map(from_ms),
        itl,
        prompt_tokens: m.and_then(|m| m.prompt_tokens),
        output_tokens: m.and_then(|m| m.output_tokens),
        cached_tokens: r.cached_tokens,
        engine_scheduled: r.engine_scheduled_ns,
        engine_first_token: r.engine_first_token_ns,
        engine_last_token: r.engine_last_token_ns,
        sent: r.sent_ns,
        endpoint: r.endpoint.clone(),
        token_count_source: r.token_count_source,
        wire_batch: r.wire_batch,
        embedding_dims: r.embedding_dims,
        client_token_times: r.token_ns.clone(),
        anomalies: Anomalies {
            non_finite: flagged("non_finite"),
            first_token_before_arrival: flagged("first_token_before_arrival"),
            last_before_first: flagged("last_before_first"),
            scheduled_before_queued: flagged("scheduled_before_queued"),
            token_after_completion: flagged("token_after_completion"),
            impossible_timestamp: flagged("impossible_timestamp"),
            token_count_mismatch: flagged("token_count_mismatch"),
            token_times_inconsistent: flagged("token_times_inconsistent"),
        },
    }
}
