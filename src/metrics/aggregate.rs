//! Streaming aggregation of one benchmark into a [`BenchmarkResult`].
//!
//! The aggregator is fed as things happen and keeps no per-request state, so memory is constant
//! in the number of requests. Like the batcher core it never reads a clock: every time comes in
//! as an argument.
//!
//! Concurrency is time-weighted: the integral of "requests in flight" over the window divided by
//! the window's length, i.e. `Σ overlap([submitted, end], window) / window`, where `end` is the
//! completion (or error, or cancellation) time, or the window's end for a request still running.

use std::collections::BTreeMap;
use std::time::Duration;

use super::client::{ClientTiming, ClientTimings};
use super::distribution::Distribution;
use super::endpoints::EndpointAggregator;
use super::mapper::RequestMetrics;
use super::result::{
    AnomalyCounts, Batching, BenchmarkResult, Counts, EmbeddingsResult, PerDistribution, PrefixCacheTokens, Tokens,
};
use super::series::SeriesRecorder;
use super::slo::{Slo, SloResult, SloVerdict};
use crate::batcher::{FlushReason, RequestTimes};
use crate::engine::TokenCountSource;
use crate::time::{Timestamp, duration_nanos};

/// Aggregates one benchmark. Call [`start`](Self::start), record events, then
/// [`finish`](Self::finish).
#[derive(Clone, Debug)]
pub struct BenchmarkAggregator {
    name: String,
    /// Window start; when never set, the earliest submission seen.
    start: Option<Timestamp>,
    earliest_submitted: Option<Timestamp>,
    latest_end: Option<Timestamp>,

    submitted: u64,
    completed: u64,
    errors: u64,
    errors_by_kind: BTreeMap<String, u64>,
    cancelled: u64,
    incomplete: u64,
    tokens: Tokens,
    anomalies: AnomalyCounts,
    prefix_cache: PrefixCacheTokens,

    /// Σ of in-flight time of finished requests inside the window, ns.
    in_flight_ns: u128,
    /// Σ of the in-window start of requests still running at the end, ns; their in-flight time
    /// is `incomplete × window_end − this`, known only at `finish`.
    incomplete_starts_ns: u128,

    distributions: PerDistribution<Distribution>,

    batch_sizes: BTreeMap<usize, u64>,
    full: u64,
    timeout: u64,
    drain: u64,
    steps: u64,
    /// Engine steps that said what they served, and the sums of their prefill and decode requests.
    phased_steps: u64,
    prefill: u64,
    decode: u64,

    series: SeriesRecorder,
    /// The objectives requests are judged against; `None` without `[slo]`.
    slo: Option<Slo>,
    slo_met: u64,
    slo_met_output_tokens: u64,
    slo_unmeasurable: u64,

    /// Dispatch delays and client lags of completed requests.
    client: ClientTimings,
    /// Per endpoint, for an engine that names the endpoint of each request.
    endpoints: EndpointAggregator,
    /// Completed requests by where the engine's token counts came from, when it says.
    token_count_sources: BTreeMap<String, u64>,
    /// Completed embeddings (pooling requests), their prompt tokens, and the vector's length.
    embeddings: EmbeddingTotals,
}

/// What the completed embeddings of a benchmark add up to ([`EmbeddingsResult`]'s inputs).
#[derive(Clone, Debug, Default)]
struct EmbeddingTotals {
    count: u64,
    input_tokens: u64,
    /// The smallest and largest vector length seen.
    dims: Option<(u32, u32)>,
}

impl BenchmarkAggregator {
    /// An empty aggregator for the benchmark `name`; its window opens at [`start`](Self::start).
    pub fn new(name: impl Into<String>) -> Self {
        BenchmarkAggregator {
            name: name.into(),
            start: None,
            earliest_submitted: None,
            latest_end: None,
            submitted: 0,
            completed: 0,
            errors: 0,
            errors_by_kind: BTreeMap::new(),
            cancelled: 0,
            incomplete: 0,
            tokens: Tokens::default(),
            anomalies: AnomalyCounts::default(),
            prefix_cache: PrefixCacheTokens::default(),
            in_flight_ns: 0,
            incomplete_starts_ns: 0,
            distributions: PerDistribution::default(),
            batch_sizes: BTreeMap::new(),
            full: 0,
            timeout: 0,
            drain: 0,
            steps: 0,
            phased_steps: 0,
            prefill: 0,
            decode: 0,
            series: SeriesRecorder::new(),
            slo: None,
            slo_met: 0,
            slo_met_output_tokens: 0,
            slo_unmeasurable: 0,
            client: ClientTimings::default(),
            endpoints: EndpointAggregator::default(),
            token_count_sources: BTreeMap::new(),
            embeddings: EmbeddingTotals::default(),
        }
    }

