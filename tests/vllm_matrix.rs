//! One engine start on vLLM for many settings. A `[matrix]`: `scenarios/vllm-matrix.toml` (two
//! batch sizes × two batch timeouts) logs "loading engine" once and reports four named
//! combinations. `batchlab tune`'s confirmation: its best points, in one engine start. Run with
//! `just test-vllm`; without the venv and model the tests fail, unless `BATCHLAB_SKIP_PYTHON=1`
//! asks to skip them (tests/common/python_env.rs).
#![cfg(feature = "vllm")]

use std::process::Command;

#[path = "common/python_env.rs"]
mod python_env;

/// The venv and the tiny model are there (tests/common/python_env.rs decides, or fails the test).
fn ready() -> bool {
    python_env::ready(true)
}

#[test]
fn a_vllm_matrix_runs_four_combinations_in_one_engine_start() {
    if !ready() {
        return;
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

/// `batchlab tune` on a vLLM scenario: the search runs in the simulator built from a profile, then
/// its best points run on vLLM in one engine start, the recommendation first, and report.json and
/// report.html hold the search next to the measured confirmation.
#[test]
fn tune_confirms_its_best_points_on_vllm_in_one_engine_start() {
    if !ready() {
        return;
    }
    let out = std::env::temp_dir().join(format!("batchlab-vllm-tune-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args([
            "tune",
            "scenarios/vllm-tune.toml",
            "--profile",
            "scenarios/profiles/example.toml",
            "--keep-load",
            "--budget",
            "20",
            "--confirm",
            "2",
            "--set",
            "stop.max_requests=64",
            "--set",
            "warmup.requests=8",
            "--output",
        ])
        .arg(&out)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running batchlab");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "batchlab tune failed: {stdout}{stderr}");
    assert_eq!(stderr.matches("loading engine").count(), 1, "one engine start: {stderr}");
    assert!(stdout.contains("predicted (simulator) against measured (real engine)"), "{stdout}");
    let report = batchlab::report::read_report(&out).expect("report.json");
    let tune = report.tune.as_ref().expect("the search is in report.json");
    let best = tune.result.best_point().expect("a recommendation");
    assert!(!tune.confirmed.is_empty() && tune.confirmed.len() <= 2, "{:?}", tune.confirmed);
    assert_eq!(tune.confirmed[0].point, best.label(tune.result.space.load), "the recommendation first");
    let names: Vec<&str> = report.benchmarks.iter().map(|b| b.name.as_str()).collect();
    let points: Vec<&str> = tune.confirmed.iter().map(|c| c.point.as_str()).collect();
    assert_eq!(names, points, "one benchmark per confirmed point");
    for (c, b) in tune.confirmed.iter().zip(&report.benchmarks) {
        assert_eq!(b.counts.completed, 64, "{}", b.name);
        assert_eq!(c.measured, b.slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s), "{}", b.name);
        assert!(c.predicted.is_some() && c.measured.is_some(), "{c:?}");
    }
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("id=\"tuning\"") && html.contains("Confirmed on the real engine"), "the tuning section");
    let _ = std::fs::remove_dir_all(&out);
}
