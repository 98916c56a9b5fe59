//! Canonical batching runs in virtual time, snapshotted as event traces (insta).
//!
//! Each case is a small script against the virtual driver and the simulated engine; the trace
//! (core events, then every outcome) is the expected behaviour, reviewed once and kept.

use std::fmt::Write as _;
use std::time::Duration;

use batchlab::batcher::virtual_time::VirtualTimeBatcher;
use batchlab::batcher::{BatchConfig, Event};
use batchlab::engine::faults::{FaultTrigger, Faults, FaultyEngine};
use batchlab::engine::sim::{CostModel, SimConfig, SimEngine};
use batchlab::engine::{EngineDeath, EngineRequest};
use batchlab::time::VirtualClock;

enum Step {
    /// Submit `n` requests now.
    Submit(u64),
    /// Let `ms` milliseconds of virtual time pass.
    Wait(u64),
    /// Drop (cancel) request `id`.
    Cancel(u64),
    /// A process watcher reports the engine's death.
    Died,
    /// The first Ctrl-C abandons the running generate.
    Abort,
    Shutdown,
}

/// A generate of `n`-token outputs takes `n` ms: one 1 ms step per token.
fn cost() -> CostModel {
    CostModel { decode_step: Duration::from_millis(1), ..CostModel::free() }
}

/// Runs a script with the default [`cost`]; returns the rendered trace.
fn trace(
    batch_size: usize,
    timeout_ms: u64,
    generate_timeout_ms: Option<u64>,
    faults: Faults,
    steps: &[Step],
) -> String {
    trace_with(cost(), batch_size, timeout_ms, generate_timeout_ms, faults, steps)
}

/// Runs a script against a simulated engine of `cost`; returns the rendered trace. Times are
/// milliseconds since the driver's start.
fn trace_with(
    cost: CostModel,
    batch_size: usize,
    timeout_ms: u64,
    generate_timeout_ms: Option<u64>,
    faults: Faults,
    steps: &[Step],
) -> String {
    let config = BatchConfig::new(batch_size, Duration::from_millis(timeout_ms))
        .and_then(|c| c.with_generate_timeout(generate_timeout_ms.map(Duration::from_millis)))
        .expect("config");
    let (engine, clock) = SimEngine::virtual_time(SimConfig { seed: 1, cost, ..SimConfig::default() });
    let engine = FaultyEngine::new(engine, faults, 1, std::sync::Arc::new(clock.clone()));
    let mut d = VirtualTimeBatcher::new(engine, config, clock).with_events();
    let origin = VirtualClock::ORIGIN.as_nanos();
    let ms = |ns: u64| (ns - origin) as f64 / 1e6;
    let mut out = String::new();
    let start = d.start();
    writeln!(out, "start: {}", if start.is_ok() { "ok".to_string() } else { format!("{start:?}") }).unwrap();
    // The batcher numbers every submit, admitted or not: the k-th is request k.
    let mut submits = 0;
    for step in steps {
        match step {
            Step::Submit(n) => {
                for _ in 0..*n {
                    match d.submit(EngineRequest::tokens(vec![1, 2, 3], 2)) {
                        Ok(id) => assert_eq!(id, submits, "the batcher numbers submits 0, 1, 2, ..."),
                        Err(e) => writeln!(out, "submit {submits} rejected: {e}").unwrap(),
                    }
                    submits += 1;
                }
            }
            Step::Wait(t) => {
                let to = d.now().saturating_add(Duration::from_millis(*t));
                d.advance_to(to);
            }
            Step::Cancel(id) => {
                let _ = d.cancel(*id);
            }
            Step::Died => d.engine_died(EngineDeath::new("VLLM::EngineCore", Some(4242), "killed by SIGKILL")),
            Step::Abort => d.abort_in_flight(),
            Step::Shutdown => {
                let r = d.shutdown();
                writeln!(out, "shutdown: {r:?}").unwrap();
            }
        }
    }
    for e in d.take_events() {
        let line = match e {
            Event::Submitted { at, id } => format!("{:>8.3} submitted {id}", ms(at)),
            Event::Rejected { at, id, error } => format!("{:>8.3} rejected {id}: {error}", ms(at)),
            Event::Cancelled { at, id } => format!("{:>8.3} cancelled {id}", ms(at)),
            Event::Dispatched { at, batch, ids, reason } => {
                format!("{:>8.3} dispatch batch {batch} {ids:?} ({reason:?})", ms(at))
            }
            Event::BatchCompleted { at, batch } => format!("{:>8.3} batch {batch} completed", ms(at)),
            Event::BatchFailed { at, batch, error } => format!("{:>8.3} batch {batch} failed: {error}", ms(at)),
            Event::EngineFailed { at, error } => format!("{:>8.3} engine failed: {error}", ms(at)),
            Event::State { to } => format!("         state -> {to:?}"),
            Event::EngineShutdown => "         engine shutdown".to_string(),
        };
        writeln!(out, "{line}").unwrap();
    }
    let mut outcomes: Vec<String> = Vec::new();
    while let Some((id, o)) = d.poll_outcome() {
        outcomes.push(match o {
            Ok(c) => format!(
                "{id}: ok in batch {} (wait {:.3} ms, latency {:.3} ms)",
                c.batch_id,
                c.times.dispatched.saturating_since(c.times.submitted).as_secs_f64() * 1e3,
                c.times.completed.saturating_since(c.times.submitted).as_secs_f64() * 1e3
            ),
            Err(e) => format!("{id}: {} ({e})", e.kind()),
        });
    }
    outcomes.sort_by_key(|l| l.split(':').next().and_then(|n| n.parse::<u64>().ok()));
    writeln!(out, "outcomes:").unwrap();
    for o in outcomes {
        writeln!(out, "  {o}").unwrap();
    }
    out
}

