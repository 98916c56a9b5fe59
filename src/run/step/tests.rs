use super::*;
use crate::batcher::{BatchRun, Completion, Outcome, RequestError, RequestTimes};
use crate::engine::{EngineOutput, FinishReason};
use crate::loadgen::StepKind;
use crate::report::RequestOutcome;
use crate::run::status::DisplayPhase;

fn at(ms: u64) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000)
}

fn done(id: RequestId, submitted: u64, completed: u64) -> Outcome {
    Ok(Completion {
        output: EngineOutput::new(Some(id), FinishReason::Length).with_prompt_tokens(4).with_output_tokens(2),
        times: RequestTimes { submitted: at(submitted), dispatched: at(submitted), completed: at(completed) },
        batch_id: 0,
        batch_size: 1,
    })
}

fn step(warmup: Option<PhaseLimit>, max_requests: u64) -> StepRun {
    let stop = crate::scenario::Scenario::builder().max_requests(max_requests).build().unwrap().stop().clone();
    let step = Step::new(StepKind::Throughput { max_concurrency: 4 });
    StepRun::new(step, stop, warmup, None, at(0), ClockDomain::Monotonic, None).unwrap()
}

#[test]
fn warmup_drains_before_measurement_starts() {
    let mut run = step(Some(PhaseLimit::Requests(2)), 2);
    for id in 0..2 {
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Warmup));
        run.on_submitted(id, Phase::Warmup, at(0));
    }
    // Concurrency allows more, but measurement waits for the warmup to finish.
    assert_eq!(run.poll(at(0)), Action::Wait(None));
    assert_eq!(run.phase_now(), Some(Phase::Warmup));
    run.on_outcome(0, &done(0, 0, 10), at(10));
    assert_eq!(run.poll(at(10)), Action::Wait(None));
    run.on_outcome(1, &done(1, 0, 20), at(20));
    for id in 2..4 {
        assert_eq!(run.poll(at(20)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(20));
    }
    assert_eq!(run.poll(at(20)), Action::Wait(None));
    run.on_outcome(2, &done(2, 20, 30), at(30));
    run.on_outcome(3, &done(3, 20, 40), at(40));
    assert_eq!(run.poll(at(40)), Action::Done);
    let r = run.finish(at(40)).result;
    assert_eq!(r.counts.completed, 2, "warmup requests are not counted");
    // The window is the measured requests' alone: 20 ms to 40 ms.
    assert!((r.duration_s - 0.020).abs() < 1e-9, "{}", r.duration_s);
}

#[test]
fn batches_count_while_measured_requests_are_unfinished() {
    use crate::batcher::FlushReason;
    let batch = |id, at_ms| BatchRun {
        id,
        size: 2,
        reason: FlushReason::Full,
        dispatched_at: at(at_ms),
        returned_at: at(at_ms + 5),
        phases: None,
    };
    let mut run = step(None, 2);
    for id in 0..2 {
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(0));
    }
    // Every measured request was submitted at 0 ms; its batch goes out at 1 ms and counts.
    run.on_batch(&batch(0, 1));
    run.on_outcome(0, &done(0, 0, 6), at(6));
    run.on_outcome(1, &done(1, 0, 6), at(6));
    // Nothing measured is left: a later batch (cooldown, say) does not count.
    run.on_batch(&batch(1, 7));
    let r = run.finish(at(7)).result;
    assert_eq!(r.batching.batches, 1);
}

#[test]
fn measured_phase_stops_at_max_requests_and_lost_is_zero() {
    let mut run = step(None, 3);
    let mut id = 0;
    while let Action::Submit(phase) = run.poll(at(0)) {
        assert_eq!(phase, Phase::Measure);
        run.on_submitted(id, phase, at(0));
        id += 1;
    }
    assert_eq!(id, 3, "max_requests bounds submissions even below the concurrency cap");
    run.on_outcome(0, &done(0, 0, 5), at(5));
    run.on_outcome(1, &Err(RequestError::Cancelled), at(6));
    let engine_error = RequestError::Engine { batch_id: 0, batch_size: 1, message: "x".into() };
    run.on_outcome(2, &Err(engine_error), at(7));
    assert_eq!(run.poll(at(7)), Action::Done);
    let r = run.finish(at(7)).result;
    assert_eq!((r.counts.completed, r.counts.cancelled, r.counts.errors, r.counts.lost), (1, 1, 1, 0));
}

