//! Engine timestamps → per-request timings. A pure function.
//!
//! Definitions (all durations, never negative; absent when an input is missing or inconsistent,
//! never a made-up zero):
//! - `batch_wait`: our submit → our dispatch of its batch.
//! - `engine_queue`: engine `queued_ts` → `scheduled_ts`.
//! - `ttft`: our submit → engine `first_token_ts`: what the caller waited for the first token;
//!   for an engine that sends requests over the network (it gives `sent_ts`), from the moment it
//!   sent the request, as the field's clients time it (the wait before, batching included, is
//!   the run's `dispatch_delay`).
//! - `tpot`: vLLM's time per output token, the first excluded:
//!   `(last_token_ts − first_token_ts) / (n − 1)`, for `n ≥ 2` generated tokens.
//! - `latency_per_token`: guidellm's "TPOT", the first token **included**: `latency / n`, for `n ≥ 1`.
//! - `itl`: the gaps between consecutive tokens (`n − 1` samples per request, vLLM's per-gap
//!   definition), from the engine's per-token times (`token_ts`); empty when the engine gives none.
//! - `latency`: our submit → our completion (end to end, as the caller saw it).
//! - `sent`: when the request left batchlab, as the engine says (`sent_ts`, an HTTP engine's send);
//!   `metrics::client` times the dispatch delay from it.
//!
//! Impossible engine timestamps are missing ones, flagged `impossible_timestamp`: a `*_ts` of
//! exactly 0 (vLLM's "unset"), and, on our own clock, a `queued_ts` or `scheduled_ts` before our
//! dispatch of the batch or after our completion (beyond [`TIMESTAMP_TOLERANCE`]): the engine
//! cannot have queued (or sent) a request it did not have yet. The same holds for `sent_ts`. Token times have their own checks
//! (`first_token_before_arrival`, `token_after_completion`).
//!
//! Generated tokens are the engine's count, or the token ids' when the count is missing or 0 (as
//! guidellm does); a count that disagrees with the ids is flagged `token_count_mismatch`.
//!
//! Engines whose [`ClockDomain`] is `Monotonic` (vLLM, the simulator) report `*_ts` on our clock,
//! so they map exactly. For a `Foreign` clock the engine timeline is shifted so its `queued_ts`
//! lands on its wall-clock `arrival_wall`, converted to our clock with [`WallAnchor`].

use std::time::Duration;

use serde::Serialize;

use crate::batcher::RequestTimes;
use crate::engine::{ClockDomain, EngineOutput, EngineStats, StepTokens, TokenCountSource};
use crate::time::{Timestamp, WallAnchor};

/// Inconsistencies found in one request's stats. Counted in reports, never a crash.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Anomalies {
    /// A `*_ts` or `arrival_wall` field was NaN, infinite or negative.
    pub non_finite: bool,
    /// The first token came before our submit (or before the engine queued the request).
    pub first_token_before_arrival: bool,
    /// The last token came before the first.
    pub last_before_first: bool,
    /// The engine scheduled the request before it queued it.
    pub scheduled_before_queued: bool,
    /// The first or the last token came after our completion time.
    pub token_after_completion: bool,
    /// A `*_ts` was 0, or a queued or scheduled time lay outside our dispatch … completion; it
    /// was taken as missing (see the module docs).
    pub impossible_timestamp: bool,
    /// The engine's `output_tokens` and its number of `output_token_ids` differ.
    pub token_count_mismatch: bool,
    /// The per-token times go backwards, lie outside `[first_token_ts, last_token_ts]`, or are
    /// not one per generated token.
    pub token_times_inconsistent: bool,
}

impl Anomalies {
    /// Whether any anomaly was found.
    pub fn any(&self) -> bool {
        self.non_finite
            || self.first_token_before_arrival
            || self.last_before_first
            || self.scheduled_before_queued
            || self.token_after_completion
            || self.impossible_timestamp
            || self.token_count_mismatch
            || self.token_times_inconsistent
    }
}

