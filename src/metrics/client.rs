//! The client's own timing: how late batchlab sent each request against the load profile's
//! schedule (`dispatch_delay`), how much of that was the client falling behind (`client_lag`), and
//! the validity warning when it fell too far behind.
//!
//! Per completed request (docs/report.md, "Dispatch delay and client lag"):
//! - **intended arrival**: when the load profile meant the request to arrive (the run's step
//!   decides it, `run::step`): its time in the schedule for a rate or trace profile, or, when
//!   `max_concurrency` held it back, the outcome that freed its slot; for a closed loop
//!   (synchronous, concurrent, throughput) the outcome that freed its slot, or the step's start;
//! - **sent**: when it left batchlab: the engine's `sent_ts` where it gives one (an HTTP engine),
//!   else the dispatch of its batch;
//! - `dispatch_delay` = sent − intended. It includes the micro-batcher's wait for the batch to fill
//!   (`batch_wait`), which is by design;
//! - `client_lag` = (submit − intended) + (sent − dispatch): the same span without the batch's
//!   wait, so only what the client itself added: the run loop's reaction (a loop busy elsewhere
//!   submits late) and an engine's own delay between our dispatch and the send (a full connection
//!   pool).
//!
//! For an engine that sends requests itself (HTTP: it gives `sent_ts`), two more:
//! - `ttft_from_submit` = first token − submit: TTFT as the caller of batchlab sees it, the wait
//!   for the batch to fill and for a free connection included (`ttft` runs from the send);
//! - `wire_batch`: the prompts of the HTTP request that carried each request, next to its
//!   micro-batch's size. A micro-batch of different `max_tokens` goes out as several requests
//!   (one completions request has one `max_tokens`): the summary counts the HTTP requests, and
//!   [`WIRE_BATCH_WARNING`] says so when any request went out in a smaller one than its batch.
//!
//! A benchmark whose `client_lag` p99 is above [`CLIENT_LAG_P99_LIMIT`] ran behind its own load
//! profile: its offered load was not what the scenario says, and its latencies start later than
//! the profile meant. The result says so with a [`ValidityWarning`], as inference-perf and guidellm
//! report their schedule delay.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::distribution::Distribution;
use crate::batcher::RequestTimes;
use crate::time::Timestamp;

/// The most `client_lag` p99 a benchmark may have before it carries a [`ValidityWarning`]: 10 ms.
/// inference-perf's guidance is a median schedule delay under 10 ms (its `docs/loadgen.md`); this
/// holds the p99 to it, so a client that falls behind on one request in a hundred is reported.
pub const CLIENT_LAG_P99_LIMIT: Duration = Duration::from_millis(10);

/// The `kind` of the warning that the client fell behind its own schedule.
pub const CLIENT_LAG_WARNING: &str = "client_lag";

/// The `kind` of the warning that requests went out in HTTP requests smaller than their batches.
pub const WIRE_BATCH_WARNING: &str = "wire_batch";

/// One completed request's dispatch delay and client lag (module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClientTiming {
    /// Intended arrival → sent.
    pub dispatch_delay: Duration,
    /// (Intended arrival → submit) + (dispatch → sent).
    pub client_lag: Duration,
    /// Whether the send time was the engine's own (`sent_ts`), not the batch's dispatch.
    pub engine_sent: bool,
    /// Submit → first token, for an engine that sends itself (module docs).
    pub ttft_from_submit: Option<Duration>,
    /// The prompts of its HTTP request, and of its micro-batch, where the engine says.
    pub wire_batch: Option<(u32, usize)>,
}

impl ClientTiming {
    /// The timing of a request meant to arrive at `intended`, with our `times`, that the engine
    /// says it sent at `sent` (`None`: the batch's dispatch is the send). Never negative: a send
    /// before the dispatch, or a submit before the intended arrival, counts 0.
    pub fn new(intended: Timestamp, times: &RequestTimes, sent: Option<Timestamp>) -> Self {
        let sent_at = sent.unwrap_or(times.dispatched);
        ClientTiming {
            dispatch_delay: sent_at.saturating_since(intended),
            client_lag: times.submitted.saturating_since(intended) + sent_at.saturating_since(times.dispatched),
            engine_sent: sent.is_some(),
            ttft_from_submit: None,
            wire_batch: None,
        }
    }

    /// With what only an engine that sends itself knows: its first token's time (for
    /// `ttft_from_submit`, from `submitted`), and the prompts of the HTTP request that carried
    /// it, beside those of its micro-batch (`batch_size`).
    pub fn with_wire(
        self,
        submitted: Timestamp,
        first_token: Option<Timestamp>,
        wire_batch: Option<u32>,
        batch_size: usize,
    ) -> Self {
        if !self.engine_sent {
            return self;
        }
        ClientTiming {
            ttft_from_submit: first_token.map(|t| t.saturating_since(submitted)),
            wire_batch: wire_batch.map(|w| (w, batch_size)),
            ..self
        }
    }
}

