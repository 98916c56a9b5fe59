//! Chat prompts and datasets end to end on the simulator, through batchlab's public API: the
//! shipped `chat.toml` and `sharegpt.toml`, what each request's prompt became, and how the
//! simulated engine counted it.

use std::path::{Path, PathBuf};

use batchlab::engine::Prompt;
use batchlab::engine::tokens::text_tokens;
use batchlab::loadgen::{LoadError, Workload};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::plan::{Plan, WorkloadSpec};
use batchlab::scenario::{Overrides, load_file};

fn scenario(name: &str, sets: &[&str]) -> Plan {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
    let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
    load_file(&path, &overrides).unwrap_or_else(|e| panic!("{e}"))
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("batchlab-workload-chat-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `plan` writing requests.jsonl; returns the report and the rows.
fn run_with_rows(plan: &Plan, name: &str) -> (serde_json::Value, Vec<serde_json::Value>) {
    let dir = out_dir(name);
    let options = RunOptions { output_dir: Some(dir.clone()), requests_jsonl: true, ..RunOptions::default() };
    let summary = run_blocking(plan, options).unwrap_or_else(|e| panic!("{e}"));
    summary.report.assert_expectations();
    let report = serde_json::to_value(&summary.report).unwrap();
    let rows = std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    (report, rows)
}

/// The tiny model's template by hand: `<s>`, then `<|role|>\ncontent</s>\n` per message, then
/// `<|assistant|>\n`.
fn tiny_template(messages: &[(&str, &str)]) -> String {
    let mut s = "<s>".to_owned();
    for (role, content) in messages {
        s.push_str(&format!("<|{role}|>\n{content}</s>\n"));
    }
    s + "<|assistant|>\n"
}

#[test]
fn chat_scenario_prompts_are_templated_then_counted_by_the_simulator() {
    let plan = scenario("chat.toml", &[]);
    let WorkloadSpec::Synthetic { chat, .. } = &plan.workload() else { panic!("chat.toml is synthetic") };
    let system = chat.system_prompt.clone().expect("chat.toml has a system prompt");
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let (_, rows) = run_with_rows(&plan, "chat");
    assert_eq!(rows.len(), 512 + 32, "measured and warmup requests");
    for row in &rows {
        let id = row["id"].as_u64().unwrap();
        let Prompt::Chat(c) = workload.request(id).prompt else { panic!("request {id} is not a chat prompt") };
        assert_eq!((c.messages[0].role.as_str(), c.messages[0].content.as_str()), ("system", system.as_str()));
        assert_eq!(c.messages[1].role, "user");
        let user = c.messages[1].content.as_str();
        let templated = text_tokens(&tiny_template(&[("system", &system), ("user", user)]));
        assert_eq!(
            row["prompt_tokens"].as_u64(),
            Some(templated as u64),
            "request {id}: the engine's count, templated"
        );
        assert!(templated > text_tokens(&system) + text_tokens(user), "the template's own tokens count");
    }
}

#[test]
fn plain_chat_prompts_are_role_prefixed_text() {
    let plan = scenario(
        "chat.toml",
        &["workload.request_format=\"plain\"", "stop.max_requests=16", "expect.completed=16", "warmup.requests=1"],
    );
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let (_, rows) = run_with_rows(&plan, "plain");
    for row in &rows {
        let id = row["id"].as_u64().unwrap();
        let Prompt::Text(text) = workload.request(id).prompt else { panic!("plain is text") };
        assert!(text.starts_with("system: You are a helpful assistant.") && text.contains("\nuser: "), "{text}");
        assert_eq!(row["prompt_tokens"].as_u64(), Some(text_tokens(&text) as u64));
    }
}

#[test]
fn a_custom_template_is_what_the_simulator_counts() {
    let plan = scenario(
        "chat.toml",
        &[
            "workload.request_format=\"[{% for m in messages %}{{ m.role }}={{ m.content }};{% endfor %}]\"",
            "stop.max_requests=8",
            "expect.completed=8",
        ],
    );
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let (_, rows) = run_with_rows(&plan, "custom");
    for row in &rows {
        let id = row["id"].as_u64().unwrap();
        let Prompt::Chat(c) = workload.request(id).prompt else { panic!() };
        let text = format!("[system={};user={};]", c.messages[0].content, c.messages[1].content);
        assert_eq!(row["prompt_tokens"].as_u64(), Some(text_tokens(&text) as u64), "request {id}");
    }
}

/// `(from, value)` turns up to the last human one, and the reply after it.
type Conversation = (Vec<(String, String)>, Option<String>);

/// The sample's conversations, read independently of batchlab.
fn sample_conversations() -> Vec<Conversation> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/data/sharegpt-sample.json");
    let data: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    data.iter()
        .map(|entry| {
            let turns: Vec<(String, String)> = entry["conversations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t["from"].as_str().unwrap().to_owned(), t["value"].as_str().unwrap().to_owned()))
                .collect();
            let last_human = turns.iter().rposition(|(from, _)| from == "human").unwrap();
            let reply = turns.get(last_human + 1).map(|(_, v)| v.clone());
            (turns[..=last_human].to_vec(), reply)
        })
        .collect()
}

#[test]
fn sharegpt_scenario_replays_the_sample_with_reply_lengths_and_truncation() {
    let plan = scenario("sharegpt.toml", &[]);
    let WorkloadSpec::File { dataset, default_max_tokens, .. } = &plan.workload() else { panic!() };
    let max = dataset.max_prompt_tokens.expect("sharegpt.toml sets max_prompt_tokens") as usize;
    let conversations = sample_conversations();
    assert_eq!(conversations.len(), 30);
    let length = |turns: &[(String, String)]| turns.iter().map(|(_, v)| text_tokens(v)).sum::<usize>();
    let long = conversations.iter().filter(|(turns, _)| length(turns) > max).count();
    assert!(long > 0, "the sample has prompts over max_prompt_tokens = {max}, so truncation is exercised");

    let (report, rows) = run_with_rows(&plan, "sharegpt");
    let stats = &report["dataset"];
    assert_eq!(stats["format"], "sharegpt");
    assert_eq!((stats["entries"].as_u64(), stats["prompts"].as_u64()), (Some(30), Some(30)));
    assert_eq!(stats["truncated"].as_u64(), Some(long as u64));
    assert_eq!((stats["skipped_bad_lines"].as_u64(), stats["dropped_long"].as_u64()), (Some(0), Some(0)));

    let workload = Workload::from_plan(plan.workload()).unwrap();
    for row in &rows {
        let id = row["id"].as_u64().unwrap();
        let (turns, reply) = &conversations[(id % 30) as usize];
        // The reply's length is max_tokens (the simulator ignores EOS, so it generates exactly that).
        let expected_out = reply.as_ref().map_or(*default_max_tokens as usize, |r| text_tokens(r).max(1));
        assert_eq!(row["output_tokens"].as_u64(), Some(expected_out as u64), "request {id}");
        let Prompt::Chat(c) = workload.request(id).prompt else { panic!() };
        let roles: Vec<&str> = c.messages.iter().map(|m| m.role.as_str()).collect();
        let want: Vec<&str> = turns
            .iter()
            .map(|(from, _)| match from.as_str() {
                "human" => "user",
                "gpt" => "assistant",
                other => other,
            })
            .collect();
        assert_eq!(roles, want, "request {id}");
        let sent: usize = c.messages.iter().map(|m| text_tokens(&m.content)).sum();
        assert_eq!(sent, length(turns).min(max), "request {id}: cut to max_prompt_tokens, never more");
    }
}

#[test]
fn bad_dataset_lines_are_errors_or_skipped_and_reported() {
    let dir = out_dir("bad-lines");
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("prompts.jsonl");
    std::fs::write(
        &data,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\nnot json\n{\"prompt\": \"fine\"}\n{\"prompt\": 7}\n",
    )
    .unwrap();
    let toml = format!(
        "[workload]\nsource = \"file\"\npath = {:?}\n[stop]\nmax_requests = 10\n[expect]\nerrors = 0\n",
        data.display().to_string()
    );
    let file = dir.join("s.toml");
    std::fs::write(&file, &toml).unwrap();
    let plan = load_file(&file, &Overrides::default()).unwrap();
    let err = Workload::from_plan(plan.workload()).unwrap_err();
    assert!(matches!(err, LoadError::BadLines { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&format!("{}:2:2: invalid JSON", data.display())), "{message}");
    assert!(
        message.contains(&format!("{}:4: expected `prompt` to be a string, found a number", data.display())),
        "{message}"
    );
    assert!(run_blocking(&plan, RunOptions::default()).is_err(), "a run fails before it starts");

    let overrides = Overrides { sets: vec!["workload.skip_bad_lines=true".into()], seed: None };
    let plan = load_file(&file, &overrides).unwrap();
    let summary = run_blocking(&plan, RunOptions::default()).unwrap();
    let stats = summary.report.dataset.as_ref().expect("a file workload's report has its dataset");
    assert_eq!((stats.entries, stats.skipped_bad_lines, stats.prompts), (4, 2, 2));
    assert!(summary.table.contains("2 prompts of 4 entries; 2 bad lines skipped"), "{}", summary.table);
    let json = serde_json::to_value(&summary.report).unwrap();
    assert_eq!(json["dataset"]["skipped_bad_lines"], 2);
    std::fs::remove_dir_all(&dir).unwrap();
}
