//! What Hugging Face's own tokenizer makes of chat prompts, through the venv's Python: the counts
//! a chat-templating engine must report. Included with `#[path]` by the tests that need Python.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use batchlab::engine::chat::Message;
use batchlab::engine::python::default_venv;

const SCRIPT: &str = r#"
import json, sys
from transformers import AutoTokenizer
model, cases = sys.argv[1], json.load(sys.stdin)
tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
out = []
for case in cases:
    ids = tok.apply_chat_template(case["messages"], chat_template=case["template"],
                                  add_generation_prompt=True, tokenize=True, return_dict=False)
    raw = sum(len(tok(m["content"], add_special_tokens=False)["input_ids"]) for m in case["messages"])
    out.append([len(ids), raw])
print(json.dumps({"has_template": bool(tok.chat_template), "lengths": out}))
"#;

/// For each `(messages, template)` (`None`: the model's own): the token count of
/// `tokenizer.apply_chat_template(messages, chat_template=template, add_generation_prompt=True,
/// tokenize=True)`, and the summed counts of the contents alone. Panics, saying what to run, when
/// the model has no chat template.
pub fn chat_lengths(model: &Path, cases: &[(Vec<Message>, Option<String>)]) -> Vec<(usize, usize)> {
    let input: Vec<serde_json::Value> = cases
        .iter()
        .map(|(messages, template)| serde_json::json!({ "messages": messages, "template": template }))
        .collect();
    let mut child = Command::new(default_venv().join("bin/python"))
        .args(["-c", SCRIPT])
        .arg(model)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_VERBOSITY", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the venv's python");
    child.stdin.take().unwrap().write_all(serde_json::to_string(&input).unwrap().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json from python");
    assert_eq!(
        result["has_template"],
        true,
        "{} has no chat template: run `just setup-vllm` (scripts/build_tiny_model.py installs it)",
        model.display()
    );
    result["lengths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| (pair[0].as_u64().unwrap() as usize, pair[1].as_u64().unwrap() as usize))
        .collect()
}
