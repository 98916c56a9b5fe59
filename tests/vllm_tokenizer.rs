//! `workload.tokenizer` against the real engine: with the tiny model's own directory as the
//! tokenizer, vLLM's count of every prompt (requests.jsonl's `prompt_tokens`, vLLM's
//! `num_prompt_tokens`) is exactly the length the workload drew, for text prompts and for chat
//! prompts after vLLM applied the model's template.
//!
//! Run with `just test-vllm`. Without the venv or the model the test fails, saying what is
//! missing, unless `BATCHLAB_SKIP_PYTHON=1` asks to skip it (never under `CI=true`;
//! tests/common/python_env.rs).
#![cfg(feature = "vllm")]

use std::path::PathBuf;

use batchlab::engine::python::batchlab_home;
use batchlab::loadgen::Workload;
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::plan::Plan;
use batchlab::scenario::{Overrides, keys, load_file};

#[path = "common/python_env.rs"]
mod python_env;

fn scenario(dir: &std::path::Path, chat: bool) -> Plan {
    let model = batchlab_home().join("tiny-llama");
    let text = format!(
        r#"
name = "vllm-tokenizer"
seed = 3

[engine]
kind = "vllm"

[engine.vllm]
model = "{model}"
dtype = "float32"
in_process = true
kv_cache_gib = 1.0
max_model_len = 512

[batching]
batch_size = 16
batch_timeout = "10ms"

[workload]
source = "synthetic"
tokenizer = "{model}"
chat = {chat}
prompt_tokens = {{ dist = "uniform", min = 40, max = 300 }}
output_tokens = 4
ignore_eos = true

[profile]
kind = "throughput"
max_concurrency = 64

[stop]
max_requests = 64

[expect]
completed = "== 64"
errors = 0
"#,
        model = model.display()
    );
    let path = dir.join(if chat { "chat.toml" } else { "text.toml" });
    std::fs::write(&path, text).unwrap();
    load_file(&path, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// The lengths the workload drew: the same plan without a tokenizer gives token-id prompts of
/// exactly those lengths (a request's length has its own random stream).
fn drawn_length(plan: &Plan, k: u64) -> u64 {
    let without = plan.with_changes(&[keys::TOKENIZER.path()], &[keys::CHAT.to(false)]).unwrap();
    let w = Workload::from_plan(without.workload()).unwrap();
    w.request(k).prompt.token_len().unwrap() as u64
}

#[test]
fn vllm_counts_exactly_the_requested_tokens_for_text_and_chat_prompts() {
    if !python_env::ready(true) {
        return;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("batchlab-vllm-tokenizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for chat in [false, true] {
        let plan = scenario(&dir, chat);
        let out = dir.join(if chat { "out-chat" } else { "out-text" });
        let options = RunOptions { output_dir: Some(out.clone()), requests_jsonl: true, ..RunOptions::default() };
        let summary = run_blocking(&plan, options).unwrap_or_else(|e| panic!("{e}"));
        summary.report.assert_expectations();
        let report = serde_json::to_value(&summary.report).unwrap();
        assert_eq!(report["token_counting"], "tokenizer");
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(out.join("requests.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 64);
        for row in &rows {
            let id = row["id"].as_u64().unwrap();
            assert_eq!(
                row["prompt_tokens"].as_u64(),
                Some(drawn_length(&plan, id)),
                "chat = {chat}, request {id}: vLLM's own count is the drawn length"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
