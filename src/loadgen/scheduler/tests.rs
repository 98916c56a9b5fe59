//! The scheduler driven by a virtual-time runner that follows `poll`, with random service times
//! and random runner delays.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use proptest::prelude::*;

use super::*;

const START: Timestamp = Timestamp::from_nanos(1_000_000_000_000);
const MS: u64 = 1_000_000;

/// What a simulated run saw.
#[derive(Debug)]
struct Trace {
    submits: Vec<Timestamp>,
    max_in_flight: usize,
    lateness: Lateness,
}

/// Runs `n` submissions of `kind`. Request `i` takes `service[i % len]` ns; after each `At` or
/// completion the runner wakes `delay[j % len]` ns late (all zero for a punctual runner).
fn simulate(kind: StepKind, n: usize, service: &[u64], delay: &[u64]) -> Trace {
    let mut s = Scheduler::new(Step::new(kind), START).unwrap();
    let mut now = START;
    let mut in_flight = BinaryHeap::new();
    let mut submits = Vec::new();
    let mut max_in_flight = 0;
    let mut wakes = 0;
    let mut late_wake = |now: Timestamp| {
        wakes += 1;
        now.saturating_add(Duration::from_nanos(delay[wakes % delay.len()]))
    };
    for _ in 0..(10 * n + 100) {
        if submits.len() == n {
            return Trace { submits, max_in_flight, lateness: s.lateness() };
        }
        while in_flight.peek().is_some_and(|&Reverse(t)| t <= now) {
            in_flight.pop();
        }
        match s.poll(now, in_flight.len()) {
            Poll::SubmitNow => {
                s.on_submitted(now);
                let done = now.saturating_add(Duration::from_nanos(service[submits.len() % service.len()]));
                submits.push(now);
                in_flight.push(Reverse(done));
                max_in_flight = max_in_flight.max(in_flight.len());
            }
            Poll::At(t) => {
                assert!(t > now, "At({t:?}) is not in the future of {now:?}");
                now = late_wake(t);
            }
            Poll::WaitForCompletion => {
                let Reverse(t) = in_flight.pop().expect("waiting for a completion with nothing in flight");
                now = late_wake(now.max(t));
            }
            Poll::CompletionOr(at) => {
                assert!(at > now, "CompletionOr({at:?}) is not in the future of {now:?}");
                let next = in_flight.peek().map_or(at, |&Reverse(t)| t.min(at));
                now = late_wake(now.max(next));
            }
            Poll::Exhausted => return Trace { submits, max_in_flight, lateness: s.lateness() },
        }
    }
    panic!("no progress: {} of {n} submitted", submits.len());
}

fn millis(trace: &Trace) -> Vec<u64> {
    trace.submits.iter().map(|t| t.checked_since(START).unwrap().as_nanos() as u64 / MS).collect()
}

/// Submit times in ms after start, for requests taking `service_ms` (cyclically), and the lateness.
fn check(kind: StepKind, service_ms: &[u64], expected_ms: &[u64], expected_lateness: Lateness) {
    let service: Vec<u64> = service_ms.iter().map(|ms| ms * MS).collect();
    let trace = simulate(kind.clone(), expected_ms.len(), &service, &[0]);
    assert_eq!(millis(&trace), expected_ms, "{kind:?}");
    assert_eq!(trace.lateness, expected_lateness, "{kind:?}");
}

const ON_TIME: Lateness = Lateness { late: 0, delayed_by_cap: 0, total: Duration::ZERO, max: Duration::ZERO };

