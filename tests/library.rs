//! batchlab as another crate uses it: only `batchlab::` public items, a user's own engine, a
//! scenario from the builder, and the outcome checked in one line.

use std::sync::Arc;
use std::time::Duration;

use batchlab::engine::faults::{FaultTrigger, Faults};
use batchlab::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, Started, TimedEngine,
    VirtualTimeEngine,
};
use batchlab::run::{Interrupt, RunOptions, RunSummary, run_benchmarks, run_with_blocking};
use batchlab::scenario::plan::{Comparison, Plan};
use batchlab::scenario::{Scenario, ScenarioBuilder};
use batchlab::time::{Clock, MonotonicClock, VirtualClock};

/// A user's engine: every batch takes `per_batch`, and each request's first token comes after
/// half of it, on whatever clock it is given.
struct MyEngine {
    clock: Arc<dyn Clock>,
    per_batch: Duration,
    batches: u64,
}

impl MyEngine {
    fn new(per_batch: Duration) -> Self {
        MyEngine { clock: Arc::new(MonotonicClock), per_batch, batches: 0 }
    }
}

impl Engine for MyEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("my-engine", "0.1").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        self.batches += 1;
        let start = self.clock.now().as_secs_f64();
        let secs = self.per_batch.as_secs_f64();
        self.clock.sleep(self.per_batch);
        let mut stats = EngineStats::default();
        stats.queued_ts = Some(start);
        stats.scheduled_ts = Some(start);
        stats.first_token_ts = Some(start + secs / 2.0);
        stats.last_token_ts = Some(start + secs);
        Ok(batch
            .iter()
            .map(|r| {
                EngineOutput::new(Some(r.id), FinishReason::Length)
                    .with_prompt_tokens(r.prompt.token_len().map(|n| n as u32))
                    .with_output_tokens(r.max_tokens)
                    .with_stats(stats.clone())
            })
            .collect())
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// The same engine can pass time by hand, so it also runs in virtual time.
impl VirtualTimeEngine for MyEngine {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock);
    }
}

fn scenario() -> ScenarioBuilder {
    Scenario::builder()
        .name("library")
        .synthetic(16, 8)
        .batch_size(4)
        .batch_timeout(Duration::from_millis(2))
        .expect("lost", Comparison::Eq, 0.0)
        .expect("errors", Comparison::Eq, 0.0)
}

fn run(plan: &Plan, engine: impl Into<TimedEngine>) -> RunSummary {
    run_with_blocking(plan, engine, RunOptions::default()).expect("the run finishes")
}

#[test]
fn a_user_engine_runs_a_builder_scenario() {
    let plan = scenario()
        .profile_throughput(8)
        .max_requests(24)
        .expect("completed", Comparison::Eq, 24.0)
        .build()
        .expect("a valid scenario");
    let summary = run(&plan, MyEngine::new(Duration::from_millis(2)));
    summary.assert_expectations();
    let environment = &summary.report.environment;
    assert_eq!((environment.engine_name.as_str(), environment.engine_version.as_str()), ("my-engine", "0.1"));
    assert!(!environment.seeds.contains_key("engine"), "the plan's engine seed is not this engine's");
}

#[test]
fn a_rate_profile_waits_between_arrivals_on_a_user_engine() {
    // 20 requests at 200/s: arrivals 5 ms apart, so the loop waits on `Wait(Some(t))`.
    let plan = scenario()
        .profile_constant(&[200.0])
        .max_requests(20)
        .expect("completed", Comparison::Eq, 20.0)
        .expect("requests_per_s", Comparison::Le, 250.0)
        .build()
        .expect("a valid scenario");
    let summary = run(&plan, MyEngine::new(Duration::from_millis(1)));
    summary.assert_expectations();
    let measured = &summary.report.benchmarks[0];
    assert!(measured.duration_s >= 0.090, "20 arrivals 5 ms apart span 95 ms, measured {}", measured.duration_s);
}

#[test]
fn a_user_engine_runs_in_virtual_time() {
    let plan = scenario()
        .profile_constant(&[10.0])
        .max_requests(50)
        .expect("completed", Comparison::Eq, 50.0)
        .build()
        .expect("a valid scenario");
    let in_virtual_time = || run(&plan, TimedEngine::virtual_time(MyEngine::new(Duration::from_millis(20))));
    let summary = in_virtual_time();
    summary.assert_expectations();
    let measured = &summary.report.benchmarks[0];
    assert!(measured.duration_s >= 4.9, "5 s of virtual arrivals, measured {}", measured.duration_s);
    // Virtual time is exact: a second run measures the same durations to the nanosecond, which a
    // run on the real clock never would.
    let again = in_virtual_time();
    assert_eq!(again.report.benchmarks[0].duration_s, measured.duration_s);
    assert_eq!(again.report.benchmarks[0].distributions, measured.distributions);
}

#[test]
fn the_middle_level_gives_the_benchmarks_in_memory_and_the_same_report() {
    let plan = scenario().max_requests(20).build().expect("a valid scenario");
    let engine = || TimedEngine::virtual_time(MyEngine::new(Duration::from_millis(5)));
    let result = run_benchmarks(&plan, engine(), RunOptions::default()).expect("the benchmarks run");
    assert_eq!(result.benchmarks.len(), 1);
    assert_eq!(result.benchmarks[0].counts.completed, 20);
    assert!(!result.incomplete && result.requests_jsonl.is_none());
    // `run_with` is this, and the report around it.
    let report = result.into_report(&plan).expect("a report");
    let summary = run(&plan, engine());
    assert_eq!(report.benchmarks, summary.report.benchmarks);
}

