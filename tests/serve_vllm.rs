//! `batchlab serve` checked by clients nobody here wrote: `vllm bench serve` (vLLM's own load
//! client, `scripts/vllm_bench_serve.py`) must measure what `batchlab run` computes in virtual
//! time on the same profile and workload, and the `openai` package must stream a chat completion.
//!
//! The workload is vLLM's `timed_trace` dataset: prompts as token ids of an exact length, so the
//! server counts what the client sent (a text prompt would be counted by batchlab's 4-bytes rule,
//! and vLLM's tokenizer disagrees). Every request finishes before the next arrives (a constant
//! rate whose gaps exceed the service time, or one request at a time), because that is where
//! `batchlab run`'s engine (one `generate` call at a time) and the server's continuous batch are
//! the same model; `tests/serve_core.rs` checks that a request alone takes exactly one `generate`
//! call's time. What remains is the client and HTTP. Run by `just test-vllm`; with `CI=true` a
//! missing venv fails the test instead of skipping it.
#![cfg(feature = "vllm")]

use std::path::{Path, PathBuf};
use std::process::Command;

use batchlab::engine::python::{batchlab_home, default_venv};
use serde_json::Value;

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

/// Prompt and output lengths.
const PROMPT_TOKENS: u32 = 1000;
const OUTPUT_TOKENS: u32 = 32;
/// A what-if on the example profile: prefill costlier (200 µs a token, the profile's 15 µs), so
/// the time to first token (~210 ms) dwarfs what the client itself adds to it (its clock runs
/// while Python serialises and sends the request: 2-5 ms on a loaded 2-core machine) while the
/// request stays small. Both sides run this same profile.
const PREFILL_PER_TOKEN: &str = "200us";

/// One measurement at a time: the tests share two CPUs with the server and the client.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn venv_python() -> Option<PathBuf> {
    let python = default_venv().join("bin/python");
    let model = batchlab_home().join("tiny-llama");
    if python.exists() && model.exists() {
        return Some(python);
    }
    let missing = format!("{} or {}", python.display(), model.display());
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI needs the vLLM venv and tiny model: {missing} is missing"
    );
    eprintln!("SKIPPED: {missing} is missing; run `just setup-vllm` (or `just test-vllm`)");
    None
}

