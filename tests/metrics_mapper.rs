//! The metrics mapper: a snapshotted table of canonical mappings, and properties over arbitrary
//! (missing, inconsistent, non-finite) engine stats.

use std::fmt::Write as _;
use std::time::Duration;

use batchlab::batcher::RequestTimes;
use std::sync::Arc;

use batchlab::engine::{ClockDomain, EngineOutput, EngineStats, FinishReason, StepEnds, StepTokens};
use batchlab::metrics::{RequestMetrics, WallAnchor, map_request};
use batchlab::time::Timestamp;
use proptest::prelude::*;

/// Our clock: submit at 100 s, dispatch 5 ms later, completion at 100.2 s.
fn times() -> RequestTimes {
    RequestTimes {
        submitted: Timestamp::from_nanos(100_000_000_000),
        dispatched: Timestamp::from_nanos(100_005_000_000),
        completed: Timestamp::from_nanos(100_200_000_000),
    }
}

fn output(stats: EngineStats, tokens: Option<u32>, ids: Option<usize>) -> EngineOutput {
    EngineOutput::new(None, FinishReason::Length)
        .with_prompt_tokens(16)
        .with_output_tokens(tokens)
        .with_output_token_ids(ids.map(|n| vec![7; n]))
        .with_stats(stats)
}

fn stats(queued: Option<f64>, scheduled: Option<f64>, first: Option<f64>, last: Option<f64>) -> EngineStats {
    let mut stats = EngineStats::default();
    stats.arrival_wall = Some(1_767_225_600.0);
    stats.queued_ts = queued;
    stats.scheduled_ts = scheduled;
    stats.first_token_ts = first;
    stats.last_token_ts = last;
    stats
}

/// `stats` with the wall-clock arrival `wall` (`None`: unknown).
fn arriving_at(wall: impl Into<Option<f64>>, stats: EngineStats) -> EngineStats {
    let mut stats = stats;
    stats.arrival_wall = wall.into();
    stats
}

/// Complete stats whose first and last token are the first and last of `tokens` (offsets from 100 s).
fn with_tokens(tokens: &[f64]) -> EngineStats {
    let at = |o: f64| Some(100.0 + o);
    let token_ts = Some(tokens.iter().map(|&o| 100.0 + o).collect());
    let (first, last) = (tokens.first().copied().and_then(at), tokens.last().copied().and_then(at));
    let mut stats = stats(at(0.006), at(0.010), first, last);
    stats.token_ts = token_ts;
    stats
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.3}", d.as_secs_f64() * 1e3))
}

