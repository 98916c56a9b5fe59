use super::*;
use crate::engine::{EngineDeath, EngineOutput};

fn at(ms: u64) -> Timestamp {
    Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000)
}

/// A started core (batch_size 3, batch_timeout 10 ms) with requests arriving at `arrivals` ms,
/// then `then` applied at the last arrival: its dispatch deadline must be `expected` ms, and
/// `poll_dispatch` must give a batch at the deadline and not a moment before.
fn check(arrivals: &[u64], then: impl FnOnce(&mut BatcherCore, Timestamp), expected: Option<u64>) {
    let mut core = BatcherCore::new(BatchConfig::new(3, Duration::from_millis(10)).unwrap());
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    for (i, &t) in arrivals.iter().enumerate() {
        assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(t)), Ok(i as u64), "ids count submits");
    }
    let last = at(arrivals.last().copied().unwrap_or(0));
    then(&mut core, last);
    let deadline = core.dispatch_deadline();
    assert_eq!(deadline, expected.map(at), "arrivals {arrivals:?}");
    assert_eq!(core.poll_timeout(), deadline, "no generate timeout: the dispatch deadline is the timeout");
    if let Some(d) = deadline.filter(|&d| d > last) {
        assert_eq!(core.poll_dispatch(Timestamp::from_nanos(d.as_nanos() - 1)), None, "dispatched before {d:?}");
    }
    if let Some(d) = deadline {
        assert!(core.poll_dispatch(d.max(last)).is_some(), "nothing dispatched at the deadline {d:?}");
    }
}

fn nothing(_: &mut BatcherCore, _: Timestamp) {}

#[test]
fn dispatch_deadline_says_when_and_now_means_now() {
    check(&[], nothing, None);
    // A partial batch waits batch_timeout after its oldest request.
    check(&[5], nothing, Some(15));
    check(&[5, 6], nothing, Some(15));
    // A full batch is due since it filled: in the past, that is, now.
    check(&[5, 6, 7], nothing, Some(7));
    check(&[5, 6, 7, 8], nothing, Some(7));
    // ... unless its oldest request timed out even earlier.
    check(&[1, 2, 30], nothing, Some(11));
    // Draining: due at once, full or not.
    check(&[5], |c, now| c.begin_shutdown(now), Some(5));
    check(&[5, 6, 7, 8], |c, now| c.begin_shutdown(now), Some(5));
    // Nothing is due while a generate runs, or once the engine is unusable.
    check(
        &[5, 6, 7, 8],
        |c, now| {
            let _batch = c.poll_dispatch(now).expect("full");
        },
        None,
    );
    check(&[5], |c, now| c.handle_engine_died(death(), now), None);
    check(&[5], |c, now| c.abort_in_flight(now), None);
}

fn death() -> EngineDeath {
    EngineDeath { process: "VLLM::EngineCore".into(), pid: Some(7), status: "killed by SIGKILL".into() }
}

#[test]
fn death_fails_everything_once_and_rejects_later_submits() {
    let mut core = BatcherCore::new(BatchConfig::new(2, Duration::from_millis(10)).unwrap());
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    for _ in 0..3 {
        core.submit(EngineRequest::tokens(vec![1], 1), at(1)).unwrap();
    }
    let batch = core.poll_dispatch(at(1)).expect("a full batch");
    core.handle_engine_died(death(), at(2));
    core.handle_engine_died(death(), at(3));
    core.abort_in_flight(at(3));
    let died = RequestError::EngineDied(death());
    let outcomes: Vec<_> = std::iter::from_fn(|| core.poll_outcome()).collect();
    assert_eq!(outcomes, [(0, Err(died.clone())), (1, Err(died.clone())), (2, Err(died.clone()))]);
    assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(4)), Err(died.clone()));
    assert_eq!(core.state(), State::Failed);
    // Shutdown needs nothing from the stuck generate, and never shuts the engine down under it.
    core.begin_shutdown(at(5));
    assert!(core.is_wedged());
    assert!(!core.poll_engine_shutdown());
    // Should the generate ever return, its result is discarded and the engine is released.
    core.handle_generate_result(batch.id, GenerateResult::Outputs(Vec::new()), at(6));
    assert_eq!(core.poll_outcome(), None);
    assert!(core.poll_engine_shutdown());
    core.handle_engine_shutdown_done();
    assert_eq!(core.state(), State::Stopped);
    assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(7)), Err(died));
}

