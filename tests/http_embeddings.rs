//! `engine.openai.api = "embeddings"` against `batchlab serve` as a process on an ephemeral
//! loopback port: a micro-batch is one `/v1/embeddings` request with a list of inputs, each input
//! gets its own vector back and its own token count, and the report gives embeddings/s and input
//! tokens/s with no TTFT, TPOT or ITL. `batchlab check` refuses the keys an embedding cannot
//! honour, at their lines. Every wait is bounded.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use batchlab::engine::openai::{Api, OpenAiConfig, OpenAiEngine};
use batchlab::engine::{Engine, EngineRequest, Prompt, TokenCountSource};
use serde_json::{Value, json};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{temp_dir, text};

/// Serve's engine: prefill priced per token, a decode step long enough to show if one were taken.
const PRICED: &str = r#"
name = "priced"
[engine.sim]
fixed_overhead = "0s"
decode_step = "50ms"
prefill_per_token = "10us"
"#;

fn engine(url: &str) -> OpenAiEngine {
    let mut config = OpenAiConfig::new(url, MODEL);
    config.api = Api::Embeddings;
    config.timeout = Some(Duration::from_secs(30));
    OpenAiEngine::new(config)
}

#[test]
fn a_batch_is_one_embeddings_request_and_each_input_gets_its_own_vector_and_count() {
    let server = Server::start(Some(PRICED), &[]);
    let mut engine = engine(&server.url);
    engine.start().expect("start");
    // Token ids of different lengths (a permutation of counts would show), and texts.
    let lengths = [3usize, 17, 40, 9];
    let ids: Vec<EngineRequest> = lengths
        .iter()
        .enumerate()
        .map(|(i, &n)| EngineRequest::tokens((1..=n as u32).collect(), 1).with_id(10 + i as u64))
        .collect();
    let outputs = engine.generate(&ids).expect("embeddings");
    assert_eq!(outputs.len(), lengths.len());
    for ((output, request), &n) in outputs.iter().zip(&ids).zip(&lengths) {
        assert_eq!(output.request_id, Some(request.id));
        assert_eq!(output.embedding_dims, Some(8), "serve's vectors have 8 dimensions");
        assert_eq!(output.prompt_tokens, Some(n as u32), "each input's own count");
        assert_eq!(output.stats.token_count_source, Some(TokenCountSource::TokenIds));
        assert_eq!(output.output_tokens, Some(0));
        let s = &output.stats;
        assert_eq!((s.first_token_ts, s.last_token_ts, s.token_ts.as_ref()), (None, None, None), "no tokens");
        assert!(s.sent_ts.is_some() && s.queued_ts == s.sent_ts);
        assert_eq!(s.wire_batch, Some(4), "one request for the batch");
    }
    // Texts of 4-byte tokens (serve counts 4 bytes a token): 12 and 4 bytes, 16 in all → 12, 4.
    let texts: Vec<EngineRequest> = ["twelve bytes", "four"]
        .iter()
        .enumerate()
        .map(|(i, t)| EngineRequest::new(Prompt::Text((*t).into()), 1).with_id(20 + i as u64))
        .collect();
    let outputs = engine.generate(&texts).expect("embeddings of text");
    let counts: Vec<_> = outputs.iter().map(|o| (o.prompt_tokens, o.stats.token_count_source)).collect();
    assert_eq!(counts, [(Some(3), Some(TokenCountSource::UsageShare)), (Some(1), Some(TokenCountSource::UsageShare))]);
    // One text alone: the usage is its own.
    let one = [EngineRequest::new(Prompt::Text("one input of 24 bytes...".into()), 1).with_id(30)];
    let outputs = engine.generate(&one).expect("one embedding");
    assert_eq!(
        (outputs[0].prompt_tokens, outputs[0].stats.token_count_source),
        (Some(6), Some(TokenCountSource::Usage))
    );
    engine.shutdown().unwrap();
}

