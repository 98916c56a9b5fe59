//! `batchlab merge`: (b) one run's records split into N parts by the shard rule merge back into
//! that run's report.json exactly, for N = 1, 2, 3 and 7, with the exceptions listed in
//! [`EXCEPTIONS`]; (c) the merge of N shard runs gives the percentiles of the union of their raw
//! records, computed here independently; a missing or a failed shard makes the merged report
//! incomplete, names the shard and exits 6. Virtual time, except the HTTP test (two `batchlab
//! serve` endpoints on 127.0.0.1, continuous admission: `batch_size = 1`, `max_in_flight = 8`).

#[path = "common/cli.rs"]
mod cli_common;
#[path = "common/serve_process.rs"]
mod serve_process;

use std::path::{Path, PathBuf};

use batchlab::loadgen::shard::Shard;
use batchlab::run::shard::ShardRun;
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, load_file};
use cli_common::{batchlab, temp_dir, text};
use serde_json::Value;

/// What the merge of a split run may not give back as the run wrote it: the shard block (the
/// merged report has a `merge` block instead), and `generate` (one sample per engine batch, which
/// no request record holds: left empty, each shard's p99 in its row; docs/distributed.md).
const EXCEPTIONS: [&str; 3] = ["/shard", "/merge", "/benchmarks/*/distributions/generate"];

/// In real time a run sees its outcomes in an order that is not their finish order, which the
/// merge of several parts cannot know: these running sums (Welford's mean and deviation) then
/// agree to rounding, 1e-12 relative, instead of to the bit.
const ROUNDED_IN_REAL_TIME: [&str; 2] = ["mean", "std"];

/// `a` and `b` equal, the [`ROUNDED_IN_REAL_TIME`] keys to within rounding when `rounded`.
fn same(a: &Value, b: &Value, rounded: bool, key: &str) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, u)| y.get(k).is_some_and(|v| same(u, v, rounded, k)))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(u, v)| same(u, v, rounded, key))
        }
        (Value::Number(x), Value::Number(y)) if rounded && ROUNDED_IN_REAL_TIME.contains(&key) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        _ => a == b,
    }
}

