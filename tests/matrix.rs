//! `[matrix]`: the Cartesian product of run-time keys, in one engine start, on the simulator in
//! virtual time.

use std::path::Path;

use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, parse_str};

const BASE: &str = r#"
name = "matrix"
seed = 7
[engine]
kind = "sim"
[engine.sim]
time = "virtual"
[workload]
output_tokens = 16
[profile]
kind = "throughput"
max_concurrency = 64
[stop]
max_requests = 96
[warmup]
requests = 4
"#;

fn scenario(matrix: &str) -> String {
    format!("{BASE}\n[matrix]\n{matrix}\n")
}

#[test]
fn every_combination_is_a_named_benchmark_with_its_own_batching() {
    let text = scenario("\"batching.batch_size\" = [4, 32]\n\"batching.batch_timeout\" = [\"1ms\", \"20ms\"]");
    let plan = parse_str(&text, "m.toml", Path::new("."), &Overrides::default()).expect("valid");
    let summary = run_blocking(&plan, RunOptions::quiet()).expect("run");
    let names: Vec<&str> = summary.report.benchmarks.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "batch_size=4,batch_timeout=1ms",
            "batch_size=4,batch_timeout=20ms",
            "batch_size=32,batch_timeout=1ms",
            "batch_size=32,batch_timeout=20ms"
        ]
    );
    for b in &summary.report.benchmarks {
        let m = b.matrix.as_ref().expect("a matrix point");
        let size: f64 = m.values[0].1.parse().unwrap();
        // The batcher took each combination's batch size: no batch is larger, and under a full
        // queue (64 in flight) the batches fill to it.
        assert_eq!(b.batching.batch_size_mean, Some(size), "{}", b.name);
        assert_eq!(b.counts.completed, 96);
        assert_eq!(b.counts.lost, 0);
    }
    // batch 32 beats batch 4 on both throughput and latency here: only the 32s are on the front.
    let front: Vec<bool> = summary.report.benchmarks.iter().map(|b| b.matrix.as_ref().unwrap().pareto_front).collect();
    assert_eq!(front, [false, false, true, true]);
    assert!(summary.table.contains("front"), "{}", summary.table);
}

#[test]
fn a_set_replaces_a_matrix_list() {
    let text = scenario("\"batching.batch_size\" = [4, 32]");
    let overrides = Overrides::default().set("batching.batch_size=[2, 8, 16]");
    let plan = parse_str(&text, "m.toml", Path::new("."), &overrides).expect("valid");
    let labels: Vec<&str> = plan.matrix().unwrap().combinations().iter().map(|c| c.label()).collect();
    assert_eq!(labels, ["batch_size=2", "batch_size=8", "batch_size=16"]);
    let single = Overrides::default().set("batching.batch_size=8");
    let plan = parse_str(&text, "m.toml", Path::new("."), &single).expect("valid");
    assert_eq!(plan.matrix().unwrap().combinations().len(), 1);
}

#[test]
fn workload_lengths_and_profile_keys_vary_too() {
    let text = scenario("\"workload.output_tokens\" = [8, 32]\n\"profile.max_concurrency\" = [8, 64]");
    let plan = parse_str(&text, "m.toml", Path::new("."), &Overrides::default()).expect("valid");
    let summary = run_blocking(&plan, RunOptions::quiet()).expect("run");
    let outputs: Vec<u64> = summary.report.benchmarks.iter().map(|b| b.tokens.output / b.counts.completed).collect();
    assert_eq!(outputs, [8, 8, 32, 32]);
    assert_eq!(summary.report.benchmarks[0].name, "output_tokens=8,max_concurrency=8");
}

#[test]
fn an_engine_key_is_refused_with_its_place() {
    let text = scenario("\"engine.sim.max_num_seqs\" = [8, 16]");
    let err = parse_str(&text, "m.toml", Path::new("."), &Overrides::default()).unwrap_err().to_string();
    assert!(err.contains("needs a new engine"), "{err}");
    let line = text.lines().position(|l| l.contains("max_num_seqs")).unwrap() + 1;
    assert!(err.contains(&format!("m.toml:{line}:1")), "{err}");
}

#[test]
fn a_bad_value_points_at_its_place_in_the_list() {
    let text = scenario("\"batching.batch_size\" = [8, 0]");
    let err = parse_str(&text, "m.toml", Path::new("."), &Overrides::default()).unwrap_err().to_string();
    let line = text.lines().position(|l| l.contains("batch_size")).unwrap() + 1;
    assert!(err.contains(&format!("m.toml:{line}:")), "{err}");
    assert!(err.contains("1 problem"), "told once: {err}");
    for bad in
        ["\"batching.batch_size\" = 8", "\"batching.batch_size\" = []", "\"seed\" = [1, 2]", "\"batching.nope\" = [1]"]
    {
        assert!(parse_str(&scenario(bad), "m.toml", Path::new("."), &Overrides::default()).is_err(), "{bad}");
    }
}

#[test]
fn the_printed_plan_keeps_the_matrix() {
    let text = scenario("\"batching.batch_size\" = [4, 32]");
    let plan = parse_str(&text, "m.toml", Path::new("."), &Overrides::default()).expect("valid");
    let printed = batchlab::scenario::to_toml(&plan);
    let again = parse_str(&printed, "m.toml", Path::new("."), &Overrides::default()).expect("printed plan parses");
    assert_eq!(again.matrix(), plan.matrix());
}
