//! The Ray launcher (`python -m batchlab_engines.ray_run`, docs/distributed.md) on a real Ray
//! cluster of three nodes on this machine (`scripts/ray_local.py`: `ray.cluster_utils.Cluster`, a
//! raylet and object store per node), three shards of one HTTP scenario against `batchlab serve`:
//! - the shards run on three nodes, the binary and the scenario shipped through the object store;
//! - the merged report's counts are the sum of the shards', its percentiles those of the union of
//!   their raw records (recomputed here from the shards' requests.jsonl), and it has a row per
//!   shard;
//! - killing one shard's actor mid-run, or removing its node from the cluster, gives within 10 s an
//!   incomplete report (exit 6) that names that shard, with the reason the launcher saw, and the
//!   other shards stopped.
//!
//! Needs the venv of `just setup-vllm` (Ray is installed there, pinned), so it is built with
//! `--features vllm` and run by `just test-vllm`, as every test that needs Python.

#![cfg(feature = "vllm")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use batchlab::metrics::Distribution;
use serde_json::Value;

#[path = "common/python_env.rs"]
mod python_env;
#[path = "common/serve_process.rs"]
mod serve_process;

use serve_process::Server;

/// One Ray cluster at a time: each takes a core's worth of processes to start.
static ONE_CLUSTER: Mutex<()> = Mutex::new(());

const SHARDS: usize = 3;

/// 400 requests at 40/s (Poisson), 32 in flight at most, output lengths 8 to 24: about ten
/// seconds of load, each request its own streamed completion.
fn scenario(url: &str) -> String {
    format!(
        r#"name = "ray-shards"
seed = 7
[engine]
kind = "openai"
[engine.openai]
urls = ["{url}"]
model = "batchlab-sim"
api = "completions"
timeout = "30s"
max_connections = 64
[batching]
batch_size = 1
max_in_flight = 32
[workload]
source = "synthetic"
prompt_tokens = 32
output_tokens = {{ dist = "uniform", min = 8, max = 24 }}
vocab_size = 4000
ignore_eos = true
[profile]
kind = "poisson"
rate = 40
max_concurrency = 32
[stop]
max_requests = 400
"#
    )
}