/// Per-request timings. See the module docs for each definition.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestMetrics {
    /// Our submit to our dispatch of its batch.
    pub batch_wait: Duration,
    /// Our submit to our completion.
    pub latency: Duration,
    /// Engine `queued_ts` to `scheduled_ts`.
    pub engine_queue: Option<Duration>,
    /// Our submit to the engine's `first_token_ts`.
    pub ttft: Option<Duration>,
    /// vLLM's TPOT: `(last − first) / (n − 1)`; needs 2 or more tokens.
    pub tpot: Option<Duration>,
    /// guidellm's TPOT: `latency / n` over `n >= 1` generated tokens.
    pub latency_per_token: Option<Duration>,
    /// Every gap between consecutive tokens, in order; empty without per-token times.
    pub itl: Itl,
    /// Prompt length in tokens, as the engine counted it.
    pub prompt_tokens: Option<u32>,
    /// Generated tokens, as the engine counted them.
    pub output_tokens: Option<u32>,
    /// Prompt tokens the engine served from its prefix cache, as it reported them.
    pub cached_tokens: Option<u32>,
    /// The engine's `scheduled_ts` on our clock, as sent (not judged): for calibration fits.
    pub engine_scheduled: Option<Timestamp>,
    /// The engine's `first_token_ts` on our clock, as sent (not judged).
    pub engine_first_token: Option<Timestamp>,
    /// The engine's `last_token_ts` on our clock, as sent (not judged).
    pub engine_last_token: Option<Timestamp>,
    /// When the request left batchlab, on our clock: the engine's `sent_ts` (judged like
    /// `queued_ts`); `None` when the engine gave none.
    pub sent: Option<Timestamp>,
    /// The endpoint that served the request (an HTTP engine's base URL), as the engine says.
    pub endpoint: Option<String>,
    /// Where the engine's token counts came from, when it says.
    pub token_count_source: Option<TokenCountSource>,
    /// The prompts of the HTTP request that carried it, as the engine says.
    pub wire_batch: Option<u32>,
    /// The embedding's dimensions, for a pooling request (no generated tokens); `None` for a
    /// generation.
    pub embedding_dims: Option<u32>,
    /// When each token arrived, on our clock, for an engine that times on the client's side (it
    /// gives `sent_ts`: the HTTP engine) and only when the times are consistent (those `itl`
    /// comes from); `None` otherwise. requests.jsonl's `token_ns`.
    pub client_token_times: Option<Vec<Timestamp>>,
    /// Inconsistencies in the engine's stats; the affected timings are `None`.
    pub anomalies: Anomalies,
}

impl RequestMetrics {
    /// The request's longest gap between two tokens (what `[slo] itl_ms` judges); `None`
    /// without per-token times.
    pub fn itl_max(&self) -> Option<Duration> {
        self.itl.max()
    }
}

/// A request's gaps between consecutive tokens, in order, kept as runs of equal gaps: a decode
/// step's length is every running sequence's gap, and steps of the same load last the same, so a
/// request's tokens are a few such runs, which the aggregation records at once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Itl {
    /// `(gap, how many in a row)`; neighbours differ, counts are at least 1.
    runs: Vec<(Duration, u64)>,
}

impl Itl {
    /// Appends one gap.
    pub fn push(&mut self, gap: Duration) {
        self.push_n(gap, 1);
    }

    /// Appends `count` equal gaps.
    pub fn push_n(&mut self, gap: Duration, count: u64) {
        match self.runs.last_mut() {
            _ if count == 0 => {}
            Some((last, n)) if *last == gap => *n += count,
            _ => self.runs.push((gap, count)),
        }
    }

    /// The runs of equal gaps, in order: `(gap, count)`, neighbours differ.
    pub fn runs(&self) -> &[(Duration, u64)] {
        &self.runs
    }

    /// Gaps (samples).
    pub fn len(&self) -> usize {
        self.runs.iter().map(|&(_, n)| n as usize).sum()
    }

    /// Whether there is no gap.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Every gap, in order.
    pub fn iter(&self) -> impl Iterator<Item = Duration> + '_ {
        self.runs.iter().flat_map(|&(gap, n)| std::iter::repeat_n(gap, n as usize))
    }

    /// The longest gap.
    pub fn max(&self) -> Option<Duration> {
        self.runs.iter().map(|&(gap, _)| gap).max()
    }

    /// Drops every gap.
    pub fn clear(&mut self) {
        self.runs.clear();
    }
}

