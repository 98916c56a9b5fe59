//! Images to a real vision-language model: `vllm serve` of the tiny random-weight LLaVA that
//! `scripts/build_tiny_vlm.py` builds (`just setup-vllm`: a one-layer CLIP tower on 28 × 28 pixels,
//! 4 image tokens an image, the tiny Llama), fed by batchlab's HTTP engine with
//! `[workload.images]`. Every request's images reach the model: the server's `usage.prompt_tokens`
//! is its own count of the text (`/tokenize` of the same text) plus batchlab's rule, 4 tokens an
//! image; and the media pool's repeats show in vLLM's `vllm:mm_cache_*` counters. In process
//! (`engine.kind = "vllm"`), the engine's Python side makes PIL images of batchlab's bytes for
//! `multi_modal_data`, and vLLM's prompt tokens are again the template's text plus 4 an image.
//! Run by `just test-vllm`; with `CI=true` a missing venv or model fails.
#![cfg(feature = "vllm")]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use batchlab::engine::Prompt;
use batchlab::engine::chat::Message;
use batchlab::engine::python::batchlab_home;
use batchlab::loadgen::Workload;
use batchlab::report::{RequestOutcome, read_records};
use batchlab::scenario::{Overrides, load_file};
use serde_json::{Value, json};

#[path = "common/hf_chat.rs"]
mod hf_chat;
#[path = "common/python_env.rs"]
mod python_env;
#[path = "common/vllm_serve.rs"]
mod vllm_serve;
use vllm_serve::VllmServer;

const NAME: &str = "tiny-vlm";
const REQUESTS: usize = 24;

/// One vLLM at a time: the machine has two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-vllm-images-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn scenario(url: &str) -> String {
    format!(
        r#"name = "vllm-images"
[engine]
kind = "openai"
[engine.openai]
urls = ["{url}"]
model = "{NAME}"
api = "chat"
[batching]
batch_size = 1
max_in_flight = 4
[workload]
chat = true
prompt_tokens = 24
output_tokens = 4
[workload.images]
buckets = "{{(28, 28, 1): 0.5, (30, 40, 1): 0.5}}"
base_items_per_request = 2
range_ratio = 0.5
limit_per_prompt = 3
content = "gradient"
pool = 3
pool_rate = 0.5
tokens_per_image = 4
[profile]
kind = "concurrent"
levels = [4]
[stop]
max_requests = {REQUESTS}
"#
    )
}

#[test]
fn a_vision_language_model_served_by_vllm_gets_the_images_and_counts_their_tokens() {
    if !python_env::ready(true) {
        return;
    }
    let model = batchlab_home().join(NAME);
    assert!(
        model.join("config.json").exists(),
        "{} is missing: run `just setup-vllm` (scripts/build_tiny_vlm.py builds it)",
        model.display()
    );
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir("serve");
    let server = VllmServer::start_model(&dir, &model, NAME, &[]);
    let path = dir.join("vllm-images.toml");
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
    let images = &b["images"];
    assert_eq!(images["requests"], REQUESTS, "{images}");
    let designed = images["designed_reuse"].as_f64().unwrap();
    // vLLM's own multimodal cache saw the pool's repeats: it misses each of the 3 pool pictures
    // once at most, then hits them as the workload was designed to.
    let sent = images["images"].as_f64().unwrap();
    let rate = b["server"][0]["mm_cache_hit_rate"].as_f64().unwrap_or_else(|| panic!("no mm cache rate: {b}"));
    assert!(rate > 0.0 && rate <= designed + 1e-9 && rate >= designed - 3.0 / sent, "{rate} vs {designed}");

    // Per request: the server's prompt tokens are its count of the text plus 4 an image.
    let plan = load_file(&path, &Overrides::default()).unwrap();
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let records: Vec<_> = read_records(&out.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    assert_eq!(records.len(), REQUESTS);
    for r in &records {
        assert_eq!(r.outcome, RequestOutcome::Completed, "{r:?}");
        let request = workload.request(r.id);
        let Prompt::Chat(chat) = &request.prompt else { panic!("a chat prompt") };
        let text_only: Vec<Value> =
            chat.messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect();
        let body = json!({"model": NAME, "messages": text_only}).to_string();
        let tokenized = post(&server, "/tokenize", &body);
        let text_tokens = tokenized["count"].as_u64().unwrap_or_else(|| panic!("{tokenized}"));
        let s = r.images.expect("images");
        assert_eq!(s.tokens, u64::from(s.images) * 4);
        let served = u64::from(r.metrics.as_ref().unwrap().prompt_tokens.unwrap());
        assert_eq!(served, text_tokens + s.tokens, "request {}: {} images", r.id, s.images);
    }
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn vllm_in_process_gets_the_images_as_multi_modal_data() {
    if !python_env::ready(true) {
        return;
    }
    let model = batchlab_home().join(NAME);
    assert!(model.join("config.json").exists(), "{} is missing: run `just setup-vllm`", model.display());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = dir("in-process");
    let text = scenario("http://unused").replace(
        "[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://unused\"]\nmodel = \"tiny-vlm\"\napi = \"chat\"\n\
         [batching]\nbatch_size = 1\nmax_in_flight = 4\n",
        &format!(
            "[engine]\nkind = \"vllm\"\n[engine.vllm]\nmodel = \"{}\"\ndtype = \"float32\"\nin_process = true\n\
             kv_cache_gib = 1.0\nmax_model_len = 512\n[batching]\nbatch_size = 4\nbatch_timeout = \"10ms\"\n",
            model.display()
        ),
    );
    assert!(text.contains("kind = \"vllm\""), "{text}");
    let path = dir.join("vllm-images-in-process.toml");
    std::fs::write(&path, &text).unwrap();
    let out = dir.join("out");
    let output = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", path.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let engine_log = std::fs::read_to_string(out.join("engine.log")).unwrap_or_default();
    assert!(output.status.success(), "{}\n{engine_log}", String::from_utf8_lossy(&output.stderr));
    let plan = load_file(&path, &Overrides::default()).unwrap();
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let records: Vec<_> = read_records(&out.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    assert_eq!(records.len(), REQUESTS);
    let cases: Vec<_> = records
        .iter()
        .map(|r| {
            let Prompt::Chat(chat) = workload.request(r.id).prompt else { panic!("a chat prompt") };
            let text_only = chat.messages.iter().map(|m| Message::new(m.role.clone(), m.content.clone())).collect();
            (text_only, None)
        })
        .collect();
    let lengths = hf_chat::chat_lengths(&model, &cases);
    for (r, (text_tokens, _)) in records.iter().zip(lengths) {
        assert_eq!(r.outcome, RequestOutcome::Completed, "{r:?}");
        let s = r.images.expect("images");
        let counted = r.metrics.as_ref().unwrap().prompt_tokens.unwrap() as usize;
        assert_eq!(counted, text_tokens + 4 * s.images as usize, "request {}: {} images", r.id, s.images);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A POST with a JSON body through curl-free std: HTTP/1.0 on loopback.
fn post(server: &VllmServer, path: &str, body: &str) -> Value {
    use std::io::{Read, Write};
    let addr = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (_, json) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{response}"));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {response}"))
}
