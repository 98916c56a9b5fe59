//! Every crash the fuzzers found (docs/fuzzing.md), kept fixed without the fuzzer.
//!
//! One case per crash, its minimized input written out inline (decoded, not as fuzzer bytes, so a
//! change to the fuzz input types cannot silently empty a case). Each area has one `check_*`
//! helper that asserts what the fuzz target asserted, and each case names the fuzz target.

use std::time::Duration;

use batchlab::batcher::RequestTimes;
use batchlab::engine::{ClockDomain, EngineOutput, EngineStats, FinishReason};
use batchlab::metrics::{Anomalies, RequestMetrics, map_request};
use batchlab::time::Timestamp;

// ---- mapper ------------------------------------------------------------------------------

/// Maps a request submitted, dispatched and completed at the given nanoseconds and returns the
/// metrics, after the invariants the `mapper` target checks on every input.
fn map(
    times_ns: (u64, u64, u64),
    stats: EngineStats,
    output_tokens: Option<u32>,
    domain: ClockDomain,
) -> RequestMetrics {
    let times = RequestTimes {
        submitted: Timestamp::from_nanos(times_ns.0),
        dispatched: Timestamp::from_nanos(times_ns.1),
        completed: Timestamp::from_nanos(times_ns.2),
    };
    let output = EngineOutput::new(None, FinishReason::Length).with_output_tokens(output_tokens).with_stats(stats);
    let m = map_request(&times, &output, domain, None);
    if let Some(ttft) = m.ttft {
        assert!(ttft <= m.latency, "ttft {ttft:?} > latency {:?}", m.latency);
        if let (Some(tpot), Some(n)) = (m.tpot, output_tokens) {
            assert!(ttft + tpot * (n - 1) <= m.latency, "the last token is after completion: {m:?}");
        }
    }
    m
}

fn check_mapper(
    times_ns: (u64, u64, u64),
    stats: EngineStats,
    output_tokens: Option<u32>,
    domain: ClockDomain,
    expected: Anomalies,
    expected_itl: Option<Duration>,
) {
    let m = map(times_ns, stats.clone(), output_tokens, domain);
    assert_eq!(m.anomalies, expected, "{stats:?}");
    assert_eq!(m.tpot, expected_itl, "{stats:?}");
}

/// Stats with a first and a last token time and nothing else.
fn token_times(first: Option<f64>, last: Option<f64>) -> EngineStats {
    let mut stats = EngineStats::default();
    stats.first_token_ts = first;
    stats.last_token_ts = last;
    stats
}

/// `mapper`: a last token after our completion was believed (tpot spanned past the request's end)
/// and not flagged. Found with no first token; the tpot half is the same cause with one.
#[test]
fn mapper_last_token_after_completion_is_flagged() {
    let stats = token_times(None, Some(2025524840.4100106));
    let times = (1012762419733073422, 1012762420676281926, 2025524840409355348);
    let expected = Anomalies { token_after_completion: true, ..Anomalies::default() };
    check_mapper(times, stats, None, ClockDomain::Monotonic, expected, None);

    // First token 1 s after submit, last 1 s after completion: no tpot, flagged.
    let stats = token_times(Some(11.0), Some(21.0));
    check_mapper(
        (10_000_000_000, 10_000_000_000, 20_000_000_000),
        stats,
        Some(5),
        ClockDomain::Monotonic,
        expected,
        None,
    );
}

/// `mapper`: last before first went unflagged when the engine gave no token count.
#[test]
fn mapper_last_before_first_is_flagged_without_a_token_count() {
    let stats = token_times(Some(1026820714.5378263), Some(0.5));
    let times = (1_000_000_000, 1_000_000_000, 2_000_000_000_000_000_000);
    let expected = Anomalies { last_before_first: true, ..Anomalies::default() };
    check_mapper(times, stats, None, ClockDomain::Monotonic, expected, None);
    // The input as found had `last_token_ts = 0`: that is vLLM's "unset", missing and flagged so.
    let stats = token_times(Some(1026820714.5378263), Some(0.0));
    let expected = Anomalies { impossible_timestamp: true, ..Anomalies::default() };
    check_mapper(times, stats, None, ClockDomain::Monotonic, expected, None);
}

/// `mapper`: with a foreign clock and no anchor, a NaN/infinite/negative stat was never looked at.
#[test]
fn mapper_non_finite_stat_is_flagged_without_an_anchor() {
    for bad in [f64::NEG_INFINITY, f64::NAN, -1.0] {
        let stats = token_times(Some(bad), None);
        let expected = Anomalies { non_finite: true, ..Anomalies::default() };
        check_mapper((0, 0, 1_000), stats, None, ClockDomain::Foreign, expected, None);
    }
}

/// The fixes above must not flag consistent stats: a plain request maps cleanly.
#[test]
fn mapper_consistent_stats_map_cleanly() {
    let mut stats = token_times(Some(11.0), Some(15.0));
    stats.arrival_wall = Some(1.7e9);
    stats.queued_ts = Some(10.0);
    stats.scheduled_ts = Some(10.5);
    let tpot = Some(Duration::from_secs(1));
    check_mapper(
        (10_000_000_000, 10_000_000_000, 16_000_000_000),
        stats,
        Some(5),
        ClockDomain::Monotonic,
        Anomalies::default(),
        tpot,
    );
}

/// `mapper`: per-token times that go backwards by less than a nanosecond became equal timestamps,
/// so they passed as in order and gave a per-gap ITL. Found with times near 1e-275 s; here near
/// 1.5 s. Out of order as sent is out of order.
#[test]
fn mapper_token_times_backwards_by_less_than_a_nanosecond_are_flagged() {
    let (late, early) = (1.5 + 2e-10, 1.5 + 1e-10);
    let mut stats = token_times(Some(late), Some(early));
    stats.token_ts = Some(vec![late, early]);
    let m = map((1_000_000_000, 1_000_000_000, 2_000_000_000), stats, Some(2), ClockDomain::Monotonic);
    assert!(m.anomalies.token_times_inconsistent, "{:?}", m.anomalies);
    assert!(m.itl.is_empty(), "{:?}", m.itl);
}