    /// Judges every completed and failed request against `slo` (when it sets any objective);
    /// the result gains [`BenchmarkResult::slo`].
    pub fn with_slo(mut self, slo: &Slo) -> Self {
        self.set_slo(slo);
        self
    }

    /// [`with_slo`](Self::with_slo) in place; call before recording anything.
    pub fn set_slo(&mut self, slo: &Slo) {
        self.slo = slo.is_set().then(|| slo.clone());
    }

    /// Opens the measurement window. Requests submitted earlier count only from here on.
    pub fn start(&mut self, at: Timestamp) {
        self.start = Some(at);
        self.series.start(at);
    }

    /// Counts one request handed to the batcher.
    pub fn record_submitted(&mut self) {
        self.submitted += 1;
    }

    /// Counts one completed request and adds its timings to the distributions; with its endpoint
    /// (`metrics.endpoint`), to that endpoint's results too.
    pub fn record_completion(&mut self, metrics: &RequestMetrics, times: &RequestTimes) {
        self.completed += 1;
        if let Some(endpoint) = &metrics.endpoint {
            let sent = metrics.sent.unwrap_or(times.dispatched);
            self.endpoints.completion(endpoint, sent, times.completed, metrics.latency, metrics.ttft);
        }
        if let Some(source) = metrics.token_count_source {
            *self.token_count_sources.entry(token_count_source_name(source).to_owned()).or_default() += 1;
        }
        self.add_in_flight(times.submitted, times.completed);
        self.series.completion(times.completed, u64::from(metrics.output_tokens.unwrap_or(0)));

        self.tokens.input += u64::from(metrics.prompt_tokens.unwrap_or(0));
        self.tokens.output += u64::from(metrics.output_tokens.unwrap_or(0));
        if let Some(dims) = metrics.embedding_dims {
            let e = &mut self.embeddings;
            e.count += 1;
            e.input_tokens += u64::from(metrics.prompt_tokens.unwrap_or(0));
            e.dims = Some(e.dims.map_or((dims, dims), |(lo, hi)| (lo.min(dims), hi.max(dims))));
        }
        if let (Some(cached), Some(prompt)) = (metrics.cached_tokens, metrics.prompt_tokens) {
            self.prefix_cache.cached += u64::from(cached.min(prompt));
            self.prefix_cache.prompt += u64::from(prompt);
        }

        self.distributions.latency.record(metrics.latency);
        self.distributions.batch_wait.record(metrics.batch_wait);
        match self.slo.as_ref().map(|slo| slo.judge(metrics)) {
            Some(SloVerdict::Met) => {
                self.slo_met += 1;
                self.slo_met_output_tokens += u64::from(metrics.output_tokens.unwrap_or(0));
            }
            Some(SloVerdict::Unmeasurable) => self.slo_unmeasurable += 1,
            Some(SloVerdict::Missed) | None => {}
        }
        let d = &mut self.distributions;
        let optional = [
            (&mut d.ttft, metrics.ttft),
            (&mut d.tpot, metrics.tpot),
            (&mut d.latency_per_token, metrics.latency_per_token),
            (&mut d.engine_queue, metrics.engine_queue),
        ];
        for (dist, value) in optional {
            if let Some(v) = value {
                dist.record(v);
            }
        }
        // One sample per gap, as vLLM counts ITL; a run of equal gaps (a decode step's length, shared
        // by consecutive steps of the same load) is recorded at once.
        for &(gap, count) in metrics.itl.runs() {
            d.itl.record_n_nanos(duration_nanos(gap), count);
        }

        let a = &metrics.anomalies;
        let c = &mut self.anomalies;
        c.requests += u64::from(a.any());
        c.non_finite += u64::from(a.non_finite);
        c.first_token_before_arrival += u64::from(a.first_token_before_arrival);
        c.last_before_first += u64::from(a.last_before_first);
        c.scheduled_before_queued += u64::from(a.scheduled_before_queued);
        c.token_after_completion += u64::from(a.token_after_completion);
        c.impossible_timestamp += u64::from(a.impossible_timestamp);
        c.token_count_mismatch += u64::from(a.token_count_mismatch);
        c.token_times_inconsistent += u64::from(a.token_times_inconsistent);
    }

