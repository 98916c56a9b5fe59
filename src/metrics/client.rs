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

/// One completed request's dispatch delay and client lag (module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClientTiming {
    /// Intended arrival → sent.
    pub dispatch_delay: Duration,
    /// (Intended arrival → submit) + (dispatch → sent).
    pub client_lag: Duration,
    /// Whether the send time was the engine's own (`sent_ts`), not the batch's dispatch.
    pub engine_sent: bool,
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
}

impl ClientTimings {
    /// Adds one completed request's timing.
    pub fn record(&mut self, t: &ClientTiming) {
        self.dispatch_delay.record(t.dispatch_delay);
        self.client_lag.record(t.client_lag);
        self.engine_sent += u64::from(t.engine_sent);
    }

    /// The summary.
    pub fn summary(&self) -> DispatchSummary {
        DispatchSummary {
            dispatch_delay: Percentiles::of(&self.dispatch_delay),
            client_lag: Percentiles::of(&self.client_lag),
            engine_sent: self.engine_sent,
        }
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