/// An engine that raised "dead" (no process named) before the process watch saw its worker
/// die: the failed batch keeps the engine's error, and the watch's death, which names the
/// process, becomes the failure later submits get. Never the other way round.
#[test]
fn a_process_death_names_the_cause_of_an_engines_own_death() {
    let mut core = BatcherCore::new(BatchConfig::new(1, Duration::from_millis(10)).unwrap());
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    core.submit(EngineRequest::tokens(vec![1], 1), at(1)).unwrap();
    let batch = core.poll_dispatch(at(1)).expect("a full batch");
    let raised = EngineDeath { process: "VllmEngine".into(), pid: None, status: "raised EngineDeadError".into() };
    core.handle_generate_result(batch.id, GenerateResult::Error(EngineError::Died(raised.clone())), at(2));
    assert_eq!(core.poll_outcome(), Some((0, Err(RequestError::EngineDied(raised.clone())))));
    core.handle_engine_died(death(), at(3));
    assert_eq!(core.poll_outcome(), None, "what failed keeps its error");
    assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(4)), Err(RequestError::EngineDied(death())));
    // A later unnamed death, or another process's, changes nothing.
    core.handle_engine_died(raised, at(5));
    let other = EngineDeath { pid: Some(8), ..death() };
    core.handle_engine_died(other, at(5));
    assert_eq!(core.failure(), Some(&RequestError::EngineDied(death())));
}

/// The core names every request: each submit, admitted or not, gets the next id, and a
/// cancel, a reconfigure or a failure never makes one come back.
#[test]
fn the_core_numbers_every_submit_and_never_repeats_an_id() {
    let mut core = BatcherCore::new(BatchConfig::new(2, Duration::from_millis(10)).unwrap()).with_events();
    let submit = |core: &mut BatcherCore, t| core.submit(EngineRequest::tokens(vec![1], 1), at(t));
    assert_eq!(submit(&mut core, 0), Err(RequestError::EngineNotStarted));
    assert!(core.begin_start());
    assert_eq!(submit(&mut core, 0), Ok(1), "a rejected submit used id 0");
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    assert_eq!(submit(&mut core, 1), Ok(2));
    let batch = core.poll_dispatch(at(1)).expect("a full batch");
    assert_eq!(batch.requests.iter().map(|r| r.id).collect::<Vec<_>>(), [1, 2], "the engine sees the core's ids");
    assert_eq!(submit(&mut core, 2), Ok(3));
    assert!(core.cancel(3, at(2)));
    core.handle_generate_result(batch.id, GenerateResult::Outputs(Vec::new()), at(3));
    while core.poll_outcome().is_some() {}
    core.reconfigure(BatchConfig::new(4, Duration::from_millis(10)).unwrap()).unwrap();
    assert_eq!(submit(&mut core, 4), Ok(4), "a cancelled id is not given again");
    core.handle_engine_died(death(), at(5));
    assert!(submit(&mut core, 6).is_err());
    let mut named = Vec::new();
    for event in core.take_events() {
        if let Event::Submitted { id, .. } | Event::Rejected { id, .. } = event {
            named.push(id);
        }
    }
    assert_eq!(named, [0, 1, 2, 3, 4, 5], "every submit named once, in order");
}

/// A started core with batch_size 2 and a stall timeout of 1 s.
fn stall_watched() -> BatcherCore {
    let config = BatchConfig::new(2, Duration::from_millis(10))
        .and_then(|c| c.with_stall_timeout(Some(Duration::from_secs(1))))
        .unwrap();
    let mut core = BatcherCore::new(config);
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    core
}

