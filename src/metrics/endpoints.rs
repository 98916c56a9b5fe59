//! Per-endpoint results, and how long the run took to recover when an endpoint began failing.
//!
//! A remote engine (an HTTP engine with several `urls`) says which endpoint served each request:
//! a completion's `EngineStats::endpoint`, a failure's `RemoteError::endpoint`. Each endpoint gets
//! its counts, its errors by kind and its latency and TTFT p50/p99. Memory is one small aggregate
//! per endpoint, whatever the number of requests.
//!
//! **Failure episodes and time to recover** (docs/report.md, "Endpoints"):
//! - an endpoint **begins failing** when a measured request fails on it (at the moment batchlab
//!   got the error) while it is not failing already: an episode begins;
//! - the episode **ends** when that endpoint completes a request sent after the episode began;
//!   until then every failure on it belongs to the same episode (a killed server's requests fail
//!   one after the other: one episode);
//! - the episode's **time to recover** is from its beginning to the completion of the first
//!   request, **on any endpoint**, that was sent after it began and completed (the first whose
//!   outcome batchlab got, at the time its generate returned): how long the run
//!   went without a success once the failure showed. It recovers as soon as the other endpoints
//!   serve requests sent after the failure, even if the failing endpoint never comes back. `None`
//!   when no such request completed within the benchmark.
//!
//! A request's send time is the engine's `sent_ts`, else its batch's dispatch.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::client::Percentiles;
use super::distribution::Distribution;
use crate::time::Timestamp;

/// One endpoint's part of a benchmark.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointResult {
    /// The endpoint (an HTTP engine's base URL).
    pub endpoint: String,
    /// Measured requests that ended on it: `completed + errors`.
    pub requests: u64,
    /// Those that completed.
    pub completed: u64,
    /// Those that failed, of any kind.
    pub errors: u64,
    /// Failures by kind (`connect_failed`, `http_5xx`, ...).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Latency (our submit → our completion) of its completed requests, ms.
    pub latency: Percentiles,
    /// TTFT of its completed requests, ms.
    pub ttft: Percentiles,
    /// When it failed and how long the run took to recover; `None` when it never failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<FailureEpisodes>,
}

/// An endpoint's failure episodes (module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FailureEpisodes {
    /// How many episodes: 1 for an endpoint that failed and stayed failed.
    pub episodes: u64,
    /// When the first began, in seconds after the benchmark's window opened.
    pub began_s: f64,
    /// The first episode's time to recover, in seconds; `None` when no request sent after it
    /// began completed.
    pub time_to_recover_s: Option<f64>,
    /// The longest time to recover of any episode that recovered, in seconds.
    pub time_to_recover_max_s: Option<f64>,
    /// An episode had not recovered when the benchmark ended.
    pub unrecovered: bool,
}

#[derive(Clone, Copy, Debug)]
struct Episode {
    began: Timestamp,
    /// The first completion, on any endpoint, of a request sent after `began`.
    recovered: Option<Timestamp>,
}

impl Episode {
    fn recovery(&self) -> Option<Duration> {
        self.recovered.map(|r| r.saturating_since(self.began))
    }
}

#[derive(Clone, Debug, Default)]
struct EndpointAggregate {
    completed: u64,
    errors: u64,
    errors_by_kind: BTreeMap<String, u64>,
    latency: Distribution,
    ttft: Distribution,
    /// The episode going on now.
    open: Option<Episode>,
    /// The first episode: its start, and its recovery once known.
    first: Option<Episode>,
    episodes: u64,
    longest_recovery: Option<Duration>,
}

impl EndpointAggregate {
    fn close(&mut self, episode: Episode) {
        if let Some(d) = episode.recovery() {
            self.longest_recovery = Some(self.longest_recovery.map_or(d, |l| l.max(d)));
        }
    }
}

/// Streams per-endpoint events into [`EndpointResult`]s: one aggregate per endpoint seen.
#[derive(Clone, Debug, Default)]
pub struct EndpointAggregator {
    endpoints: BTreeMap<String, EndpointAggregate>,
}

