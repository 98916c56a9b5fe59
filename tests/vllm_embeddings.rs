//! `engine.openai.api = "embeddings"` against a real `vllm serve` of the tiny Llama as a pooling
//! model (`--runner pooling --convert embed`: vLLM adapts the causal LM to an embedding model,
//! last-token pooling, 128 dimensions). A run sends each micro-batch as one `/v1/embeddings` list;
//! every input comes back as a vector of the model's width, the report gives embeddings/s and
//! input tokens/s and no token timings, and each input's count is real: the inputs' counts add up
//! to vLLM's own `vllm:prompt_tokens_total`, and texts shared from a list's usage add up to
//! vLLM's `/tokenize` of each. In process (`engine.kind = "vllm"` with `engine_args = { runner =
//! "pooling", convert = "embed" }`), each batch is one `LLM.embed`: the same vectors' length, the
//! prompt's own token count, no token timings. Run by `just test-vllm`; with `CI=true` a missing
//! venv or model fails.
#![cfg(feature = "vllm")]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use batchlab::engine::openai::{Api, OpenAiConfig, OpenAiEngine};
use batchlab::engine::python::batchlab_home;
use batchlab::engine::{Engine, EngineRequest, Prompt, TokenCountSource};
use serde_json::{Value, json};

#[path = "common/python_env.rs"]
mod python_env;
#[path = "common/vllm_serve.rs"]
mod vllm_serve;
use vllm_serve::{MODEL, VllmServer};

const REQUESTS: usize = 48;

/// One vLLM at a time: the machine has two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-embeddings-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn scenario(url: &str) -> String {
    format!(
        r#"name = "vllm-embeddings"
[engine]
kind = "openai"
[engine.openai]
urls = ["{url}"]
model = "{MODEL}"
api = "embeddings"
timeout = "60s"
[batching]
batch_size = 8
batch_timeout = "10ms"
max_in_flight = 2
[workload]
prompt_tokens = {{ dist = "uniform", min = 8, max = 40 }}
vocab_size = 4000
[profile]
kind = "concurrent"
levels = [16]
[stop]
max_requests = {REQUESTS}
"#
    )
}

