//! A `[matrix]` on vLLM runs in one engine start: `scenarios/vllm-matrix.toml` (two batch sizes ×
//! two batch timeouts) logs "loading engine" once and reports four named combinations. Run with
//! `just test-vllm`; without the venv and model the test says SKIPPED and checks nothing.
#![cfg(feature = "vllm")]

use std::process::Command;

use batchlab::engine::python::{batchlab_home, default_venv};

#[test]
fn a_vllm_matrix_runs_four_combinations_in_one_engine_start() {
    for needed in [default_venv().join("bin/python"), batchlab_home().join("tiny-llama/config.json")] {
        if !needed.exists() {
            eprintln!("SKIPPED: {} is missing; run `just setup-vllm` (or `just test-vllm`)", needed.display());
            return;
        }
    }
    let out = std::env::temp_dir().join(format!("batchlab-vllm-matrix-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", "scenarios/vllm-matrix.toml", "--output"])
        .arg(&out)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running batchlab");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "batchlab failed: {stderr}");
    assert_eq!(stderr.matches("loading engine").count(), 1, "one engine start: {stderr}");
    let report = batchlab::report::read_report(&out).expect("report.json");
    let names: Vec<&str> = report.benchmarks.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "batch_size=8,batch_timeout=5ms",
            "batch_size=8,batch_timeout=20ms",
            "batch_size=32,batch_timeout=5ms",
            "batch_size=32,batch_timeout=20ms"
        ]
    );
    for b in &report.benchmarks {
        assert_eq!(b.counts.completed, 64, "{}", b.name);
        let size: f64 = b.matrix.as_ref().expect("matrix point").values[0].1.parse().unwrap();
        let mean = b.batching.batch_size_mean.expect("batches ran");
        assert!(mean <= size, "{}: batches of {mean} under batch_size {size}", b.name);
    }
    assert!(report.benchmarks.iter().any(|b| b.matrix.as_ref().unwrap().pareto_front));
    let _ = std::fs::remove_dir_all(&out);
}