#[tokio::test]
async fn serve_answers_embeddings_with_deterministic_vectors_and_the_lists_usage() {
    let server = Server::start(None, &[]);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let post = |body: Value| client.post(server.url("/v1/embeddings")).json(&body).send();
    let body = json!({"model": MODEL, "input": ["The first input", "Second"], "encoding_format": "float"});
    let a: Value = post(body.clone()).await.unwrap().json().await.unwrap();
    let b: Value = post(body).await.unwrap().json().await.unwrap();
    assert_eq!(a["object"], "list");
    // "The first input" is 15 bytes (4 tokens by the 4-bytes rule), "Second" 6 (2).
    assert_eq!(a["usage"], json!({"prompt_tokens": 6, "total_tokens": 6, "completion_tokens": 0}));
    let data = a["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!((d["index"].as_u64(), d["object"].as_str()), (Some(i as u64), Some("embedding")));
        let v: Vec<f64> = d["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(v.len(), 8);
        assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-9, "unit length: {v:?}");
    }
    assert_ne!(data[0]["embedding"], data[1]["embedding"], "two inputs, two vectors");
    assert_eq!(a["data"], b["data"], "the same input, the same vector");
    let bad = post(json!({"model": MODEL, "input": "x", "encoding_format": "base64"})).await.unwrap();
    assert_eq!(bad.status(), 400);
    let e: Value = bad.json().await.unwrap();
    assert_eq!(e["error"]["param"], "encoding_format");
    // Prefill only: no generated token, first token or ITL in the server's own counters.
    let metrics = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let counter = |name: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{name}: {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(counter("vllm:prompt_tokens_total"), 12.0);
    assert_eq!(counter("vllm:generation_tokens_total"), 0.0);
    assert_eq!(counter("vllm:time_to_first_token_seconds_count"), 0.0);
}

fn run(dir: &Path, scenario: &Path, args: &[&str]) -> (std::process::Output, std::path::PathBuf) {
    let out = dir.join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchlab"));
    cmd.args(["run", scenario.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl", "--quiet"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let limit = Duration::from_secs(180);
    let output = match rx.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            panic!("`batchlab run` did not finish within {limit:?}: a hang");
        }
    };
    (output, out)
}

/// The shipped scenarios/embeddings.toml against `batchlab serve`: it meets its `[expect]`; the
/// report has embeddings/s and input tokens/s, and TTFT, TPOT and ITL are absent (no samples, no
/// values), not 0; requests.jsonl has each input's vector length and count.
#[test]
fn the_shipped_embeddings_scenario_reports_embeddings_per_second_and_no_token_timings() {
    let server = Server::start(None, &[]);
    let dir = temp_dir("embeddings-shipped");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/embeddings.toml");
    let urls = format!("engine.openai.urls=[\"{}\"]", server.url);
    let (output, out) = run(&dir, &path, &["--set", &urls]);
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let benchmarks = report["benchmarks"].as_array().unwrap();
    assert_eq!(benchmarks.len(), 2);
    for b in benchmarks {
        let completed = b["counts"]["completed"].as_u64().unwrap();
        assert!(completed > 0 && b["counts"]["lost"] == 0, "{}", b["counts"]);
        let e = &b["embeddings"];
        assert_eq!(e["embeddings"].as_u64(), Some(completed), "{e}");
        assert_eq!((e["dims_min"].as_u64(), e["dims_max"].as_u64()), (Some(8), Some(8)));
        assert_eq!(e["input_tokens"].as_u64(), Some(128 * completed), "128 token ids an input");
        let (per_s, tok_per_s) = (e["embeddings_per_s"].as_f64().unwrap(), e["input_tokens_per_s"].as_f64().unwrap());
        assert!(per_s > 0.0 && (tok_per_s / per_s - 128.0).abs() < 1e-6, "{e}");
        assert_eq!(b["tokens"]["output"], 0);
        for timing in ["ttft", "tpot", "itl", "latency_per_token"] {
            let d = &b["distributions"][timing];
            assert_eq!(d["count"], 0, "{timing}: {d}");
            assert!(d["p50"].is_null() && d["mean"].is_null(), "{timing} absent, not 0: {d}");
        }
        assert!(b["distributions"]["latency"]["count"].as_u64().unwrap() > 0);
        assert_eq!(b["token_count_sources"], json!({"token_ids": completed}));
    }
    let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let completed: Vec<Value> = records
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["outcome"] == "completed")
        .collect();
    assert!(!completed.is_empty());
    for r in &completed {
        assert_eq!((r["embedding_dims"].as_u64(), r["prompt_tokens"].as_u64()), (Some(8), Some(128)), "{r}");
        assert!(r["ttft_ms"].is_null(), "{r}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `batchlab check` refuses, at each one's line, the keys an embedding cannot honour: an output
/// length, sampling, objectives on tokens, images; a scenario without them passes.
#[test]
fn check_refuses_output_keys_token_objectives_and_images_with_embeddings_at_their_lines() {
    let dir = temp_dir("embeddings-check");
    let path = dir.join("embed.toml");
    let head = "name = \"e\"\n[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://127.0.0.1:9\"]\n\
                model = \"m\"\napi = \"embeddings\"\n[batching]\nbatch_size = 8\n";
    let bad = format!(
        "{head}[workload]\nprompt_tokens = 32\noutput_tokens = 16\ntemperature = 0.5\nchat = true\n\
         request_format = \"chat-template\"\n[workload.images]\nbuckets = \"{{(28, 28, 1): 1.0}}\"\n[slo]\nttft_ms = 100\n\
         itl_ms = 20\n[stop]\nmax_requests = 8\n"
    );
    std::fs::write(&path, &bad).unwrap();
    let check = cli_common::batchlab(&["check", path.to_str().unwrap()]);
    let stderr = text(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{stderr}");
    let line = |key: &str| bad.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    for (key, says) in [
        ("output_tokens", "`workload.output_tokens` sets an output length"),
        ("temperature", "`workload.temperature` sets how tokens are sampled"),
        ("ttft_ms", "`slo.ttft_ms` sets a first token"),
        ("itl_ms", "`slo.itl_ms` sets gaps between tokens"),
        ("[workload.images]", "the embeddings API takes no images"),
        ("chat = true", "\"embeddings\", which takes text or token ids only"),
    ] {
        let at = format!("embed.toml:{}:", line(key));
        assert!(stderr.contains(&at), "{key} refused at {at}: {stderr}");
        assert!(stderr.contains(says), "{key}: {says}: {stderr}");
    }
    // vLLM in process with a pooling runner (`LLM.embed`): the same refusal, naming it.
    let vllm = "name = \"e\"\n[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"m\"\n\
                engine_args = { runner = \"pooling\", convert = \"embed\" }\n[workload]\noutput_tokens = 16\n";
    std::fs::write(&path, vllm).unwrap();
    let check = cli_common::batchlab(&["check", path.to_str().unwrap()]);
    let stderr = text(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{stderr}");
    let at = format!("embed.toml:{}:", vllm.lines().position(|l| l.starts_with("output_tokens")).unwrap() + 1);
    assert!(stderr.contains(&at) && stderr.contains("`runner = \"pooling\"` (`LLM.embed`)"), "{stderr}");
    let good = format!("{head}[workload]\nprompt_tokens = 32\n[stop]\nmax_requests = 8\n");
    std::fs::write(&path, good).unwrap();
    let check = cli_common::batchlab(&["check", path.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stub embeddings server on 127.0.0.1: `flood` answers with a JSON body far longer than any
/// list of vectors (`EMBEDDING_BYTES` a chunk, 8 chunks), `stall` sends the head and the body's
/// first bytes, then nothing for `HOLD` (then it ends, so nothing can hang on it).
struct EmbeddingStub {
    url: String,
    _runtime: tokio::runtime::Runtime,
}

const HOLD: Duration = Duration::from_secs(20);
const FLOOD_CHUNK: usize = 1 << 20;

impl EmbeddingStub {
    fn start(flood: bool) -> EmbeddingStub {
        use axum::response::IntoResponse;
        use futures_util::StreamExt;
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let app = axum::Router::new()
            .route(
                "/v1/models",
                axum::routing::get(|| async { axum::Json(json!({"object": "list", "data": [{"id": MODEL}]})) }),
            )
            .route(
                "/v1/embeddings",
                axum::routing::post(move || async move {
                    let head = futures_util::stream::once(async { axum::body::Bytes::from_static(b"{\"data\": [") });
                    let rest = futures_util::stream::unfold(0usize, move |k| async move {
                        if flood {
                            (k < 8).then(|| (axum::body::Bytes::from(vec![b' '; FLOOD_CHUNK]), k + 1))
                        } else {
                            tokio::time::sleep(HOLD).await;
                            None
                        }
                    });
                    let body = axum::body::Body::from_stream(head.chain(rest).map(Ok::<_, std::io::Error>));
                    ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
                }),
            );
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        EmbeddingStub { url, _runtime: runtime }
    }
}

/// The hostile-peer bounds hold on the embeddings path: an answer past the byte cap fails its
/// batch as `bad_response` without being read whole, and a body that stops fails as `stalled`
/// within the stall timeout, not the request's timeout.
#[test]
fn an_answer_past_the_byte_cap_or_one_that_stalls_fails_its_batch_and_nothing_hangs() {
    use batchlab::engine::{EngineError, RemoteErrorKind};
    let batch: Vec<EngineRequest> = (0..2).map(|i| EngineRequest::tokens(vec![1, 2, 3], 1).with_id(i)).collect();
    let flood = EmbeddingStub::start(true);
    let mut engine = engine(&flood.url);
    engine.start().expect("start");
    match engine.generate(&batch) {
        Err(EngineError::Remote(e)) => {
            assert_eq!(e.kind, RemoteErrorKind::BadResponse, "{e}");
            assert!(e.message.contains("longer than"), "the cap, not a parse error: {e}");
        }
        other => panic!("the flood must fail the batch: {other:?}"),
    }
    engine.shutdown().unwrap();
    let stall = EmbeddingStub::start(false);
    let mut config = OpenAiConfig::new(&stall.url, MODEL);
    config.api = Api::Embeddings;
    config.timeout = Some(HOLD);
    config.stall_timeout = Some(Duration::from_millis(300));
    let mut engine = OpenAiEngine::new(config);
    engine.start().expect("start");
    let started = std::time::Instant::now();
    match engine.generate(&batch) {
        Err(EngineError::Remote(e)) => assert_eq!(e.kind, RemoteErrorKind::Stalled, "{e}"),
        other => panic!("the stall must fail the batch: {other:?}"),
    }
    assert!(started.elapsed() < HOLD / 2, "failed by the stall watch, not the timeout: {:?}", started.elapsed());
    engine.shutdown().unwrap();
}