/// `POST path` with a JSON body to the server (HTTP/1.0, so the body ends with the connection),
/// its JSON answer.
fn post(server: &VllmServer, path: &str, body: &Value) -> Value {
    use std::io::{Read, Write};
    let body = body.to_string();
    let addr = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (_, json) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no body: {response}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

fn prompt_tokens_total(server: &VllmServer) -> f64 {
    let (status, text) = server.get("/metrics").expect("/metrics");
    assert_eq!(status, 200);
    let line = text
        .lines()
        .find(|l| l.starts_with("vllm:prompt_tokens_total"))
        .unwrap_or_else(|| panic!("no vllm:prompt_tokens_total: {text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn embeddings_against_vllm_serve_of_the_tiny_model_as_a_pooling_model() {
    if !python_env::ready(true) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir("serve");
    let server = VllmServer::start(&dir, &["--runner", "pooling", "--convert", "embed"]);

    // A run: every input one embedding of 128 dimensions, no token timings.
    let path = dir.join("vllm-embeddings.toml");
    std::fs::write(&path, scenario(&server.url)).unwrap();
    let out = dir.join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", path.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}\n{}", String::from_utf8_lossy(&output.stderr), server.tail(40));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let b = &report["benchmarks"][0];
    assert_eq!(b["counts"]["completed"], REQUESTS, "{}", b["counts"]);
    let e = &b["embeddings"];
    assert_eq!(
        (e["embeddings"].as_u64(), e["dims_min"].as_u64(), e["dims_max"].as_u64()),
        (Some(48), Some(128), Some(128))
    );
    assert!(e["embeddings_per_s"].as_f64().unwrap() > 0.0 && e["input_tokens_per_s"].as_f64().unwrap() > 0.0, "{e}");
    for timing in ["ttft", "tpot", "itl"] {
        assert_eq!(b["distributions"][timing]["count"], 0, "{timing}");
        assert!(b["distributions"][timing]["p50"].is_null(), "{timing} absent, not 0");
    }
    // Each input's count is the ids it sent, and together they are vLLM's own prompt tokens.
    let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let mut sum = 0u64;
    for line in records.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["outcome"], "completed", "{r}");
        assert_eq!((r["embedding_dims"].as_u64(), r["token_count_source"].as_str()), (Some(128), Some("token_ids")));
        let n = r["prompt_tokens"].as_u64().unwrap();
        assert!((8..=40).contains(&n), "{r}");
        sum += n;
    }
    assert_eq!(e["input_tokens"].as_u64(), Some(sum));
    assert_eq!(prompt_tokens_total(&server), sum as f64, "the inputs' counts are vLLM's");

    // Texts in one list: each input's share of the list's usage, and the shares are vLLM's count.
    let mut config = OpenAiConfig::new(&server.url, MODEL);
    config.api = Api::Embeddings;
    config.timeout = Some(Duration::from_secs(60));
    let mut engine = OpenAiEngine::new(config);
    engine.start().expect("start");
    let texts = [
        "A short one.",
        "A somewhat longer sentence, with more words in it than the others.",
        "Middle length text here.",
    ];
    let batch: Vec<EngineRequest> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| EngineRequest::new(Prompt::Text((*t).into()), 1).with_id(i as u64))
        .collect();
    let outputs = engine.generate(&batch).expect("embeddings of texts");
    engine.shutdown().unwrap();
    let mut tokenized = 0;
    for (o, text) in outputs.iter().zip(texts) {
        assert_eq!((o.embedding_dims, o.stats.token_count_source), (Some(128), Some(TokenCountSource::UsageShare)));
        tokenized += post(&server, "/tokenize", &json!({"model": MODEL, "prompt": text}))["count"].as_u64().unwrap();
    }
    let shared: u64 = outputs.iter().map(|o| u64::from(o.prompt_tokens.unwrap())).sum();
    assert_eq!(shared, tokenized, "the shares add up to vLLM's count of the texts");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn embeddings_in_process_through_llm_embed() {
    if !python_env::ready(true) {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir("in-process");
    let model = batchlab_home().join("tiny-llama");
    let text = format!(
        r#"name = "vllm-embed-in-process"
[engine]
kind = "vllm"
[engine.vllm]
model = "{}"
dtype = "float32"
in_process = true
kv_cache_gib = 1.0
max_model_len = 512
engine_args = {{ runner = "pooling", convert = "embed", enforce_eager = true }}
[batching]
batch_size = 8
batch_timeout = "10ms"
[workload]
prompt_tokens = {{ dist = "uniform", min = 8, max = 40 }}
vocab_size = 4000
[profile]
kind = "concurrent"
levels = [16]
[stop]
max_requests = {REQUESTS}
"#,
        model.display()
    );
    let path = dir.join("vllm-embed.toml");
    std::fs::write(&path, &text).unwrap();
    let out = dir.join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", path.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl", "--quiet"])
        .env("OMP_NUM_THREADS", "1")
        .env("VLLM_CPU_KVCACHE_SPACE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let b = &report["benchmarks"][0];
    assert_eq!(b["counts"]["completed"], REQUESTS, "{}", b["counts"]);
    let e = &b["embeddings"];
    assert_eq!(
        (e["embeddings"].as_u64(), e["dims_min"].as_u64(), e["dims_max"].as_u64()),
        (Some(48), Some(128), Some(128))
    );
    for timing in ["ttft", "tpot", "itl"] {
        assert_eq!(b["distributions"][timing]["count"], 0, "{timing}");
    }
    assert_eq!(b["tokens"]["output"], 0);
    let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let mut sum = 0;
    for line in records.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["embedding_dims"].as_u64(), Some(128), "{r}");
        let n = r["prompt_tokens"].as_u64().unwrap();
        assert!((8..=40).contains(&n), "the prompt's own ids: {r}");
        sum += n;
    }
    assert_eq!(e["input_tokens"].as_u64(), Some(sum));
    std::fs::remove_dir_all(&dir).unwrap();
}
