//! batchlab's HTTP engine (`engine.kind = "openai"`) against a real `vllm serve` of the tiny
//! model (`common/vllm_serve.rs`: vLLM's OpenAI server from the venv, on 127.0.0.1 and an
//! ephemeral port). `scenarios/vllm-serve.toml` runs batched (8 prompts per streamed
//! `/v1/completions` request) and one prompt per request (8 in flight); every prompt must get its
//! `max_tokens` (`ignore_eos`) and its prompt's length, and vLLM's own counters must agree with
//! the totals. Then the server is SIGKILLed mid-run: the run must end on its own, every request
//! answered (`lost == 0`), the failures counted by kind (`connect_failed`, `stream_dropped`), and
//! no vLLM process left. Run by `just test-vllm`; with `CI=true` a missing venv fails.
#![cfg(feature = "vllm")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use batchlab::report::{RequestOutcome, RequestRecord, read_records};
use serde_json::Value;

#[path = "common/python_env.rs"]
mod python_env;
#[path = "common/vllm_serve.rs"]
mod vllm_serve;
use vllm_serve::VllmServer;

/// `scenarios/vllm-serve.toml`'s workload: every prompt this long, every output this long.
const PROMPT_TOKENS: u32 = 32;
const OUTPUT_TOKENS: u32 = 16;

/// One vLLM server at a time: the machine has two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-serve-http-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `batchlab run scenarios/vllm-serve.toml` against `server`, with `sets`, writing to `out`.
fn spawn_run(server: &VllmServer, sets: &[&str], out: &Path) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchlab"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "scenarios/vllm-serve.toml", "--quiet", "--requests-jsonl", "--output"])
        .arg(out)
        .arg("--set")
        .arg(format!("engine.openai.urls=[\"{}\"]", server.url));
    for set in sets {
        cmd.args(["--set", set]);
    }
    cmd.env_remove("BATCHLAB_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(out.with_extension("stderr")).unwrap())
        .spawn()
        .expect("running batchlab")
}

/// Waits at most `within` for `child`; kills it and panics past that.
fn finish_within(mut child: Child, within: Duration, out: &Path) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("batchlab run did not end within {within:?}; stderr:\n{}", stderr(out));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stderr(out: &Path) -> String {
    std::fs::read_to_string(out.with_extension("stderr")).unwrap_or_default()
}

fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json")).unwrap()
}

fn records(out: &Path) -> Vec<RequestRecord> {
    read_records(&out.join("requests.jsonl")).expect("requests.jsonl").collect::<Result<_, _>>().expect("records")
}

/// The sum of every series of a Prometheus counter in `/metrics`' text.
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn metrics(server: &VllmServer) -> String {
    let (status, body) = server.get("/metrics").expect("vllm serve answers /metrics");
    assert_eq!(status, 200);
    body
}

