//! `batchlab k8s`: the committed `deploy/k8s/indexed-job.yaml` is what the command prints for
//! `scenarios/throughput.toml` at 3 workers; every object validates against the `kubernetes`
//! Python package's models (deserialized and serialized back unchanged: nothing unknown, nothing
//! required missing; needs the venv with `scripts/setup-kubernetes.sh`, and fails under CI=true
//! without it); and the manifest's exact container commands run as 3 local processes with
//! `JOB_COMPLETION_INDEX` set, then the merge Job's, into a complete merged report. Not run on a
//! cluster here. Needs the venv, so built with `--features vllm` and run by `just test-vllm`, as
//! every test that needs Python (`just test` needs none).

#![cfg(feature = "vllm")]

#[path = "common/cli.rs"]
mod cli_common;
#[path = "common/python_env.rs"]
mod python_env;

use std::path::Path;
use std::process::Command;

use cli_common::{batchlab, temp_dir, text};
use serde_json::Value;

const COMMITTED: &str = "deploy/k8s/indexed-job.yaml";
const ARGS: [&str; 4] = ["k8s", "scenarios/throughput.toml", "--workers", "3"];

/// The manifest as `batchlab k8s` prints it.
fn printed() -> String {
    let out = batchlab(&ARGS);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// The objects of a manifest: JSON documents after `---` lines (comments before the first).
fn objects(manifest: &str) -> Vec<Value> {
    manifest
        .split("\n---\n")
        .skip(1)
        .map(|doc| serde_json::from_str(doc).unwrap_or_else(|e| panic!("{e}: {doc}")))
        .collect()
}

fn kind<'a>(objects: &'a [Value], kind: &str, name_ends: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().is_some_and(|n| n.ends_with(name_ends)))
        .unwrap_or_else(|| panic!("no {kind} *{name_ends}"))
}

#[test]
fn the_committed_manifest_is_what_batchlab_k8s_prints() {
    let committed = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED)).unwrap();
    assert_eq!(printed(), committed, "regenerate it: batchlab {} > {COMMITTED}", ARGS.join(" "));
    assert!(committed.contains("Not run on a cluster here"), "the manifest says it was not run on a cluster");
    let objects = objects(&committed);
    let shards = kind(&objects, "Job", "-shards");
    assert_eq!(shards["spec"]["completionMode"], "Indexed");
    assert_eq!((shards["spec"]["completions"].as_u64(), shards["spec"]["parallelism"].as_u64()), (Some(3), Some(3)));
}

/// Deserializes each object into its model and back; prints what differs and exits 1.
const VALIDATE: &str = r#"
import json, sys
from kubernetes import client
api = client.ApiClient()
models = {"ConfigMap": "V1ConfigMap", "PersistentVolumeClaim": "V1PersistentVolumeClaim", "Job": "V1Job"}
docs = [json.loads(d) for d in sys.stdin.read().split("\n---\n")[1:]]
bad = 0
for doc in docs:
    model = models[doc["kind"]]
    back = api.sanitize_for_serialization(api.deserialize(json.dumps(doc), model, "application/json"))
    if back != doc:
        bad += 1
        print(f"{doc['kind']} {doc['metadata']['name']}: not the model's {model}:\n{json.dumps(back, indent=1)}")
print(f"{len(docs) - bad} of {len(docs)} objects are valid {sorted(set(models.values()))}")
sys.exit(1 if bad else 0)
"#;

#[test]
fn every_object_is_valid_for_the_kubernetes_models() {
    if !python_env::ready(false) {
        return;
    }
    let python = batchlab::engine::python::default_venv().join("bin/python");
    let has = Command::new(&python).args(["-c", "import kubernetes"]).status().expect("python runs");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if !has.success() && !ci && std::env::var(python_env::SKIP_VAR).is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED ({}=1): the kubernetes package is not in the venv", python_env::SKIP_VAR);
        return;
    }
    assert!(has.success(), "the kubernetes package is not in {}: run scripts/setup-kubernetes.sh", python.display());
    let mut child = Command::new(&python)
        .args(["-c", VALIDATE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(printed().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("4 of 4 objects are valid"), "{}", text(&out.stdout));
    // It can fail: a misplaced field is caught.
    let broken = printed().replacen("\"completionMode\"", "\"completion_mode\"", 1);
    let mut child = Command::new(&python)
        .args(["-c", VALIDATE])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(broken.as_bytes()).unwrap();
    assert!(!child.wait_with_output().unwrap().status.success(), "a misspelled field is refused");
}

/// The container's command and its environment (`name` → `value`).
fn container(job: &Value) -> (Vec<String>, Vec<(String, String)>) {
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let command = c["command"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect();
    let env = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_owned(), e["value"].as_str().unwrap().to_owned()))
        .collect();
    (command, env)
}