    /// What a completed request's prompt was designed to hit in a prefix cache: `designed` of its
    /// `prompt_tokens` (the engine's count; a request without one adds nothing).
    pub fn record_designed_cached(&mut self, designed: u32, prompt_tokens: Option<u32>) {
        if let Some(prompt) = prompt_tokens {
            self.prefix_cache.designed_cached += u64::from(designed.min(prompt));
            self.prefix_cache.designed_prompt += u64::from(prompt);
        }
    }

    /// A completed request's dispatch delay and client lag ([`ClientTiming`]).
    pub fn record_client_timing(&mut self, timing: &ClientTiming) {
        self.client.record(timing);
    }

    /// A request that failed; `kind` is [`crate::batcher::RequestError::kind`]; `endpoint` where
    /// the error names one (a remote engine's).
    pub fn record_error(&mut self, kind: &str, endpoint: Option<&str>, submitted: Timestamp, completed: Timestamp) {
        self.errors += 1;
        *self.errors_by_kind.entry(kind.to_string()).or_default() += 1;
        if let Some(endpoint) = endpoint {
            self.endpoints.error(endpoint, kind, completed);
        }
        self.add_in_flight(submitted, completed);
        self.series.error(completed);
    }

    /// A request cancelled at `at` before it ran.
    pub fn record_cancelled(&mut self, submitted: Timestamp, at: Timestamp) {
        self.cancelled += 1;
        self.add_in_flight(submitted, at);
    }

    /// A request still running when the benchmark ended: in flight until the window's end.
    pub fn record_incomplete(&mut self, submitted: Timestamp) {
        self.incomplete += 1;
        self.note_submitted(submitted);
        self.incomplete_starts_ns += u128::from(self.clip_start(submitted).as_nanos());
        self.series.request(self.clip_start(submitted), None);
    }

    /// A batch the engine ran: when it was dispatched, its size, why it was flushed, and how long
    /// generate took.
    pub fn record_batch(&mut self, dispatched_at: Timestamp, size: usize, reason: FlushReason, generate: Duration) {
        *self.batch_sizes.entry(size).or_default() += 1;
        self.series.batch(dispatched_at, size);
        match reason {
            FlushReason::Full => self.full += 1,
            FlushReason::Timeout => self.timeout += 1,
            FlushReason::Drain => self.drain += 1,
            FlushReason::Step => self.steps += 1,
        }
        self.distributions.generate.record(generate);
    }

    /// What an engine step recorded by [`record_batch`](Self::record_batch) served: `prefill`
    /// requests got their first token, `decode` a further one.
    pub fn record_step_phases(&mut self, prefill: u32, decode: u32) {
        self.phased_steps += 1;
        self.prefill += u64::from(prefill);
        self.decode += u64::from(decode);
    }

    fn note_submitted(&mut self, submitted: Timestamp) {
        self.earliest_submitted = Some(self.earliest_submitted.map_or(submitted, |e| e.min(submitted)));
    }

    /// Where a request submitted at `submitted` enters the window. Without an explicit start the
    /// window starts at the earliest submission, which is never after this one.
    fn clip_start(&self, submitted: Timestamp) -> Timestamp {
        self.start.map_or(submitted, |s| s.max(submitted))
    }

    fn add_in_flight(&mut self, submitted: Timestamp, ended: Timestamp) {
        self.note_submitted(submitted);
        self.latest_end = Some(self.latest_end.map_or(ended, |e| e.max(ended)));
        let from = self.clip_start(submitted);
        self.in_flight_ns += u128::from(ended.as_nanos().saturating_sub(from.as_nanos()));
        self.series.request(from, Some(ended));
    }

    /// The measured window [`finish`](Self::finish) at `at` would close, `(start, end)`, on the
    /// run's clock (a shard's report gives it to `batchlab merge`).
    pub fn window(&self, at: Timestamp) -> (Timestamp, Timestamp) {
        let start = self.start.or(self.earliest_submitted).unwrap_or(at);
        (start, self.latest_end.map_or(at, |l| l.max(at)).max(start))
    }

