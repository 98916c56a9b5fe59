//! `mapper`: `map_request` on arbitrary engine stats never panics, every duration it gives is
//! plausible, and inconsistent inputs are flagged instead of silently dropped or believed.

use arbitrary::Arbitrary;
use batchlab::batcher::RequestTimes;
use batchlab::engine::{ClockDomain, EngineOutput, EngineStats, FinishReason};
use batchlab::metrics::{RequestMetrics, WallAnchor, map_request};
use batchlab::time::Timestamp;

#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    pub submitted: u64,
    pub dispatch_after: u32,
    pub complete_after: u64,
    /// Use `raw_times` as given (possibly out of order) instead of submitted ≤ dispatched ≤ completed.
    pub raw_times: Option<(u64, u64)>,
    pub arrival_wall: Option<Secs>,
    pub queued: Option<Secs>,
    pub scheduled: Option<Secs>,
    /// An HTTP engine's send time.
    pub sent: Option<Secs>,
    pub first_token: Option<Secs>,
    pub last_token: Option<Secs>,
    pub output_tokens: Option<u32>,
    pub output_token_ids: Option<u16>,
    pub prompt_tokens: Option<u32>,
    pub foreign: bool,
    pub anchor: Option<(Secs, u64)>,
    pub token_times: Option<TokenTimes>,
}

/// Per-token times as an engine may report them.
#[derive(Arbitrary, Debug, Clone)]
pub enum TokenTimes {
    /// One per generated token (at most 4096), evenly spaced from the first token's time to the
    /// last's: consistent whenever those two are.
    Even,
    /// As given: any count, any order.
    Raw(Vec<Secs>),
}

/// A seconds value as an engine may report it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Secs {
    Raw(f64),
    /// Nanoseconds after (or before, if negative) our submit: a plausible reading.
    NearSubmit(i32),
    /// Nanoseconds after (or before) our completion.
    NearCompletion(i32),
    Nan,
    Inf,
    NegInf,
    Huge,
    Negative(u16),
}

impl Secs {
    fn value(self, times: &RequestTimes) -> f64 {
        let near = |t: Timestamp, delta: i32| (t.as_nanos() as f64 + f64::from(delta)) / 1e9;
        match self {
            Secs::Raw(v) => v,
            Secs::NearSubmit(d) => near(times.submitted, d),
            Secs::NearCompletion(d) => near(times.completed, d),
            Secs::Nan => f64::NAN,
            Secs::Inf => f64::INFINITY,
            Secs::NegInf => f64::NEG_INFINITY,
            Secs::Huge => 1e300,
            Secs::Negative(n) => -f64::from(n) - 1e-9,
        }
    }
}

/// The request as `map_request` sees it.
pub struct Case {
    pub times: RequestTimes,
    pub output: EngineOutput,
    pub domain: ClockDomain,
    pub anchor: Option<WallAnchor>,
}

impl Input {
    pub fn case(&self) -> Case {
        let times = match self.raw_times {
            Some((dispatched, completed)) => RequestTimes {
                submitted: Timestamp::from_nanos(self.submitted),
                dispatched: Timestamp::from_nanos(dispatched),
                completed: Timestamp::from_nanos(completed),
            },
            None => {
                // Keep room for offsets so that the order submitted ≤ dispatched ≤ completed holds.
                let submitted = self.submitted >> 2;
                let dispatched = submitted + u64::from(self.dispatch_after);
                RequestTimes {
                    submitted: Timestamp::from_nanos(submitted),
                    dispatched: Timestamp::from_nanos(dispatched),
                    completed: Timestamp::from_nanos(dispatched + (self.complete_after >> 2)),
                }
            }
        };
        let secs = |s: Option<Secs>| s.map(|s| s.value(&times));
        let generated = self.output_tokens.or(self.output_token_ids.map(u32::from));
        let token_ts = match &self.token_times {
            None => None,
            Some(TokenTimes::Raw(v)) => Some(v.iter().map(|s| s.value(&times)).collect()),
            Some(TokenTimes::Even) => match (secs(self.first_token), secs(self.last_token), generated) {
                (Some(f), Some(l), Some(n)) if n >= 1 => {
                    let n = n.min(4096) as usize;
                    let mut ts: Vec<f64> =
                        (0..n).map(|i| if n == 1 { f } else { f + (l - f) * i as f64 / (n - 1) as f64 }).collect();
                    if n >= 2 {
                        ts[n - 1] = l;
                    }
                    Some(ts)
                }
                _ => None,
            },
        };
        let mut stats = EngineStats::default();
        stats.arrival_wall = secs(self.arrival_wall);
        stats.queued_ts = secs(self.queued);
        stats.scheduled_ts = secs(self.scheduled);
        stats.sent_ts = secs(self.sent);
        stats.first_token_ts = secs(self.first_token);
        stats.last_token_ts = secs(self.last_token);
        stats.token_ts = token_ts;
        let output = EngineOutput::new(None, FinishReason::Length)
            .with_prompt_tokens(self.prompt_tokens)
            .with_output_tokens(self.output_tokens)
            .with_output_token_ids(self.output_token_ids.map(|n| vec![7; usize::from(n)]))
            .with_stats(stats);
        let domain = if self.foreign { ClockDomain::Foreign } else { ClockDomain::Monotonic };
        let anchor = self
            .anchor
            .map(|(wall, mono)| WallAnchor { wall_secs: wall.value(&times), mono: Timestamp::from_nanos(mono) });
        Case { times, output, domain, anchor }
    }
}