/// p50, p99 and max of a timing, in milliseconds; `None` without samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median (nearest rank, as every distribution's).
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest sample (exact).
    pub max: Option<f64>,
}

impl Percentiles {
    /// The percentiles of `d`, with its precision (docs/report.md, "Distribution summaries").
    pub fn of(d: &Distribution) -> Self {
        let ms = |nanos: u64| nanos as f64 / 1e6;
        Percentiles {
            count: d.count(),
            p50: d.quantile_nanos(0.50).map(ms),
            p99: d.quantile_nanos(0.99).map(ms),
            max: d.max_nanos().map(ms),
        }
    }

    /// Whether it has no samples.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `p50`, `p99` or `max` by name.
    pub fn stat(&self, stat: &str) -> Option<f64> {
        match stat {
            "p50" => self.p50,
            "p99" => self.p99,
            "max" => self.max,
            _ => None,
        }
    }
}

/// A benchmark's dispatch delays and client lags, over its completed measured requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DispatchSummary {
    /// Intended arrival → sent.
    pub dispatch_delay: Percentiles,
    /// (Intended arrival → submit) + (dispatch → sent).
    pub client_lag: Percentiles,
    /// Requests whose send time was the engine's own `sent_ts` (the others': their batch's
    /// dispatch).
    pub engine_sent: u64,
    /// Submit → first token (an engine that sends itself; `ttft` runs from the send).
    #[serde(default, skip_serializing_if = "Percentiles::is_empty")]
    pub ttft_from_submit: Percentiles,
    /// The prompts per HTTP request as sent (an engine that says; `None` for the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_batch: Option<WireBatch>,
}

/// The prompts per request on the wire, over a benchmark's completed measured requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireBatch {
    /// HTTP requests (each of `k` prompts counts `1/k` for each of its prompts).
    pub http_requests: u64,
    /// Prompts per HTTP request: mean over the HTTP requests.
    pub mean: f64,
    /// The smallest HTTP request, in prompts.
    pub min: u32,
    /// The largest.
    pub max: u32,
    /// Requests whose HTTP request was smaller than their micro-batch.
    pub split_requests: u64,
}

/// A reason to doubt a benchmark's numbers, which the report shows beside them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidityWarning {
    /// What is wrong, as a stable name: `client_lag`.
    pub kind: String,
    /// What is wrong, for people, with the numbers.
    pub message: String,
}

/// Streams [`ClientTiming`]s into a [`DispatchSummary`] and its warning; constant memory.
#[derive(Clone, Debug, Default)]
pub struct ClientTimings {
    dispatch_delay: Distribution,
    client_lag: Distribution,
    engine_sent: u64,
    ttft_from_submit: Distribution,
    /// Requests with a wire batch, the sum of `1/k` over them (the HTTP requests), the smallest
    /// and largest `k`, those split from their batch, and their batches' sizes summed.
    wire_requests: u64,
    wire_http: f64,
    wire_min: u32,
    wire_max: u32,
    wire_split: u64,
    wire_batch_sizes: u64,
}

impl ClientTimings {
    /// Adds one completed request's timing.
    pub fn record(&mut self, t: &ClientTiming) {
        self.dispatch_delay.record(t.dispatch_delay);
        self.client_lag.record(t.client_lag);
        self.engine_sent += u64::from(t.engine_sent);
        if let Some(ttft) = t.ttft_from_submit {
            self.ttft_from_submit.record(ttft);
        }
        if let Some((wire, batch)) = t.wire_batch.filter(|(w, _)| *w > 0) {
            self.wire_min = if self.wire_requests == 0 { wire } else { self.wire_min.min(wire) };
            self.wire_max = self.wire_max.max(wire);
            self.wire_requests += 1;
            self.wire_http += 1.0 / f64::from(wire);
            self.wire_split += u64::from((wire as usize) < batch);
            self.wire_batch_sizes += batch as u64;
        }
    }

    /// The prompts per HTTP request, where the engine said.
    fn wire_batch(&self) -> Option<WireBatch> {
        if self.wire_requests == 0 {
            return None;
        }
        let http_requests = self.wire_http.round().max(1.0) as u64;
        Some(WireBatch {
            http_requests,
            mean: self.wire_requests as f64 / http_requests as f64,
            min: self.wire_min,
            max: self.wire_max,
            split_requests: self.wire_split,
        })
    }

    /// The summary.
    pub fn summary(&self) -> DispatchSummary {
        DispatchSummary {
            dispatch_delay: Percentiles::of(&self.dispatch_delay),
            client_lag: Percentiles::of(&self.client_lag),
            engine_sent: self.engine_sent,
            ttft_from_submit: Percentiles::of(&self.ttft_from_submit),
            wire_batch: self.wire_batch(),
        }
    }