fn scenario(dir: &Path, name: &str, profile: &str, requests: u32) -> PathBuf {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/profiles/example.toml");
    let text = format!(
        r#"name = "{name}"
seed = 3
[engine.sim]
profile = "{}"
prefill_per_token = "{PREFILL_PER_TOKEN}"
[batching]
batch_size = 1
batch_timeout = "1us"
[workload]
prompt_tokens = {PROMPT_TOKENS}
output_tokens = {OUTPUT_TOKENS}
ignore_eos = true
[profile]
{profile}
[stop]
max_requests = {requests}
"#,
        example.display()
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// `batchlab run` in virtual time: (requests/s, {metric: (mean, p50)}) in ms.
fn batchlab_run(scenario: &Path, out: &Path) -> Measured {
    let status = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .arg("run")
        .arg(scenario)
        .args(["--quiet", "--output"])
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "batchlab run {}", scenario.display());
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let b = &report["benchmarks"][0];
    let d = &b["distributions"];
    let pair = |m: &str| (d[m]["mean"].as_f64().unwrap(), d[m]["p50"].as_f64().unwrap());
    Measured {
        throughput: b["requests_per_s"].as_f64().unwrap(),
        ttft: pair("ttft"),
        tpot: pair("tpot"),
        itl: pair("itl"),
    }
}

/// `vllm bench serve` against `url` with `args`.
fn vllm_bench(python: &Path, url: &str, trace: &Path, requests: u32, args: &[&str]) -> Measured {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/vllm_bench_serve.py");
    let tokenizer = batchlab_home().join("tiny-llama");
    let output = Command::new(python)
        .arg(script)
        .args(["--backend", "openai", "--endpoint", "/v1/completions", "--base-url", url, "--model", MODEL])
        .arg("--tokenizer")
        .arg(tokenizer)
        .args(["--dataset-name", "timed_trace", "--no-self-timed", "--dataset-path"])
        .arg(trace)
        .args(["--num-prompts", &requests.to_string(), "--num-warmups", "2", "--ignore-eos", "--disable-tqdm"])
        .args(["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("BENCH_RESULT ")) else {
        panic!("vllm bench serve failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    };
    let r: Value = serde_json::from_str(line).unwrap();
    assert_eq!((r["completed"].as_u64(), r["failed"].as_u64()), (Some(u64::from(requests)), Some(0)), "{r}");
    assert_eq!(r["total_input_tokens"].as_u64(), Some(u64::from(requests * PROMPT_TOKENS)), "token ids count as sent");
    let pair = |m: &str| (r[format!("mean_{m}_ms")].as_f64().unwrap(), r[format!("p50_{m}_ms")].as_f64().unwrap());
    Measured {
        throughput: r["request_throughput"].as_f64().unwrap(),
        ttft: pair("ttft"),
        tpot: pair("tpot"),
        itl: pair("itl"),
    }
}

#[derive(Debug)]
struct Measured {
    throughput: f64,
    ttft: (f64, f64),
    tpot: (f64, f64),
    itl: (f64, f64),
}

/// Every failed goal of `served` against `simulated`, after printing both.
fn compare(label: &str, simulated: &Measured, served: &Measured) -> Vec<String> {
    let mut failed = Vec::new();
    let mut check = |what: &str, sim: f64, real: f64, goal: f64| {
        let err = (real - sim) / sim;
        let ok = err.abs() <= goal;
        println!(
            "{label:<12} {what:<12} batchlab run {sim:>9.3}  vllm bench serve {real:>9.3}  {:>+6.2} %  goal ±{:.0} %  {}",
            100.0 * err,
            100.0 * goal,
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failed.push(format!("{label} {what}: {sim:.3} vs {real:.3}"));
        }
    };
    check("requests/s", simulated.throughput, served.throughput, 0.03);
    for (name, s, r) in [
        ("ttft", simulated.ttft, served.ttft),
        ("tpot", simulated.tpot, served.tpot),
        ("itl", simulated.itl, served.itl),
    ] {
        check(&format!("{name} mean"), s.0, r.0, 0.05);
        check(&format!("{name} p50"), s.1, r.1, 0.05);
    }
    failed
}

#[test]
fn vllm_bench_serve_measures_what_batchlab_run_computes() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = venv_python() else { return };
    let dir = std::env::temp_dir().join(format!("batchlab-serve-vllm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // vLLM's timed_trace: each 16-token chunk of a prompt is drawn from its hash id; distinct ids,
    // distinct prompts (no prefix-cache hits, as batchlab's unique prefixes).
    let trace = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..200)
        .map(|i| {
            let ids: Vec<String> = (0..PROMPT_TOKENS.div_ceil(16)).map(|j| (i * 10_000 + j).to_string()).collect();
            format!(
                r#"{{"timestamp": 0, "input_length": {PROMPT_TOKENS}, "output_length": {OUTPUT_TOKENS}, "hash_ids": [{}]}}"#,
                ids.join(", ")
            )
        })
        .collect();
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();

    let mut failed = Vec::new();
    // A fixed rate: a constant 2.5/s (vLLM's `--burstiness inf`), each request alone (~340 ms).
    let (rate_requests, rate) = (80, 2.5);
    let s = scenario(&dir, "rate", &format!("kind = \"constant\"\nrates = [{rate}]"), rate_requests);
    let simulated = batchlab_run(&s, &dir.join("out-rate"));
    let server = Server::start(Some(&std::fs::read_to_string(&s).unwrap()), &[]);
    let served = vllm_bench(
        &python,
        &server.url,
        &trace,
        rate_requests,
        &["--request-rate", &rate.to_string(), "--burstiness", "inf"],
    );
    drop(server);
    failed.extend(compare("rate 2.5/s", &simulated, &served));

    // A fixed concurrency: one request at a time, back to back.
    let conc_requests = 40;
    let s = scenario(&dir, "concurrency", "kind = \"throughput\"\nmax_concurrency = 1", conc_requests);
    let simulated = batchlab_run(&s, &dir.join("out-concurrency"));
    let server = Server::start(Some(&std::fs::read_to_string(&s).unwrap()), &[]);
    let served = vllm_bench(&python, &server.url, &trace, conc_requests, &["--max-concurrency", "1"]);
    drop(server);
    failed.extend(compare("concurrency 1", &simulated, &served));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "vllm bench serve disagrees with batchlab run:\n{}", failed.join("\n"));
}

#[test]
fn the_openai_package_streams_a_chat_completion() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(python) = venv_python() else { return };
    let server = Server::start(None, &[]);
    let script = r#"
import json, sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
stream = client.chat.completions.create(
    model=sys.argv[2], messages=[{"role": "user", "content": "Say something."}], max_tokens=5,
    stream=True, stream_options={"include_usage": True})
content, finish, usage = "", None, None
for chunk in stream:
    if chunk.choices:
        content += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    if chunk.usage:
        usage = chunk.usage.completion_tokens
print(json.dumps({"content": content, "finish": finish, "usage": usage}))
"#;
    let out = Command::new(&python).args(["-c", script, &server.url, MODEL]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["finish"].as_str(), r["usage"].as_u64()), (Some("length"), Some(5)), "{r}");
    assert!(r["content"].as_str().is_some_and(|c| !c.is_empty()), "{r}");
}