fn counts(run: &StepRun, now: Timestamp) -> (DisplayPhase, u64, Option<u64>) {
    let s = run.status(now);
    (s.phase, s.done, s.total)
}

#[test]
fn repeats_are_named_in_the_display_and_carried_by_results_and_records() {
    let mut run = step(None, 1).with_records().with_repeat(1, 3);
    assert_eq!(run.status(at(0)).benchmark, "throughput #2/3");
    assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
    run.on_submitted(0, Phase::Measure, at(0));
    run.on_outcome(0, &done(0, 0, 5), at(5));
    assert_eq!(run.poll_record().map(|r| r.repeat), Some(1));
    let finished = run.finish(at(5));
    assert_eq!((finished.result.name.as_str(), finished.result.repeat), ("throughput", 1));
    assert_eq!(step(None, 1).status(at(0)).benchmark, "throughput", "one run: the plain name");
}

#[test]
fn status_counts_each_phase_on_its_own() {
    // Issue 9: the warmup showed "0 requests" and the measurement began at "32/32": each
    // phase must show its own finished count against its own target.
    let mut run = step(Some(PhaseLimit::Requests(2)), 3).with_position(1, Some(4));
    assert_eq!(counts(&run, at(0)), (DisplayPhase::Warmup, 0, Some(2)));
    for id in 0..2 {
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Warmup));
        run.on_submitted(id, Phase::Warmup, at(0));
    }
    assert_eq!(counts(&run, at(0)), (DisplayPhase::Warmup, 0, Some(2)), "submitted is not finished");
    run.on_outcome(0, &done(0, 0, 10), at(10));
    assert_eq!(run.poll(at(10)), Action::Wait(None));
    assert_eq!(counts(&run, at(10)), (DisplayPhase::Warmup, 1, Some(2)));
    run.on_outcome(1, &done(1, 0, 20), at(20));
    assert_eq!(run.poll(at(20)), Action::Submit(Phase::Measure));
    assert_eq!(counts(&run, at(20)), (DisplayPhase::Measuring, 0, Some(3)), "measuring starts at 0 of its own");
    run.on_submitted(2, Phase::Measure, at(20));
    run.on_outcome(2, &done(2, 20, 30), at(30));
    let s = run.status(at(30));
    assert_eq!((s.phase, s.done, s.total), (DisplayPhase::Measuring, 1, Some(3)));
    assert_eq!((s.benchmark.as_str(), s.index, s.count), ("throughput", 1, Some(4)));
    assert!((s.elapsed_s - 0.010).abs() < 1e-9, "{}", s.elapsed_s);
    assert_eq!(s.requests_per_s, Some(100.0));
    assert_eq!(s.errors, 0);
}

#[test]
fn status_measures_until_the_last_measured_request_and_drains_after_an_interrupt() {
    let mut run = step(None, 3);
    assert_eq!(counts(&run, at(0)), (DisplayPhase::Measuring, 0, Some(3)), "no warmup, none shown");
    for id in 0..3 {
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(0));
    }
    // All submitted: admission is over, but the measurement is still what runs.
    assert_eq!(run.poll(at(0)), Action::Wait(None));
    let engine_error = RequestError::Engine { batch_id: 0, batch_size: 1, message: "x".into() };
    run.on_outcome(0, &Err(engine_error), at(5));
    let s = run.status(at(5));
    assert_eq!((s.phase, s.done, s.total, s.errors), (DisplayPhase::Measuring, 1, Some(3), 1));
    run.interrupt(at(6));
    let s = run.status(at(6));
    assert_eq!((s.phase, s.done, s.total), (DisplayPhase::Draining, 1, Some(3)));
}

#[test]
fn records_come_out_of_the_step_and_leftovers_are_incomplete() {
    let mut run = step(None, 2).with_records();
    for id in 0..2 {
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(0));
    }
    run.on_outcome(0, &done(0, 0, 5), at(5));
    let record = run.poll_record().expect("a row for the completed request");
    assert_eq!((record.id, record.outcome), (0, RequestOutcome::Completed));
    assert!(run.poll_record().is_none());
    run.interrupt(at(6));
    let finished = run.finish(at(6));
    assert!(finished.ends_run);
    let rows: Vec<_> = finished.records.iter().map(|r| (r.id, r.outcome.clone())).collect();
    assert_eq!(rows, [(1, RequestOutcome::Incomplete)]);
}

