//! Runs a scenario against your own engine and prints its report.
//!
//! `cargo run --example custom_engine` writes report.json and report.csv to
//! `results/custom_engine/` (or the directory given as the first argument); the report names the
//! engine `echo-engine`, from its `EngineInfo`.

use std::path::PathBuf;
use std::time::Duration;

use batchlab::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, Started,
};
use batchlab::run::{RunOptions, run_with_blocking};
use batchlab::scenario::Scenario;
use batchlab::scenario::plan::Comparison;
use batchlab::time::MonotonicClock;

/// An engine that "generates" `max_tokens` tokens in 1 ms per batch, with timestamps on
/// `CLOCK_MONOTONIC` so batchlab can measure TTFT and TPOT.
struct EchoEngine;

impl Engine for EchoEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("echo-engine", "1.0").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let start = MonotonicClock::read().as_secs_f64();
        std::thread::sleep(Duration::from_millis(1));
        let end = MonotonicClock::read().as_secs_f64();
        // Every field of the stats is optional: what an engine does not know stays `None`.
        let mut stats = EngineStats::default();
        stats.queued_ts = Some(start);
        stats.scheduled_ts = Some(start);
        stats.first_token_ts = Some(start + (end - start) / 2.0);
        stats.last_token_ts = Some(end);
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let plan = Scenario::builder()
        .name("custom_engine")
        .synthetic(32, 16)
        .batch_size(8)
        .batch_timeout(Duration::from_millis(2))
        .profile_constant(&[100.0, 400.0])
        .max_requests(100)
        .expect("lost", Comparison::Eq, 0.0)
        .expect("errors", Comparison::Eq, 0.0)
        .build()?;
    let output_dir = std::env::args().nth(1).map_or_else(|| PathBuf::from("results/custom_engine"), PathBuf::from);
    let options = RunOptions { output_dir: Some(output_dir), ..RunOptions::default() };
    let summary = run_with_blocking(&plan, EchoEngine, options)?;
    print!("{}", summary.table);
    for path in &summary.written {
        println!("wrote {}", path.display());
    }
    summary.assert_expectations();
    Ok(())
}
