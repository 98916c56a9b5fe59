//! `batchlab serve --tokenizer DIR`: prompts are counted, prefix-cached and tokenized in the
//! model's own tokens (the shipped tiny tokenizer, tests/fixtures/tiny-llama-tokenizer).

use std::path::{Path, PathBuf};
use std::time::Duration;

use batchlab::engine::tokenizer::ModelTokenizer;
use serde_json::{Value, json};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

fn tokenizer_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-llama-tokenizer")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

async fn post(server: &Server, path: &str, body: Value) -> Value {
    let resp = client().post(server.url(path)).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{path}");
    resp.json().await.unwrap()
}

/// A counter of `/metrics` (summed over its labels).
async fn metric(server: &Server, name: &str) -> f64 {
    let text = client().get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test]
async fn tokenize_usage_and_the_prefix_cache_are_in_the_tokenizers_tokens() {
    let tiny = ModelTokenizer::load(&tokenizer_dir()).unwrap();
    let dir = tokenizer_dir();
    let server = Server::start(None, &["--tokenizer", dir.to_str().unwrap()]);

    // /tokenize: the tokenizer's ids, for text and, after the model's template, for messages.
    let text = "stoung kait chaibrer dou tou, fek lick";
    let got = post(&server, "/tokenize", json!({"model": MODEL, "prompt": text})).await;
    let ids = tiny.text_ids(text);
    assert_ne!(ids.len(), text.len().div_ceil(4), "a text the four-byte rule counts otherwise");
    assert_eq!(got["tokens"], json!(ids));
    assert_eq!(got["count"], ids.len());
    let messages = json!([{"role": "user", "content": text}]);
    let got = post(&server, "/tokenize", json!({"model": MODEL, "messages": messages})).await;
    assert_eq!(got["tokens"], json!(tiny.plain_ids(&format!("<s><|user|>\n{text}</s>\n<|assistant|>\n"))));
    let back = post(&server, "/detokenize", json!({"model": MODEL, "tokens": ids})).await;
    assert_eq!(back["prompt"], text);

    // usage.prompt_tokens is the tokenizer's count.
    let body = json!({"model": MODEL, "prompt": text, "max_tokens": 2, "ignore_eos": true});
    let got = post(&server, "/v1/completions", body).await;
    assert_eq!(got["usage"]["prompt_tokens"], ids.len());

    // Two prompts that share 40 real tokens (40 bytes of digits: 10 by the four-byte rule, not a
    // full block): the second hits the first's full blocks of 16 real tokens, 32.
    let shared: String = tiny.decode(&tiny.text_ids(&"0123456789 ".repeat(10))[..40]);
    let shared_ids = tiny.text_ids(&shared);
    assert_eq!(shared_ids.len(), 40, "{shared:?}");
    let hits_before = metric(&server, "vllm:prefix_cache_hits_total").await;
    for tail in [" first tail of the prompt", " second, other tail"] {
        let body = json!({"model": MODEL, "prompt": format!("{shared}{tail}"), "max_tokens": 1});
        post(&server, "/v1/completions", body).await;
    }
    let hits = metric(&server, "vllm:prefix_cache_hits_total").await - hits_before;
    assert_eq!(hits, 32.0, "the second prompt's hit: the shared 40 tokens' two full blocks");
}

#[test]
fn a_bad_tokenizer_path_is_refused_with_what_was_expected() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["serve", "--port", "0", "--tokenizer", "/nonexistent/model"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tokenizer: tokenizer /nonexistent/model: not found; expected a model directory"),
        "{stderr}"
    );
}