impl FromIterator<Duration> for Itl {
    fn from_iter<I: IntoIterator<Item = Duration>>(gaps: I) -> Self {
        let mut itl = Itl::default();
        for gap in gaps {
            itl.push(gap);
        }
        itl
    }
}

impl From<Vec<Duration>> for Itl {
    fn from(gaps: Vec<Duration>) -> Self {
        gaps.into_iter().collect()
    }
}

impl Serialize for Itl {
    /// As the list of gaps it stands for.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

/// Engine timestamps converted to our timeline.
struct EngineTimes {
    queued: Option<Timestamp>,
    scheduled: Option<Timestamp>,
    /// When the engine sent the request (an HTTP engine).
    sent: Option<Timestamp>,
    first_token: Option<Timestamp>,
    last_token: Option<Timestamp>,
    /// The per-token times; `None` when absent or when one of them is unusable.
    tokens: Option<TokenTimes>,
}

/// The per-token times on our timeline, read in one pass: what the ITL needs of them.
struct TokenTimes {
    first: Timestamp,
    last: Timestamp,
    count: usize,
    /// Whether no time comes before the one before it.
    ordered: bool,
    /// The gaps between consecutive times (`saturating`: 0 where one goes backwards).
    gaps: Itl,
}

/// `ts` on our timeline (`conv` each), or `None` at the first unusable one; `None` for no times.
fn token_times(ts: &[f64], mut conv: impl FnMut(f64) -> Option<Timestamp>) -> Option<Option<TokenTimes>> {
    let (&head, rest) = match ts.split_first() {
        Some(split) => split,
        None => return Some(None),
    };
    let first = conv(head)?;
    let mut t = TokenTimes { first, last: first, count: 1, ordered: true, gaps: Itl::default() };
    for &v in rest {
        let next = conv(v)?;
        t.ordered &= t.last <= next;
        t.gaps.push(next.saturating_since(t.last));
        t.last = next;
        t.count += 1;
    }
    Some(Some(t))
}

/// A step engine's token times on our timeline, from its step ends read on our clock once for the
/// whole batch: the same as [`token_times`] of the expanded list with no offset (each end is
/// `Timestamp::from_secs_f64` of it, and they are in order), in O(runs of equal gaps). `None`
/// when the ends could not be read on our clock: the caller expands the list.
fn step_token_times(steps: &StepTokens) -> Option<Option<TokenTimes>> {
    let clock = steps.ends.on_our_clock()?;
    let (Some(head), Some(tail)) = (steps.runs.first(), steps.runs.last()) else { return Some(None) };
    let mut t = TokenTimes {
        first: clock.at[head.start],
        last: clock.at[tail.end - 1],
        count: steps.count(),
        ordered: true,
        gaps: Itl::default(),
    };
    let mut previous_end = None;
    for run in &steps.runs {
        if let Some(end) = previous_end {
            t.gaps.push(clock.at[run.start].saturating_since(clock.at[end - 1]));
        }
        let mut k = run.start + 1;
        while k < run.end {
            let same_until = clock.same_gap_until[k].min(run.end - 1);
            t.gaps.push_n(clock.gap(k), (same_until + 1 - k) as u64);
            k = same_until + 1;
        }
        previous_end = Some(run.end);
    }
    Some(Some(t))
}

/// How far before our dispatch, or after our completion, an engine's queued or scheduled time may
/// lie on our own clock before it is impossible (float rounding, not clock skew: it is one clock).
pub const TIMESTAMP_TOLERANCE: std::time::Duration = std::time::Duration::from_millis(1);

fn to_timestamps(
    stats: &EngineStats,
    times: &RequestTimes,
    domain: ClockDomain,
    anchor: Option<WallAnchor>,
    anomalies: &mut Anomalies,
) -> EngineTimes {
    // 0 is vLLM's "not set": missing, and flagged (a made-up zero duration otherwise).
    let zero = |v: Option<f64>| v.filter(|v| *v == 0.0);
    let given = [stats.queued_ts, stats.scheduled_ts, stats.first_token_ts, stats.last_token_ts, stats.sent_ts];
    if given.iter().any(|v| zero(*v).is_some()) {
        anomalies.impossible_timestamp = true;
    }
    let unset_zero = |v: Option<f64>| v.filter(|v| *v != 0.0);
    // A step engine's times, on our clock at once when it is ours; else as a list, like any other.
    let expanded: Option<Vec<f64>>;
    let mut step_times = None;
    let token_ts = match (&stats.token_ts, &stats.token_steps) {
        (Some(ts), _) => Some(ts.as_slice()),
        (None, Some(steps)) => {
            if domain == ClockDomain::Monotonic {
                step_times = step_token_times(steps);
            }
            if step_times.is_some() {
                None
            } else {
                expanded = Some(steps.times().collect());
                expanded.as_deref()
            }
        }
        (None, None) => None,
    };
    let stats = &EngineStats {
        arrival_wall: stats.arrival_wall,
        queued_ts: unset_zero(stats.queued_ts),
        scheduled_ts: unset_zero(stats.scheduled_ts),
        first_token_ts: unset_zero(stats.first_token_ts),
        last_token_ts: unset_zero(stats.last_token_ts),
        cached_tokens: stats.cached_tokens,
        image_cache_hits: stats.image_cache_hits,
        token_ts: None,
        token_steps: None,
        sent_ts: unset_zero(stats.sent_ts),
        endpoint: None,
        token_count_source: None,
        wire_batch: None,
    };
    let offset = match domain {
        ClockDomain::Monotonic => Some(0.0),
        ClockDomain::Foreign => match (anchor, stats.arrival_wall, stats.queued_ts) {
            (Some(a), Some(wall), Some(q)) if wall.is_finite() && q.is_finite() => {
                // arrival on our clock, minus the engine's own reading at that moment.
                Some(a.mono.as_secs_f64() + (wall - a.wall_secs) - q)
            }
            _ => None,
        },
    };
    // Judged on the values as sent, so a bad field is flagged even when no offset can be found.
    let sent = [
        stats.arrival_wall,
        stats.queued_ts,
        stats.scheduled_ts,
        stats.first_token_ts,
        stats.last_token_ts,
        stats.sent_ts,
    ];
    if sent.iter().flatten().chain(token_ts.unwrap_or_default()).any(|v| !v.is_finite() || *v < 0.0) {
        anomalies.non_finite = true;
    }
    let mut conv = |v: Option<f64>, offset: f64| -> Option<Timestamp> {
        let t = Timestamp::from_secs_f64(v? + offset);
        // A finite value shifted out of our timeline is just as unusable.
        anomalies.non_finite |= t.is_none();
        t
    };
    let mut e = match offset {
        Some(o) if o.is_finite() => EngineTimes {
            queued: conv(stats.queued_ts, o),
            scheduled: conv(stats.scheduled_ts, o),
            sent: conv(stats.sent_ts, o),
            first_token: conv(stats.first_token_ts, o),
            last_token: conv(stats.last_token_ts, o),
            tokens: match step_times {
                // Read on our clock, which a monotonic engine's offset (0) leaves as it is.
                Some(times) => times,
                None => token_ts.and_then(|ts| token_times(ts, |v| conv(Some(v), o))).flatten(),
            },
        },
        _ => {
            EngineTimes { queued: None, scheduled: None, sent: None, first_token: None, last_token: None, tokens: None }
        }
    };
    if domain == ClockDomain::Monotonic {
        // The engine had the request from our dispatch to our completion, not before, not after.
        let earliest = times.dispatched.as_nanos().saturating_sub(TIMESTAMP_TOLERANCE.as_nanos() as u64);
        let latest = times.completed.as_nanos().saturating_add(TIMESTAMP_TOLERANCE.as_nanos() as u64);
        for t in [&mut e.queued, &mut e.scheduled, &mut e.sent] {
            if t.is_some_and(|t| t.as_nanos() < earliest || t.as_nanos() > latest) {
                *t = None;
                anomalies.impossible_timestamp = true;
            }
        }
    }
    e
}

/// Maps one completed request. Pure: the same inputs always give the same metrics.
pub fn map_request(
    times: &RequestTimes,
    output: &EngineOutput,
    domain: ClockDomain,
    anchor: Option<WallAnchor>,
) -> RequestMetrics {
    let mut anomalies = Anomalies::default();
    let e = to_timestamps(&output.stats, times, domain, anchor, &mut anomalies);
    let n = output.generated_tokens();
    anomalies.token_count_mismatch = output.token_count_mismatch();
    let latency = times.completed.saturating_since(times.submitted);

    let engine_queue = match (e.queued, e.scheduled) {
        (Some(q), Some(s)) => {
            let d = s.checked_since(q);
            anomalies.scheduled_before_queued |= d.is_none();
            d
        }
        _ => None,
    };

    // From the moment the request was sent, where the engine says (never before our submit).
    let ttft_from = e.sent.map_or(times.submitted, |sent| sent.max(times.submitted));
    let ttft = e.first_token.and_then(|first| {
        let before_queue = e.queued.is_some_and(|q| first < q);
        let d = first.checked_since(ttft_from);
        if d.is_none() || before_queue {
            anomalies.first_token_before_arrival = true;
            return None;
        }
        if first > times.completed {
            anomalies.token_after_completion = true;
            return None;
        }
        d
    });

    // A last token after completion would make `tpot` span more than the request took.
    let last_after_completion = e.last_token.is_some_and(|last| last > times.completed);
    anomalies.token_after_completion |= last_after_completion;

    // Judged whether or not the engine gave a token count.
    let token_span = match (e.first_token, e.last_token) {
        (Some(first), Some(last)) => {
            let span = last.checked_since(first);
            anomalies.last_before_first |= span.is_none();
            span
        }
        _ => None,
    };
    let tpot = match (token_span, n) {
        (Some(span), Some(n)) if n >= 2 && ttft.is_some() && !last_after_completion => Some(span / (n - 1)),
        _ => None,
    };

    let latency_per_token = match n {
        Some(n) if n >= 1 => Some(latency / n),
        _ => None,
    };

    // Per-gap ITL: only from per-token times that agree with the first and last token (and so
    // with our submit and completion) and with the token count.
    let mut client_token_times = None;
    let itl = match (e.tokens, ttft, tpot.is_some() || n == Some(1)) {
        (Some(tokens), Some(_), true) => {
            // In order as sent, too: times that go backwards by less than a nanosecond still
            // go backwards.
            let sent_ordered = match (&output.stats.token_ts, &output.stats.token_steps) {
                (Some(ts), _) => ts.windows(2).all(|w| w[0] <= w[1]),
                // Ends read on our clock are all in order, and so is every run of them.
                (None, Some(steps)) => {
                    steps.ends.on_our_clock().is_some() || {
                        let mut before: Option<f64> = None;
                        steps.times().all(|t| before.replace(t).is_none_or(|b| b <= t))
                    }
                }
                (None, None) => true,
            };
            let ordered = sent_ordered && tokens.ordered;
            let ends_agree = e.first_token == Some(tokens.first) && e.last_token == Some(tokens.last);
            let count_agrees = n.is_none_or(|n| usize::try_from(n).is_ok_and(|n| n == tokens.count));
            if ordered && ends_agree && count_agrees {
                if e.sent.is_some() {
                    // A client-timed engine's arrivals, for requests.jsonl: the first, then each
                    // gap after it (exact, since they are in order).
                    let mut at = tokens.first;
                    let mut arrivals = Vec::with_capacity(tokens.count);
                    arrivals.push(at);
                    for gap in tokens.gaps.iter() {
                        at = at.saturating_add(gap);
                        arrivals.push(at);
                    }
                    client_token_times = Some(arrivals);
                }
                tokens.gaps
            } else {
                anomalies.token_times_inconsistent = true;
                Itl::default()
            }
        }
        _ => Itl::default(),
    };

    RequestMetrics {
        batch_wait: times.dispatched.saturating_since(times.submitted),
        latency,
        engine_queue,
        ttft,
        tpot,
        latency_per_token,
        itl,
        prompt_tokens: output.prompt_tokens,
        output_tokens: n,
        cached_tokens: output.stats.cached_tokens,
        engine_scheduled: e.scheduled,
        engine_first_token: e.first_token,
        engine_last_token: e.last_token,
        sent: e.sent,
        endpoint: output.stats.endpoint.clone(),
        token_count_source: output.stats.token_count_source,
        wire_batch: output.stats.wire_batch,
        embedding_dims: output.embedding_dims,
        client_token_times,
        anomalies,
    }
}