/// A completion of `id` submitted at `submitted`, dispatched at `dispatched`, done at `done` ms.
fn ran(id: RequestId, submitted: u64, dispatched: u64, done_ms: u64) -> Outcome {
    let mut outcome = done(id, submitted, done_ms);
    if let Ok(c) = &mut outcome {
        c.times.dispatched = at(dispatched);
    }
    outcome
}

fn kind_step(kind: StepKind, max_requests: u64) -> StepRun {
    let stop = crate::scenario::Scenario::builder().max_requests(max_requests).build().unwrap().stop().clone();
    StepRun::new(Step::new(kind), stop, None, None, at(0), ClockDomain::Monotonic, None).unwrap().with_records()
}

/// (intended ms after the step's start, dispatch delay ms) of every record, in id order.
fn intended(run: &mut StepRun) -> Vec<(u64, f64)> {
    let mut rows: Vec<_> = std::iter::from_fn(|| run.poll_record())
        .map(|r| (r.id, (r.intended_ns.unwrap().as_nanos() - at(0).as_nanos()) / 1_000_000, r.dispatch_delay_ms))
        .collect();
    rows.sort_by_key(|r| r.0);
    rows.into_iter().map(|(_, i, d)| (i, d.unwrap())).collect()
}

#[test]
fn a_scheduled_arrival_is_meant_for_its_due_time_and_a_late_submit_lags() {
    // 100/s: due at 0 and 10 ms. The second is submitted at 25 ms (the loop was busy).
    let mut run = kind_step(StepKind::Constant { rate: 100.0, max_concurrency: None }, 2);
    assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
    run.on_submitted(0, Phase::Measure, at(0));
    assert_eq!(run.poll(at(1)), Action::Wait(Some(at(10))));
    assert_eq!(run.poll(at(25)), Action::Submit(Phase::Measure));
    run.on_submitted(1, Phase::Measure, at(25));
    // Each waits 5 ms for its batch.
    run.on_outcome(0, &ran(0, 0, 5, 40), at(40));
    run.on_outcome(1, &ran(1, 25, 30, 50), at(50));
    assert_eq!(intended(&mut run), [(0, 5.0), (10, 20.0)]);
    let d = run.finish(at(50)).result.dispatch;
    // Client lag: 0 and 15 ms (the 5 ms batch waits are by design).
    assert_eq!((d.client_lag.p50, d.client_lag.max), (Some(0.0), Some(15.0)));
    assert_eq!((d.dispatch_delay.count, d.dispatch_delay.max), (2, Some(20.0)));
}

#[test]
fn an_arrival_held_by_max_concurrency_is_meant_for_when_its_slot_freed() {
    // 100/s with one in flight: the second arrival (due at 10 ms) waits for the first to end
    // at 30 ms; the loop submits it at 32 ms: 2 ms of lag, not 22.
    let mut run = kind_step(StepKind::Constant { rate: 100.0, max_concurrency: Some(1) }, 2);
    assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
    run.on_submitted(0, Phase::Measure, at(0));
    assert_eq!(run.poll(at(10)), Action::Wait(None));
    run.on_outcome(0, &ran(0, 0, 0, 30), at(30));
    assert_eq!(run.poll(at(32)), Action::Submit(Phase::Measure));
    run.on_submitted(1, Phase::Measure, at(32));
    run.on_outcome(1, &ran(1, 32, 32, 40), at(40));
    assert_eq!(intended(&mut run), [(0, 0.0), (30, 2.0)]);
    assert_eq!(run.finish(at(40)).result.dispatch.client_lag.max, Some(2.0));
}