pub fn check(input: &Input) {
    let case = input.case();
    let m = map_request(&case.times, &case.output, case.domain, case.anchor);
    check_metrics(&case, &m);
}

/// The properties every mapping must have. Panics with the case on a violation.
pub fn check_metrics(case: &Case, m: &RequestMetrics) {
    let t = &case.times;
    let s = &case.output.stats;
    let n = case.output.generated_tokens();
    let ordered = t.submitted <= t.dispatched && t.dispatched <= t.completed;

    // Our own clock needs no engine input.
    assert_eq!(m.latency, t.completed.saturating_since(t.submitted));
    if ordered {
        assert!(m.batch_wait <= m.latency, "batch_wait {:?} > latency {:?}", m.batch_wait, m.latency);
    }
    assert_eq!(m.output_tokens, n);
    assert_eq!(m.anomalies.token_count_mismatch, case.output.token_count_mismatch());
    if n == Some(0) {
        assert!(case.output.output_token_ids.as_ref().is_none_or(Vec::is_empty), "a count of 0 next to token ids");
    }
    assert_eq!(m.prompt_tokens, case.output.prompt_tokens);

    // Durations that must fit inside the request's latency.
    if let Some(ttft) = m.ttft {
        assert!(ttft <= m.latency, "ttft {ttft:?} > latency {:?}", m.latency);
    }
    if let Some(tpot) = m.tpot {
        let n = n.expect("tpot without a token count");
        assert!(n >= 2, "tpot with {n} tokens");
        let ttft = m.ttft.expect("tpot without ttft");
        // The last token is at submit + ttft + tpot × (n − 1) (rounded down): before completion.
        let span = tpot.checked_mul(n - 1).expect("tpot × (n − 1) overflows");
        assert!(ttft + span <= m.latency, "last token after completion: ttft {ttft:?} + {span:?} > {:?}", m.latency);
    }
    match (m.latency_per_token, n) {
        (Some(latency_per_token), Some(n)) => {
            assert!(n >= 1);
            assert!(
                latency_per_token.checked_mul(n).is_some_and(|total| total <= m.latency),
                "latency_per_token {latency_per_token:?} × {n}"
            );
        }
        (None, Some(n)) => assert_eq!(n, 0, "latency_per_token missing with {n} tokens"),
        (Some(_), None) => panic!("latency_per_token without a token count"),
        (None, None) => {}
    }

    // Per-gap ITL: one gap per token after the first, only with a TTFT, never longer in total than
    // the request, and only from per-token times in order.
    if !m.itl.is_empty() {
        let n = n.expect("itl without a token count");
        assert_eq!(m.itl.len() as u64, u64::from(n) - 1, "itl gaps for {n} tokens");
        assert!(m.ttft.is_some(), "itl without ttft");
        let total: std::time::Duration = m.itl.iter().sum();
        assert!(total <= m.latency, "itl gaps {total:?} longer than the request {:?}", m.latency);
        let tokens = s.token_ts.as_deref().expect("itl without per-token times");
        assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "itl from out-of-order token times {tokens:?}");
    }
    if s.token_ts.is_none() {
        assert!(m.itl.is_empty() && !m.anomalies.token_times_inconsistent, "itl without per-token times");
    }

    // A field that is NaN, infinite or negative is always flagged, whatever the clock domain.
    let fields = [s.arrival_wall, s.queued_ts, s.scheduled_ts, s.first_token_ts, s.last_token_ts, s.sent_ts];
    if fields.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
        assert!(m.anomalies.non_finite, "a non-finite or negative stat was not flagged: {s:?} → {:?}", m.anomalies);
    }

    if case.domain == ClockDomain::Monotonic {
        check_monotonic(case, m, ordered);
    }
}