struct Launch {
    dir: PathBuf,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Starts `batchlab serve`, writes the scenario into a directory of its own (the directory the
/// launcher ships), and runs the launcher on a fresh three-node cluster.
fn launch(name: &str, extra: &[&str]) -> Launch {
    let server = Server::start(None, &[]);
    let dir = std::env::temp_dir().join(format!("batchlab-ray-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("scenario")).unwrap();
    let scenario_path = dir.join("scenario/ray.toml");
    std::fs::write(&scenario_path, scenario(&server.url)).unwrap();
    // The debug binary is ~300 MB of symbols; every node gets a stripped copy.
    let binary = dir.join("batchlab");
    let strip =
        Command::new("strip").arg("-o").arg(&binary).arg(env!("CARGO_BIN_EXE_batchlab")).status().expect("strip runs");
    assert!(strip.success(), "strip failed");
    let python = batchlab::engine::python::default_venv().join("bin/python");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(python);
    cmd.arg(root.join("scripts/ray_local.py")).args(["--nodes", "3"]).args(extra).arg("--");
    cmd.arg(&scenario_path).args(["--workers", &SHARDS.to_string()]).arg("--binary").arg(&binary);
    cmd.arg("--output").arg(dir.join("out"));
    let out = cmd.output().expect("the venv's python runs");
    let launch = Launch {
        dir,
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    drop(server);
    launch
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The measured records of a requests.jsonl, as JSON objects.
fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["phase"] == "measure")
        .collect()
}

#[test]
fn three_shards_on_three_ray_nodes_merge_into_the_report_of_their_union() {
    if !python_env::ready(false) {
        return;
    }
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let run = launch("whole", &[]);
    assert_eq!(run.code, Some(0), "launcher failed:\n{}", run.stderr);
    assert!(run.stderr.contains("3 shards on 3 node(s)"), "the shards were not spread over 3 nodes:\n{}", run.stderr);
    let out = run.dir.join("out");
    let merged = json(&out.join("merged/report.json"));
    assert_eq!(merged["incomplete"], Value::Bool(false), "{merged:#}");

    // Counts: the sum of the shards'.
    let bench = &merged["benchmarks"][0];
    let mut union = Vec::new();
    let (mut completed, mut submitted) = (0, 0);
    for k in 0..SHARDS {
        let shard = json(&out.join(format!("shard-{k}/report.json")));
        assert_eq!(shard["shard"]["k"], k as u64);
        assert_eq!(shard["shard"]["n"], SHARDS as u64);
        completed += shard["benchmarks"][0]["counts"]["completed"].as_u64().unwrap();
        submitted += shard["benchmarks"][0]["counts"]["submitted"].as_u64().unwrap();
        union.extend(records(&out.join(format!("shard-{k}/requests.jsonl"))));
    }
    assert_eq!(bench["counts"]["completed"].as_u64(), Some(completed));
    assert_eq!(bench["counts"]["submitted"].as_u64(), Some(submitted));
    assert_eq!(completed, 400, "every request of the one schedule, once");

    // Percentiles: those of the union of the shards' raw records.
    for (metric, field) in [("latency", "latency_ms"), ("ttft", "ttft_ms"), ("tpot", "tpot_ms")] {
        let mut d = Distribution::new();
        for r in union.iter().filter(|r| r["outcome"] == "completed") {
            if let Some(ms) = r[field].as_f64() {
                d.record_nanos((ms * 1e6).round() as u64);
            }
        }
        let want = d.summary();
        let got = &bench["distributions"][metric];
        assert_eq!(got["count"].as_u64(), Some(want.count), "{metric} count");
        for (q, value) in [("p50", want.p50), ("p90", want.p90), ("p99", want.p99), ("max", want.max)] {
            let got = got[q].as_f64().unwrap_or_else(|| panic!("{metric} {q}: {got}"));
            let want = value.unwrap();
            assert!((got - want).abs() < 1e-6, "{metric} {q}: merged {got}, union of the shards' records {want}");
        }
    }

    // A row per shard, each with its host, clock offset and verdict.
    let rows = merged["merge"]["shards"].as_array().expect("merge.shards");
    let mut ks: Vec<u64> = rows.iter().map(|r| r["k"].as_u64().unwrap()).collect();
    ks.sort();
    assert_eq!(ks, vec![0, 1, 2]);
    for row in rows {
        assert!(row["host"].is_string() && row["clock_offset_ms"].is_number(), "{row}");
        assert!(row["completed"].as_u64().unwrap() > 100, "{row}");
    }
    let _ = std::fs::remove_dir_all(&run.dir);
}

/// Runs the launcher with `how` (ray_local's way of losing a shard 2 s into its ten) and checks the
/// merged report is incomplete and names the lost shard, within 10 s of the loss.
fn check_a_lost_shard(name: &str, how: &[&str]) {
    let _one = ONE_CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let run = launch(name, how);
    assert_eq!(run.code, Some(6), "an incomplete merge exits 6:\n{}", run.stderr);
    let timing: Value = serde_json::from_str(run.stdout.lines().last().expect("ray_local's timing line")).unwrap();
    let k = timing["killed_shard"].as_u64().expect("the shard hit");
    let seconds = timing["seconds_from_kill_to_end"].as_f64().unwrap();
    assert!(seconds < 10.0, "the merged report came {seconds:.1} s after the loss:\n{}", run.stderr);

    let merged = json(&run.dir.join("out/merged/report.json"));
    assert_eq!(merged["incomplete"], Value::Bool(true));
    let failed = merged["merge"]["failed"].as_array().expect("merge.failed");
    let lost =
        failed.iter().find(|f| f["k"] == k).unwrap_or_else(|| panic!("shard {k} not named: {:#}", merged["merge"]));
    let reason = lost["reason"].as_str().unwrap();
    assert!(reason.contains("lost by the Ray launcher"), "{lost}");
    assert!(run.stderr.contains(&format!("shard {k} (")), "{}", run.stderr);
    // The others were stopped on the loss (interrupted), not left to run out their schedule.
    let others: Vec<&Value> = failed.iter().filter(|f| f["k"] != k).collect();
    assert_eq!(others.len(), SHARDS - 1, "{:#}", merged["merge"]);
    assert!(others.iter().all(|f| f["reason"].as_str().unwrap().contains("incomplete")), "{:#}", merged["merge"]);
    let _ = std::fs::remove_dir_all(&run.dir);
}

#[test]
fn a_killed_shard_actor_makes_the_merged_report_incomplete_and_named_within_10_s() {
    if !python_env::ready(false) {
        return;
    }
    check_a_lost_shard("kill", &["--kill-shard", "1", "--kill-after", "2"]);
}

#[test]
fn a_lost_node_makes_the_merged_report_incomplete_and_names_its_shard_within_10_s() {
    if !python_env::ready(false) {
        return;
    }
    check_a_lost_shard("node", &["--lose-node-of-shard", "1", "--kill-after", "2"]);
}