    /// Closes the window at `at` and computes the result. If a recorded request ended after
    /// `at` (events fed out of order), the window is extended to cover it, so that concurrency
    /// never counts time outside the window.
    pub fn finish(self, at: Timestamp) -> BenchmarkResult {
        let (start, end) = self.window(at);
        let window_ns = end.as_nanos() - start.as_nanos();
        let duration_s = window_ns as f64 / 1e9;
        let per_s = |n: u64| (window_ns > 0).then(|| n as f64 / duration_s);

        let incomplete_ns =
            (u128::from(end.as_nanos()) * u128::from(self.incomplete)).saturating_sub(self.incomplete_starts_ns);
        let in_flight_ns = self.in_flight_ns + incomplete_ns;
        let concurrency_mean = (window_ns > 0).then(|| in_flight_ns as f64 / window_ns as f64);

        let accounted = self.completed + self.errors + self.cancelled + self.incomplete;
        let lost = i64::try_from(self.submitted).unwrap_or(i64::MAX) - i64::try_from(accounted).unwrap_or(i64::MAX);

        let batches: u64 = self.batch_sizes.values().sum();
        let share = |n: u64| (batches > 0).then(|| n as f64 / batches as f64);
        let size_sum: u128 = self.batch_sizes.iter().map(|(&size, &n)| size as u128 * u128::from(n)).sum();
        let p = &self.prefix_cache;
        let ratio = |part: u64, whole: u64| (whole > 0).then(|| part as f64 / whole as f64);
        let prefix_cache_hit_rate = ratio(p.cached, p.prompt);
        let prefix_cache_designed_hit_rate = ratio(p.designed_cached, p.designed_prompt);
        let slo = self.slo.as_ref().map(|_| {
            // An error is judged and never meets the SLO; cancelled and unfinished requests are not judged.
            let judged = self.completed + self.errors;
            SloResult {
                judged,
                met: self.slo_met,
                unmeasurable: self.slo_unmeasurable,
                attainment: (judged > 0).then(|| self.slo_met as f64 / judged as f64),
                goodput_requests_per_s: per_s(self.slo_met),
                goodput_output_tokens_per_s: per_s(self.slo_met_output_tokens),
            }
        });

        BenchmarkResult {
            name: self.name,
            repeat: 0,
            counts: Counts {
                submitted: self.submitted,
                completed: self.completed,
                errors: self.errors,
                errors_by_kind: self.errors_by_kind,
                cancelled: self.cancelled,
                incomplete: self.incomplete,
                lost,
            },
            duration_s,
            requests_per_s: per_s(self.completed),
            input_tokens_per_s: per_s(self.tokens.input),
            output_tokens_per_s: per_s(self.tokens.output),
            total_tokens_per_s: per_s(self.tokens.input + self.tokens.output),
            tokens: self.tokens,
            concurrency_mean,
            distributions: self.distributions.map(|d| d.summary()),
            dispatch: self.client.summary(),
            validity_warnings: self.client.warnings(),
            batching: Batching {
                batches,
                batch_size_mean: (batches > 0).then(|| size_sum as f64 / batches as f64),
                batch_size_histogram: self.batch_sizes,
                full: self.full,
                timeout: self.timeout,
                drain: self.drain,
                full_share: share(self.full),
                timeout_share: share(self.timeout),
                drain_share: share(self.drain),
                steps: self.steps,
                prefill_mean: (self.phased_steps > 0).then(|| self.prefill as f64 / self.phased_steps as f64),
                decode_mean: (self.phased_steps > 0).then(|| self.decode as f64 / self.phased_steps as f64),
                // The run's driver fills it in: the aggregator sees the measured window only.
                whole_run: Default::default(),
            },
            anomalies: self.anomalies,
            prefix_cache_hit_rate,
            prefix_cache_designed_hit_rate,
            prefix_cache_tokens: self.prefix_cache,
            slo,
            endpoints: self.endpoints.finish(start),
            server: Vec::new(),
            token_count_sources: self.token_count_sources,
            time_series: self.series.finish(end),
            matrix: None,
            images: None,
            prompt_target: None,
            embeddings: self.embeddings.dims.map(|(dims_min, dims_max)| EmbeddingsResult {
                embeddings: self.embeddings.count,
                embeddings_per_s: per_s(self.embeddings.count),
                input_tokens: self.embeddings.input_tokens,
                input_tokens_per_s: per_s(self.embeddings.input_tokens),
                dims_min,
                dims_max,
            }),
            sessions: None,
        }
    }
}