#[test]
fn schedules() {
    check(StepKind::Synchronous, &[30], &[0, 30, 60, 90], ON_TIME);
    check(StepKind::Concurrent(2), &[30], &[0, 0, 30, 30, 60], ON_TIME);
    check(StepKind::Concurrent(0), &[30], &[0, 30, 60], ON_TIME);
    check(StepKind::Throughput { max_concurrency: 3 }, &[10], &[0, 0, 0, 10, 10, 10, 20], ON_TIME);
    check(StepKind::Constant { rate: 10.0, max_concurrency: None }, &[250], &[0, 100, 200, 300, 400], ON_TIME);
    check(StepKind::Constant { rate: 10.0, max_concurrency: Some(5) }, &[250], &[0, 100, 200, 300], ON_TIME);
    // Capped at 1 with 250 ms requests at 10/s: each arrival waits for the previous completion.
    // Due 0, 100, 200, 300; sent 0, 250, 500, 750: late by 150, 300, 450 ms.
    check(
        StepKind::Constant { rate: 10.0, max_concurrency: Some(1) },
        &[250],
        &[0, 250, 500, 750],
        Lateness { late: 3, delayed_by_cap: 3, total: Duration::from_millis(900), max: Duration::from_millis(450) },
    );
    // Delayed arrivals catch up back to back once the cap allows, and later ones keep their times:
    // due 10, 20, 30 wait for the slow first request, then go at 35, 36, 37; 40 and 50 are on time.
    check(
        StepKind::Constant { rate: 100.0, max_concurrency: Some(1) },
        &[35, 1, 1, 1, 1, 1],
        &[0, 35, 36, 37, 40, 50],
        Lateness { late: 3, delayed_by_cap: 3, total: Duration::from_millis(48), max: Duration::from_millis(25) },
    );
    // A steady overload: each arrival waits a little longer than the one before.
    check(
        StepKind::Constant { rate: 100.0, max_concurrency: Some(2) },
        &[25],
        &[0, 10, 25, 35, 50, 60, 75, 85],
        Lateness { late: 6, delayed_by_cap: 6, total: Duration::from_millis(60), max: Duration::from_millis(15) },
    );
}

#[test]
fn poisson_is_reproducible_and_starts_after_a_gap() {
    let kind = StepKind::Poisson { rate: 5.0, seed: 11, max_concurrency: None };
    let a = simulate(kind.clone(), 50, &[MS], &[0]);
    let b = simulate(kind, 50, &[7 * MS], &[0]);
    assert_eq!(a.submits, b.submits);
    assert!(a.submits[0] > START);
    let other = simulate(StepKind::Poisson { rate: 5.0, seed: 12, max_concurrency: None }, 50, &[MS], &[0]);
    assert_ne!(a.submits, other.submits);
}

/// Pinned values: a change here changes every report made with a seed.
#[test]
fn poisson_arrivals_are_stable_across_versions() {
    let kind = StepKind::Poisson { rate: 10.0, seed: 1, max_concurrency: None };
    let trace = simulate(kind, 3, &[0], &[0]);
    let nanos: Vec<u64> = trace.submits.iter().map(|t| t.as_nanos() - START.as_nanos()).collect();
    assert_eq!(nanos, [83_600_553, 220_556_769, 574_612_210]);
}

#[test]
fn bad_rates_are_errors() {
    for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        for kind in [
            StepKind::Constant { rate, max_concurrency: None },
            StepKind::Poisson { rate, seed: 0, max_concurrency: Some(2) },
            StepKind::Gamma { rate, burstiness: 1.0, seed: 0, max_concurrency: None },
        ] {
            let err = Scheduler::new(Step::new(kind), START).unwrap_err();
            assert!(matches!(err, LoadError::InvalidRate { .. }), "{err:?}");
        }
        let gamma = StepKind::Gamma { rate: 1.0, burstiness: rate, seed: 0, max_concurrency: None };
        let err = Scheduler::new(Step::new(gamma), START).unwrap_err();
        assert!(err.to_string().contains("burstiness must be a finite number above 0"), "{err}");
        let trace = StepKind::Trace { time_scale: rate, arrivals: arrivals(&[0.0]), max_concurrency: None };
        let err = Scheduler::new(Step::new(trace), START).unwrap_err();
        assert!(err.to_string().contains("time_scale must be"), "{err}");
    }
    let empty = StepKind::Trace { time_scale: 1.0, arrivals: TraceArrivals::default(), max_concurrency: None };
    assert!(Scheduler::new(Step::new(empty), START).is_err());
}