#[test]
fn the_manifests_commands_run_as_three_local_processes_and_merge() {
    let manifest = printed();
    let objects = objects(&manifest);
    let dir = temp_dir("k8s");
    // The volumes, here: the ConfigMap's scenario at $SCENARIO, the claim at $RESULTS.
    let scenario = dir.join("scenario.toml");
    let config = kind(&objects, "ConfigMap", "-scenario");
    std::fs::write(&scenario, config["data"]["scenario.toml"].as_str().unwrap()).unwrap();
    let results = dir.join("results");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_batchlab")).parent().unwrap().to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let local = |command: &[String], env: &[(String, String)]| {
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..]).env("PATH", &path);
        for (name, value) in env {
            cmd.env(name, value);
        }
        cmd.env("SCENARIO", &scenario).env("RESULTS", &results);
        cmd
    };
    let (command, env) = container(kind(&objects, "Job", "-shards"));
    assert_eq!(env.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["SCENARIO", "RESULTS", "START_AT"]);
    let shards: Vec<_> = (0..3)
        .map(|k| local(&command, &env).env("JOB_COMPLETION_INDEX", k.to_string()).output().expect("a shard runs"))
        .collect();
    for (k, out) in shards.iter().enumerate() {
        assert!(out.status.success(), "shard {k}: {}", text(&out.stderr));
        assert!(results.join(format!("shard-{k}/requests.jsonl")).exists(), "shard {k} wrote its records");
    }
    let (command, env) = container(kind(&objects, "Job", "-merge"));
    let out = local(&command, &env).output().expect("the merge runs");
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let merged: Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("merged/report.json")).unwrap()).unwrap();
    assert_eq!(merged["incomplete"], false);
    assert_eq!(merged["merge"]["shards"].as_array().unwrap().len(), 3);
    // The single-process run of the same scenario measures the same requests: 256, at 64 tokens.
    let whole = batchlab(&["run", scenario.to_str().unwrap(), "--output", dir.join("whole").to_str().unwrap(), "-q"]);
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    let whole: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("whole/report.json")).unwrap()).unwrap();
    for field in ["submitted", "completed", "errors"] {
        assert_eq!(merged["benchmarks"][0]["counts"][field], whole["benchmarks"][0]["counts"][field], "{field}");
    }
    assert_eq!(merged["benchmarks"][0]["tokens"], whole["benchmarks"][0]["tokens"]);
    // Its latency percentiles are the union's, from the three shards' raw records.
    let mut latencies: Vec<f64> = (0..3)
        .flat_map(|k| {
            std::fs::read_to_string(results.join(format!("shard-{k}/requests.jsonl")))
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|l| serde_json::from_str::<Value>(&l).unwrap())
        .filter(|r| r["phase"] == "measure" && r["outcome"] == "completed")
        .map(|r| r["latency_ms"].as_f64().unwrap())
        .collect();
    latencies.sort_by(f64::total_cmp);
    let d = &merged["benchmarks"][0]["distributions"]["latency"];
    assert_eq!(d["count"].as_u64(), Some(latencies.len() as u64));
    assert_eq!(d["max"].as_f64(), latencies.last().copied());
    let p50 = latencies[latencies.len().div_ceil(2) - 1];
    let reported = d["p50"].as_f64().unwrap();
    assert!(reported >= p50 && reported <= p50 * (1.0 + 1.0 / 1024.0) + 1e-9, "p50 {reported} vs the union's {p50}");
    std::fs::remove_dir_all(dir).unwrap();
}
