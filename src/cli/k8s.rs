//! `batchlab k8s SCENARIO --workers N`: prints the Kubernetes manifests of a distributed run
//! (docs/distributed.md, "On Kubernetes"): a ConfigMap with the resolved scenario, a
//! ReadWriteMany claim for the results, an Indexed Job of N pods each running
//! `batchlab run --shard $JOB_COMPLETION_INDEX/N` into `/results/shard-K`, and a merge Job that
//! waits for the shards' reports and runs `batchlab merge`. Each object is printed as JSON (which
//! is YAML) after `---`; the manifests were checked against the `kubernetes` package's models and
//! their commands run as local processes (tests/distributed_k8s.rs), **not run on a cluster here**.

use std::path::PathBuf;
use std::process::ExitCode;

use batchlab::scenario::{Overrides, to_toml};
use serde_json::{Value, json};

use super::load_scenario;

/// `batchlab k8s`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct K8sArgs {
    /// The scenario file.
    scenario: PathBuf,
    /// The number of shards (pods).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    workers: u32,
    /// The container image: one with `batchlab` on its PATH.
    #[arg(long, value_name = "IMAGE", default_value = "batchlab:latest")]
    image: String,
    /// The common start of the shards (RFC 3339 or unix seconds); without it each shard starts
    /// when its engine is loaded. Sets START_AT in the shards' pods.
    #[arg(long, value_name = "TIME", value_parser = checked_start_at)]
    start_at: Option<String>,
    /// Override any scenario key, as `batchlab run --set`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

/// `--start-at` as given, once `batchlab run --start-at` would take it.
fn checked_start_at(text: &str) -> Result<String, String> {
    super::shard::parse_start_at(text).map(|_| text.to_owned())
}

/// Where the pods mount the scenario and the results.
const SCENARIO_PATH: &str = "/scenario/scenario.toml";
const RESULTS_DIR: &str = "/results";
/// How long the merge Job waits for every shard's report before it merges what is there (a
/// missing shard then makes the merged report incomplete, exit 6).
const MERGE_WAIT_S: u32 = 3600;

/// The shell line each shard's pod runs, with `$SCENARIO`, `$RESULTS`, `$JOB_COMPLETION_INDEX`
/// and `$START_AT` from its environment.
fn shard_script(n: u32) -> String {
    format!(
        "exec batchlab run \"$SCENARIO\" --shard \"$JOB_COMPLETION_INDEX/{n}\" ${{START_AT:+--start-at \"$START_AT\"}} \
         --output \"$RESULTS/shard-$JOB_COMPLETION_INDEX\" --quiet"
    )
}

/// The shell line of the merge Job: waits (at most [`MERGE_WAIT_S`]) for every shard's
/// report.json, then merges every shard's directory, so a missing one is named.
fn merge_script(n: u32) -> String {
    let dirs: Vec<String> = (0..n).map(|k| format!("\"$RESULTS/shard-{k}\"")).collect();
    format!(
        "waited=0; while [ \"$(ls \"$RESULTS\"/shard-*/report.json 2>/dev/null | wc -l)\" -lt {n} ] && \
         [ \"$waited\" -lt {MERGE_WAIT_S} ]; do sleep 5; waited=$((waited + 5)); done; \
         exec batchlab merge {} --expect {n} --output \"$RESULTS/merged\"",
        dirs.join(" ")
    )
}

/// A Kubernetes name from the scenario's: lowercase letters, digits and dashes.
fn dns_name(name: &str) -> String {
    let mut out: String =
        name.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    out = out.trim_matches('-').to_owned();
    out.truncate(40);
    if out.is_empty() { "scenario".into() } else { out }
}

/// The manifests, as printed.
pub(crate) fn render(scenario_toml: &str, name: &str, args: &K8sArgs) -> String {
    let base = format!("batchlab-{}", dns_name(name));
    let n = args.workers;
    let (config, claim) = (format!("{base}-scenario"), format!("{base}-results"));
    let env = |extra: Vec<Value>| {
        let mut env = vec![
            json!({ "name": "SCENARIO", "value": SCENARIO_PATH }),
            json!({ "name": "RESULTS", "value": RESULTS_DIR }),
        ];
        env.extend(extra);
        Value::Array(env)
    };
    let volumes = json!([
        { "name": "scenario", "configMap": { "name": config } },
        { "name": "results", "persistentVolumeClaim": { "claimName": claim } }
    ]);
    let mounts = json!([
        { "name": "scenario", "mountPath": "/scenario", "readOnly": true },
        { "name": "results", "mountPath": RESULTS_DIR }
    ]);
    let config_map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": config },
        "data": { "scenario.toml": scenario_toml }
    });
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": { "name": claim },
        "spec": { "accessModes": ["ReadWriteMany"], "resources": { "requests": { "storage": "1Gi" } } }
    });
    let start_at = json!({ "name": "START_AT", "value": args.start_at.clone().unwrap_or_default() });
    let shards = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": format!("{base}-shards") },
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": n,
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "shard",
                    "image": args.image,
                    "command": ["sh", "-c", shard_script(n)],
                    "env": env(vec![start_at]),
                    "volumeMounts": mounts
                }],
                "volumes": volumes
            }}
        }
    });
    let merge = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": { "name": format!("{base}-merge") },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "merge",
                    "image": args.image,
                    "command": ["sh", "-c", merge_script(n)],
                    "env": env(Vec::new()),
                    "volumeMounts": mounts
                }],
                "volumes": volumes
            }}
        }
    });
    let mut out = format!(
        "# batchlab k8s: {n} shards of scenario {name:?}, then their merge (docs/distributed.md).\n\
         # Not run on a cluster here: checked against the kubernetes package's models, and its commands\n\
         # run as {n} local processes with JOB_COMPLETION_INDEX set (tests/distributed_k8s.rs).\n\
         # Each object is JSON, which is YAML: kubectl apply -f this file.\n"
    );
    for object in [config_map, pvc, shards, merge] {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(&object).expect("a manifest"));
        out.push('\n');
    }
    out
}

pub(crate) fn main(args: K8sArgs) -> ExitCode {
    let overrides = Overrides { sets: args.sets.clone(), seed: None };
    let plan = match load_scenario(&args.scenario, &overrides) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    print!("{}", render(&to_toml(&plan), plan.name(), &args));
    ExitCode::SUCCESS
}