/// A [`TokenCountSource`]'s name in reports (`usage`, `token_ids`, `chunks`).
pub fn token_count_source_name(source: TokenCountSource) -> &'static str {
    match source {
        TokenCountSource::Usage => "usage",
        TokenCountSource::TokenIds => "token_ids",
        TokenCountSource::Chunks => "chunks",
        TokenCountSource::UsageShare => "usage_share",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::metrics::Anomalies;

    const MS: u64 = 1_000_000;

    fn at_ms(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000_000 * MS + ms * MS)
    }

    fn times(submitted: u64, dispatched: u64, completed: u64) -> RequestTimes {
        RequestTimes { submitted: at_ms(submitted), dispatched: at_ms(dispatched), completed: at_ms(completed) }
    }

    /// Metrics consistent with `times`, `n` output tokens, first token `ttft` ms after submit.
    pub(crate) fn metrics(t: &RequestTimes, ttft_ms: u64, n: u32) -> RequestMetrics {
        let latency = t.completed.saturating_since(t.submitted);
        let ttft = Duration::from_millis(ttft_ms);
        RequestMetrics {
            batch_wait: t.dispatched.saturating_since(t.submitted),
            latency,
            engine_queue: Some(Duration::from_micros(250)),
            ttft: Some(ttft),
            tpot: (n >= 2).then(|| latency.saturating_sub(ttft) / (n - 1)),
            latency_per_token: (n >= 1).then(|| latency / n),
            // Evenly spaced tokens after the first: n - 1 equal gaps.
            itl: if n >= 2 {
                vec![latency.saturating_sub(ttft) / (n - 1); (n - 1) as usize].into()
            } else {
                crate::metrics::Itl::default()
            },
            prompt_tokens: Some(16),
            output_tokens: Some(n),
            cached_tokens: Some(4),
            engine_scheduled: None,
            engine_first_token: None,
            engine_last_token: None,
            sent: None,
            endpoint: None,
            token_count_source: None,
            wire_batch: None,
            embedding_dims: None,
            client_token_times: None,
            anomalies: Anomalies::default(),
        }
    }

    /// A hand-built benchmark: 1 s window, 4 completions, one error, one cancellation, one
    /// request still running at the end. Shared by the report snapshot tests.
    pub(crate) fn sample_aggregator(name: &str) -> BenchmarkAggregator {
        let slo = Slo { ttft_ms: Some(50.0), latency_ms: Some(400.0), ..Slo::default() };
        let mut agg = BenchmarkAggregator::new(name).with_slo(&slo);
        agg.start(at_ms(0));
        for _ in 0..7 {
            agg.record_submitted();
        }
        let completions = [(0, 10, 110, 30, 8), (0, 10, 130, 35, 10), (100, 120, 400, 60, 20), (100, 120, 450, 70, 24)];
        for (s, d, c, ttft, n) in completions {
            let t = times(s, d, c);
            agg.record_completion(&metrics(&t, ttft, n), &t);
            agg.record_designed_cached(8, Some(16));
            // Each meant to arrive 1 ms before its submit.
            let intended = Timestamp::from_nanos(at_ms(s).as_nanos() - MS);
            agg.record_client_timing(&ClientTiming::new(intended, &t, None));
        }
        agg.record_batch(at_ms(10), 2, FlushReason::Timeout, Duration::from_millis(100));
        agg.record_batch(at_ms(120), 2, FlushReason::Full, Duration::from_millis(280));
        agg.record_batch(at_ms(500), 1, FlushReason::Drain, Duration::from_millis(20));
        agg.record_error("engine_error", None, at_ms(500), at_ms(520));
        agg.record_cancelled(at_ms(600), at_ms(610));
        agg.record_incomplete(at_ms(900));
        agg
    }

    pub(crate) fn sample_result() -> BenchmarkResult {
        sample_aggregator("throughput").finish(at_ms(1000))
    }

    #[test]
    fn slo_attainment_and_goodput() {
        let r = sample_result();
        // Met: the first two (ttft 30 and 35 ms, latency 110 and 130 ms). Missed: ttft 60 and 70 ms.
        // The error is judged and misses; the cancelled and the unfinished request are not judged.
        let slo = r.slo.clone().expect("an SLO was set");
        assert_eq!((slo.judged, slo.met, slo.unmeasurable), (5, 2, 0));
        assert_eq!(slo.attainment, Some(0.4));
        assert_eq!(slo.goodput_requests_per_s, Some(2.0));
        assert_eq!(slo.goodput_output_tokens_per_s, Some(18.0));
        assert_eq!(r.metric("slo_attainment"), Some(0.4));

        // An objective whose metric is absent: unmeasurable, not met.
        let itl = Slo { itl_ms: Some(1000.0), ..Slo::default() };
        let mut agg = BenchmarkAggregator::new("itl").with_slo(&itl);
        agg.start(at_ms(0));
        let t = times(0, 1, 10);
        let mut m = metrics(&t, 5, 4);
        agg.record_submitted();
        agg.record_completion(&m, &t);
        m.itl.clear();
        agg.record_submitted();
        agg.record_completion(&m, &t);
        let slo = agg.finish(at_ms(10)).slo.unwrap();
        assert_eq!((slo.judged, slo.met, slo.unmeasurable, slo.attainment), (2, 1, 1, Some(0.5)));

        let none = BenchmarkAggregator::new("none").with_slo(&Slo::default()).finish(at_ms(1));
        assert_eq!((none.slo.clone(), none.metric("slo_attainment")), (None, None), "no objective, no SLO result");
    }

    #[test]
    fn sample_counts_rates_and_concurrency() {
        let r = sample_result();
        assert_eq!(r.counts.lost, 0);
        assert_eq!(
            (r.counts.submitted, r.counts.completed, r.counts.errors, r.counts.cancelled, r.counts.incomplete),
            (7, 4, 1, 1, 1)
        );
        assert_eq!(r.counts.errors_by_kind, BTreeMap::from([("engine_error".to_string(), 1)]));
        assert_eq!(r.duration_s, 1.0);
        assert_eq!(r.requests_per_s, Some(4.0));
        assert_eq!(r.output_tokens_per_s, Some(62.0));
        assert_eq!(r.input_tokens_per_s, Some(64.0));
        assert_eq!(r.total_tokens_per_s, Some(126.0));
        // In flight: 110 + 130 + 300 + 350 + 20 + 10 + 100 ms over 1000 ms.
        assert_eq!(r.concurrency_mean, Some(1.02));
        assert_eq!(r.batching.batches, 3);
        assert_eq!(r.batching.batch_size_histogram, BTreeMap::from([(1, 1), (2, 2)]));
        assert_eq!(r.batching.batch_size_mean, Some(5.0 / 3.0));
        assert_eq!(r.distributions.latency.count, 4);
        assert_eq!(r.distributions.generate.count, 3);
        assert_eq!(r.distributions.itl.count, 7 + 9 + 19 + 23, "one ITL sample per gap");
        assert_eq!(r.distributions.tpot.count, 4, "one TPOT sample per request");
    }

    #[test]
    fn time_series_adds_up_to_the_totals() {
        let r = sample_result();
        let s = &r.time_series;
        // A 1 s window: 1000 intervals of 1 ms.
        assert_eq!((s.interval_s, s.len()), (0.001, 1000));
        assert_eq!(s.completed.iter().sum::<u64>(), r.counts.completed);
        assert_eq!(s.output_tokens.iter().sum::<u64>(), r.tokens.output);
        assert_eq!(s.errors.iter().sum::<u64>(), r.counts.errors);
        assert_eq!(s.batches.iter().sum::<u64>(), r.batching.batches);
        assert_eq!((s.completed[109], s.output_tokens[109], s.errors[519]), (1, 8, 1), "by end time");
        assert_eq!((s.batch_size_mean[9], s.batch_size_mean[499]), (Some(2.0), Some(1.0)));
        let weighted: f64 =
            s.concurrency.iter().enumerate().map(|(i, c)| c.unwrap() * s.interval_len_s(i, r.duration_s)).sum();
        assert!((weighted / r.duration_s - r.concurrency_mean.unwrap()).abs() < 1e-9, "{weighted}");
        // Requests submitted at 0 and 100 ms, in flight until 110..450 ms; the incomplete one from 900 ms.
        assert_eq!(
            (s.concurrency[0], s.concurrency[105], s.concurrency[200], s.concurrency[950]),
            (Some(2.0), Some(4.0), Some(2.0), Some(1.0))
        );
    }

    /// One row: requests as `(submitted_ms, ended_ms)`, window, expected mean concurrency.
    fn check_concurrency(requests: &[(u64, u64)], window: (u64, u64), expected: Option<f64>) {
        let mut agg = BenchmarkAggregator::new("c");
        agg.start(at_ms(window.0));
        for &(s, e) in requests {
            agg.record_submitted();
            agg.record_error("x", None, at_ms(s), at_ms(e));
        }
        let r = agg.finish(at_ms(window.1));
        assert_eq!(r.concurrency_mean, expected, "{requests:?} in {window:?}");
    }

    #[test]
    fn concurrency_is_time_weighted_and_clipped_to_the_window() {
        check_concurrency(&[], (0, 100), Some(0.0));
        check_concurrency(&[(0, 100)], (0, 100), Some(1.0));
        check_concurrency(&[(0, 50), (50, 100)], (0, 100), Some(1.0));
        check_concurrency(&[(0, 100), (0, 100), (0, 100), (0, 100)], (0, 100), Some(4.0));
        check_concurrency(&[(0, 25)], (0, 100), Some(0.25));
        // Submitted before the window opened: only the part inside counts.
        check_concurrency(&[(0, 150)], (100, 200), Some(0.5));
        // Ended after `finish`'s time: the window stretches to cover it.
        check_concurrency(&[(0, 200)], (0, 100), Some(1.0));
        // An empty window has no concurrency.
        check_concurrency(&[], (100, 100), None);
    }

    #[test]
    fn incomplete_requests_are_in_flight_until_the_end() {
        let mut agg = BenchmarkAggregator::new("i");
        agg.start(at_ms(0));
        agg.record_submitted();
        agg.record_submitted();
        agg.record_incomplete(at_ms(50));
        agg.record_incomplete(at_ms(0));
        let r = agg.finish(at_ms(100));
        assert_eq!(r.concurrency_mean, Some(1.5));
        assert_eq!(r.counts.lost, 0);
    }

    #[test]
    fn lost_counts_unaccounted_requests_either_way() {
        let mut agg = BenchmarkAggregator::new("l");
        agg.record_submitted();
        agg.record_submitted();
        agg.record_cancelled(at_ms(0), at_ms(1));
        assert_eq!(agg.clone().finish(at_ms(10)).counts.lost, 1);
        agg.record_cancelled(at_ms(0), at_ms(1));
        agg.record_cancelled(at_ms(0), at_ms(1));
        assert_eq!(agg.finish(at_ms(10)).counts.lost, -1);
    }

    #[test]
    fn empty_benchmark_has_no_rates_or_percentiles() {
        let r = BenchmarkAggregator::new("empty").finish(at_ms(5));
        assert_eq!(r.duration_s, 0.0);
        assert_eq!((r.requests_per_s, r.concurrency_mean, r.batching.batch_size_mean), (None, None, None));
        assert_eq!(r.metric("ttft_p99_ms"), None);
        assert_eq!(r.metric("completed"), Some(0.0));
    }

    #[test]
    fn anomalies_and_missing_optional_metrics() {
        let mut agg = BenchmarkAggregator::new("a");
        agg.start(at_ms(0));
        let t = times(0, 1, 10);
        let mut m = metrics(&t, 5, 1);
        m.ttft = None;
        m.anomalies.first_token_before_arrival = true;
        m.anomalies.non_finite = true;
        agg.record_submitted();
        agg.record_completion(&m, &t);
        let r = agg.finish(at_ms(10));
        assert_eq!(r.anomalies.requests, 1);
        assert_eq!(
            (r.anomalies.non_finite, r.anomalies.first_token_before_arrival, r.anomalies.last_before_first),
            (1, 1, 0)
        );
        assert_eq!(r.distributions.ttft.count, 0);
        assert_eq!(r.distributions.itl.count, 0);
        assert_eq!(r.distributions.tpot.count, 0);
        assert_eq!(r.distributions.latency.count, 1);
    }
}
