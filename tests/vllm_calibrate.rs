//! The configuration vLLM resolved, recorded where batchlab says it is: in every report.json of a
//! vLLM run (in-process and multiprocess, where vLLM copies it back from its EngineCore), and in
//! the profile `batchlab calibrate SCENARIO` writes. Each is checked against what vLLM itself
//! logged in engine.log (its KV-cache size in tokens, its token budget, its prefix-caching and
//! chunked-prefill switches), not against what the scenario asked for.
//!
//! Run with `just test-vllm`; without the venv and model the tests fail, unless
//! `BATCHLAB_SKIP_PYTHON=1` asks to skip them (tests/common/python_env.rs).
#![cfg(feature = "vllm")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

#[path = "common/python_env.rs"]
mod python_env;

/// One engine at a time on a 2-core machine.
static ONE_ENGINE: Mutex<()> = Mutex::new(());

fn ready() -> bool {
    python_env::ready(true)
}

fn output_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-calibrate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn batchlab(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("VLLM_ENABLE_V1_MULTIPROCESSING")
        .env_remove("OMP_NUM_THREADS")
        .output()
        .expect("spawning batchlab");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "batchlab {} failed:\n{stderr}", args.join(" "));
    stderr
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What vLLM's own log lines say it resolved.
#[derive(Debug, PartialEq)]
struct Logged {
    kv_tokens: u64,
    max_num_batched_tokens: u64,
    prefix_caching: bool,
    chunked_prefill: bool,
}

/// `CPU KV cache size: 524,288 tokens`, `Chunked prefill is enabled with
/// max_num_batched_tokens=4096.`, and the config dump's `enable_prefix_caching=True,
/// enable_chunked_prefill=True`.
fn logged(engine_log: &Path) -> Logged {
    let log = std::fs::read_to_string(engine_log).unwrap_or_else(|e| panic!("{}: {e}", engine_log.display()));
    let after = |marker: &str| -> &str {
        let at = log.find(marker).unwrap_or_else(|| panic!("vLLM logged no `{marker}` in {}", engine_log.display()));
        &log[at + marker.len()..]
    };
    let number = |text: &str| -> u64 {
        let digits: String =
            text.chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
        digits.parse().unwrap_or_else(|_| panic!("no number at {:?}", &text[..text.len().min(40)]))
    };
    let flag = |marker: &str| after(marker).starts_with("True");
    Logged {
        kv_tokens: number(after("KV cache size: ")),
        max_num_batched_tokens: number(after("max_num_batched_tokens=")),
        prefix_caching: flag("enable_prefix_caching="),
        chunked_prefill: flag("enable_chunked_prefill="),
    }
}

/// `config` (report.json's `environment.engine_config`, or profile.toml's `[engine]`) agrees with
/// what vLLM logged, and has `max_num_seqs`.
fn check_config(config: &Value, log: &Logged, max_num_seqs: u64, what: &str) {
    let get = |key: &str| config.get(key).unwrap_or_else(|| panic!("{what}: no `{key}` in {config}"));
    let int = |key: &str| get(key).as_u64().unwrap_or_else(|| panic!("{what}: `{key}` is not an int in {config}"));
    assert_eq!(int("num_kv_blocks") * int("block_size"), log.kv_tokens, "{what}: KV blocks × block size, {config}");
    assert_eq!(int("max_num_batched_tokens"), log.max_num_batched_tokens, "{what}: {config}");
    assert_eq!(get("prefix_caching").as_bool(), Some(log.prefix_caching), "{what}: {config}");
    assert_eq!(get("chunked_prefill").as_bool(), Some(log.chunked_prefill), "{what}: {config}");
    assert_eq!(int("max_num_seqs"), max_num_seqs, "{what}: {config}");
}

