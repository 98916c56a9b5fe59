//! The fault wrapper works around any engine: the simulator on a real clock and an engine written
//! here, as a user would, with nothing but `batchlab::` public items. Every fault kind is injected
//! into both; the process faults kill a stand-in child whose argv[0] is vLLM's process name.
//!
//! The engines and the wrapper share one virtual clock: an injected delay (hang, slow, start
//! delay) is read off that clock exactly, and no test waits in real time.

mod common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use batchlab::engine::faults::{FaultTrigger, Faults, FaultyEngine, ProcessFault};
use batchlab::engine::sim::{CostModel, SimConfig, SimEngine};
use batchlab::engine::{Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, Started};
use batchlab::time::{Clock, VirtualClock, WallAnchor};

/// How long one generate takes in both engines.
const WORK: Duration = Duration::from_millis(15);

/// A user's engine: echoes after `WORK` on its clock, and counts how often it was called.
struct UserEngine {
    clock: VirtualClock,
    starts: Arc<AtomicU64>,
    generates: Arc<AtomicU64>,
}

impl Engine for UserEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        Ok(EngineInfo::new("user", "1").into())
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.generates.fetch_add(1, Ordering::SeqCst);
        self.clock.sleep(WORK);
        Ok(common::echo(batch))
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// An engine around its clock, shared with the fault wrapper.
type Made = (Box<dyn Engine>, VirtualClock);

fn sim() -> Made {
    let clock = VirtualClock::new();
    let cost = CostModel { fixed_overhead: WORK, ..CostModel::free() };
    let config = SimConfig { seed: 7, cost, ..SimConfig::default() };
    (Box::new(SimEngine::on_clock(config, Arc::new(clock.clone()), WallAnchor::VIRTUAL)), clock)
}

fn user_engine() -> (Made, Arc<AtomicU64>, Arc<AtomicU64>) {
    let clock = VirtualClock::new();
    let (starts, generates) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let engine = UserEngine { clock: clock.clone(), starts: starts.clone(), generates: generates.clone() };
    ((Box::new(engine), clock), starts, generates)
}

fn wrap((inner, clock): Made, faults: Faults) -> (FaultyEngine<Box<dyn Engine>>, VirtualClock) {
    (FaultyEngine::new(inner, faults, 7, Arc::new(clock.clone())), clock)
}

fn batch(n: u64) -> Vec<EngineRequest> {
    (0..n).map(|i| EngineRequest::tokens(vec![1, 2, 3], 2).with_id(i)).collect()
}

/// What one started engine with `faults` gives for one batch of 4, and how much time it took.
fn generate_once(inner: Made, faults: Faults) -> (Result<Vec<EngineOutput>, EngineError>, Duration) {
    let (mut e, clock) = wrap(inner, faults);
    e.start().expect("start");
    let t0 = clock.now();
    let r = e.generate(&batch(4));
    (r, clock.now().saturating_since(t0))
}

fn every_call(f: impl FnOnce(&mut Faults, FaultTrigger)) -> Faults {
    let mut faults = Faults::default();
    f(&mut faults, FaultTrigger::every(1));
    faults
}

/// Every batch fault, against an engine made by `make`.
fn batch_faults_are_injected(make: &dyn Fn() -> Made) {
    let (r, took) = generate_once(make(), Faults::default());
    assert_eq!(r.expect("no faults").len(), 4);
    assert_eq!(took, WORK, "the engine's own work");

    let (r, _) = generate_once(make(), every_call(|f, t| f.fail_batch = t));
    assert!(matches!(r, Err(EngineError::Generate(m)) if m.contains("injected failure")));
    let (r, _) = generate_once(make(), every_call(|f, t| f.short_output = t));
    assert_eq!(r.expect("short_output").len(), 3);
    let (r, _) = generate_once(make(), every_call(|f, t| f.extra_output = t));
    assert_eq!(r.expect("extra_output").len(), 5);
    let (r, _) = generate_once(make(), every_call(|f, t| f.wrong_id = t));
    assert_eq!(r.expect("wrong_id")[0].request_id, Some(4), "an id not in the batch");

    let (mut e, _) = wrap(make(), every_call(|f, t| f.panic = t));
    e.start().expect("start");
    assert!(catch_unwind(AssertUnwindSafe(|| e.generate(&batch(4)))).is_err(), "panic");

    let hang_for = Duration::from_millis(40);
    let (r, took) = generate_once(make(), Faults { hang: FaultTrigger::every(1), hang_for, ..Faults::default() });
    assert!(matches!(r, Err(EngineError::Generate(m)) if m.contains("injected hang")));
    assert_eq!(took, hang_for, "a hang takes exactly hang_for");

    let (r, took) =
        generate_once(make(), Faults { slow: FaultTrigger::every(1), slow_factor: 3.0, ..Faults::default() });
    assert_eq!(r.expect("slow").len(), 4);
    assert_eq!(took, WORK * 3, "slow_factor 3 on the engine's {WORK:?}");

    let start_delay = Duration::from_millis(30);
    let (mut e, clock) = wrap(make(), Faults { start_delay, ..Faults::default() });
    let t0 = clock.now();
    e.start().expect("a delayed start still starts");
    assert_eq!(clock.now().saturating_since(t0), start_delay);
    let (mut e, _) = wrap(make(), Faults { start_fails: true, ..Faults::default() });
    assert!(matches!(e.start(), Err(EngineError::Start(_))));
}

#[test]
fn every_fault_around_a_sim_engine() {
    batch_faults_are_injected(&sim);
}

#[test]
fn every_fault_around_a_user_engine() {
    batch_faults_are_injected(&|| user_engine().0);
    // Faults that replace the engine's work do not call it at all.
    let (inner, starts, generates) = user_engine();
    let (mut e, _) = wrap(inner, Faults { fail_batch: FaultTrigger::every(2), ..Faults::default() });
    e.start().expect("start");
    for _ in 0..4 {
        let _ = e.generate(&batch(1));
    }
    assert_eq!((starts.load(Ordering::SeqCst), generates.load(Ordering::SeqCst)), (1, 2));
    let (inner, starts, _) = user_engine();
    let (mut e, _) = wrap(inner, Faults { start_fails: true, ..Faults::default() });
    assert!(e.start().is_err());
    assert!(e.shutdown().is_ok());
    assert_eq!(starts.load(Ordering::SeqCst), 0);
}

/// `kill_engine` and `kill_worker` SIGKILL the descendant whose argv[0] is vLLM's process name,
/// during generate `after_batches + 1`.
#[test]
fn process_faults_kill_the_named_descendant_during_the_chosen_generate() {
    for (argv0, faults) in [
        ("VLLM::EngineCore", Faults { kill_engine: Some(ProcessFault { after_batches: 1 }), ..Faults::default() }),
        ("VLLM::Worker_TP0", Faults { kill_worker: Some(ProcessFault { after_batches: 1 }), ..Faults::default() }),
    ] {
        let mut stand_in =
            std::process::Command::new("sleep").arg0(argv0).arg("30").spawn().expect("spawning a stand-in process");
        let (inner, _, _) = user_engine();
        let (mut e, _) = wrap(inner, faults);
        e.start().expect("start");
        e.generate(&batch(1)).expect("generate 1");
        assert_eq!(stand_in.try_wait().expect("try_wait"), None, "{argv0} was killed too early");
        e.generate(&batch(1)).expect("generate 2 itself succeeds: only the process dies");
        let status = stand_in.wait().expect("wait");
        assert_eq!(status.signal(), Some(9), "{argv0}: {status:?}");
    }
}