#[test]
fn faults_on_a_user_engine_fail_exactly_their_batches() {
    // 24 requests in full batches of 4 (throughput keeps 8 in flight): generates 1..=6. In virtual
    // time the batches are the same on every run, so the counts are exact: `fail_batch` fails calls
    // 3 and 6 (8 requests), `short_output` drops an output from call 5 (its 4 requests fail as a
    // count mismatch), and the other 3 batches complete.
    let plan = Scenario::builder()
        .name("library-faults")
        .synthetic(16, 8)
        .batch_size(4)
        .batch_timeout(Duration::from_millis(2))
        .profile_throughput(8)
        .max_requests(24)
        .faults(&Faults {
            fail_batch: FaultTrigger::every(3),
            short_output: FaultTrigger::every(5),
            ..Faults::default()
        })
        .expect("completed", Comparison::Eq, 12.0)
        .expect("errors", Comparison::Eq, 12.0)
        .expect("errors_engine_error", Comparison::Eq, 8.0)
        .expect("errors_output_count_mismatch", Comparison::Eq, 4.0)
        .expect("lost", Comparison::Eq, 0.0)
        .build()
        .expect("a valid scenario");
    run(&plan, TimedEngine::virtual_time(MyEngine::new(Duration::from_millis(2)))).assert_expectations();
}

#[test]
#[should_panic(expected = "FAIL ttft_p99_ms <= 0.001 (builder: expect.ttft_p99_ms=\"<= 0.001\"): measured ")]
fn a_failed_expectation_names_measured_and_expected() {
    let plan = scenario()
        .profile_synchronous()
        .max_requests(3)
        .expect("ttft_p99_ms", Comparison::Le, 0.001)
        .build()
        .expect("a valid scenario");
    run(&plan, MyEngine::new(Duration::from_millis(2))).assert_expectations();
}

/// Fires an interrupt from inside its third generate, as a user's Ctrl-C handler would.
struct InterruptingEngine {
    inner: MyEngine,
    interrupt: Interrupt,
}

impl Engine for InterruptingEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        self.inner.start()
    }
    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        if self.inner.batches == 2 {
            self.interrupt.fire();
        }
        self.inner.generate(batch)
    }
    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.inner.shutdown()
    }
}

#[test]
fn an_interrupt_drains_and_reports_an_incomplete_run() {
    let plan = scenario().profile_throughput(2).max_duration(Duration::from_secs(3600)).build().expect("valid");
    let interrupt = Interrupt::new();
    let engine = InterruptingEngine { inner: MyEngine::new(Duration::from_millis(1)), interrupt: interrupt.clone() };
    let options = RunOptions { interrupt, ..RunOptions::default() };
    let summary = run_with_blocking(&plan, engine, options).expect("an interrupted run still reports");
    assert!(summary.interrupted && summary.report.incomplete);
    let counts = &summary.report.benchmarks[0].counts;
    assert_eq!(counts.lost, 0);
    assert!(counts.completed >= 2, "{counts:?}");
}

/// A user's engine that wedges in its first generate: it blocks, using no CPU, until the test
/// lets it go (after the run, so no thread is left behind).
struct WedgedEngine {
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Engine for WedgedEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("wedged", "0").into())
    }

    fn generate(&mut self, _batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let _ = self.release.lock().unwrap().recv();
        Err(EngineError::Generate("released after the run".into()))
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// `run_with` gives a caller's real-time engine the stall watch (and a real engine's default
/// timeouts): an engine wedged in `generate` ends the run with a report, the batch and the queue
/// failed as `engine_stalled`, soon after the stall timeout, instead of blocking for ever.
#[test]
fn a_user_engine_wedged_in_generate_ends_the_run_once_it_stalls() {
    let stall = Duration::from_millis(300);
    let plan = scenario().profile_throughput(8).max_requests(24).stall_timeout(stall).build().expect("valid");
    let (release, wedged) = std::sync::mpsc::channel();
    let engine = WedgedEngine { release: std::sync::Mutex::new(wedged) };
    let started = std::time::Instant::now();
    // On a thread of its own, so that a run that never ends fails the test (after a backstop far
    // above the stall limit) instead of hanging it.
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(run_with_blocking(&plan, engine, RunOptions::default()));
    });
    let summary =
        outcome.recv_timeout(Duration::from_secs(60)).expect("the run ends").expect("a stalled run still reports");
    let took = started.elapsed();
    let _ = release.send(());
    assert!(summary.report.incomplete, "the run could not finish");
    let counts = &summary.report.benchmarks[0].counts;
    assert_eq!(counts.lost, 0, "{counts:?}");
    assert_eq!(counts.completed, 0, "{counts:?}");
    assert!(counts.errors_by_kind.get("engine_stalled").is_some_and(|&n| n >= 4), "{counts:?}");
    // The stall limit plus one sample interval and the run's own work; far below any timeout.
    assert!(took < Duration::from_secs(20), "the stall took {took:?} to end the run");
    assert!(took >= stall, "declared before the stall timeout: {took:?}");
}

#[test]
fn docs_library_md_shows_the_example_as_it_is() {
    let doc = include_str!("../docs/library.md");
    let example = include_str!("../examples/custom_engine.rs");
    assert!(doc.contains(example), "docs/library.md must contain examples/custom_engine.rs verbatim");
}