/// On our own clock the mapping can be predicted exactly: the engine times are ours.
fn check_monotonic(case: &Case, m: &RequestMetrics, ordered: bool) {
    let t = &case.times;
    let s = &case.output.stats;
    // 0 is "unset"; a queued or scheduled time outside dispatch … completion (± the tolerance)
    // is impossible: both are missing, and flagged.
    let ts = |v: Option<f64>| v.filter(|v| *v != 0.0).and_then(Timestamp::from_secs_f64);
    let tolerance = batchlab::metrics::mapper::TIMESTAMP_TOLERANCE.as_nanos() as u64;
    let (earliest, latest) =
        (t.dispatched.as_nanos().saturating_sub(tolerance), t.completed.as_nanos().saturating_add(tolerance));
    let possible = |x: Option<Timestamp>| x.filter(|x| (earliest..=latest).contains(&x.as_nanos()));
    let (queued, scheduled) = (possible(ts(s.queued_ts)), possible(ts(s.scheduled_ts)));
    let sent = possible(ts(s.sent_ts));
    let (first, last) = (ts(s.first_token_ts), ts(s.last_token_ts));
    let zero = [s.queued_ts, s.scheduled_ts, s.first_token_ts, s.last_token_ts, s.sent_ts].contains(&Some(0.0));
    let impossible = zero || queued != ts(s.queued_ts) || scheduled != ts(s.scheduled_ts) || sent != ts(s.sent_ts);
    // TTFT runs from the send, where there is a possible one (never before our submit).
    let ttft_from = sent.map_or(t.submitted, |sent| sent.max(t.submitted));
    assert_eq!(m.anomalies.impossible_timestamp, impossible, "{s:?} {t:?}");

    let scheduled_before_queued = matches!((queued, scheduled), (Some(q), Some(s)) if s < q);
    assert_eq!(m.anomalies.scheduled_before_queued, scheduled_before_queued);
    if let (Some(q), Some(s)) = (queued, scheduled) {
        assert_eq!(m.engine_queue, s.checked_since(q));
    } else {
        assert_eq!(m.engine_queue, None);
    }
    if let Some(f) = first {
        let before_arrival = f < ttft_from || queued.is_some_and(|q| f < q);
        assert_eq!(m.anomalies.first_token_before_arrival, before_arrival, "{s:?}");
    }
    if let (Some(f), Some(l)) = (first, last) {
        assert_eq!(m.anomalies.last_before_first, l < f, "{s:?}");
    }
    let late = |x: Option<Timestamp>| x.is_some_and(|x| x > t.completed);
    if ordered && (late(first) || late(last)) {
        assert!(m.anomalies.any(), "a token after completion was not flagged: {s:?} {t:?}");
    }

    // Consistent inputs give every metric they can define: nothing dropped without a flag.
    if ordered && !m.anomalies.any() {
        if let Some(f) = first {
            assert_eq!(m.ttft, f.checked_since(ttft_from));
        }
        if let (Some(f), Some(l), Some(n)) = (first, last, case.output.generated_tokens()) {
            assert_eq!(m.tpot.is_some(), n >= 2, "tpot missing on consistent input: {s:?}");
            // Evenly spread per-token times (up to 4096 tokens) give every gap, adding up exactly.
            if s.token_ts.as_ref().is_some_and(|ts| ts.len() == n as usize) && n >= 2 && m.ttft.is_some() {
                assert_eq!(m.itl.len(), n as usize - 1, "itl missing on consistent input: {s:?}");
                assert_eq!(m.itl.iter().sum::<std::time::Duration>(), l.saturating_since(f));
            }
        }
    }
}
