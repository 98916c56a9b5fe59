//! `BatchesSeen::same_with_batch_size`: when a run says a larger (or smaller) batch size would
//! have changed nothing, rerunning it with that batch size gives the same benchmark, exactly.
//! `tune` relies on this to skip runs it can prove equal.

use std::path::Path;

use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, parse_str};

fn scenario(rate: f64, batch_size: usize, timeout_ms: u64, warmup: u64) -> String {
    let warmup = if warmup > 0 { format!("[warmup]\nrequests = {warmup}") } else { String::new() };
    format!(
        r#"
name = "eq"
seed = 9
[engine]
kind = "sim"
[engine.sim]
time = "virtual"
[batching]
batch_size = {batch_size}
batch_timeout = "{timeout_ms}ms"
[workload]
prompt_tokens = {{ dist = "uniform", min = 16, max = 200 }}
output_tokens = {{ dist = "uniform", min = 4, max = 64 }}
[profile]
kind = "constant"
rates = [{rate:.1}]
[stop]
max_requests = 300
{warmup}
[slo]
ttft_ms = 50
"#
    )
}

fn run(rate: f64, batch_size: usize, timeout_ms: u64, warmup: u64) -> batchlab::metrics::BenchmarkResult {
    let text = scenario(rate, batch_size, timeout_ms, warmup);
    let plan = parse_str(&text, "eq.toml", Path::new("."), &Overrides::default()).expect("valid scenario");
    let summary = run_blocking(&plan, RunOptions::quiet()).expect("run");
    summary.report.benchmarks.into_iter().next().expect("one benchmark")
}

/// Over light and heavy loads, short and long timeouts, with and without warmup: every pair the
/// predicate calls the same is the same benchmark (its JSON, byte for byte), and the predicate
/// says so for some pairs and not for others (it is not vacuous either way).
#[test]
fn a_batch_size_the_run_never_reached_gives_the_same_benchmark() {
    let sizes = [2, 4, 8, 16, 64, 256];
    let (mut same, mut differ) = (0, 0);
    for (rate, timeout_ms, warmup) in [(50.0, 5, 0), (200.0, 20, 10), (400.0, 2, 0), (2000.0, 10, 20)] {
        for &ran_with in &sizes {
            let first = run(rate, ran_with, timeout_ms, warmup);
            let seen = first.batching.whole_run;
            assert!(seen.batches > 0);
            for &other in sizes.iter().filter(|&&b| b != ran_with) {
                if !seen.same_with_batch_size(ran_with, other) {
                    differ += 1;
                    continue;
                }
                same += 1;
                let second = run(rate, other, timeout_ms, warmup);
                assert_eq!(
                    serde_json::to_string(&first).unwrap(),
                    serde_json::to_string(&second).unwrap(),
                    "rate {rate}, timeout {timeout_ms} ms: batch size {ran_with} (largest batch {}) and {other}",
                    seen.largest
                );
            }
        }
    }
    assert!(same >= 10 && differ >= 10, "{same} pairs the same, {differ} not");
}
