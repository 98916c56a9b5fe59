use std::time::Duration;

use super::*;
use crate::engine::sim::{CostModel, SimConfig, SimEngine};
use crate::time::{Timestamp, VirtualClock};

fn batch(n: u64) -> Vec<EngineRequest> {
    (0..n).map(|i| EngineRequest::tokens(vec![1; 4], 4).with_id(i)).collect()
}

/// A started sim engine in virtual time with `faults` around it, and its clock.
fn engine(faults: Faults) -> (FaultyEngine<SimEngine>, VirtualClock) {
    let (sim, clock) =
        SimEngine::virtual_time(SimConfig { seed: 1, cost: CostModel::default(), ..SimConfig::default() });
    let mut e = FaultyEngine::new(sim, faults, 1, Arc::new(clock.clone()));
    e.start().expect("start");
    (e, clock)
}

type Check = fn(&Result<Vec<EngineOutput>, EngineError>, usize) -> bool;

#[test]
fn each_batch_fault_fires_on_schedule() {
    let cases: [(Faults, Check); 5] = [
        (Faults { fail_batch: FaultTrigger::every(1), ..Faults::default() }, |r, _| r.is_err()),
        (Faults { short_output: FaultTrigger::every(1), ..Faults::default() }, |r, n| {
            r.as_ref().is_ok_and(|o| o.len() == n - 1)
        }),
        (Faults { extra_output: FaultTrigger::every(1), ..Faults::default() }, |r, n| {
            r.as_ref().is_ok_and(|o| o.len() == n + 1)
        }),
        (Faults { wrong_id: FaultTrigger::every(1), ..Faults::default() }, |r, n| {
            r.as_ref().is_ok_and(|o| o[0].request_id == Some(n as u64))
        }),
        (Faults { hang: FaultTrigger::every(1), hang_for: Duration::from_secs(7), ..Faults::default() }, |r, _| {
            r.is_err()
        }),
    ];
    for (i, (faults, check)) in cases.into_iter().enumerate() {
        let (mut e, _) = engine(faults);
        let r = e.generate(&batch(4));
        assert!(check(&r, 4), "case {i}: {r:?}");
    }
}

#[test]
fn every_nth_batch_fails() {
    let (mut e, _) = engine(Faults { fail_batch: FaultTrigger::every(3), ..Faults::default() });
    let failed: Vec<bool> = (0..7).map(|_| e.generate(&batch(1)).is_err()).collect();
    assert_eq!(failed, [false, false, true, false, false, true, false]);
}

#[test]
fn same_seed_same_faults() {
    let faults = Faults { fail_batch: FaultTrigger::probability(0.3), ..Faults::default() };
    let run = || {
        let (mut e, _) = engine(faults.clone());
        (0..64).map(|_| e.generate(&batch(1)).is_err()).collect::<Vec<_>>()
    };
    let (a, b) = (run(), run());
    assert_eq!(a, b);
    assert!(a.contains(&true) && a.contains(&false), "{a:?}");
}

#[test]
fn panic_panics_and_hang_takes_virtual_time() {
    let (mut e, _) = engine(Faults { panic: FaultTrigger::every(1), ..Faults::default() });
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.generate(&batch(1))));
    assert!(r.is_err());

    let (mut e, clock) =
        engine(Faults { hang: FaultTrigger::every(1), hang_for: Duration::from_secs(3600), ..Faults::default() });
    let t0 = clock.now();
    // The hour passes on the virtual clock (a real one would make this test hang for an hour).
    assert!(e.generate(&batch(1)).is_err());
    assert_eq!(clock.now(), t0.saturating_add(Duration::from_secs(3600)));
}

#[test]
fn slow_returns_factor_times_later_with_the_engines_own_timestamps() {
    let (mut plain, clock) = engine(Faults::default());
    let t0 = clock.now();
    let fast = plain.generate(&batch(2)).expect("generate");
    let took = clock.now().saturating_since(t0);
    assert!(took > Duration::ZERO);

    let (mut slow, clock) = engine(Faults { slow: FaultTrigger::every(1), slow_factor: 4.0, ..Faults::default() });
    let t0 = clock.now();
    let late = slow.generate(&batch(2)).expect("generate");
    assert_eq!(clock.now().saturating_since(t0), took * 4);
    assert_eq!(late, fast, "the outputs (and their engine timestamps) are the engine's");
}