#[test]
fn a_generate_without_progress_stalls_the_engine_for_good() {
    let mut core = stall_watched();
    for _ in 0..3 {
        core.submit(EngineRequest::tokens(vec![1], 1), at(0)).unwrap();
    }
    assert_eq!(core.stall_watched_batch(), None, "nothing runs");
    let batch = core.poll_dispatch(at(0)).expect("a full batch");
    assert_eq!(core.stall_watched_batch(), Some(batch.id));
    assert_eq!(core.stall_deadline(), Some(at(1000)), "the dispatch is the first sign of life");
    assert_eq!(core.poll_timeout(), Some(at(1000)), "the driver is woken for it");
    // The first sample of a generate is its baseline; only a busy engine (CPU time grown by a
    // tenth of the time passed) makes progress.
    let cpu = Duration::from_millis;
    core.handle_cpu_sample(batch.id, cpu(5), at(100));
    assert_eq!(core.stall_deadline(), Some(at(1000)));
    core.handle_cpu_sample(batch.id, cpu(60), at(500));
    assert_eq!(core.stall_deadline(), Some(at(1500)), "55 ms of CPU in 400 ms is busy: progress at 500 ms");
    core.handle_cpu_sample(batch.id, cpu(66), at(900));
    assert_eq!(core.stall_deadline(), Some(at(1500)), "6 ms in 400 ms is a poller waiting, not work");
    core.handle_cpu_sample(batch.id, cpu(66), at(1400));
    core.handle_cpu_sample(batch.id + 1, cpu(900), at(1450));
    assert_eq!(core.stall_deadline(), Some(at(1500)), "flat CPU time, or another batch's, is no progress");
    core.handle_timeout(at(1499));
    assert_eq!(core.poll_outcome(), None, "not stalled a moment early");
    core.handle_timeout(at(1500));
    let stalled =
        RequestError::EngineStalled { batch_id: batch.id, batch_size: 2, stalled_for: Duration::from_secs(1) };
    let outcomes: Vec<_> = std::iter::from_fn(|| core.poll_outcome()).collect();
    assert_eq!(outcomes, [(0, Err(stalled.clone())), (1, Err(stalled.clone())), (2, Err(stalled.clone()))]);
    assert_eq!(stalled.kind(), "engine_stalled");
    assert!(stalled.engine_unusable());
    assert_eq!(core.state(), State::Failed, "a frozen engine is not used again");
    assert_eq!(core.submit(EngineRequest::tokens(vec![1], 1), at(1600)), Err(stalled));
    assert_eq!((core.stall_deadline(), core.stall_watched_batch()), (None, None), "the generate is abandoned");
    // Should the frozen generate return (a SIGCONT), its result is discarded.
    core.handle_generate_result(batch.id, GenerateResult::Outputs(Vec::new()), at(2000));
    assert_eq!(core.poll_outcome(), None);
}

#[test]
fn the_stall_limit_is_the_floor_or_a_multiple_of_the_longest_generate() {
    let mut core = stall_watched();
    for _ in 0..2 {
        core.submit(EngineRequest::tokens(vec![1], 1), at(0)).unwrap();
    }
    let first = core.poll_dispatch(at(0)).expect("a full batch");
    let outputs = vec![EngineOutput::new(None, crate::engine::FinishReason::Length); 2];
    core.handle_generate_result(first.id, GenerateResult::Outputs(outputs), at(600));
    while core.poll_outcome().is_some() {}
    for _ in 0..2 {
        core.submit(EngineRequest::tokens(vec![1], 1), at(700)).unwrap();
    }
    let _second = core.poll_dispatch(at(700)).expect("a full batch");
    // 4 × 600 ms is longer than the 1 s floor.
    assert_eq!(core.stall_deadline(), Some(at(700 + 2400)));
    let config = core.config().clone();
    assert_eq!(config.stall_limit(Duration::from_millis(100)), Some(Duration::from_secs(1)), "the floor");
    assert_eq!(BatchConfig::default().stall_limit(Duration::from_secs(9)), None, "no stall timeout, no limit");
    assert_eq!(BatchConfig::default().with_stall_timeout(Some(Duration::ZERO)), Err(ConfigError::ZeroStallTimeout));
}

