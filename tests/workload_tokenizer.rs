//! `workload.tokenizer` end to end, with the shipped tiny tokenizer
//! (tests/fixtures/tiny-llama-tokenizer, scripts/build_tiny_model.py's): synthetic text and chat
//! prompts have exactly their drawn token count, unique and shared prefixes hold in real tokens,
//! and report.json names the counting.

use std::path::{Path, PathBuf};

use batchlab::engine::Prompt;
use batchlab::engine::chat::Message;
use batchlab::engine::tokenizer::ModelTokenizer;
use batchlab::loadgen::Workload;
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::plan::Plan;
use batchlab::scenario::{Overrides, Set, keys, load_file};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn plan(sets: &[&str]) -> Plan {
    let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
    load_file(&fixture().join("tokenizer.toml"), &overrides).unwrap_or_else(|e| panic!("{e}"))
}

fn tiny() -> ModelTokenizer {
    ModelTokenizer::load(&fixture().join("tiny-llama-tokenizer")).unwrap()
}

/// The lengths the workload drew: the same plan as token ids (no tokenizer) has them as its
/// prompts' lengths, since a request's length has its own random stream.
fn drawn_lengths(sets: &[&str], n: u64) -> Vec<usize> {
    let mut sets: Vec<&str> = sets.iter().copied().filter(|s| !s.starts_with("workload.system_prompt")).collect();
    sets.extend(["workload.chat=false", "workload.unique_prefix=false"]);
    let w = Workload::from_plan(without_tokenizer(&plan(&sets)).workload()).unwrap();
    (0..n).map(|k| w.request(k).prompt.token_len().expect("token ids without a tokenizer")).collect()
}