#[test]
fn start_faults() {
    let (sim, clock) =
        SimEngine::virtual_time(SimConfig { seed: 1, cost: CostModel::default(), ..SimConfig::default() });
    let faults = Faults { start_fails: true, start_delay: Duration::from_secs(2), ..Faults::default() };
    let mut e = FaultyEngine::new(sim, faults, 1, Arc::new(clock.clone()));
    assert!(e.start().is_err());
    assert_eq!(clock.now(), Timestamp::from_nanos(VirtualClock::ORIGIN.as_nanos() + 2_000_000_000));
    assert!(e.generate(&batch(1)).is_err(), "generate before a successful start fails");
    assert!(e.shutdown().is_ok(), "nothing to shut down");
}

#[test]
fn process_targets_match_vllm_argv0() {
    assert!(process::Target::EngineCore.matches("VLLM::EngineCore"));
    assert!(process::Target::Worker.matches("VLLM::Worker_TP0"));
    assert!(!process::Target::EngineCore.matches("VLLM::Worker"));
    assert!(!process::Target::Worker.matches("python3"));
}

/// An engine whose concurrent face answers every batch at once, one output per request, from
/// whatever thread calls it.
struct Echo;

impl Engine for Echo {
    fn start(&mut self) -> Result<Started, EngineError> {
        let info = crate::engine::EngineInfo::new("echo", "0");
        Ok(Started { info, concurrent: Some(Concurrent::new(Arc::new(EchoConcurrent))) })
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        Ok(echo(batch))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

fn echo(batch: &[EngineRequest]) -> Vec<EngineOutput> {
    batch.iter().map(|r| EngineOutput::new(Some(r.id), crate::engine::FinishReason::Length)).collect()
}

struct EchoConcurrent;

impl ConcurrentEngine for EchoConcurrent {
    fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
        done(Ok(echo(&batch)));
    }
}

/// The result of one concurrent generate, and how many times `done` was called (waiting, boundedly,
/// for a fault held back on a thread).
fn concurrent_generate(face: &Arc<dyn ConcurrentEngine>, n: u64) -> (Result<Vec<EngineOutput>, EngineError>, usize) {
    let (tx, rx) = std::sync::mpsc::channel();
    face.generate(batch(n), Box::new(move |r| tx.send(r).unwrap()));
    let first = rx.recv_timeout(Duration::from_secs(10)).expect("done is called");
    let more = rx.try_iter().count();
    (first, 1 + more)
}

#[test]
fn the_concurrent_face_gets_the_same_faults_from_the_same_count() {
    let clock = VirtualClock::new();
    let start = clock.now();
    let faults = Faults {
        fail_batch: FaultTrigger::every(3),
        short_output: FaultTrigger::every(4),
        wrong_id: FaultTrigger::every(5),
        hang: FaultTrigger::every(7),
        hang_for: Duration::from_secs(60),
        ..Faults::default()
    };
    let mut e = FaultyEngine::new(Echo, faults, 1, Arc::new(clock.clone()));
    let face = e.start().unwrap().concurrent.expect("the inner engine's face, wrapped").face;
    // Call 1 on the blocking face, then 2..=8 on the concurrent one: one count.
    assert_eq!(e.generate(&batch(2)).unwrap().len(), 2);
    let mut seen = Vec::new();
    for _ in 2..=8 {
        let (result, calls) = concurrent_generate(&face, 4);
        assert_eq!(calls, 1, "done is called exactly once");
        seen.push(match result {
            Err(EngineError::Generate(m)) if m.contains("hang") => "hang",
            Err(_) => "fail",
            Ok(o) if o.len() == 3 => "short",
            Ok(o) if o[0].request_id == Some(4) => "wrong_id",
            Ok(_) => "ok",
        });
    }
    assert_eq!(seen, ["ok", "fail", "short", "wrong_id", "fail", "hang", "short"]);
    assert_eq!(clock.now().saturating_since(start), Duration::from_secs(60), "the hang slept on the wrapper's clock");
}

#[test]
fn the_concurrent_face_panics_like_the_blocking_one_and_passes_through_when_inactive() {
    let mut quiet = FaultyEngine::new(Echo, Faults::default(), 1, Arc::new(VirtualClock::new()));
    let face = quiet.start().unwrap().concurrent.unwrap().face;
    assert_eq!(concurrent_generate(&face, 3).0.unwrap().len(), 3);

    let faults = Faults { panic: FaultTrigger::every(1), ..Faults::default() };
    let mut e = FaultyEngine::new(Echo, faults, 1, Arc::new(VirtualClock::new()));
    let face = e.start().unwrap().concurrent.unwrap().face;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| face.generate(batch(1), Box::new(|_| {}))));
    assert!(caught.is_err());
    // An engine without a concurrent face has none through the wrapper either.
    let (sim, _) = SimEngine::virtual_time(SimConfig { seed: 1, ..SimConfig::default() });
    let mut faulty = FaultyEngine::new(
        sim,
        Faults { fail_batch: FaultTrigger::every(2), ..Faults::default() },
        1,
        Arc::new(VirtualClock::new()),
    );
    assert!(faulty.start().unwrap().concurrent.is_none());
}