fn arrivals(times: &[f64]) -> TraceArrivals {
    TraceArrivals::from_timestamps(times).unwrap()
}

#[test]
fn traces_replay_at_the_scaled_recorded_times_then_end() {
    let trace = arrivals(&[100.0, 100.25, 100.25, 101.0, 103.5]);
    let kind = |time_scale| StepKind::Trace { time_scale, arrivals: trace.clone(), max_concurrency: None };
    check(kind(1.0), &[1], &[0, 250, 250, 1000, 3500], ON_TIME);
    check(kind(2.0), &[1], &[0, 125, 125, 500, 1750], ON_TIME);
    check(kind(0.5), &[1], &[0, 500, 500, 2000, 7000], ON_TIME);
    let mut s = Scheduler::new(Step::new(kind(1.0)), START).unwrap();
    for _ in 0..5 {
        let due = s.next_arrival().unwrap();
        assert_eq!(s.poll(due, 0), Poll::SubmitNow);
        s.on_submitted(due);
    }
    assert_eq!(s.poll(START, 0), Poll::Exhausted);
    assert_eq!(s.next_arrival(), None);
    // A cap delays a trace like any rate.
    let capped = StepKind::Trace { time_scale: 1.0, arrivals: trace.clone(), max_concurrency: Some(1) };
    let t = simulate(capped, 5, &[400 * MS], &[0]);
    assert_eq!(millis(&t), [0, 400, 800, 1200, 3500]);
    assert_eq!(t.lateness.delayed_by_cap, 3);
}

#[test]
fn a_restarted_trace_goes_on_with_its_next_line() {
    let kind = StepKind::Trace { time_scale: 2.0, arrivals: arrivals(&[0.0, 1.0, 3.0, 4.0]), max_concurrency: None };
    let mut s = Scheduler::new(Step::new(kind), START).unwrap();
    s.on_submitted(START);
    let later = START.saturating_add(Duration::from_secs(60));
    let mut r = s.restarted(later).unwrap();
    let mut due = Vec::new();
    while let Some(t) = r.next_arrival() {
        due.push(t.checked_since(later).unwrap().as_millis());
        r.on_submitted(t);
    }
    assert_eq!(due, [0, 1000, 1500], "lines 1, 2, 3 with their gaps halved");
    // A rate starts over.
    let poisson =
        Scheduler::new(Step::new(StepKind::Poisson { rate: 5.0, seed: 3, max_concurrency: None }), START).unwrap();
    let again = poisson.restarted(later).unwrap();
    assert_eq!(
        again.next_arrival().unwrap().checked_since(later),
        poisson.next_arrival().unwrap().checked_since(START)
    );
}

#[test]
fn constant_ramps_follow_the_inverse_cumulative_intensity() {
    // 10/s ramped over 2 s: arrival i at sqrt(2 · 2 · i / 10) while i / 10 <= 1, then i / 10 + 1.
    let step =
        Step::new(StepKind::Constant { rate: 10.0, max_concurrency: None }).with_rampup(Some(Duration::from_secs(2)));
    let mut s = Scheduler::new(step, START).unwrap();
    let mut got = Vec::new();
    for _ in 0..14 {
        let due = s.next_arrival().unwrap();
        got.push(due.checked_since(START).unwrap().as_nanos() as u64);
        s.on_submitted(due);
    }
    let expected: Vec<u64> = (0..14u32)
        .map(|i| {
            let s = f64::from(i) / 10.0;
            let t = if s <= 1.0 { (4.0 * s).sqrt() } else { s + 1.0 };
            (t * 1e9).round() as u64
        })
        .collect();
    assert_eq!(got, expected);
    assert_eq!(got[10], 2_000_000_000, "the ramp ends at T with rate · T / 2 arrivals");
    assert_eq!(got[11] - got[10], 100_000_000, "then the full rate");
}