fn without_tokenizer(p: &Plan) -> Plan {
    p.with_changes(&[keys::TOKENIZER.path()], &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn text(p: &Prompt) -> &str {
    match p {
        Prompt::Text(t) => t,
        other => panic!("not text: {other:?}"),
    }
}

/// The tiny model's template by hand: `<s>`, then `<|role|>\ncontent</s>\n` per message, then
/// `<|assistant|>\n`.
fn tiny_template(messages: &[Message]) -> String {
    let mut s = "<s>".to_owned();
    for m in messages {
        s.push_str(&format!("<|{}|>\n{}</s>\n", m.role, m.content));
    }
    s + "<|assistant|>\n"
}

/// The done-when: 1,000 synthetic text prompts and 1,000 chat prompts, each exactly the
/// drawn number of the tiny tokenizer's tokens (the chat ones after the model's template).
#[test]
fn a_thousand_text_and_a_thousand_chat_prompts_have_exactly_the_drawn_count() {
    let tiny = tiny();
    let w = Workload::from_plan(plan(&[]).workload()).unwrap();
    let lengths = drawn_lengths(&[], 1000);
    for (k, want) in lengths.iter().enumerate() {
        let r = w.request(k as u64);
        let t = text(&r.prompt);
        assert_eq!(tiny.text_tokens(t), *want, "request {k}: {t:?}");
        assert!(!tiny.text_ids(t).iter().any(|&id| id <= 2), "request {k}: a special token in {t:?}");
    }
    assert!(lengths.iter().any(|&l| l < 40) && lengths.iter().any(|&l| l > 280), "the draws span the range");

    // A prompt holds at least the template's own tokens (39 with this system turn) and one more.
    let chat = [
        "workload.chat=true",
        "workload.system_prompt=\"You are terse.\"",
        "workload.prompt_tokens={dist=\"uniform\", min=40, max=300}",
    ];
    let w = Workload::from_plan(plan(&chat).workload()).unwrap();
    let lengths = drawn_lengths(&chat, 1000);
    for (k, want) in lengths.iter().enumerate() {
        let r = w.request(k as u64);
        let Prompt::Chat(c) = &r.prompt else { panic!("request {k}: not a chat prompt: {:?}", r.prompt) };
        assert_eq!(c.messages[0], Message::new("system", "You are terse."));
        let rendered = tiny_template(&c.messages);
        assert_eq!(tiny.plain_ids(&rendered).len(), *want, "request {k}: {rendered:?}");
        // The template's own tokens count: the user turn is shorter than the prompt.
        assert!(tiny.plain_ids(&c.messages[1].content).len() < *want, "request {k}");
    }
}

#[test]
fn the_same_seed_gives_the_same_prompts_and_another_seed_others() {
    let a = Workload::from_plan(plan(&[]).workload()).unwrap();
    let b = Workload::from_plan(plan(&[]).workload()).unwrap();
    let c = Workload::from_plan(plan(&["workload.seed=99"]).workload()).unwrap();
    for k in [0, 7, 123] {
        assert_eq!(a.request(k), b.request(k));
        assert_ne!(a.request(k).prompt, c.request(k).prompt);
    }
}

/// `unique_prefix` (the default): each prompt starts with the words spelling its index, so no two
/// share their first tokens; `prefix_groups`: the group's prefix, exactly `prefix_tokens` real
/// tokens, then different text.
#[test]
fn unique_and_shared_prefixes_hold_in_real_tokens() {
    let tiny = tiny();
    let w = Workload::from_plan(plan(&[]).workload()).unwrap();
    let mut firsts = std::collections::HashSet::new();
    for k in 0..500 {
        let ids = tiny.text_ids(text(&w.request(k).prompt));
        assert!(firsts.insert(ids[..16].to_vec()), "request {k} repeats a first block");
    }

    let sets = ["workload.prefix_groups=3", "workload.prefix_tokens=20", "workload.unique_prefix=false"];
    let w = Workload::from_plan(plan(&sets).workload()).unwrap();
    let lengths = drawn_lengths(&sets, 300);
    let prompts: Vec<Vec<u32>> = (0..300).map(|k| tiny.text_ids(text(&w.request(k).prompt))).collect();
    for (k, ids) in prompts.iter().enumerate() {
        assert_eq!(ids.len(), lengths[k], "request {k}");
    }
    let prefixes: std::collections::HashSet<&[u32]> = prompts.iter().map(|t| &t[..20]).collect();
    assert_eq!(prefixes.len(), 3, "three groups, each prefix exactly shared in real tokens");
    let rests: std::collections::HashSet<&[u32]> = prompts.iter().map(|t| &t[20..23]).collect();
    assert!(rests.len() > 290, "past the prefix, prompts differ: {} of 300 distinct", rests.len());
}

/// The simulator runs the workload (in batches of 16, and one at a time without unique
/// prefixes), and report.json names the counting: `tokenizer` with one, `four_bytes` without.
#[test]
fn report_json_names_the_counting() {
    let dir = std::env::temp_dir().join(format!("batchlab-workload-tokenizer-{}", std::process::id()));
    let one_at_a_time = plan(&["batching.batch_size=1", "workload.unique_prefix=false"]);
    for (p, counting) in
        [(plan(&[]), "tokenizer"), (one_at_a_time, "tokenizer"), (without_tokenizer(&plan(&[])), "four_bytes")]
    {
        let options = RunOptions { output_dir: Some(dir.clone()), ..RunOptions::default() };
        let summary = run_blocking(&p, options).unwrap_or_else(|e| panic!("{e}"));
        let report = serde_json::to_value(&summary.report).unwrap();
        assert_eq!(report["token_counting"], counting);
        assert_eq!(report["benchmarks"][0]["counts"]["completed"].as_u64(), Some(64), "{report:#}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file workload with `tokenizer`: `max_prompt_tokens` and `truncate` count real tokens (40
/// bytes of digits are 40 of the tiny model's tokens, 10 by the four-byte rule).
#[test]
fn file_limits_count_real_tokens() {
    let tiny = tiny();
    let dir = std::env::temp_dir().join(format!("batchlab-workload-tokenizer-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let digits = "0123456789 ".repeat(4);
    std::fs::write(dir.join("prompts.txt"), format!("{digits}\nshort one\n")).unwrap();
    let scenario = format!(
        "name = \"file\"\n[engine]\nkind = \"sim\"\n[workload]\nsource = \"file\"\npath = \"prompts.txt\"\n\
         format = \"text\"\ntokenizer = \"{}\"\nmax_prompt_tokens = 12\ntruncate = true\n",
        fixture().join("tiny-llama-tokenizer").display()
    );
    std::fs::write(dir.join("s.toml"), scenario).unwrap();
    let p = load_file(&dir.join("s.toml"), &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let w = Workload::from_plan(p.workload()).unwrap();
    let stats = w.dataset_stats().unwrap();
    assert_eq!((stats.truncated, stats.prompts), (1, 2), "{stats:?}");
    let cut = text(&w.request(0).prompt).to_owned();
    assert_eq!(tiny.text_tokens(&cut), 12, "{cut:?}");
    assert!(digits.starts_with(&cut));
    assert_eq!(text(&w.request(1).prompt), "short one");

    // A filter that leaves nothing says which counting it used: the tokenizer, by its path.
    let none = p
        .with_changes(
            &["workload.max_prompt_tokens", "workload.truncate"],
            &[Set::new("workload.min_prompt_tokens", 1000u32)],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let err = Workload::from_plan(none.workload()).unwrap_err().to_string();
    let counting =
        format!("(lengths in the tokens of `workload.tokenizer` {}", fixture().join("tiny-llama-tokenizer").display());
    assert!(err.contains("has no prompts left") && err.contains(&counting), "{err}");

    // A tokenizer path that is not there is an error at the key, with what was expected.
    std::fs::write(dir.join("bad.toml"), "name = \"bad\"\n[workload]\ntokenizer = \"no-such-model\"\n").unwrap();
    let err = load_file(&dir.join("bad.toml"), &Overrides::default()).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.contains("bad.toml:3:13"), "{err}");
    assert!(err.contains("no-such-model: not found; expected a model directory with a tokenizer.json"), "{err}");
}

/// Against `batchlab serve --tokenizer` (which counts the same tokenizer's tokens, a chat prompt
/// after the model's template), every prompt is counted at the length the workload sized it to:
/// each record has the target beside the server's count, and the report has no miss. On the
/// simulator, which counts four bytes a token, the same targets are there, and missed.
#[test]
fn the_server_counts_every_prompt_at_its_target() {
    #[path = "common/serve_process.rs"]
    mod serve_process;
    let server =
        serve_process::Server::start(None, &["--tokenizer", fixture().join("tiny-llama-tokenizer").to_str().unwrap()]);
    let dir = std::env::temp_dir().join(format!("batchlab-workload-tokenizer-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // tests/fixtures/tokenizer.toml with its engine swapped for the HTTP one.
    let fixture_text = std::fs::read_to_string(fixture().join("tokenizer.toml")).unwrap();
    let (head, rest) = fixture_text.split_once("[engine]").unwrap();
    let (_, rest) = rest.split_once("[batching]").unwrap();
    let tokenizer = fixture().join("tiny-llama-tokenizer");
    for (api, chat) in [("completions", false), ("chat", true)] {
        let scenario = format!(
            "{head}[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"{}\"]\nmodel = \"{}\"\napi = \"{api}\"\n\
             [batching]{}",
            server.url,
            serve_process::MODEL,
            rest.replace(
                "tokenizer = \"tiny-llama-tokenizer\"",
                &format!("tokenizer = {:?}\nchat = {chat}", tokenizer.display().to_string())
            )
        );
        let path = dir.join("http.toml");
        std::fs::write(&path, scenario).unwrap();
        let overrides =
            Overrides { sets: vec!["batching.batch_size=1".into(), "stop.max_requests=24".into()], seed: None };
        let http = load_file(&path, &overrides).unwrap_or_else(|e| panic!("{e}"));
        let options = RunOptions { output_dir: Some(dir.join("out")), requests_jsonl: true, ..RunOptions::default() };
        let summary = run_blocking(&http, options).unwrap_or_else(|e| panic!("{e}"));
        let target = summary.report.benchmarks[0].prompt_target.clone().expect("targets");
        assert_eq!((target.requests, target.differ, target.max_abs_diff), (24, 0, 0), "{api}: {target:?}");
        let records = batchlab::report::read_records(&dir.join("out/requests.jsonl")).unwrap().map(Result::unwrap);
        let drawn = drawn_lengths(&[], 24);
        for r in records {
            let served = r.metrics.as_ref().unwrap().prompt_tokens;
            assert_eq!(r.prompt_tokens_target, served, "{api}, request {}", r.id);
            assert_eq!(r.prompt_tokens_target, Some(drawn[r.id as usize] as u32), "{api}, request {}", r.id);
        }
    }
    // The simulator counts otherwise: the targets are recorded, and the report shows the misses.
    let options = RunOptions { output_dir: Some(dir.clone()), ..RunOptions::default() };
    let summary = run_blocking(&plan(&[]), options).unwrap_or_else(|e| panic!("{e}"));
    let target = summary.report.benchmarks[0].prompt_target.clone().expect("targets");
    assert_eq!(target.requests, 64);
    assert!(target.differ > 0 && target.max_abs_diff > 0, "{target:?}");
    let options = RunOptions { output_dir: Some(dir.clone()), ..RunOptions::default() };
    let summary = run_blocking(&without_tokenizer(&plan(&[])), options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.report.benchmarks[0].prompt_target, None, "token ids have no target");
    let _ = std::fs::remove_dir_all(&dir);
}