#[test]
fn a_closed_loop_request_is_meant_for_when_the_outcome_before_it_came() {
    let mut run = kind_step(StepKind::Throughput { max_concurrency: 2 }, 4);
    for id in 0..2 {
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(0));
    }
    assert_eq!(run.poll(at(0)), Action::Wait(None));
    // Two outcomes came before the loop reacted at 13 ms: both requests are dated from the
    // later one (10 ms), never earlier, so the lag is not overstated.
    run.on_outcome(0, &ran(0, 0, 0, 7), at(7));
    run.on_outcome(1, &ran(1, 0, 0, 10), at(10));
    for id in 2..4 {
        assert_eq!(run.poll(at(13)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(13));
    }
    run.on_outcome(2, &ran(2, 13, 13, 20), at(20));
    run.on_outcome(3, &ran(3, 13, 13, 20), at(20));
    assert_eq!(intended(&mut run), [(0, 0.0), (0, 0.0), (10, 3.0), (10, 3.0)]);
    let result = run.finish(at(20)).result;
    assert_eq!(result.dispatch.client_lag.max, Some(3.0));
    assert!(result.validity_warnings.is_empty(), "3 ms is within the limit");
}

#[test]
fn an_engine_send_after_the_dispatch_is_client_lag_and_warns() {
    use crate::engine::EngineStats;
    let mut run = kind_step(StepKind::Synchronous, 3);
    for id in 0..3 {
        // Each submitted the moment the one before ended: the loop itself never lags.
        let t = id * 50;
        assert_eq!(run.poll(at(t)), Action::Submit(Phase::Measure));
        run.on_submitted(id, Phase::Measure, at(t));
        // The engine sends each request 30 ms after our dispatch.
        let mut outcome = ran(id, t, t, t + 50);
        if let Ok(c) = &mut outcome {
            c.output.stats = EngineStats { sent_ts: Some(at(t + 30).as_secs_f64()), ..EngineStats::default() };
        }
        run.on_outcome(id, &outcome, at(t + 50));
    }
    let records: Vec<_> = std::iter::from_fn(|| run.poll_record()).collect();
    assert_eq!(records[0].sent_ns, Some(at(30)));
    assert_eq!(records.iter().map(|r| r.dispatch_delay_ms).collect::<Vec<_>>(), [Some(30.0); 3]);
    let result = run.finish(at(150)).result;
    assert_eq!((result.dispatch.engine_sent, result.dispatch.client_lag.p99), (3, Some(30.0)));
    let kinds: Vec<_> = result.validity_warnings.iter().map(|w| w.kind.as_str()).collect();
    assert_eq!(kinds, ["client_lag"]);
}

#[test]
fn no_records_unless_asked() {
    let mut run = step(None, 1);
    assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
    run.on_submitted(0, Phase::Measure, at(0));
    run.on_outcome(0, &done(0, 0, 5), at(5));
    assert!(run.poll_record().is_none());
    assert!(run.finish(at(5)).records.is_empty());
}

#[test]
fn a_shard_passes_over_the_others_arrivals_and_records_its_own_by_their_index_in_the_run() {
    // Shard 1 of 3 of a run whose step starts at request 10 (a step before it sent 0..10): of
    // arrivals 10..16 it sends 10 and 13 (10 mod 3 = 1), passing over the others; the limit of 6
    // counts every shard's.
    let mut run = step(None, 6).with_shard(crate::loadgen::shard::Shard { k: 1, n: 3 }, 10).with_records();
    let mut sent = Vec::new();
    loop {
        match run.poll(at(0)) {
            Action::Pass => {}
            Action::Submit(phase) => {
                let id = sent.len() as RequestId;
                run.on_submitted(id, phase, at(0));
                sent.push(id);
            }
            _ => break,
        }
    }
    assert_eq!(sent, [0, 1], "two of the six arrivals are this shard's");
    assert_eq!(run.status(at(1)).total, Some(2), "its display counts to its own part, not the run's 6");
    run.on_outcome(0, &done(0, 0, 10), at(10));
    let ids: Vec<RequestId> = std::iter::from_fn(|| run.poll_record()).map(|r| r.id).collect();
    assert_eq!(ids, [10], "its record carries its index in the run, not the batcher's id");
    // The other is still running when the step ends: its incomplete record is numbered alike.
    let finished = run.finish(at(20));
    assert_eq!(
        finished.records.iter().map(|r| (r.id, r.outcome.clone())).collect::<Vec<_>>(),
        [(13, RequestOutcome::Incomplete)]
    );
    assert_eq!(finished.result.counts.submitted, 2, "only its own requests count in its result");
}