/// An engine whose start hands out a face with every capability: it runs here, counts steps and
/// has counters.
struct Capable;

impl Engine for Capable {
    fn start(&mut self) -> Result<Started, EngineError> {
        let at = Timestamp::from_nanos(5);
        let concurrent = Concurrent {
            runs_here: true,
            counters: Some(Arc::new(|| {
                vec![crate::engine::ServerCounters { endpoint: "http://127.0.0.1:1".into(), ..Default::default() }]
            })),
            steps: Some(Arc::new(move || vec![crate::engine::EngineStep::new(at, at, 2, 3)])),
            ..Concurrent::new(Arc::new(EchoConcurrent))
        };
        Ok(Started { info: crate::engine::EngineInfo::new("capable", "0"), concurrent: Some(concurrent) })
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        Ok(echo(batch))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// Issue 36, item 1: with any `[faults]` key, vLLM's continuous admission lost its stall watch
/// (`runs_here`) and counted hand-overs as batches (the steps), because the faulty face forwarded
/// only the counters. Now the capabilities are data the wrapper passes on: through two layers of
/// faults, each replacing only the face, all of them come through, and the face is faulty.
#[test]
fn the_faulty_concurrent_face_keeps_every_capability_of_the_face_it_wraps() {
    let faults = Faults { fail_batch: FaultTrigger::every(1), ..Faults::default() };
    let once = FaultyEngine::new(
        Capable,
        Faults { slow: FaultTrigger::every(5), ..Faults::default() },
        1,
        Arc::new(VirtualClock::new()),
    );
    let mut e = FaultyEngine::new(once, faults, 1, Arc::new(VirtualClock::new()));
    let c = e.start().unwrap().concurrent.expect("the wrapped face");
    assert!(c.runs_here, "runs_here passes through the fault layers");
    let steps = (c.steps.as_ref().expect("the steps pass through the fault layers"))();
    assert_eq!((steps.len(), steps[0].prefill, steps[0].decode), (1, 2, 3));
    assert_eq!((c.counters.as_ref().expect("the counters pass through"))().len(), 1);
    assert!(concurrent_generate(&c.face, 2).0.is_err(), "the outer layer's fail_batch: the face is the wrapped one");
}

/// One decision serves both faces: the same call of the same faults decides the same, and the
/// effect's hold is the slow factor's share of what the engine took.
#[test]
fn one_decision_and_one_effect_serve_both_faces() {
    let faults = Faults {
        short_output: FaultTrigger::every(2),
        slow: FaultTrigger::every(3),
        slow_factor: 4.0,
        ..Faults::default()
    };
    let b = batch(3);
    assert_eq!(
        faults.decide(1, 1, &b),
        Decision::Call(Effect { output: OutputFault::None, stranger: 3, slow_factor: None })
    );
    let Decision::Call(effect) = faults.decide(1, 6, &b) else { panic!("call 6 calls the engine") };
    let (result, hold) = effect.apply(Ok(echo(&b)), Duration::from_millis(10));
    assert_eq!((result.unwrap().len(), hold), (2, Some(Duration::from_millis(30))));
    let panics = Faults { panic: FaultTrigger::every(1), fail_batch: FaultTrigger::every(1), ..Faults::default() };
    assert_eq!(panics.decide(1, 7, &b), Decision::Panic { call: 7 }, "panic comes first");
    let hangs = Faults { hang: FaultTrigger::every(1), hang_for: Duration::from_secs(2), ..Faults::default() };
    assert!(matches!(hangs.decide(1, 1, &b), Decision::Refuse { hold: Some(d), .. } if d == Duration::from_secs(2)));
}
