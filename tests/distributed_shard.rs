//! `batchlab run --shard K/N` in virtual time: for N = 1, 2, 3 and 7 the shards' requests
//! (arrival times, prompts, output lengths, phases) are exactly the single-process run's,
//! partitioned by the shard rule (`loadgen::shard`), on the shipped scenarios' load profiles. A
//! profile of several steps starts each step when the shard's previous one drained, so only a
//! one-step profile's arrival times are compared on the clock (docs/distributed.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use batchlab::loadgen::shard::Shard;
use batchlab::report::{RequestRecord, read_records};
use batchlab::run::shard::ShardRun;
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, load_file};

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-shard-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `scenario` (with `sets`) into `dir`, as shard `shard` when given; its records.
fn run(scenario: &str, sets: &[&str], dir: &Path, shard: Option<Shard>) -> Vec<RequestRecord> {
    let overrides = Overrides { sets: sets.iter().map(|s| s.to_string()).collect(), seed: None };
    let plan = load_file(Path::new(scenario), &overrides).unwrap_or_else(|e| panic!("{e}"));
    let options = RunOptions {
        output_dir: Some(dir.to_path_buf()),
        requests_jsonl: true,
        shard: shard.map(|shard| ShardRun { shard, start_at: None, clock_offset_ms: None }),
        ..RunOptions::default()
    };
    let summary = run_blocking(&plan, options).unwrap_or_else(|e| panic!("{scenario} {shard:?}: {e}"));
    assert!(!summary.report.incomplete, "{scenario} {shard:?}");
    assert_eq!(summary.report.shard.as_ref().map(|s| (s.k, s.n)), shard.map(|s| (s.k, s.n)));
    read_records(&dir.join("requests.jsonl")).unwrap().collect::<Result<_, _>>().unwrap()
}

/// What must be the same in a shard as in the single-process run: the request's benchmark,
/// phase, intended arrival (a rate profile's schedule; a closed loop's depends on completions),
/// its prompt and output lengths, and its images.
type Key = (String, String, Option<u64>, Option<u32>, Option<u32>, String);

fn key(r: &RequestRecord, open_loop: bool) -> Key {
    let m = r.metrics.as_ref();
    (
        r.benchmark.clone(),
        format!("{:?}", r.phase),
        if open_loop { r.intended_ns.map(|t| t.as_nanos()) } else { None },
        m.and_then(|m| m.prompt_tokens),
        m.and_then(|m| m.output_tokens),
        format!("{:?}", r.images),
    )
}

/// The shards of `scenario` for N = 1, 2, 3, 7 partition its single-process run's requests.
fn check_partition(name: &str, scenario: &str, sets: &[&str], open_loop: bool) {
    let whole_dir = out_dir(&format!("{name}-whole"));
    let whole: BTreeMap<u64, _> =
        run(scenario, sets, &whole_dir, None).iter().map(|r| (r.id, key(r, open_loop))).collect();
    assert!(whole.len() >= 8, "{name}: {} requests", whole.len());
    for n in [1u32, 2, 3, 7] {
        let mut union = BTreeMap::new();
        for k in 0..n {
            let dir = out_dir(&format!("{name}-{k}of{n}"));
            for r in run(scenario, sets, &dir, Some(Shard { k, n })) {
                assert_eq!(r.id % u64::from(n), u64::from(k), "{name}: request {} in shard {k}/{n}", r.id);
                assert!(union.insert(r.id, key(&r, open_loop)).is_none(), "{name}: request {} twice", r.id);
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
        assert_eq!(union, whole, "{name}: the union of {n} shards is the single-process run");
    }
    std::fs::remove_dir_all(&whole_dir).unwrap();
}

#[test]
fn poisson_shards_keep_their_arrival_times_prompts_and_lengths() {
    check_partition("poisson", "scenarios/poisson.toml", &[], true);
}

#[test]
fn one_constant_rate_with_few_requests_and_batch_size_one() {
    check_partition(
        "constant",
        "scenarios/constant.toml",
        &["profile.rates=[50.0]", "stop.max_requests=9", "batching.batch_size=1"],
        true,
    );
}

#[test]
fn a_trace_from_a_dataset_file_is_partitioned() {
    check_partition("trace", "scenarios/trace.toml", &[], true);
}

#[test]
fn a_closed_loop_splits_its_concurrency_and_keeps_prompts_and_lengths() {
    // Throughput with a warm-up of 16 and 256 measured: the warm-up and the stop count every
    // shard's requests.
    check_partition("throughput", "scenarios/throughput.toml", &["profile.max_concurrency=28"], false);
}

#[test]
fn a_concurrency_below_the_shard_count_is_refused_by_name() {
    let plan = load_file(
        Path::new("scenarios/throughput.toml"),
        &Overrides { sets: vec!["profile.max_concurrency=2".into()], seed: None },
    )
    .unwrap();
    let options = RunOptions {
        shard: Some(ShardRun { shard: Shard { k: 0, n: 3 }, start_at: None, clock_offset_ms: None }),
        ..RunOptions::default()
    };
    let error = run_blocking(&plan, options).expect_err("refused").to_string();
    assert!(error.contains("max_concurrency = 2 cannot be split over 3 shards"), "{error}");
}

#[test]
fn images_and_prefix_groups_go_with_their_request() {
    // 800 chat requests with images (half from a pool), cut to 40: each shard's requests carry
    // the single-process run's images and prompt lengths.
    check_partition("vision", "scenarios/vision.toml", &["stop.max_requests=40"], false);
    // Shared prefixes: request i is in the same prefix group in every shard.
    check_partition(
        "prefix",
        "scenarios/poisson.toml",
        &["workload.prefix_groups=3", "workload.prefix_tokens=64", "stop.max_requests=60"],
        true,
    );
}
