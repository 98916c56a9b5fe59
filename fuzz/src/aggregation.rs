//! `aggregation`: [`Distribution`] and [`BenchmarkAggregator`] on arbitrary samples and events.
//!
//! Percentiles are ordered (min ≤ p50 ≤ … ≤ p999 ≤ max), nothing is NaN, counts add up, and
//! merging two distributions is the same as recording every sample into one.

use std::time::Duration;

use arbitrary::Arbitrary;
use batchlab::batcher::{FlushReason, RequestTimes};
use batchlab::metrics::{Anomalies, BenchmarkAggregator, BenchmarkResult, Distribution, RequestMetrics, Summary};
use batchlab::time::Timestamp;

#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub a: Vec<Sample>,
    pub b: Vec<Sample>,
    pub start: Option<u64>,
    pub events: Vec<Event>,
    pub finish_at: u64,
}

/// A duration in nanoseconds; most inputs should be ordinary, some extreme.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Sample {
    Small(u16),
    Medium(u32),
    Any(u64),
    Max,
}

impl Sample {
    fn nanos(self) -> u64 {
        match self {
            Sample::Small(n) => u64::from(n),
            Sample::Medium(n) => u64::from(n) * 1_000,
            Sample::Any(n) => n,
            Sample::Max => u64::MAX,
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Event {
    Submitted,
    Completion {
        submitted: u64,
        wait: u32,
        run: u32,
        ttft: Option<u32>,
        tokens: Option<u32>,
        prompt: Option<u32>,
        anomalies: u8,
    },
    Error {
        kind: u8,
        submitted: u64,
        ended: u64,
    },
    Cancelled {
        submitted: u64,
        at: u64,
    },
    Incomplete {
        submitted: u64,
    },
    Batch {
        dispatched: u64,
        size: u8,
        reason: u8,
        generate: Sample,
    },
}

fn distribution(samples: &[Sample]) -> Distribution {
    let mut d = Distribution::new();
    samples.iter().for_each(|s| d.record_nanos(s.nanos()));
    d
}

/// Min, percentiles and max in order, all finite, mean inside the range.
pub fn check_summary(s: &Summary, what: &str) {
    if s.count == 0 {
        assert_eq!(*s, Summary::default(), "{what}: an empty summary has values");
        return;
    }
    let all = [s.mean, s.std, s.min, s.p50, s.p90, s.p95, s.p99, s.p999, s.max];
    assert!(all.iter().all(|v| v.is_some_and(f64::is_finite)), "{what}: missing or non-finite value: {s:?}");
    let chain = [s.min, s.p50, s.p90, s.p95, s.p99, s.p999, s.max].map(Option::unwrap);
    assert!(chain.windows(2).all(|w| w[0] <= w[1]), "{what}: percentiles out of order: {s:?}");
    let mean = s.mean.unwrap();
    assert!(chain[0] <= mean && mean <= chain[6], "{what}: mean outside [min, max]: {s:?}");
    assert!(s.std.unwrap() >= 0.0, "{what}: negative std: {s:?}");
}

pub fn check(input: &Input) {
    check_distributions(&input.a, &input.b);
    check_aggregator(input);
}

fn check_distributions(a: &[Sample], b: &[Sample]) {
    let (da, db) = (distribution(a), distribution(b));
    let all: Vec<Sample> = a.iter().chain(b).copied().collect();
    let whole = distribution(&all);
    let mut merged = da.clone();
    merged.merge(&db);

    let nanos: Vec<u64> = all.iter().map(|s| s.nanos()).collect();
    assert_eq!(whole.count(), nanos.len() as u64);
    assert_eq!(whole.min_nanos(), nanos.iter().copied().min());
    assert_eq!(whole.max_nanos(), nanos.iter().copied().max());
    assert_eq!(whole.sum_nanos(), nanos.iter().map(|&n| u128::from(n)).sum::<u128>());

    assert_eq!(merged.count(), whole.count());
    assert_eq!(merged.min_nanos(), whole.min_nanos());
    assert_eq!(merged.max_nanos(), whole.max_nanos());
    assert_eq!(merged.sum_nanos(), whole.sum_nanos());
    for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
        assert_eq!(merged.quantile_nanos(q), whole.quantile_nanos(q), "q = {q}");
    }
    let (m, w) = (merged.summary(), whole.summary());
    check_summary(&m, "merged");
    check_summary(&w, "whole");
    check_summary(&da.summary(), "a");
    assert_eq!((m.count, m.min, m.max, m.p50, m.p99, m.p999), (w.count, w.min, w.max, w.p50, w.p99, w.p999));
}

fn at(nanos: u64) -> Timestamp {
    // Keep sums of offsets below u64::MAX.
    Timestamp::from_nanos(nanos >> 2)
}

fn check_aggregator(input: &Input) {
    const KINDS: [&str; 3] = ["engine_error", "cancelled", "generate_timed_out"];
    let mut agg = BenchmarkAggregator::new("fuzz");
    if let Some(s) = input.start {
        agg.start(at(s));
    }
    let (mut submitted, mut completed, mut errors, mut batches, mut requests) = (0u64, 0u64, 0u64, 0u64, 0u64);
    // Requests with ttft, tpot, latency_per_token, engine_queue; then ITL gaps.
    let mut with = [0u64; 5];
    for event in &input.events {
        match event {
            Event::Submitted => {
                agg.record_submitted();
                submitted += 1;
            }
            Event::Completion { submitted: s, wait, run, ttft, tokens, prompt, anomalies } => {
                // Below 2^16 tokens: the ITL samples below are one per gap, and billions of them
                // would exhaust the fuzzer's memory, not test the aggregator.
                let tokens = &tokens.map(|n| n & 0xffff);
                let s = at(*s);
                let dispatched = s.saturating_add(Duration::from_nanos(u64::from(*wait)));
                let done = dispatched.saturating_add(Duration::from_nanos(u64::from(*run)));
                let times = RequestTimes { submitted: s, dispatched, completed: done };
                let latency = done.saturating_since(s);
                let ttft = ttft.map(|t| Duration::from_nanos(u64::from(t)).min(latency));
                let metrics = RequestMetrics {
                    batch_wait: dispatched.saturating_since(s),
                    latency,
                    engine_queue: ttft.map(|t| t / 2),
                    ttft,
                    tpot: tokens.filter(|n| *n >= 2).and_then(|n| ttft.map(|t| latency.saturating_sub(t) / (n - 1))),
                    latency_per_token: tokens.filter(|n| *n >= 1).map(|n| latency / n),
                    // Evenly spaced tokens: n - 1 gaps, one ITL sample each.
                    itl: match (tokens, ttft) {
                        (Some(n), Some(t)) if *n >= 2 => vec![latency.saturating_sub(t) / (n - 1); (*n - 1) as usize].into(),
                        _ => Default::default(),
                    },
                    prompt_tokens: *prompt,
                    output_tokens: *tokens,
                    cached_tokens: None,
                    engine_scheduled: None,
                    engine_first_token: None,
                    engine_last_token: None,
                    sent: None,
                    endpoint: None,
                    token_count_source: None,
                    wire_batch: None,
                    embedding_dims: None,
                    client_token_times: None,
                    anomalies: Anomalies {
                        non_finite: anomalies & 1 != 0,
                        first_token_before_arrival: anomalies & 2 != 0,
                        last_before_first: anomalies & 4 != 0,
                        scheduled_before_queued: anomalies & 8 != 0,
                        token_after_completion: anomalies & 16 != 0,
                        impossible_timestamp: anomalies & 32 != 0,
                        token_count_mismatch: anomalies & 64 != 0,
                        token_times_inconsistent: anomalies & 128 != 0,
                    },
                };
                for (k, present) in [metrics.ttft, metrics.tpot, metrics.latency_per_token, metrics.engine_queue].iter().enumerate() {
                    with[k] += u64::from(present.is_some());
                }
                with[4] += metrics.itl.len() as u64;
                agg.record_completion(&metrics, &times);
                completed += 1;
                requests += 1;
            }
            Event::Error { kind, submitted: s, ended } => {
                agg.record_error(KINDS[usize::from(*kind) % KINDS.len()], None, at(*s), at(*ended));
                errors += 1;
                requests += 1;
            }
            Event::Cancelled { submitted: s, at: a } => {
                agg.record_cancelled(at(*s), at(*a));
                requests += 1;
            }
            Event::Incomplete { submitted: s } => {
                agg.record_incomplete(at(*s));
                requests += 1;
            }
            Event::Batch { dispatched, size, reason, generate } => {
                let reason = [FlushReason::Full, FlushReason::Timeout, FlushReason::Drain][usize::from(*reason) % 3];
                agg.record_batch(at(*dispatched), usize::from(*size), reason, Duration::from_nanos(generate.nanos()));
                batches += 1;
            }
        }
    }
    let r = agg.finish(at(input.finish_at));
    check_result(&r, submitted, completed, errors, batches, requests, with);
}

fn check_result(
    r: &BenchmarkResult,
    submitted: u64,
    completed: u64,
    errors: u64,
    batches: u64,
    requests: u64,
    with: [u64; 5],
) {
    let c = &r.counts;
    assert_eq!((c.submitted, c.completed, c.errors), (submitted, completed, errors));
    assert_eq!(c.errors_by_kind.values().sum::<u64>(), c.errors);
    let accounted = c.completed + c.errors + c.cancelled + c.incomplete;
    assert_eq!(accounted, requests);
    assert_eq!(i128::from(c.lost), i128::from(c.submitted) - i128::from(accounted));

    let b = &r.batching;
    assert_eq!(b.batches, batches);
    assert_eq!(b.full + b.timeout + b.drain, b.batches);
    assert_eq!(b.batch_size_histogram.values().sum::<u64>(), b.batches);
    if b.batches > 0 {
        let shares = b.full_share.unwrap() + b.timeout_share.unwrap() + b.drain_share.unwrap();
        assert!((shares - 1.0).abs() < 1e-9, "flush shares add up to {shares}");
    }

    assert!(r.duration_s.is_finite() && r.duration_s >= 0.0, "duration_s {}", r.duration_s);
    for (name, v) in [
        ("requests_per_s", r.requests_per_s),
        ("input_tokens_per_s", r.input_tokens_per_s),
        ("output_tokens_per_s", r.output_tokens_per_s),
        ("total_tokens_per_s", r.total_tokens_per_s),
        ("batch_size_mean", b.batch_size_mean),
    ] {
        assert!(v.is_none_or(|v| v.is_finite() && v >= 0.0), "{name} = {v:?}");
    }
    // Every request is in flight at most the whole window.
    if let Some(cm) = r.concurrency_mean {
        assert!(cm.is_finite() && cm >= 0.0, "concurrency_mean = {cm}");
        assert!(cm <= requests as f64 * (1.0 + 1e-9), "concurrency_mean {cm} with {requests} requests");
    }

    let d = &r.distributions;
    assert_eq!(d.latency.count, completed);
    assert_eq!(d.batch_wait.count, completed);
    assert_eq!([d.ttft.count, d.tpot.count, d.latency_per_token.count, d.engine_queue.count], with[..4]);
    assert_eq!(d.itl.count, with[4], "one ITL sample per gap");
    assert_eq!(d.generate.count, batches);
    for (name, summary) in d.iter() {
        check_summary(summary, name);
    }
    for name in batchlab::metrics::metric_names() {
        assert!(r.metric(name).is_none_or(|v| !v.is_nan()), "{name} is NaN");
    }
    assert!(r.anomalies.requests <= completed);

    // The time series: bounded, and its intervals add up to the totals.
    let s = &r.time_series;
    assert!(s.len() <= batchlab::metrics::series::MAX_INTERVALS, "{} intervals", s.len());
    assert_eq!(s.completed.iter().sum::<u64>(), completed);
    assert_eq!(s.errors.iter().sum::<u64>(), errors);
    assert_eq!(s.batches.iter().sum::<u64>(), batches);
    assert_eq!(s.output_tokens.iter().sum::<u64>(), r.tokens.output);
    for c in s.concurrency.iter().chain(&s.batch_size_mean).flatten() {
        assert!(c.is_finite() && *c >= 0.0, "series value {c}");
    }
}