#[test]
fn real_engine_defaults_fill_only_what_is_unset() {
    let d = BatchConfig::default().with_real_engine_defaults();
    assert_eq!(d.generate_timeout(), Some(REAL_ENGINE_GENERATE_TIMEOUT));
    assert_eq!(d.stall_timeout(), Some(REAL_ENGINE_STALL_TIMEOUT));
    let set =
        BatchConfig::default().with_stall_timeout(Some(Duration::from_secs(2))).unwrap().with_real_engine_defaults();
    assert_eq!(set.stall_timeout(), Some(Duration::from_secs(2)));
}

/// A started core with batch_size 2, a long batch timeout, `max_in_flight` slots and the given
/// generate timeout.
fn several(max_in_flight: usize, generate_timeout: Option<Duration>) -> BatcherCore {
    let config = BatchConfig::new(2, Duration::from_secs(60))
        .and_then(|c| c.with_max_in_flight(max_in_flight))
        .and_then(|c| c.with_generate_timeout(generate_timeout))
        .unwrap();
    let mut core = BatcherCore::new(config).with_events();
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    core
}

fn submit_n(core: &mut BatcherCore, n: usize, t: u64) {
    for _ in 0..n {
        core.submit(EngineRequest::tokens(vec![1], 1), at(t)).unwrap();
    }
}

fn echo(batch: &Batch) -> GenerateResult {
    let outputs = batch.requests.iter().map(|r| EngineOutput::new(Some(r.id), crate::engine::FinishReason::Length));
    GenerateResult::Outputs(outputs.collect())
}

fn outcomes(core: &mut BatcherCore) -> Vec<(RequestId, Outcome)> {
    std::iter::from_fn(|| core.poll_outcome()).collect()
}

#[test]
fn up_to_max_in_flight_batches_go_out_and_return_in_any_order() {
    let mut core = several(2, None);
    submit_n(&mut core, 7, 1);
    let first = core.poll_dispatch(at(1)).expect("a full batch");
    let second = core.poll_dispatch(at(1)).expect("a second full batch: a slot is free");
    assert_eq!((first.reason, second.reason), (FlushReason::Full, FlushReason::Full));
    assert_eq!(core.generates_in_flight(), 2);
    assert_eq!(core.dispatch_deadline(), None, "both slots taken: nothing is due");
    assert_eq!(core.poll_dispatch(at(1)), None, "no third batch beyond max_in_flight");
    // The second batch returns first: its requests, and only they, are answered.
    core.handle_generate_result(second.id, echo(&second), at(5));
    let got = outcomes(&mut core);
    assert_eq!(got.iter().map(|o| o.0).collect::<Vec<_>>(), [2, 3]);
    for (id, outcome) in got {
        let c = outcome.expect("completed");
        assert_eq!((c.output.request_id, c.batch_id, c.batch_size), (Some(id), second.id, 2));
        assert_eq!((c.times.dispatched, c.times.completed), (at(1), at(5)));
    }
    // Its slot is free: the next full batch goes at once, the first still running.
    let third = core.poll_dispatch(at(5)).expect("the freed slot takes the next batch");
    assert_eq!(third.requests.iter().map(|r| r.id).collect::<Vec<_>>(), [4, 5], "the queue's front");
    // A result for a batch that is not in flight (returned already, or never given out) is ignored.
    core.handle_generate_result(second.id, echo(&second), at(6));
    core.handle_generate_result(99, GenerateResult::Outputs(Vec::new()), at(6));
    assert_eq!(outcomes(&mut core), []);
    core.handle_generate_result(first.id, echo(&first), at(7));
    assert_eq!(outcomes(&mut core).iter().map(|o| o.0).collect::<Vec<_>>(), [0, 1]);
    // Shutdown drains the last request as its own batch, then the engine stops once every
    // generate returned.
    core.begin_shutdown(at(8));
    let drained = core.poll_dispatch(at(8)).expect("the drain");
    assert_eq!((drained.reason, drained.requests.len()), (FlushReason::Drain, 1));
    assert!(!core.poll_engine_shutdown(), "two generates are out");
    core.handle_generate_result(drained.id, echo(&drained), at(9));
    assert!(!core.poll_engine_shutdown(), "one generate is out");
    core.handle_generate_result(third.id, GenerateResult::Error(EngineError::Generate("boom".into())), at(10));
    let failed = outcomes(&mut core);
    assert_eq!(failed.len(), 3);
    assert!(matches!(&failed[0], (6, Ok(_))));
    assert!(matches!(&failed[1..], [(4, Err(RequestError::Engine { batch_size: 2, .. })), (5, Err(_))]));
    assert!(core.poll_engine_shutdown());
    core.handle_engine_shutdown_done();
    assert_eq!(core.state(), State::Stopped);
}

