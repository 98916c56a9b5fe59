//! `batchlab calibrate SCENARIO`: the designed settings run on the scenario's engine, each into a
//! directory of its own, and the fit of those directories. With a simulated engine of known
//! coefficients (and vLLM's CPU limits) the design alone must recover every coefficient: the
//! design separates them, or the fit could not.

use batchlab::engine::sim::Profile;

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{batchlab, temp_dir, text};

/// Known coefficients (ns), in `Coefficients::NAMES` order, as the scenario spells them.
const TRUTH: [(&str, f64); 9] = [
    ("fixed_overhead", 1_500_000.0),
    ("request_overhead", 250_000.0),
    ("decode_step", 3_500_000.0),
    ("prefill_per_token", 21_000.0),
    ("per_seq", 60_000.0),
    ("context_per_1k_tokens", 400_000.0),
    ("tokens_squared_per_1m", 1_600_000.0),
    ("finish_overhead", 500_000.0),
    ("finish_per_request", 20_000.0),
];

/// Roughly the tiny model on vLLM's CPU backend, with vLLM's CPU limits; the workload and profile
/// are the design's, not these.
const SCENARIO: &str = r#"
name = "cpu-like"
seed = 11

[engine.sim]
fixed_overhead = "1500us"
request_overhead = "250us"
decode_step = "3500us"
prefill_per_token = "21us"
per_seq = "60us"
context_per_1k_tokens = "400us"
tokens_squared_per_1m = "1600us"
finish_overhead = "500us"
finish_per_request = "20us"
max_num_seqs = 256
max_num_batched_tokens = 4096
num_kv_blocks = 4096
block_size = 128
prefix_caching = true

[workload]
prompt_tokens = 128
output_tokens = 64
vocab_size = 4000
"#;

#[test]
fn calibrate_a_scenario_recovers_its_coefficients_from_the_designed_runs() {
    let dir = temp_dir("design");
    let scenario = dir.join("cpu-like.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let profile_path = dir.join("cpu.toml");
    let o = batchlab(&["calibrate", scenario.to_str().unwrap(), "--output", profile_path.to_str().unwrap(), "--quiet"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let design = batchlab::calibrate::DESIGN;
    let batches: u32 = design.iter().map(|s| s.batches).sum();
    let said = format!("ran {batches} designed batches of {} settings", design.len());
    assert!(text(&o.stderr).contains(&said), "{said}: {}", text(&o.stderr));

    // The designed runs, next to the profile by default: the warm-up and one directory per
    // designed batch, each a complete run with requests.jsonl.
    let runs = dir.join("cpu-runs");
    let mut names: Vec<String> = std::fs::read_dir(&runs)
        .expect("the runs directory")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let base = batchlab::scenario::load_file(&scenario, &Default::default()).expect("the scenario");
    let mut expected: Vec<String> = batchlab::calibrate::design_runs(&base, batchlab::calibrate::DESIGN)
        .expect("the design")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    expected.sort();
    assert_eq!(names, expected);
    for name in &names {
        assert!(runs.join(name).join("requests.jsonl").is_file() && runs.join(name).join("report.json").is_file());
    }

    let profile = Profile::load(&profile_path).expect("a valid profile");
    for ((name, want), got) in TRUTH.iter().zip(profile.coefficients.to_array()) {
        let err = (got - want).abs() / want;
        assert!(err < 0.01, "{name}: fitted {got} ns, true {want} ns ({:.3} %)", err * 100.0);
    }
    assert!(profile.fit.unidentified.is_empty(), "the design identifies every coefficient: {:?}", profile.fit);
    let e = profile.engine;
    assert_eq!((e.max_num_seqs, e.max_num_batched_tokens, e.num_kv_blocks, e.block_size), (256, 4096, 4096, 128));
    assert!(e.prefix_caching && e.chunked_prefill);
    // The warm-up is not fitted.
    assert_eq!(profile.provenance.sources.len(), names.len() - 1);
    assert!(profile.provenance.sources.iter().all(|s| !s.ends_with("warmup")), "{:?}", profile.provenance.sources);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn calibrate_options_that_need_a_scenario_are_refused_with_directories() {
    let dir = temp_dir("options");
    let o = batchlab(&["calibrate", dir.to_str().unwrap(), "--set", "batching.batch_size=4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("need a scenario"), "{}", text(&o.stderr));
    let o = batchlab(&["calibrate", "scenarios/throughput.toml", "--set", "batching.batch_size=0"]);
    assert_eq!(o.status.code(), Some(2), "a bad --set is bad input: {}", text(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