/// Runs `scenario` with `sets` into `dir`, as `shard`.
fn run_shard(scenario: &str, sets: &[String], dir: &Path, shard: Shard) {
    let overrides = Overrides { sets: sets.to_vec(), seed: None };
    let plan = load_file(Path::new(scenario), &overrides).unwrap_or_else(|e| panic!("{e}"));
    let options = RunOptions {
        output_dir: Some(dir.to_path_buf()),
        shard: Some(ShardRun { shard, start_at: None, clock_offset_ms: None }),
        ..RunOptions::default()
    };
    let summary = run_blocking(&plan, options).unwrap_or_else(|e| panic!("{scenario}: {e}"));
    assert!(!summary.report.incomplete, "{scenario} {shard}");
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `batchlab merge DIRS --output OUT`: its exit code and stdout.
fn merge(dirs: &[PathBuf], out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["merge".to_owned()];
    args.extend(dirs.iter().map(|d| d.display().to_string()));
    args.extend(["--output".to_owned(), out.display().to_string()]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = batchlab(&args);
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

/// `value` without the [`EXCEPTIONS`] (paths whose `*` matches every element of an array).
fn without_exceptions(mut value: Value) -> Value {
    fn remove(value: &mut Value, path: &[&str]) {
        match path {
            [] => {}
            [last] => {
                if let Some(obj) = value.as_object_mut() {
                    obj.remove(*last);
                }
            }
            ["*", rest @ ..] => value.as_array_mut().into_iter().flatten().for_each(|v| remove(v, rest)),
            [key, rest @ ..] => {
                if let Some(v) = value.get_mut(*key) {
                    remove(v, rest);
                }
            }
        }
    }
    for path in EXCEPTIONS {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        remove(&mut value, &parts);
    }
    value
}

/// Zeroes what no record holds in a part's report (`batching`, the time series' batches, the
/// designed prefix-cache tokens, the servers' counters), which the merge sums (the counters: takes from the widest part):
/// the first part keeps the run's, so the sums are the run's.
fn zero_unrecorded(report: &mut Value) {
    for b in report["benchmarks"].as_array_mut().unwrap() {
        let batching = &mut b["batching"];
        batching["batch_size_histogram"] = serde_json::json!({});
        for key in ["batches", "full", "timeout", "drain", "steps"] {
            batching[key] = 0.into();
        }
        batching["whole_run"] = serde_json::json!({ "batches": 0, "largest": 0 });
        for key in ["prefill_mean", "decode_mean"] {
            batching[key] = Value::Null;
        }
        let n = b["time_series"]["batches"].as_array().unwrap().len();
        b["time_series"]["batches"] = serde_json::json!(vec![0; n]);
        b["time_series"]["batch_size_mean"] = serde_json::json!(vec![Value::Null; n]);
        b["prefix_cache_tokens"]["designed_cached"] = 0.into();
        b["prefix_cache_tokens"]["designed_prompt"] = 0.into();
        b["server"] = serde_json::json!([]);
    }
}

/// (b): the run of `scenario` (as shard 0/1, so its records carry what a merge needs) split into
/// N parts by the shard rule, for N = 1, 2, 3, 7, merges back into its report.json.
fn check_split_merge(name: &str, scenario: &str, sets: &[&str], real_time: bool) {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let dir = temp_dir(name);
    let whole = dir.join("whole");
    run_shard(scenario, &sets, &whole, Shard::WHOLE);
    let report = read_json(&whole.join("report.json"));
    let records = lines(&whole.join("requests.jsonl"));
    assert!(records.len() >= 8, "{name}: {} records", records.len());
    for n in [1u32, 2, 3, 7] {
        let parts: Vec<PathBuf> = (0..n)
            .map(|k| {
                let part = dir.join(format!("part-{k}of{n}"));
                std::fs::create_dir_all(&part).unwrap();
                let mut part_report = report.clone();
                part_report["shard"]["k"] = k.into();
                part_report["shard"]["n"] = n.into();
                if k > 0 {
                    zero_unrecorded(&mut part_report);
                }
                std::fs::write(part.join("report.json"), serde_json::to_string(&part_report).unwrap()).unwrap();
                let mine: String = records
                    .iter()
                    .filter(|r| Shard { k, n }.owns(r["id"].as_u64().unwrap()))
                    .map(|r| format!("{r}\n"))
                    .collect();
                std::fs::write(part.join("requests.jsonl"), mine).unwrap();
                part
            })
            .collect();
        let out = dir.join(format!("merged-{n}"));
        let (code, stdout, stderr) = merge(&parts, &out, &[]);
        // A `--set` can leave the scenario's [expect] failing: the merge fails it as the run would.
        let passed = report["expectations"].as_array().unwrap().iter().all(|e| e["passed"] == true);
        assert_eq!(code, if passed { 0 } else { 3 }, "{name} N={n}: {stdout}{stderr}");
        let merged = read_json(&out.join("report.json"));
        assert_eq!(merged["merge"]["shards"].as_array().unwrap().len(), n as usize);
        let (merged, expected) = (without_exceptions(merged), without_exceptions(report.clone()));
        // With one part the order is the run's own, in any time.
        let rounded = real_time && n > 1;
        assert!(
            same(&expected, &merged, rounded, ""),
            "{name} N={n}: the merged report differs:\n{}",
            first_difference(&expected, &merged, "")
        );
        let mut got = lines(&out.join("requests.jsonl"));
        let mut want = records.clone();
        let by_id = |v: &Value| v["id"].as_u64();
        got.sort_by_key(by_id);
        want.sort_by_key(by_id);
        assert_eq!(got, want, "{name} N={n}: the merged requests.jsonl holds the run's records");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The first path where `a` and `b` differ, for a readable failure.
fn first_difference(a: &Value, b: &Value, path: &str) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                if x.get(k) != y.get(k) {
                    return match (x.get(k), y.get(k)) {
                        (Some(u), Some(v)) => first_difference(u, v, &format!("{path}/{k}")),
                        _ => format!("{path}/{k}: present in one only"),
                    };
                }
            }
            String::new()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find(|(_, (u, v))| u != v)
            .map(|(i, (u, v))| first_difference(u, v, &format!("{path}/{i}")))
            .unwrap_or_default(),
        _ => format!("{path}: {a} != {b}"),
    }
}

#[test]
fn a_poisson_run_split_and_merged_is_its_report() {
    check_split_merge("split-poisson", "scenarios/poisson.toml", &[], false);
}

#[test]
fn a_closed_loop_with_warmup_and_variable_output_lengths_split_and_merged_is_its_report() {
    check_split_merge(
        "split-throughput",
        "scenarios/throughput.toml",
        &["workload.output_tokens={ dist = \"uniform\", min = 4, max = 64 }", "stop.max_requests=64"],
        false,
    );
}

#[test]
fn few_requests_at_batch_size_one_split_and_merged_is_its_report() {
    check_split_merge(
        "split-constant",
        "scenarios/constant.toml",
        &["profile.rates=[50.0, 100.0]", "stop.max_requests=9", "batching.batch_size=1"],
        false,
    );
}

#[test]
fn a_dataset_trace_split_and_merged_is_its_report() {
    check_split_merge("split-trace", "scenarios/trace.toml", &[], false);
}

#[test]
fn images_and_prefix_groups_split_and_merged_are_their_report() {
    check_split_merge("split-vision", "scenarios/vision.toml", &["stop.max_requests=40"], false);
    check_split_merge(
        "split-prefix",
        "scenarios/poisson.toml",
        &["workload.prefix_groups=3", "workload.prefix_tokens=64", "stop.max_requests=60"],
        false,
    );
}

/// Nearest rank, as the report's percentiles: the smallest value with at least `q` of the
/// samples at or below it.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// (c): `n` shard runs of `scenario` merged: counts are the shards' sums and each percentile is
/// the union's (the report's histogram tops a bucket at most 1/1024 above the true value).
fn check_shard_runs(name: &str, scenario: &str, sets: &[&str], n: u32) -> PathBuf {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let dir = temp_dir(name);
    let shards: Vec<PathBuf> = (0..n)
        .map(|k| {
            let d = dir.join(format!("shard-{k}"));
            run_shard(scenario, &sets, &d, Shard { k, n });
            d
        })
        .collect();
    let out = dir.join("merged");
    let (code, stdout, stderr) = merge(&shards, &out, &[]);
    assert_eq!(code, 0, "{name}: {stdout}{stderr}");
    for k in 0..n {
        assert!(stdout.contains(&format!("{k}/{n} ")), "{name}: the shard table names shard {k}:\n{stdout}");
    }
    let merged = read_json(&out.join("report.json"));
    let shard_reports: Vec<Value> = shards.iter().map(|d| read_json(&d.join("report.json"))).collect();
    let records: Vec<Value> = shards.iter().flat_map(|d| lines(&d.join("requests.jsonl"))).collect();
    for (i, b) in merged["benchmarks"].as_array().unwrap().iter().enumerate() {
        for count in ["submitted", "completed", "errors"] {
            let sum: u64 = shard_reports.iter().map(|r| r["benchmarks"][i]["counts"][count].as_u64().unwrap()).sum();
            assert_eq!(b["counts"][count].as_u64(), Some(sum), "{name}: {count} is the shards' sum");
        }
        let mine = |r: &&Value| r["benchmark"] == b["name"] && r["phase"] == "measure" && r["outcome"] == "completed";
        for metric in ["latency", "ttft", "tpot"] {
            let mut union: Vec<f64> =
                records.iter().filter(mine).filter_map(|r| r[format!("{metric}_ms")].as_f64()).collect();
            union.sort_by(f64::total_cmp);
            let d = &b["distributions"][metric];
            assert_eq!(d["count"].as_u64(), Some(union.len() as u64), "{name}: {metric} count");
            assert_eq!(d["min"].as_f64(), union.first().copied(), "{name}: {metric} min");
            assert_eq!(d["max"].as_f64(), union.last().copied(), "{name}: {metric} max");
            for (q, key) in [(0.5, "p50"), (0.9, "p90"), (0.99, "p99")] {
                let (truth, reported) = (nearest_rank(&union, q), d[key].as_f64().unwrap());
                assert!(
                    reported >= truth - 1e-9 && reported <= truth * (1.0 + 1.0 / 1024.0) + 1e-9,
                    "{name}: {metric} {key} {reported} is not the union's {truth}"
                );
            }
        }
    }
    dir
}

#[test]
fn merged_shard_runs_give_the_percentiles_of_the_union_of_their_records() {
    for n in [1, 2, 3, 7] {
        let dir = check_shard_runs(&format!("runs-poisson-{n}"), "scenarios/poisson.toml", &[], n);
        std::fs::remove_dir_all(dir).unwrap();
    }
    let dir = check_shard_runs("runs-throughput", "scenarios/throughput.toml", &["profile.max_concurrency=21"], 3);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_missing_shard_makes_the_report_incomplete_and_names_it() {
    let dir = check_shard_runs("missing", "scenarios/poisson.toml", &[], 3);
    let given = [dir.join("shard-0"), dir.join("shard-2")];
    let (code, stdout, stderr) = merge(&given, &dir.join("two"), &[]);
    assert_eq!(code, 6, "{stdout}{stderr}");
    assert!(stdout.contains("1/3    MISSING"), "{stdout}");
    assert!(stderr.contains("the merged report is incomplete: shard 1 of 3 is missing"), "{stderr}");
    let report = read_json(&dir.join("two/report.json"));
    assert_eq!(report["incomplete"], true);
    assert_eq!(report["merge"]["missing"], serde_json::json!([1]));
    // --expect 4 with all three: shard 3 is missing.
    let all = [dir.join("shard-0"), dir.join("shard-1"), dir.join("shard-2")];
    let (code, _, stderr) = merge(&all, &dir.join("four"), &["--expect", "4"]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("shard 3 of 4 is missing"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_shard_its_launcher_lost_is_named_failed_with_the_launchers_reason() {
    let dir = check_shard_runs("lost", "scenarios/poisson.toml", &[], 3);
    // What the Ray launcher leaves for a shard whose actor died: its marker, nothing else.
    std::fs::remove_dir_all(dir.join("shard-1")).unwrap();
    std::fs::create_dir_all(dir.join("shard-1")).unwrap();
    let marker = r#"{"k": 1, "n": 3, "reason": "lost by the Ray launcher: its actor died (ActorDiedError)"}"#;
    std::fs::write(dir.join("shard-1/shard-failed.json"), marker).unwrap();
    let shards = [dir.join("shard-0"), dir.join("shard-1"), dir.join("shard-2")];
    let (code, stdout, stderr) = merge(&shards, &dir.join("out"), &[]);
    assert_eq!(code, 6, "{stdout}{stderr}");
    assert!(stdout.contains("1/3    FAILED"), "{stdout}");
    let merged = read_json(&dir.join("out/report.json"));
    assert_eq!(merged["incomplete"], true);
    assert_eq!(merged["merge"]["missing"], serde_json::json!([]), "named failed, not also missing");
    let failed = &merged["merge"]["failed"][0];
    assert_eq!(failed["k"], 1);
    assert!(failed["reason"].as_str().unwrap().contains("its actor died"), "{failed}");
    assert!(stderr.contains("shard 1 (") && stderr.contains("its actor died"), "{stderr}");
    // A marker that cannot be read is a failure of its own, not a silent skip.
    std::fs::write(dir.join("shard-1/shard-failed.json"), "{").unwrap();
    let (code, _, stderr) = merge(&shards, &dir.join("bad"), &[]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("shard-failed.json"), "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_failed_shard_makes_the_report_incomplete_and_names_it() {
    let dir = check_shard_runs("failed", "scenarios/poisson.toml", &[], 3);
    // Shard 1 lost its records; shard 2's report says its engine became unusable.
    std::fs::remove_file(dir.join("shard-1/requests.jsonl")).unwrap();
    let path = dir.join("shard-2/report.json");
    let mut report = read_json(&path);
    report["incomplete"] = true.into();
    std::fs::write(&path, serde_json::to_string(&report).unwrap()).unwrap();
    let shards = [dir.join("shard-0"), dir.join("shard-1"), dir.join("shard-2")];
    let (code, stdout, stderr) = merge(&shards, &dir.join("out"), &[]);
    assert_eq!(code, 6, "{stdout}{stderr}");
    assert!(stdout.contains("1/3    FAILED"), "{stdout}");
    assert!(stdout.contains("2/3    FAILED"), "{stdout}");
    let merged = read_json(&dir.join("out/report.json"));
    assert_eq!(merged["incomplete"], true);
    let error = merged["error"].as_str().unwrap();
    assert!(error.contains("shard 1 (") && error.contains("requests.jsonl"), "{error}");
    assert!(error.contains("shard 2 (") && error.contains("marked incomplete"), "{error}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn http_shards_against_two_serve_endpoints_with_continuous_admission_merge_exactly() {
    let (a, b) = (serve_process::Server::start(None, &[]), serve_process::Server::start(None, &[]));
    let urls = format!("engine.openai.urls=[\"{}\", \"{}\"]", a.url, b.url);
    let sets = [
        urls.as_str(),
        "batching.batch_size=1",
        "batching.max_in_flight=8",
        "profile.levels=[8]",
        "stop.max_requests=60",
    ];
    let dir = check_shard_runs("http", "scenarios/http.toml", &sets, 2);
    let merged = read_json(&dir.join("merged/report.json"));
    let endpoints = merged["benchmarks"][0]["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 2, "both endpoints: {endpoints:?}");
    std::fs::remove_dir_all(dir).unwrap();
    check_split_merge("split-http", "scenarios/http.toml", &sets, true);
}