#[test]
fn the_generate_timeout_is_per_batch_and_a_stuck_slot_stays_taken() {
    let limit = Duration::from_millis(100);
    let mut core = several(2, Some(limit));
    submit_n(&mut core, 2, 0);
    let a = core.poll_dispatch(at(0)).expect("a");
    submit_n(&mut core, 2, 50);
    let b = core.poll_dispatch(at(50)).expect("b");
    assert_eq!(core.watchdog_deadline(), Some(at(100)), "the oldest generate's own deadline");
    core.handle_timeout(at(100));
    let timed_out = RequestError::GenerateTimedOut { batch_id: a.id, batch_size: 2, after: limit };
    assert_eq!(outcomes(&mut core), [(0, Err(timed_out.clone())), (1, Err(timed_out))], "only batch a fails");
    assert_eq!(core.watchdog_deadline(), Some(at(150)), "b's deadline is its own");
    // a's slot stays taken until its generate returns: no third batch.
    submit_n(&mut core, 2, 120);
    assert_eq!(core.poll_dispatch(at(120)), None);
    core.handle_generate_result(b.id, echo(&b), at(130));
    assert_eq!(outcomes(&mut core).len(), 2, "b completes");
    let c = core.poll_dispatch(at(130)).expect("b's slot takes the next batch");
    submit_n(&mut core, 1, 140);
    core.handle_timeout(at(230));
    assert_eq!(outcomes(&mut core).len(), 2, "c timed out too");
    // Both slots are held by abandoned generates: the queued request fails once it waited
    // generate_timeout, and not a moment before.
    assert!(core.engine_unresponsive());
    assert_eq!(core.watchdog_deadline(), Some(at(240)));
    core.handle_timeout(at(239));
    assert_eq!(outcomes(&mut core), []);
    core.handle_timeout(at(240));
    assert!(matches!(outcomes(&mut core).as_slice(), [(6, Err(RequestError::EngineUnresponsive { .. }))]));
    // A late result of an abandoned batch is discarded and frees its slot.
    core.handle_generate_result(a.id, echo(&a), at(300));
    assert_eq!(outcomes(&mut core), []);
    submit_n(&mut core, 1, 300);
    assert_eq!(core.watchdog_deadline(), None, "a slot is free: the queue moves, no queued deadline");
    core.begin_shutdown(at(300));
    assert!(!core.is_wedged(), "a request is queued");
    let last = core.poll_dispatch(at(300)).expect("the drain takes the free slot");
    assert!(!core.is_wedged(), "the drained batch runs");
    core.handle_generate_result(last.id, echo(&last), at(301));
    assert_eq!(outcomes(&mut core).len(), 1);
    assert!(core.is_wedged(), "everyone is answered; only the abandoned c is out");
    assert!(!core.poll_engine_shutdown(), "c is still out");
    core.handle_generate_result(c.id, echo(&c), at(310));
    assert!(core.poll_engine_shutdown());
}

#[test]
fn death_fails_every_batch_in_flight_and_the_engine_stops_after_the_last_returns() {
    let mut core = several(3, None);
    submit_n(&mut core, 5, 1);
    let batches: Vec<Batch> = std::iter::from_fn(|| core.poll_dispatch(at(1))).collect();
    assert_eq!(batches.len(), 2);
    core.begin_shutdown(at(2));
    let drained = core.poll_dispatch(at(2)).expect("the last request drains into the third slot");
    core.handle_engine_died(death(), at(3));
    let died = RequestError::EngineDied(death());
    assert_eq!(outcomes(&mut core), (0..5).map(|id| (id, Err(died.clone()))).collect::<Vec<_>>());
    assert!(core.is_wedged(), "every generate out is abandoned");
    for (k, batch) in [&batches[1], &drained, &batches[0]].into_iter().enumerate() {
        assert!(!core.poll_engine_shutdown(), "shutdown while {} generates are out", 3 - k);
        core.handle_generate_result(batch.id, echo(batch), at(4 + k as u64));
        assert_eq!(outcomes(&mut core), [], "a late result after the death is discarded");
    }
    assert!(core.poll_engine_shutdown());
    assert!(!core.poll_engine_shutdown(), "once");
}