macro_rules! trace_case {
    ($name:ident, $bs:expr, $to:expr, $gto:expr, $faults:expr, [$($step:expr),* $(,)?]) => {
        #[test]
        fn $name() {
            use Step::*;
            insta::assert_snapshot!(trace($bs, $to, $gto, $faults, &[$($step),*]));
        }
    };
}

trace_case!(full_batches_dispatch_at_once, 4, 10, None, Faults::default(), [Submit(8), Wait(50), Shutdown]);
trace_case!(
    partial_batch_waits_for_timeout,
    4,
    10,
    None,
    Faults::default(),
    [Submit(3), Wait(5), Submit(1), Wait(50), Submit(2), Wait(50), Shutdown]
);
trace_case!(
    requests_queue_while_a_generate_runs,
    2,
    10,
    None,
    Faults::default(),
    [Submit(2), Wait(1), Submit(3), Wait(100), Shutdown]
);
trace_case!(
    shutdown_drains_partial_batch_then_stops_engine,
    8,
    1000,
    None,
    Faults::default(),
    [Submit(3), Shutdown, Submit(1)]
);
trace_case!(
    engine_error_fails_whole_batch,
    3,
    10,
    None,
    Faults { fail_batch: FaultTrigger::every(1), ..Faults::default() },
    [Submit(3), Wait(50), Shutdown]
);
trace_case!(
    short_output_fails_whole_batch,
    3,
    10,
    None,
    Faults { short_output: FaultTrigger::every(2), ..Faults::default() },
    [Submit(6), Wait(50), Shutdown]
);
trace_case!(
    wrong_id_fails_whole_batch,
    3,
    10,
    None,
    Faults { wrong_id: FaultTrigger::every(1), ..Faults::default() },
    [Submit(3), Wait(50), Shutdown]
);
trace_case!(
    panic_fails_whole_batch_and_batcher_goes_on,
    2,
    10,
    None,
    Faults { panic: FaultTrigger::every(1), ..Faults::default() },
    [Submit(2), Wait(50), Shutdown]
);
trace_case!(
    hang_is_cut_by_generate_timeout,
    2,
    10,
    Some(100),
    Faults { hang: FaultTrigger::every(1), ..Faults::default() },
    [Submit(2), Wait(1), Submit(1), Wait(500), Submit(1), Shutdown]
);
trace_case!(
    cancel_before_dispatch_never_reaches_engine,
    4,
    10,
    None,
    Faults::default(),
    [Submit(2), Cancel(0), Wait(50), Shutdown]
);
trace_case!(
    start_failure_rejects_everything,
    4,
    10,
    None,
    Faults { start_fails: true, ..Faults::default() },
    [Submit(1), Shutdown]
);
trace_case!(
    engine_death_fails_running_batch_and_queue_and_rejects_later,
    2,
    10,
    None,
    Faults { hang: FaultTrigger::every(1), ..Faults::default() },
    [Submit(2), Wait(1), Submit(1), Died, Submit(1), Died, Shutdown]
);
trace_case!(
    abort_abandons_the_running_generate,
    2,
    10,
    None,
    Faults { hang: FaultTrigger::every(1), ..Faults::default() },
    [Submit(2), Wait(1), Submit(1), Abort, Submit(1), Shutdown]
);

/// Each step costs 1 ms per scheduled sequence on top of its 1 ms. Two output tokens: the first at
/// the end of the prefill step, the second one decode step later. A lone request takes
/// (1 + 1) + (1 + 1) = 4 ms, a batch of 4 takes (1 + 4) + (1 + 4) = 10 ms.
#[test]
fn decode_cost_grows_with_the_running_batch() {
    use Step::*;
    let cost = CostModel { per_seq: Duration::from_millis(1), ..cost() };
    insta::assert_snapshot!(trace_with(
        cost,
        4,
        10,
        None,
        Faults::default(),
        &[Submit(1), Wait(50), Submit(4), Wait(50), Shutdown]
    ));
}