fn row(m: &RequestMetrics) -> String {
    let a = &m.anomalies;
    let flags: Vec<&str> = [
        (a.non_finite, "non_finite"),
        (a.first_token_before_arrival, "first_before_arrival"),
        (a.last_before_first, "last_before_first"),
        (a.scheduled_before_queued, "scheduled_before_queued"),
        (a.token_after_completion, "token_after_completion"),
        (a.impossible_timestamp, "impossible_timestamp"),
        (a.token_count_mismatch, "token_count_mismatch"),
        (a.token_times_inconsistent, "token_times_inconsistent"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    format!(
        "wait {:>7} queue {:>7} ttft {:>7} tpot {:>6} lpt {:>6} itl {:>2}x max {:>6} lat {:>7} out {:>4} {}",
        ms(Some(m.batch_wait)),
        ms(m.engine_queue),
        ms(m.ttft),
        ms(m.tpot),
        ms(m.latency_per_token),
        m.itl.len(),
        ms(m.itl_max()),
        ms(Some(m.latency)),
        m.output_tokens.map_or("-".into(), |n| n.to_string()),
        flags.join(",")
    )
}

#[test]
fn canonical_mappings() {
    let s = 100.0;
    let cases: Vec<(&str, EngineOutput, ClockDomain, Option<WallAnchor>)> = vec![
        (
            "complete vLLM-like stats",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.050), Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "one output token: no TPOT",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.050), Some(s + 0.050)), Some(1), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "count from token ids",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.050), Some(s + 0.190)), None, Some(8)),
            ClockDomain::Monotonic,
            None,
        ),
        ("no stats at all", output(EngineStats::default(), Some(8), None), ClockDomain::Monotonic, None),
        (
            "per-token times: ITL per gap",
            output(with_tokens(&[0.050, 0.060, 0.100, 0.190]), Some(4), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "per-token times out of order",
            output(with_tokens(&[0.050, 0.120, 0.100, 0.190]), Some(4), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "per-token times, one missing",
            output(with_tokens(&[0.050, 0.100, 0.190]), Some(4), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "missing first token",
            output(stats(Some(s + 0.006), Some(s + 0.010), None, Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "first token before submit",
            output(stats(Some(s - 1.0), Some(s - 0.9), Some(s - 0.5), Some(s + 0.1)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "last before first",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.150), Some(s + 0.050)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "scheduled before queued",
            output(stats(Some(s + 0.010), Some(s + 0.006), Some(s + 0.050), Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "token after completion",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.500), Some(s + 0.600)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "NaN and infinity",
            output(stats(Some(f64::NAN), Some(s + 0.010), Some(f64::INFINITY), Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "foreign clock anchored on arrival",
            output(
                arriving_at(1_767_225_600.006, stats(Some(5.0), Some(5.004), Some(5.044), Some(5.184))),
                Some(8),
                None,
            ),
            ClockDomain::Foreign,
            Some(WallAnchor { wall_secs: 1_767_225_600.0, mono: Timestamp::from_nanos(100_000_000_000) }),
        ),
        (
            "count 0 next to 5 token ids",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.050), Some(s + 0.190)), Some(0), Some(5)),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "count 3 next to 5 token ids",
            output(stats(Some(s + 0.006), Some(s + 0.010), Some(s + 0.050), Some(s + 0.190)), Some(3), Some(5)),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "all timestamps 0",
            output(stats(Some(0.0), Some(0.0), Some(0.0), Some(0.0)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "queued, scheduled before dispatch",
            output(stats(Some(s + 0.002), Some(s + 0.003), Some(s + 0.050), Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "queued within 1 ms before dispatch",
            output(stats(Some(s + 0.0045), Some(s + 0.010), Some(s + 0.050), Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "scheduled after completion",
            output(stats(Some(s + 0.006), Some(s + 0.5), Some(s + 0.050), Some(s + 0.190)), Some(8), None),
            ClockDomain::Monotonic,
            None,
        ),
        (
            "foreign clock, queued 0",
            output(
                arriving_at(1_767_225_600.006, stats(Some(0.0), Some(0.0), Some(5.044), Some(5.184))),
                Some(8),
                None,
            ),
            ClockDomain::Foreign,
            Some(WallAnchor { wall_secs: 1_767_225_600.0, mono: Timestamp::from_nanos(100_000_000_000) }),
        ),
        (
            "foreign clock without anchor",
            output(stats(Some(5.0), Some(5.004), Some(5.044), Some(5.184)), Some(8), None),
            ClockDomain::Foreign,
            None,
        ),
    ];
    let mut table = String::new();
    for (name, out, domain, anchor) in &cases {
        let m = map_request(&times(), out, *domain, *anchor);
        writeln!(table, "{name:<34} {}", row(&m)).unwrap();
    }
    insta::assert_snapshot!(table);
}

fn opt_f64() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(f64::NAN)),
        1 => Just(Some(f64::INFINITY)),
        1 => Just(Some(-1.0)),
        1 => Just(Some(1e300)),
        8 => (90.0f64..110.0).prop_map(Some),
    ]
}

proptest! {
    #[test]
    fn arbitrary_stats_never_panic_and_durations_stay_sane(
        q in opt_f64(), sch in opt_f64(), first in opt_f64(), last in opt_f64(), wall in opt_f64(),
        tokens in proptest::option::of(0u32..10_000),
        foreign in any::<bool>(),
        submit in 0u64..200_000_000_000, wait in 0u64..1_000_000_000, run in 0u64..1_000_000_000,
    ) {
        let t = RequestTimes {
            submitted: Timestamp::from_nanos(submit),
            dispatched: Timestamp::from_nanos(submit + wait),
            completed: Timestamp::from_nanos(submit + wait + run),
        };
        let stats = arriving_at(wall, stats(q, sch, first, last));
        let domain = if foreign { ClockDomain::Foreign } else { ClockDomain::Monotonic };
        let anchor = Some(WallAnchor { wall_secs: 100.0, mono: Timestamp::from_nanos(submit) });
        let m = map_request(&t, &output(stats, tokens, None), domain, anchor);
        prop_assert_eq!(m.latency, Duration::from_nanos(wait + run));
        prop_assert_eq!(m.batch_wait, Duration::from_nanos(wait));
        if let Some(ttft) = m.ttft {
            prop_assert!(ttft <= m.latency, "ttft {:?} > latency {:?}", ttft, m.latency);
        }
        if let (Some(tpot), Some(ttft)) = (m.tpot, m.ttft) {
            prop_assert!(ttft + tpot <= m.latency + Duration::from_nanos(1), "ttft + tpot beyond latency");
        }
        if m.latency_per_token.is_some() {
            prop_assert!(tokens.is_some_and(|n| n >= 1));
        }
        let non_finite = [q, sch, first, last].iter().flatten().any(|v| !v.is_finite() || *v < 0.0 || *v > 1e15);
        if non_finite && !foreign {
            prop_assert!(m.anomalies.non_finite);
        }
    }

    #[test]
    fn consistent_stats_give_ordered_metrics(
        a in 0u64..1_000_000, b in 0u64..1_000_000, c in 0u64..1_000_000, d in 0u64..1_000_000, e in 0u64..1_000_000,
        n in 2u32..500,
    ) {
        // submit <= queued <= scheduled <= first <= last <= completed, all in nanoseconds.
        let submit = 50_000_000_000u64;
        let queued = submit + a;
        let scheduled = queued + b;
        let first = scheduled + c;
        let last = first + d;
        let completed = last + e;
        let t = RequestTimes { submitted: Timestamp::from_nanos(submit), dispatched: Timestamp::from_nanos(queued), completed: Timestamp::from_nanos(completed) };
        let secs = |ns: u64| Some(ns as f64 / 1e9);
        let m = map_request(&t, &output(stats(secs(queued), secs(scheduled), secs(first), secs(last)), Some(n), None), ClockDomain::Monotonic, None);
        prop_assert!(!m.anomalies.any(), "{:?}", m.anomalies);
        let ttft = m.ttft.expect("ttft");
        let tpot = m.tpot.expect("tpot");
        prop_assert!(m.batch_wait <= ttft + Duration::from_micros(1));
        prop_assert!(ttft <= m.latency);
        prop_assert!(m.engine_queue.expect("queue") <= ttft + Duration::from_micros(1));
        prop_assert!(tpot * (n - 1) <= m.latency);
        prop_assert_eq!(m.latency_per_token, Some(m.latency / n));
    }
}

/// An engine's send time (`sent_ts`, an HTTP engine's) maps onto our clock and is judged as
/// `queued_ts` is: between our dispatch and our completion, 0 is unset; the endpoint and the
/// token-count source pass through.
#[test]
fn sent_ts_endpoint_and_token_count_source() {
    use batchlab::engine::TokenCountSource;
    let sent = |sent_ts: Option<f64>, domain: ClockDomain| {
        let mut s = stats(Some(100.006), Some(100.010), Some(100.050), Some(100.190));
        s.sent_ts = sent_ts;
        s.endpoint = Some("http://127.0.0.1:8000".into());
        s.token_count_source = Some(TokenCountSource::TokenIds);
        map_request(&times(), &output(s, Some(8), None), domain, None)
    };
    let m = sent(Some(100.007), ClockDomain::Monotonic);
    assert_eq!(m.sent, Some(Timestamp::from_nanos(100_007_000_000)));
    assert!(!m.anomalies.any(), "{:?}", m.anomalies);
    assert_eq!(m.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
    assert_eq!(m.token_count_source, Some(TokenCountSource::TokenIds));
    // Before our dispatch (beyond the 1 ms tolerance), or after our completion: impossible.
    for impossible in [100.003, 100.202] {
        let m = sent(Some(impossible), ClockDomain::Monotonic);
        assert_eq!((m.sent, m.anomalies.impossible_timestamp), (None, true), "{impossible}");
        assert!(m.ttft.is_some(), "the other timings stand");
    }
    let m = sent(Some(0.0), ClockDomain::Monotonic);
    assert_eq!((m.sent, m.anomalies.impossible_timestamp), (None, true), "0 is unset");
    let m = sent(Some(f64::NAN), ClockDomain::Monotonic);
    assert_eq!((m.sent, m.anomalies.non_finite), (None, true));
    assert_eq!(sent(None, ClockDomain::Monotonic).sent, None);
    // A foreign clock without an anchor: nothing maps, the send time neither.
    assert_eq!(sent(Some(100.007), ClockDomain::Foreign).sent, None);
}

/// An HTTP engine's TTFT runs from the moment it sent the request (`sent_ts`), not from our
/// submit; a sent time outside our dispatch … completion is impossible, flagged, and ignored.
#[test]
fn ttft_runs_from_the_moment_an_http_engine_sent_the_request() {
    let t = times();
    let mut s = stats(Some(100.020), None, Some(100.050), Some(100.190));
    s.sent_ts = Some(100.020);
    let m = map_request(&t, &output(s.clone(), Some(8), None), ClockDomain::Monotonic, None);
    assert_eq!(m.ttft, Some(Duration::from_millis(30)));
    assert_eq!(m.latency, Duration::from_millis(200), "latency is still the caller's");
    assert!(!m.anomalies.any(), "{:?}", m.anomalies);
    for impossible in [99.0, 100.5] {
        s.sent_ts = Some(impossible);
        let m = map_request(&t, &output(s.clone(), Some(8), None), ClockDomain::Monotonic, None);
        assert!(m.anomalies.impossible_timestamp, "sent at {impossible}");
        assert_eq!(m.ttft, Some(Duration::from_millis(50)), "from our submit");
    }
    s.sent_ts = Some(f64::NAN);
    assert!(map_request(&t, &output(s, Some(8), None), ClockDomain::Monotonic, None).anomalies.non_finite);
}

proptest! {
    /// A step engine's token times (the batch's step ends once, each request's runs of steps) map
    /// exactly as the same times given one per token: ITL runs, anomalies, every field, on either
    /// clock domain, whether the ends can be read on our clock or not (out of order, NaN).
    #[test]
    fn step_token_times_map_as_the_same_times_one_per_token(
        gaps_us in proptest::collection::vec(prop_oneof![Just(1000u64), Just(1001), 0u64..3000], 1..60),
        cuts in proptest::collection::vec(0usize..60, 0..6),
        skips in proptest::collection::vec(1usize..4, 6),
        start_ms in 6.0f64..20.0,
        broken in prop_oneof![Just(None), (0usize..60).prop_map(Some)],
        nan: bool,
        foreign: bool,
        count_off: bool,
    ) {
        // Step ends from 100 s + start, a gap after each (in µs; on a float that rounds to the ns).
        let mut ends = Vec::with_capacity(gaps_us.len() + 1);
        let mut t = 100.0 + start_ms / 1e3;
        ends.push(t);
        for g in &gaps_us {
            t += *g as f64 / 1e6;
            ends.push(t);
        }
        if let Some(k) = broken {
            let k = k % ends.len();
            ends[k] = if nan { f64::NAN } else { ends[k] - 0.01 };
        }
        // Runs: the steps cut into pieces, some skipped between (a preemption's gap).
        let mut runs = Vec::new();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % ends.len()).collect();
        cuts.push(ends.len());
        cuts.sort_unstable();
        let mut from = 0;
        for (i, &cut) in cuts.iter().enumerate() {
            if cut > from {
                runs.push(from..cut);
            }
            from = (cut + skips[i % skips.len()]).min(ends.len());
        }
        let steps = StepTokens { ends: Arc::new(StepEnds::new(ends)), runs };
        let list: Vec<f64> = steps.times().collect();
        let mut base = stats(Some(100.006), Some(100.006), list.first().copied(), list.last().copied());
        base.arrival_wall = Some(1_767_225_600.0);
        let n = u32::try_from(steps.count()).unwrap() + u32::from(count_off);
        let (mut as_list, mut as_steps) = (base.clone(), base);
        as_list.token_ts = Some(list);
        as_steps.token_steps = Some(steps);
        let domain = if foreign { ClockDomain::Foreign } else { ClockDomain::Monotonic };
        let anchor = Some(WallAnchor { mono: Timestamp::from_nanos(100_006_000_000), wall_secs: 1_767_225_600.0 });
        let t = RequestTimes { completed: Timestamp::from_nanos(200_000_000_000), ..times() };
        let one_per_token = map_request(&t, &output(as_list, Some(n), None), domain, anchor);
        let at_steps = map_request(&t, &output(as_steps, Some(n), None), domain, anchor);
        prop_assert_eq!(&at_steps, &one_per_token);
        prop_assert_eq!(at_steps.itl.len(), if one_per_token.itl.is_empty() { 0 } else { n as usize - 1 });
    }
}