#[test]
fn concurrent_ramps_open_one_stream_at_a_time() {
    // 4 streams over 2 s: streams open at 0, 0.5, 1, 1.5 s; requests take 10 s, so each submit is
    // a stream opening.
    let step = Step::new(StepKind::Concurrent(4)).with_rampup(Some(Duration::from_secs(2)));
    let mut s = Scheduler::new(step, START).unwrap();
    let mut now = START;
    let mut submits = Vec::new();
    let mut in_flight = 0;
    while submits.len() < 4 {
        match s.poll(now, in_flight) {
            Poll::SubmitNow => {
                s.on_submitted(now);
                submits.push(now.checked_since(START).unwrap().as_millis());
                in_flight += 1;
            }
            Poll::CompletionOr(t) => now = t,
            other => panic!("{other:?} at {now:?}"),
        }
    }
    assert_eq!(submits, [0, 500, 1000, 1500]);
    assert_eq!(s.poll(now, 4), Poll::WaitForCompletion, "all streams open: only a completion helps");
    // A completion during the ramp frees its stream at once.
    let step = Step::new(StepKind::Concurrent(4)).with_rampup(Some(Duration::from_secs(2)));
    let mut s = Scheduler::new(step, START).unwrap();
    assert_eq!(s.poll(START, 0), Poll::SubmitNow);
    s.on_submitted(START);
    assert_eq!(s.poll(START, 1), Poll::CompletionOr(START.saturating_add(Duration::from_millis(500))));
    assert_eq!(s.poll(START, 0), Poll::SubmitNow);
}

#[test]
fn tiny_rates_saturate_instead_of_overflowing() {
    let mut s = Scheduler::new(Step::new(StepKind::Constant { rate: 1e-300, max_concurrency: None }), START).unwrap();
    assert_eq!(s.poll(START, 0), Poll::SubmitNow);
    s.on_submitted(START);
    assert_eq!(s.poll(START, 0), Poll::At(Timestamp::from_nanos(u64::MAX)));
}

/// Arrival `k` of a constant schedule, computed independently of the scheduler.
fn constant_due(rate: f64, k: usize) -> Timestamp {
    START.saturating_add(Duration::from_secs_f64(k as f64 / rate))
}

fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![0.01f64..1.0, 1.0f64..100.0, 100.0f64..100_000.0]
}

fn times(max_ms: u64) -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0..max_ms * MS, 1..20)
}

