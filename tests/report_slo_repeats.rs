//! Goodput against `[slo]`, `--repeat` and reading a report back, through the public API only.

use std::sync::Arc;
use std::time::Duration;

use batchlab::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, Started, TimedEngine,
    VirtualTimeEngine,
};
use batchlab::metrics::Slo;
use batchlab::report::read_report;
use batchlab::run::{RunOptions, run_blocking, run_with_blocking};
use batchlab::scenario::Scenario;
use batchlab::scenario::plan::Comparison;
use batchlab::time::{Clock, VirtualClock};

/// An engine like offline vLLM: first and last token times, none per token.
struct NoTokenTimes {
    clock: Arc<dyn Clock>,
}

impl Engine for NoTokenTimes {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("no-token-times", "0").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let start = self.clock.now().as_secs_f64();
        self.clock.sleep(Duration::from_millis(10));
        let mut stats = EngineStats::default();
        stats.queued_ts = Some(start);
        stats.scheduled_ts = Some(start);
        stats.first_token_ts = Some(start + 0.002);
        stats.last_token_ts = Some(start + 0.010);
        Ok(batch
            .iter()
            .map(|r| {
                EngineOutput::new(Some(r.id), FinishReason::Length)
                    .with_prompt_tokens(4)
                    .with_output_tokens(r.max_tokens)
                    .with_stats(stats.clone())
            })
            .collect())
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

impl VirtualTimeEngine for NoTokenTimes {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock);
    }
}

fn builder() -> batchlab::scenario::ScenarioBuilder {
    Scenario::builder().sim_virtual().synthetic(16, 8).batch_size(4).profile_concurrent(&[1, 4]).max_requests(20)
}

#[test]
fn goodput_counts_requests_that_meet_every_objective() {
    // Generous objectives: every request meets them, goodput is the throughput.
    let slo = Slo { ttft_ms: Some(1e4), tpot_ms: Some(1e4), itl_ms: Some(1e4), latency_ms: Some(1e4) };
    let plan = builder().slo(&slo).expect("slo_attainment", Comparison::Eq, 1.0).build().unwrap();
    let summary = run_blocking(&plan, RunOptions::quiet()).unwrap();
    summary.assert_expectations();
    for b in &summary.report.benchmarks {
        let s = b.slo.as_ref().expect("an SLO result");
        assert_eq!((s.judged, s.met, s.unmeasurable), (20, 20, 0), "{}", b.name);
        assert_eq!(s.goodput_requests_per_s, b.requests_per_s);
        assert_eq!(b.metric("goodput_output_tokens_per_s"), b.output_tokens_per_s);
    }
    // A latency objective below what the run achieves: nothing meets it.
    let slo = Slo { latency_ms: Some(0.001), ..Slo::default() };
    let summary = run_blocking(&builder().slo(&slo).build().unwrap(), RunOptions::quiet()).unwrap();
    for b in &summary.report.benchmarks {
        assert_eq!(b.metric("slo_attainment"), Some(0.0), "{}", b.name);
        assert_eq!(b.metric("goodput_requests_per_s"), Some(0.0));
    }
}

#[test]
fn an_itl_objective_without_per_token_times_is_not_met() {
    let slo = Slo { itl_ms: Some(1e6), ..Slo::default() };
    let plan = builder().slo(&slo).expect("slo_attainment", Comparison::Ge, 0.5).build().unwrap();
    let engine = TimedEngine::virtual_time(NoTokenTimes { clock: Arc::new(VirtualClock::new()) });
    let summary = run_with_blocking(&plan, engine, RunOptions::quiet()).unwrap();
    for b in &summary.report.benchmarks {
        let s = b.slo.as_ref().unwrap();
        assert_eq!((s.met, s.unmeasurable, s.attainment), (0, 20, Some(0.0)), "{}", b.name);
        assert_eq!(b.distributions.itl.count, 0, "no per-token times, no ITL");
        assert_eq!(b.distributions.tpot.count, 20, "TPOT needs only the first and last token");
    }
    assert!(!summary.report.passed(), "an expectation on an unmeasurable SLO fails");
}

#[test]
fn repeats_interleave_and_are_summarized() {
    let plan = builder().build().unwrap();
    let options = RunOptions { repeat: 3, ..RunOptions::quiet() };
    let report = run_blocking(&plan, options).unwrap().report;
    let order: Vec<(&str, u32)> = report.benchmarks.iter().map(|b| (b.name.as_str(), b.repeat)).collect();
    assert_eq!(
        order,
        [
            ("concurrent@1", 0),
            ("concurrent@4", 0),
            ("concurrent@1", 1),
            ("concurrent@4", 1),
            ("concurrent@1", 2),
            ("concurrent@4", 2)
        ]
    );
    assert_eq!(report.repeats.len(), 2);
    for summary in &report.repeats {
        assert_eq!(summary.repeats, 3, "{}", summary.benchmark);
        let rps = &summary.metrics["requests_per_s"];
        assert_eq!(rps.n, 3);
        assert!(rps.ci95_low.unwrap() <= rps.mean && rps.mean <= rps.ci95_high.unwrap(), "{rps:?}");
        assert!(summary.requests_per_s_cv.is_some_and(|cv| cv >= 0.0));
        let runs: Vec<f64> =
            report.benchmarks.iter().filter(|b| b.name == summary.benchmark).filter_map(|b| b.requests_per_s).collect();
        assert!((rps.mean - runs.iter().sum::<f64>() / 3.0).abs() < 1e-9);
    }
}

#[test]
fn a_sweep_repeats_the_rates_its_first_round_measured() {
    let plan = Scenario::builder().sim_virtual().synthetic(16, 8).profile_sweep(2).max_requests(16).build().unwrap();
    let report = run_blocking(&plan, RunOptions { repeat: 2, ..RunOptions::quiet() }).unwrap().report;
    let names: Vec<&str> = report.benchmarks.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names.len(), 8, "{names:?}");
    assert_eq!(names[..4], names[4..], "the second round reruns the first round's steps");
    assert!(
        report.benchmarks[..4].iter().all(|b| b.repeat == 0) && report.benchmarks[4..].iter().all(|b| b.repeat == 1)
    );
}

#[test]
fn a_written_report_reads_back() {
    let dir = std::env::temp_dir().join(format!("batchlab-read-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let plan = builder().slo(&Slo { ttft_ms: Some(50.0), ..Slo::default() }).build().unwrap();
    let options = RunOptions { output_dir: Some(dir.clone()), repeat: 2, ..RunOptions::quiet() };
    let summary = run_blocking(&plan, options).unwrap();
    assert_eq!(read_report(&dir).unwrap(), summary.report, "from the directory");
    assert_eq!(read_report(&dir.join("report.json")).unwrap(), summary.report, "from the file");
    std::fs::remove_dir_all(&dir).unwrap();
}
