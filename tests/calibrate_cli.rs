//! `batchlab calibrate` through files, as a user runs it: a simulated run with known coefficients
//! writes requests.jsonl and report.json, `calibrate` fits them, the profile holds the known
//! coefficients within 1 %, and a scenario using the profile runs with them. A run with images
//! gives the encoder's cost per image token too; one without leaves it out.

use batchlab::engine::sim::Profile;
use batchlab::scenario::plan::EnginePlan;
use batchlab::scenario::{Overrides, load_file};

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{batchlab, temp_dir, text};

/// `batchlab run SCENARIO --quiet --requests-jsonl --output OUT`, which must succeed.
fn run_with_requests(scenario: &std::path::Path, out: &std::path::Path) {
    let (scenario, out) = (scenario.to_str().unwrap(), out.to_str().unwrap());
    let run = batchlab(&["run", scenario, "--quiet", "--requests-jsonl", "--output", out]);
    assert!(run.status.success(), "{}", text(&run.stderr));
}

/// Known coefficients (ns), in `Coefficients::NAMES` order, as the scenario below spells them.
const TRUTH: [(&str, f64); 9] = [
    ("fixed_overhead", 2_000_000.0),
    ("request_overhead", 40_000.0),
    ("decode_step", 900_000.0),
    ("prefill_per_token", 5_300.0),
    ("per_seq", 31_000.0),
    ("context_per_1k_tokens", 17_000.0),
    ("tokens_squared_per_1m", 800_000.0),
    ("finish_overhead", 700_000.0),
    ("finish_per_request", 12_000.0),
];

/// Small limits (chunked prefill and preemption happen), batches of several sizes, varied
/// prompt and output lengths.
const SCENARIO: &str = r#"
name = "calibration-source"
seed = 5

[engine.sim]
fixed_overhead = "2ms"
request_overhead = "40us"
decode_step = "900us"
prefill_per_token = "5300ns"
per_seq = "31us"
context_per_1k_tokens = "17us"
tokens_squared_per_1m = "800us"
finish_overhead = "700us"
finish_per_request = "12us"
max_num_seqs = 8
max_num_batched_tokens = 256
num_kv_blocks = 48
block_size = 16
prefix_caching = false

[batching]
batch_size = 16
batch_timeout = "5ms"

[workload]
prompt_tokens = { dist = "uniform", min = 8, max = 400 }
output_tokens = { dist = "uniform", min = 1, max = 60 }

[profile]
kind = "concurrent"
levels = [1, 3, 8, 16]

[stop]
max_requests = 48
"#;