/// In-process with the scenario's settings (vLLM's CPU defaults: 256 sequences, a 4096-token
/// budget, 1 GiB of KV cache = 4096 blocks of 128), and multiprocess with other ones, so the
/// recorded values cannot be constants.
#[test]
fn a_vllm_report_records_the_resolved_config() {
    if !ready() {
        return;
    }
    let _one = ONE_ENGINE.lock().unwrap_or_else(|p| p.into_inner());
    let small = ["--set", "stop.max_requests=16", "--set", "warmup.requests=1", "--set", "expect.completed=16"];
    for (name, sets, max_num_seqs, kv_tokens) in [
        ("in-process", vec![], 256, 524_288),
        (
            "multiprocess",
            vec![
                "--set",
                "engine.vllm.in_process=false",
                "--set",
                "engine.vllm.max_num_seqs=64",
                "--set",
                "engine.vllm.max_num_batched_tokens=2048",
                "--set",
                "engine.vllm.kv_cache_gib=2",
            ],
            64,
            1_048_576,
        ),
    ] {
        let dir = output_dir(name);
        let mut args = vec!["run", "scenarios/vllm-cpu.toml", "--quiet", "--output", dir.to_str().expect("utf-8")];
        args.extend(small);
        args.extend(sets);
        batchlab(&args);
        let log = logged(&dir.join("engine.log"));
        assert_eq!(log.kv_tokens, kv_tokens, "{name}: vLLM's KV cache follows kv_cache_gib");
        let report = json(&dir.join("report.json"));
        let config = &report["environment"]["engine_config"];
        check_config(config, &log, max_num_seqs, &format!("{name} report.json"));
    }
}

/// `batchlab calibrate scenarios/vllm-cpu.toml`: one engine start for the designed settings, a
/// report.json and requests.jsonl per setting, and a profile whose `[engine]` is what vLLM
/// resolved and whose coefficients and residuals come from those runs.
#[test]
fn calibrate_writes_a_profile_with_the_resolved_config() {
    if !ready() {
        return;
    }
    let _one = ONE_ENGINE.lock().unwrap_or_else(|p| p.into_inner());
    let dir = output_dir("calibrate");
    let profile_path = dir.join("cpu.toml");
    let runs = dir.join("runs");
    batchlab(&[
        "calibrate",
        "scenarios/vllm-cpu.toml",
        "--output",
        profile_path.to_str().expect("utf-8"),
        "--runs",
        runs.to_str().expect("utf-8"),
        "--quiet",
    ]);
    let log = logged(&runs.join("engine.log"));
    let starts = std::fs::read_to_string(runs.join("engine.log"))
        .expect("engine.log")
        .matches("Initializing a V1 LLM engine")
        .count();
    assert_eq!(starts, 1, "every designed setting runs in one engine start");

    let profile: toml::Value =
        toml::from_str(&std::fs::read_to_string(&profile_path).expect("profile.toml")).expect("toml");
    let engine = serde_json::to_value(&profile["engine"]).expect("json");
    check_config(&engine, &log, 256, "profile.toml [engine]");

    // Every designed batch wrote its own report and requests, with the same resolved config.
    let mut settings = 0;
    for entry in std::fs::read_dir(&runs).expect("runs dir").flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        settings += 1;
        let report = json(&path.join("report.json"));
        assert_eq!(report["environment"]["engine_config"], engine, "{}", path.display());
        let rows = std::fs::read_to_string(path.join("requests.jsonl")).expect("requests.jsonl");
        let completed = rows.lines().filter(|l| l.contains("\"outcome\":\"completed\"")).count();
        assert!(completed > 0, "{}: no completed requests", path.display());
    }
    let design: usize = batchlab::calibrate::DESIGN.iter().map(|s| s.batches as usize).sum();
    assert_eq!(settings, design + 1, "the warm-up and every designed batch");

    // Coefficients: every one a finite number, the step cost positive; residuals from many rows.
    let coefficients = profile["coefficients"].as_table().expect("[coefficients]");
    for (key, value) in coefficients {
        let v = value.as_float().or_else(|| value.as_integer().map(|i| i as f64)).expect("a number");
        assert!(v.is_finite() && v >= 0.0, "{key} = {v}");
    }
    let step = coefficients["decode_step_ns"].as_float().expect("decode_step_ns");
    assert!(step > 0.0, "a step of the real engine costs time: {step}");
    let samples = profile["residuals"]["first_token"]["samples"].as_integer().expect("residual samples");
    assert!(samples > 100, "residuals over the designed rows: {samples}");
}