/// The most batches (generate calls) that were in flight at once.
fn max_overlap(records: &[RequestRecord]) -> usize {
    let mut batches = std::collections::BTreeMap::new();
    for r in records {
        if let (Some(batch), Some(start), Some(end)) = (r.batch, r.dispatched_ns, r.finished_ns) {
            let e = batches.entry(batch).or_insert((start, end));
            e.0 = e.0.min(start);
            e.1 = e.1.max(end);
        }
    }
    let mut edges: Vec<(batchlab::time::Timestamp, i32)> =
        batches.values().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    // An end before a start at the same instant: touching is not overlapping.
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// One run to completion: every request completed with its full output, counts as vLLM counted.
fn run_completes(server: &VllmServer, name: &str, sets: &[&str]) -> Vec<RequestRecord> {
    let out = dir(name);
    let before = metrics(server);
    let status = finish_within(spawn_run(server, sets, &out), Duration::from_secs(300), &out);
    assert_eq!(status.code(), Some(0), "{name}: stderr:\n{}", stderr(&out));
    let records = records(&out);
    assert!(!records.is_empty(), "{name}");
    for r in &records {
        assert_eq!(r.outcome, RequestOutcome::Completed, "{name}: {r:?}");
        let m = r.metrics.as_ref().expect("a completed request's metrics");
        assert_eq!(m.output_tokens, Some(OUTPUT_TOKENS), "{name}: {r:?}");
        assert_eq!(m.prompt_tokens, Some(PROMPT_TOKENS), "{name}: {r:?}");
        assert!(m.ttft_ms.is_some_and(|t| t > 0.0) && m.itl_max_ms.is_some(), "{name}: streamed timings: {r:?}");
    }
    // What vLLM itself counted over the run (warm-up included) is what batchlab recorded.
    let after = metrics(server);
    let delta = |name: &str| counter(&after, name) - counter(&before, name);
    let n = records.len() as f64;
    assert_eq!(delta("vllm:prompt_tokens_total"), n * f64::from(PROMPT_TOKENS), "{name}");
    assert_eq!(delta("vllm:generation_tokens_total"), n * f64::from(OUTPUT_TOKENS), "{name}");
    assert_eq!(report(&out)["benchmarks"][0]["counts"]["lost"], 0, "{name}");
    records
}

/// The harness alone: the server starts, answers, and leaves no process behind when dropped.
#[test]
fn the_harness_starts_vllm_serve_and_leaves_no_process_behind() {
    if !python_env::ready(true) {
        return;
    }
    let _one = one_at_a_time();
    let server = VllmServer::start(&dir("harness"), &[]);
    let processes = server.processes();
    let names: Vec<&str> = processes.iter().map(|(_, comm)| comm.as_str()).collect();
    // `comm` is cut at 15 bytes: "VLLM::EngineCor".
    assert!(names.iter().any(|n| n.starts_with("VLLM::EngineCor")), "the engine core runs in the group: {processes:?}");
    let (status, body) = server.get("/health").expect("/health answers");
    assert_eq!(status, 200, "{body}");
    let pgid = server.pgid();
    drop(server);
    assert_eq!(vllm_serve::group_processes(pgid), Vec::new(), "every vLLM process is gone");
}

#[test]
fn batched_and_one_per_request_against_vllm_serve_then_the_server_killed_mid_run() {
    if !python_env::ready(true) {
        return;
    }
    let _one = one_at_a_time();
    let mut server = VllmServer::start(&dir("server"), &[]);

    // Batched: 8 prompts in each streamed request.
    let batched = run_completes(&server, "batched", &["batching.batch_size=8"]);
    assert_eq!(batched.iter().filter_map(|r| r.batch_size).max(), Some(8), "full batches of 8");

    // One prompt per request, 8 requests in flight.
    let single = run_completes(&server, "one-per-request", &["batching.batch_size=1", "batching.max_in_flight=8"]);
    assert!(single.iter().all(|r| r.batch_size == Some(1)));
    let overlap = max_overlap(&single);
    assert!((2..=8).contains(&overlap), "several requests in flight, at most 8: {overlap}");

    // The server dies mid-run: a long run, killed once vLLM has finished some of its requests.
    let out = dir("killed");
    let sets = ["batching.batch_size=8", "stop.max_requests=5000", "expect.completed=\"== 5000\""];
    let run = spawn_run(&server, &sets, &out);
    let done_before = counter(&metrics(&server), "vllm:request_success_total");
    let waited = Instant::now();
    while counter(&metrics(&server), "vllm:request_success_total") < done_before + 64.0 {
        assert!(waited.elapsed() < Duration::from_secs(120), "the run never got going; stderr:\n{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
    server.kill_now();
    let killed = Instant::now();
    let status = finish_within(run, Duration::from_secs(120), &out);
    eprintln!("the run ended {:.2?} after the kill, {status}", killed.elapsed());
    // The engine goes on after a remote error (each batch fails alone), so the run finishes and
    // reports: exit 3, because its `[expect]` (no errors, 5000 completed) failed (README.md).
    assert_eq!(status.code(), Some(3), "stderr:\n{}", stderr(&out));
    let r = report(&out);
    let counts = &r["benchmarks"][0]["counts"];
    assert_eq!(counts["lost"], 0, "{counts}");
    let by_kind = counts["errors_by_kind"].as_object().expect("errors by kind");
    assert!(!by_kind.is_empty(), "requests after the kill fail: {counts}");
    for kind in by_kind.keys() {
        assert!(["connect_failed", "stream_dropped"].contains(&kind.as_str()), "{kind}: {counts}");
    }
    assert!(counts["completed"].as_u64().unwrap() > 0, "{counts}");
    let answered: u64 =
        ["completed", "errors", "cancelled", "incomplete"].iter().map(|k| counts[k].as_u64().unwrap_or(0)).sum();
    assert_eq!(Some(answered), counts["submitted"].as_u64(), "{counts}");
    for r in records(&out) {
        if let RequestOutcome::Error { kind } = &r.outcome {
            assert!(["connect_failed", "stream_dropped"].contains(&kind.as_str()), "{r:?}");
        }
    }
    let failed: Vec<String> = r["expectations"]
        .as_array()
        .expect("expectations")
        .iter()
        .filter(|e| e["passed"] != true)
        .map(|e| e["metric"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(failed.contains(&"errors".to_string()) && !failed.contains(&"lost".to_string()), "{failed:?}");
}