    /// Every warning: [`ClientTimings::warning`], then the [`WIRE_BATCH_WARNING`] when requests
    /// went out in HTTP requests smaller than their micro-batches.
    pub fn warnings(&self) -> Vec<ValidityWarning> {
        let mut warnings: Vec<ValidityWarning> = self.warning().into_iter().collect();
        if let Some(wire) = self.wire_batch().filter(|w| w.split_requests > 0) {
            let batch_mean = self.wire_batch_sizes as f64 / self.wire_requests as f64;
            warnings.push(ValidityWarning {
                kind: WIRE_BATCH_WARNING.to_owned(),
                message: format!(
                    "{} of {} requests went out in HTTP requests smaller than their micro-batch: {} HTTP requests of \
                     {:.2} prompts on average (min {}, max {}), for micro-batches of {:.2} per request; one \
                     completions request carries one `max_tokens` (and seed, temperature), so a batch of different \
                     `max_tokens` is split (docs/http.md, \"Wire batches\")",
                    wire.split_requests,
                    self.wire_requests,
                    wire.http_requests,
                    wire.mean,
                    wire.min,
                    wire.max,
                    batch_mean
                ),
            });
        }
        warnings
    }

    /// The [`CLIENT_LAG_WARNING`] when the client lag's p99 is above [`CLIENT_LAG_P99_LIMIT`].
    pub fn warning(&self) -> Option<ValidityWarning> {
        let p99 = self.client_lag.quantile_nanos(0.99)?;
        let limit = crate::time::duration_nanos(CLIENT_LAG_P99_LIMIT);
        (p99 > limit).then(|| {
            let ms = |nanos: u64| nanos as f64 / 1e6;
            ValidityWarning {
                kind: CLIENT_LAG_WARNING.to_owned(),
                message: format!(
                    "the client fell behind its own schedule: client lag p99 {:.2} ms (max {:.2} ms) is over {} ms, \
                     so the load offered was lower than the profile's and latencies start late",
                    ms(p99),
                    self.client_lag.max_nanos().map_or(0.0, ms),
                    CLIENT_LAG_P99_LIMIT.as_millis()
                ),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    fn times(submitted: u64, dispatched: u64, completed: u64) -> RequestTimes {
        RequestTimes { submitted: at(submitted), dispatched: at(dispatched), completed: at(completed) }
    }

    /// One row: intended, (submit, dispatch, complete), the engine's send, and the expected
    /// dispatch delay and client lag in ms.
    fn check(intended: u64, t: (u64, u64, u64), sent: Option<u64>, expected: (u64, u64)) {
        let timing = ClientTiming::new(at(intended), &times(t.0, t.1, t.2), sent.map(at));
        let got = (timing.dispatch_delay.as_millis() as u64, timing.client_lag.as_millis() as u64);
        assert_eq!(got, expected, "intended {intended}, times {t:?}, sent {sent:?}");
        assert_eq!(timing.engine_sent, sent.is_some());
    }

    #[test]
    fn the_batch_wait_is_dispatch_delay_but_not_client_lag() {
        // On time, 20 ms waiting for the batch to fill, sent at dispatch: no lag.
        check(0, (0, 20, 50), None, (20, 0));
        // Submitted 5 ms late (the loop was busy): lag 5.
        check(0, (5, 20, 50), None, (20, 5));
        // The engine sent 7 ms after our dispatch (no free connection): lag 7 more.
        check(0, (5, 20, 50), Some(27), (27, 12));
        // A send time before the dispatch counts 0, never negative.
        check(0, (0, 20, 50), Some(15), (15, 0));
        // A submit before the intended arrival (a trace's clock rounding) counts 0.
        check(10, (8, 20, 50), None, (10, 0));
    }

    #[test]
    fn a_p99_over_the_limit_warns_and_one_under_does_not() {
        let mut ok = ClientTimings::default();
        let mut late = ClientTimings::default();
        for i in 0..100u64 {
            // 98 requests on time, 2 lagging 30 ms: p99 is the 99th sample, 30 ms.
            let lag = if i >= 98 { 30 } else { 0 };
            late.record(&ClientTiming::new(at(0), &times(lag, lag, lag + 5), None));
            // 10 ms is the limit itself: not over it.
            ok.record(&ClientTiming::new(at(0), &times(10, 10, 15), None));
        }
        assert_eq!(ok.warning(), None);
        let warning = late.warning().expect("p99 30 ms > 10 ms");
        assert_eq!(warning.kind, "client_lag");
        assert!(
            warning.message.contains("client lag p99 30.00 ms (max 30.00 ms) is over 10 ms"),
            "{}",
            warning.message
        );
        let s = late.summary();
        assert_eq!((s.client_lag.count, s.client_lag.p50, s.client_lag.p99), (100, Some(0.0), Some(30.0)));
        assert_eq!(s.dispatch_delay.max, Some(30.0));
        assert_eq!(ClientTimings::default().warning(), None, "no samples, no warning");
        assert_eq!(ClientTimings::default().summary(), DispatchSummary::default());
    }
}