#[test]
fn calibrate_recovers_a_simulated_runs_coefficients_from_its_output_directory() {
    let dir = temp_dir("fit");
    let scenario = dir.join("source.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let out = dir.join("run");
    run_with_requests(&scenario, &out);

    let profile_path = dir.join("profile.toml");
    let fit = batchlab(&["calibrate", out.to_str().unwrap(), "--output", profile_path.to_str().unwrap()]);
    assert!(fit.status.success(), "{}", text(&fit.stderr));
    assert!(text(&fit.stdout).contains("residual last_token"), "{}", text(&fit.stdout));

    let profile = Profile::load(&profile_path).expect("a valid profile");
    for ((name, want), got) in TRUTH.iter().zip(profile.coefficients.to_array()) {
        let err = (got - want).abs() / want;
        assert!(err < 0.01, "{name}: fitted {got} ns, true {want} ns ({:.3} %)", err * 100.0);
    }
    // No images: the encoder's cost is not fitted, nor said to be unidentified.
    assert_eq!(profile.coefficients.encoder_per_image_token_ns, None);
    assert!(!std::fs::read_to_string(&profile_path).unwrap().contains("encoder_per_image_token_ns"));
    assert!(!text(&fit.stdout).contains("encoder_per_image_token"), "{}", text(&fit.stdout));
    assert!(profile.fit.unidentified.is_empty(), "{:?}", profile.fit.unidentified);
    assert_eq!(profile.engine.max_num_batched_tokens, 256);
    assert_eq!(profile.engine.num_kv_blocks, 48);
    assert_eq!(profile.provenance.engine_name, "sim");
    assert_eq!(profile.provenance.sources, vec![out.display().to_string()]);
    assert!(profile.fit.batches >= 8, "{:?}", profile.fit);
    assert!(profile.residuals["first_token"].p99_rel < 1e-4, "{:?}", profile.residuals);
    let sizes: Vec<u64> = profile.fit.by_batch_size.iter().map(|b| b.size).collect();
    assert!(sizes.len() >= 3 && sizes.contains(&1), "several batch sizes: {sizes:?}");
    assert!(profile.fit.by_batch_size.iter().all(|b| b.mean_rel_error.abs() < 1e-6), "{:?}", profile.fit.by_batch_size);
    assert!(text(&fit.stdout).contains("batch size 1 "), "{}", text(&fit.stdout));

    // A scenario that uses the profile gets its coefficients and limits; a key written beside
    // `profile` overrides it.
    let user = dir.join("user.toml");
    std::fs::write(&user, "[engine.sim]\nprofile = \"profile.toml\"\nmax_num_seqs = 4\n").unwrap();
    let plan = load_file(&user, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let EnginePlan::Sim(sim) = &plan.engine() else { panic!("{:?}", plan.engine()) };
    assert_eq!(sim.cost.decode_step.as_nanos(), profile.coefficients.decode_step_ns.round() as u128);
    assert_eq!(sim.scheduler.num_kv_blocks, 48);
    assert_eq!(sim.scheduler.max_num_seqs, 4, "the explicit key wins");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// [`SCENARIO`] with chat prompts carrying 0 to 4 images of 48 tokens each, half of them from a
/// pool of 6 (so the encoder cache hits), and an encoder cost of 1.5 µs an image token.
fn images_scenario() -> String {
    let with_encoder = SCENARIO.replace(
        "tokens_squared_per_1m = \"800us\"\n",
        "tokens_squared_per_1m = \"800us\"\nencoder_per_image_token = \"1500ns\"\n",
    );
    format!(
        "{with_encoder}\n[workload.images]\nbuckets = \"{{(32, 32, 1): 0.5, (24, 48, 1): 0.5}}\"\n\
         base_items_per_request = 2\nrange_ratio = 1.0\ncontent = \"solid\"\npool = 6\npool_rate = 0.5\n\
         tokens_per_image = 48\n"
    )
    .replace("[workload]\n", "[workload]\nchat = true\n")
}

/// A simulated run with images and a known encoder cost: `calibrate` gives that cost within 1 %
/// (with every other coefficient), from each request's images and encoder-cache hits in
/// requests.jsonl.
#[test]
fn calibrate_recovers_the_encoder_cost_per_image_token_from_a_run_with_images() {
    let dir = temp_dir("images");
    let scenario = dir.join("images.toml");
    std::fs::write(&scenario, images_scenario()).unwrap();
    let out = dir.join("run");
    run_with_requests(&scenario, &out);
    // The data has what separates the encoder from the prefill: misses, hits, and requests
    // without images.
    let records: Vec<_> =
        batchlab::report::read_records(&out.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    let hits: u32 = records.iter().filter_map(|r| r.image_cache_hits).sum();
    let images: u32 = records.iter().filter_map(|r| r.images.map(|s| s.images)).sum();
    assert!(hits > 10 && images > hits + 10, "{hits} hits of {images} images");
    assert!(records.iter().any(|r| r.images.is_none()), "some requests have no images");

    let profile_path = dir.join("profile.toml");
    let fit = batchlab(&["calibrate", out.to_str().unwrap(), "--output", profile_path.to_str().unwrap()]);
    assert!(fit.status.success(), "{}", text(&fit.stderr));
    assert!(text(&fit.stdout).contains("encoder_per_image_token"), "{}", text(&fit.stdout));
    let profile = Profile::load(&profile_path).expect("a valid profile");
    let got = profile.coefficients.encoder_per_image_token_ns.expect("fitted from a run with images");
    assert!((got - 1500.0).abs() / 1500.0 < 0.01, "encoder_per_image_token: fitted {got} ns, true 1500 ns");
    for ((name, want), got) in TRUTH.iter().zip(profile.coefficients.to_array()) {
        let err = (got - want).abs() / want;
        assert!(err < 0.01, "{name}: fitted {got} ns, true {want} ns ({:.3} %)", err * 100.0);
    }
    assert!(profile.fit.unidentified.is_empty(), "{:?}", profile.fit.unidentified);
    assert!(profile.residuals["first_token"].p99_rel < 1e-4, "{:?}", profile.residuals);

    // A scenario that uses the profile gets the encoder's cost.
    let user = dir.join("user.toml");
    std::fs::write(&user, "[engine.sim]\nprofile = \"profile.toml\"\n").unwrap();
    let plan = load_file(&user, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let EnginePlan::Sim(sim) = &plan.engine() else { panic!("{:?}", plan.engine()) };
    assert_eq!(sim.cost.encoder_per_image_token.as_nanos(), got.round() as u128);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn calibrate_explains_what_it_cannot_use() {
    let dir = temp_dir("errors");
    let o = batchlab(&["calibrate", dir.join("missing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("is not a directory"), "{}", text(&o.stderr));

    // A run without requests.jsonl.
    let out = dir.join("run");
    let run = batchlab(&["run", "scenarios/throughput.toml", "--quiet", "--output", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let o = batchlab(&["calibrate", out.to_str().unwrap(), "--output", dir.join("p.toml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("requests.jsonl"), "{}", text(&o.stderr));

    // A bad profile in a scenario names the profile's file and line.
    std::fs::write(dir.join("bad.toml"), "[coefficients]\nfixed_overhead_ns = \"fast\"\n").unwrap();
    std::fs::write(dir.join("user.toml"), "[engine.sim]\nprofile = \"bad.toml\"\n").unwrap();
    let err = load_file(&dir.join("user.toml"), &Overrides::default()).unwrap_err().to_string();
    assert!(err.contains("bad.toml:2:"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_shipped_example_profile_is_what_calibrating_its_source_run_gives() {
    let dir = temp_dir("example");
    let out = dir.join("example-source");
    run_with_requests(std::path::Path::new("scenarios/profiles/example-source.toml"), &out);
    let fitted = batchlab::calibrate::fit_dirs(std::slice::from_ref(&out)).expect("fit");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shipped = Profile::load(&root.join("scenarios/profiles/example.toml")).expect("the shipped profile");
    assert_eq!(fitted.engine, shipped.engine);
    assert_eq!(fitted.fit, shipped.fit);
    for ((name, a), b) in batchlab::engine::sim::profile::Coefficients::NAMES
        .iter()
        .zip(fitted.coefficients.to_array())
        .zip(shipped.coefficients.to_array())
    {
        assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{name}: fitted {a}, shipped {b}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