#[test]
fn the_stall_watch_is_off_with_several_in_flight() {
    let config = BatchConfig::new(1, Duration::from_millis(10))
        .and_then(|c| c.with_stall_timeout(Some(Duration::from_secs(1))))
        .and_then(|c| c.with_max_in_flight(2))
        .unwrap();
    let mut core = BatcherCore::new(config);
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    submit_n(&mut core, 1, 0);
    let batch = core.poll_dispatch(at(0)).expect("a full batch");
    assert_eq!((core.stall_watched_batch(), core.stall_deadline()), (None, None));
    core.handle_cpu_sample(batch.id, Duration::ZERO, at(100));
    core.handle_timeout(at(1_000_000));
    assert_eq!(core.poll_outcome(), None, "a long generate is no stall here");
    assert_eq!(BatchConfig::default().with_max_in_flight(0), Err(ConfigError::ZeroMaxInFlight));
    assert_eq!(BatchConfig::default().max_in_flight(), 1);
}

#[test]
fn an_engine_that_runs_here_is_stall_watched_through_its_oldest_generate_with_several_in_flight() {
    let config = BatchConfig::new(1, Duration::from_millis(10))
        .and_then(|c| c.with_stall_timeout(Some(Duration::from_secs(1))))
        .and_then(|c| c.with_max_in_flight(4))
        .unwrap();
    let mut core = BatcherCore::new(config);
    core.set_engine_runs_here(true);
    assert!(core.begin_start());
    core.handle_start_result(Ok(EngineInfo::new("t", "0")), at(0));
    submit_n(&mut core, 2, 0);
    let first = core.poll_dispatch(at(0)).expect("the first request");
    let second = core.poll_dispatch(at(0)).expect("the second, at once: a slot is free");
    assert_eq!((core.stall_watched_batch(), core.stall_deadline()), (Some(first.id), Some(at(1000))));
    // Another generate's result is the engine's sign of life; the oldest running one is watched.
    core.handle_generate_result(
        first.id,
        GenerateResult::Outputs(vec![EngineOutput::new(Some(0), crate::engine::FinishReason::Length)]),
        at(100),
    );
    assert_eq!(core.poll_outcome().map(|(id, o)| (id, o.is_ok())), Some((0, true)));
    assert_eq!((core.stall_watched_batch(), core.stall_deadline()), (Some(second.id), Some(at(1100))));
    let cpu = Duration::from_millis;
    core.handle_cpu_sample(second.id, cpu(0), at(200));
    core.handle_cpu_sample(second.id, cpu(300), at(700));
    assert_eq!(core.stall_deadline(), Some(at(1700)), "a busy engine is progress");
    core.handle_timeout(at(1699));
    assert_eq!(core.poll_outcome(), None, "not stalled a moment early");
    core.handle_timeout(at(1700));
    let stalled =
        RequestError::EngineStalled { batch_id: second.id, batch_size: 1, stalled_for: Duration::from_secs(1) };
    assert_eq!(core.poll_outcome(), Some((1, Err(stalled))));
    assert_eq!(core.state(), State::Failed);
}

#[test]
fn engine_death_display() {
    assert_eq!(death().to_string(), "VLLM::EngineCore (pid 7) killed by SIGKILL");
    let d = EngineDeath { process: "engine".into(), pid: None, status: "raised EngineDeadError".into() };
    assert_eq!(EngineError::Died(d.clone()).to_string(), "engine died: engine raised EngineDeadError");
    assert_eq!(RequestError::EngineDied(d).kind(), "engine_died");
    assert_eq!(RequestError::Aborted.kind(), "aborted");
}