impl EndpointAggregator {
    /// Whether no endpoint was seen.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    fn entry(&mut self, endpoint: &str) -> &mut EndpointAggregate {
        if !self.endpoints.contains_key(endpoint) {
            self.endpoints.insert(endpoint.to_owned(), EndpointAggregate::default());
        }
        self.endpoints.get_mut(endpoint).expect("inserted above")
    }

    /// A request that `endpoint` completed at `completed`, sent at `sent`. It is the recovery of
    /// every episode (of any endpoint) that began before it was sent and has none yet, and it ends
    /// `endpoint`'s own episode when that began before it was sent.
    pub fn completion(
        &mut self,
        endpoint: &str,
        sent: Timestamp,
        completed: Timestamp,
        latency: Duration,
        ttft: Option<Duration>,
    ) {
        for e in self.endpoints.values_mut() {
            for episode in [&mut e.open, &mut e.first].into_iter().flatten() {
                if episode.began < sent && episode.recovered.is_none() {
                    episode.recovered = Some(completed);
                }
            }
        }
        let e = self.entry(endpoint);
        e.completed += 1;
        e.latency.record(latency);
        if let Some(ttft) = ttft {
            e.ttft.record(ttft);
        }
        if let Some(episode) = e.open.filter(|ep| ep.began < sent) {
            e.open = None;
            e.close(episode);
        }
    }

    /// A request that failed on `endpoint` with `kind` at `at`: an episode begins unless one is
    /// going on.
    pub fn error(&mut self, endpoint: &str, kind: &str, at: Timestamp) {
        let e = self.entry(endpoint);
        e.errors += 1;
        *e.errors_by_kind.entry(kind.to_owned()).or_default() += 1;
        if e.open.is_none() {
            let episode = Episode { began: at, recovered: None };
            e.open = Some(episode);
            e.episodes += 1;
            if e.first.is_none() {
                e.first = Some(episode);
            }
        }
    }

    /// The results, by endpoint name; failure times relative to `window_start`.
    pub fn finish(self, window_start: Timestamp) -> Vec<EndpointResult> {
        self.endpoints
            .into_iter()
            .map(|(endpoint, mut e)| {
                let unrecovered = e.open.is_some_and(|ep| ep.recovered.is_none());
                if let Some(open) = e.open.take() {
                    e.close(open);
                }
                let secs = |d: Duration| d.as_secs_f64();
                let failures = e.first.map(|first| FailureEpisodes {
                    episodes: e.episodes,
                    began_s: secs(first.began.saturating_since(window_start)),
                    time_to_recover_s: first.recovery().map(secs),
                    time_to_recover_max_s: e.longest_recovery.map(secs),
                    unrecovered,
                });
                EndpointResult {
                    endpoint,
                    requests: e.completed + e.errors,
                    completed: e.completed,
                    errors: e.errors,
                    errors_by_kind: e.errors_by_kind,
                    latency: Percentiles::of(&e.latency),
                    ttft: Percentiles::of(&e.ttft),
                    failures,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// `endpoint` completes a request sent at `sent` ms, done at `done` ms.
    fn ok(agg: &mut EndpointAggregator, endpoint: &str, sent: u64, done: u64) {
        agg.completion(endpoint, at(sent), at(done), ms(done - sent), Some(ms(1)));
    }

    fn by_name(results: &[EndpointResult], name: &str) -> EndpointResult {
        results.iter().find(|r| r.endpoint == name).cloned().unwrap_or_else(|| panic!("no endpoint {name}"))
    }

    #[test]
    fn a_dead_endpoint_recovers_when_another_serves_a_request_sent_after_the_failure() {
        let mut agg = EndpointAggregator::default();
        ok(&mut agg, "a", 0, 10);
        ok(&mut agg, "b", 0, 12);
        // b dies at 100 ms: its first failure starts the episode; later ones belong to it.
        agg.error("b", "stream_dropped", at(100));
        agg.error("b", "connect_failed", at(130));
        // a completes a request sent before the failure: not a recovery.
        ok(&mut agg, "a", 90, 140);
        // a completes one sent at 110 ms, after the failure: recovered at 170 ms, 70 ms after
        // (the first such outcome batchlab got; a later one does not change it).
        ok(&mut agg, "a", 110, 170);
        ok(&mut agg, "a", 120, 160);
        let results = agg.finish(at(0));
        let b = by_name(&results, "b");
        assert_eq!((b.requests, b.completed, b.errors), (3, 1, 2));
        assert_eq!(b.errors_by_kind, BTreeMap::from([("connect_failed".into(), 1), ("stream_dropped".into(), 1)]));
        let f = b.failures.expect("b failed");
        assert_eq!((f.episodes, f.began_s, f.unrecovered), (1, 0.1, false));
        assert_eq!(f.time_to_recover_s, Some(0.07));
        assert_eq!(f.time_to_recover_max_s, Some(0.07));
        let a = by_name(&results, "a");
        assert_eq!((a.requests, a.errors, a.failures), (4, 0, None));
        assert_eq!((a.latency.count, a.latency.max), (4, Some(60.0)));
        assert_eq!(a.ttft.p99, Some(1.0));
    }

    #[test]
    fn an_episode_ends_when_its_endpoint_serves_again_and_a_new_one_can_begin() {
        let mut agg = EndpointAggregator::default();
        agg.error("b", "http_5xx", at(100));
        // b itself serves a request sent after: recovered (20 ms) and the episode ends.
        ok(&mut agg, "b", 105, 120);
        agg.error("b", "http_429", at(200));
        // Nothing sent after 200 ms completes: the second episode is unrecovered.
        ok(&mut agg, "a", 150, 250);
        let f = by_name(&agg.finish(at(50)), "b").failures.expect("b failed");
        assert_eq!(f.episodes, 2);
        assert_eq!((f.began_s, f.time_to_recover_s, f.time_to_recover_max_s), (0.05, Some(0.02), Some(0.02)));
        assert!(f.unrecovered);
    }

    #[test]
    fn an_endpoint_that_never_recovers_has_no_time_to_recover() {
        let mut agg = EndpointAggregator::default();
        agg.error("only", "connect_failed", at(10));
        agg.error("only", "connect_failed", at(20));
        let r = agg.finish(at(0)).remove(0);
        assert_eq!((r.requests, r.completed, r.latency.count, r.latency.p50), (2, 0, 0, None));
        let f = r.failures.unwrap();
        assert_eq!((f.episodes, f.time_to_recover_s, f.time_to_recover_max_s, f.unrecovered), (1, None, None, true));
    }
}