proptest! {
    #[test]
    fn uncapped_constant_arrivals_are_exactly_on_time(rate in rate(), service in times(5_000)) {
        let trace = simulate(StepKind::Constant { rate, max_concurrency: None }, 200, &service, &[0]);
        for (k, &t) in trace.submits.iter().enumerate() {
            let due = constant_due(rate, k);
            prop_assert!(t.as_nanos().abs_diff(due.as_nanos()) <= 1, "arrival {} at {:?}, due {:?}", k, t, due);
        }
        prop_assert_eq!(trace.lateness.late, 0);
    }

    #[test]
    fn constant_arrivals_are_never_early(
        rate in rate(), cap in prop::option::of(1u32..8), service in times(2_000), delay in times(50),
    ) {
        let trace = simulate(StepKind::Constant { rate, max_concurrency: cap }, 200, &service, &delay);
        for (k, &t) in trace.submits.iter().enumerate() {
            let due = constant_due(rate, k);
            prop_assert!(t.as_nanos() + 1 >= due.as_nanos(), "arrival {} at {:?}, due {:?}", k, t, due);
        }
    }

    #[test]
    fn in_flight_never_exceeds_the_cap(
        n in 1u32..16, which in 0..6u8, rate in rate(), service in times(1_000), delay in times(20),
    ) {
        let (kind, cap) = match which {
            0 => (StepKind::Synchronous, 1),
            1 => (StepKind::Concurrent(n), n),
            2 => (StepKind::Throughput { max_concurrency: n }, n),
            3 => (StepKind::Constant { rate, max_concurrency: Some(n) }, n),
            4 => (StepKind::Gamma { rate, burstiness: 0.3, seed: u64::from(n), max_concurrency: Some(n) }, n),
            _ => (StepKind::Poisson { rate, seed: u64::from(n), max_concurrency: Some(n) }, n),
        };
        let trace = simulate(kind, 300, &service, &delay);
        prop_assert!(trace.max_in_flight <= cap as usize, "{} in flight, cap {}", trace.max_in_flight, cap);
    }

    #[test]
    fn closed_loops_keep_the_level_when_requests_are_slow(n in 1u32..16, service_ms in 1u64..100) {
        // Equal service times: every level is filled at once and refilled on every completion.
        let trace = simulate(StepKind::Concurrent(n), 5 * n as usize, &[service_ms * MS], &[0]);
        prop_assert_eq!(trace.max_in_flight, n as usize);
        let expected: Vec<u64> = (0..5 * u64::from(n)).map(|i| i / u64::from(n) * service_ms).collect();
        prop_assert_eq!(millis(&trace), expected);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn poisson_mean_rate_matches(rate in rate(), seed: u64) {
        let n = 20_000;
        let arrivals = |seed| {
            let kind = StepKind::Poisson { rate, seed, max_concurrency: None };
            let mut s = Scheduler::new(Step::new(kind), START).unwrap();
            (0..n).map(|_| {
                let due = s.next_arrival().unwrap();
                s.on_submitted(due);
                due
            }).collect::<Vec<_>>()
        };
        let a = arrivals(seed);
        prop_assert_eq!(&a, &arrivals(seed));
        prop_assert!(a.windows(2).all(|w| w[0] <= w[1]));
        // The mean of n exponential gaps has a relative stdev of 1/sqrt(n) = 0.7%; allow 5%.
        let measured = n as f64 / a[n - 1].checked_since(START).unwrap().as_secs_f64();
        prop_assert!((measured / rate - 1.0).abs() < 0.05, "rate {} measured {}", rate, measured);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A ramp only delays: arrival `i` of a ramped step comes no earlier than arrival `i` of the
    /// same step without it (same seed), and at most `T / 2` later (the shift once ramped up);
    /// ramped times never go back.
    #[test]
    fn ramps_delay_each_arrival_by_at_most_half_the_ramp(
        rate in rate(), ramp_ms in 1u64..60_000, seed: u64, which in 0..3u8, k in 0.1f64..10.0,
    ) {
        let kind = match which {
            0 => StepKind::Constant { rate, max_concurrency: None },
            1 => StepKind::Poisson { rate, seed, max_concurrency: None },
            _ => StepKind::Gamma { rate, burstiness: k, seed, max_concurrency: None },
        };
        let ramp = Duration::from_millis(ramp_ms);
        let dues = |step: Step| {
            let mut s = Scheduler::new(step, START).unwrap();
            (0..300).map(|_| {
                let due = s.next_arrival().unwrap();
                s.on_submitted(due);
                due.as_nanos()
            }).collect::<Vec<u64>>()
        };
        let plain = dues(Step::new(kind.clone()));
        let ramped = dues(Step::new(kind).with_rampup(Some(ramp)));
        prop_assert!(ramped.windows(2).all(|w| w[0] <= w[1]));
        let half = ramp.as_nanos() as u64 / 2;
        for (i, (p, r)) in plain.iter().zip(&ramped).enumerate() {
            prop_assert!(*r + 1 >= *p && *r <= p + half + 1, "arrival {}: {} unramped, {} ramped", i, p, r);
        }
    }
}
