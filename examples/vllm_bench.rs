//! Measures the vLLM engine alone: start time and output tokens/s for a scenario's workload, sent
//! in back-to-back batches of the scenario's `batch_size` (no batcher, no load profile). A
//! stand-in until `batchlab run` drives the vLLM engine; also a quick check of a setup.
//!
//! ```sh
//! PYO3_PYTHON=~/.cache/batchlab/venv/bin/python \
//!     cargo run --release --features vllm --example vllm_bench -- scenarios/vllm-cpu.toml
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use batchlab::engine::vllm::VllmEngine;
use batchlab::engine::{Engine, EngineOutput};
use batchlab::load::Workload;
use batchlab::scenario::plan::EnginePlan;
use batchlab::scenario::{Overrides, load_file};

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let path: PathBuf = std::env::args_os().nth(1).context("usage: vllm_bench SCENARIO.toml")?.into();
    let plan = load_file(&path, &Overrides::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let EnginePlan::Vllm(vllm) = plan.engine.clone() else { bail!("{}: not a vllm scenario", path.display()) };
    let workload = Workload::from_plan(&plan.workload).map_err(|e| anyhow::anyhow!("{e}"))?;
    let n = plan.stop.max_requests.unwrap_or(256);
    let batch_size = plan.batching.batch_size();

    let mut engine = VllmEngine::new(vllm);
    let t = Instant::now();
    let info = engine.start()?;
    let start_secs = t.elapsed().as_secs_f64();

    // One warm-up batch, outside the measurement.
    let warmup: Vec<_> = workload.requests(1_000_000).take(batch_size).collect();
    engine.generate(&warmup)?;

    let requests: Vec<_> = workload.requests(0).take(usize::try_from(n)?).collect();
    let t = Instant::now();
    let mut tokens = 0u64;
    for batch in requests.chunks(batch_size) {
        let outputs = engine.generate(batch)?;
        tokens += outputs.iter().filter_map(EngineOutput::generated_tokens).map(u64::from).sum::<u64>();
    }
    let secs = t.elapsed().as_secs_f64();
    engine.shutdown()?;
    println!(
        "{} {}: start {start_secs:.1}s; {n} requests in batches of {batch_size}: {tokens} output tokens in {secs:.2}s = {:.0} tok/s",
        info.name,
        info.version,
        tokens as f64 / secs
    );
    Ok(())
}
