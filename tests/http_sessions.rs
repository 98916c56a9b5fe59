//! `[workload.sessions]` over HTTP (`engine.kind = "openai"`, the chat API): each turn carries
//! the previous turn's messages and the reply text the server streamed, byte for byte, and its
//! session in `X-Session-ID` (a recording stub shows what went on the wire); against two
//! `batchlab serve` endpoints, `routing = "session_affinity"` keeps each session on one of them.

use std::collections::BTreeMap;
use std::path::Path;

use batchlab::report::{RequestOutcome, read_records};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, parse_str};
use serde_json::json;

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::Server;
#[path = "common/recording.rs"]
mod recording;
use recording::{Recording, check_chains};

const MODEL: &str = "batchlab-sim";

/// A chat scenario of sessions against `urls`, with the engine settings `openai` added.
fn scenario(urls: &[&str], openai: &str, requests: u32) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "name = \"sessions-http\"\nseed = 3\n[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [{}]\n\
         model = \"{MODEL}\"\napi = \"chat\"\n{openai}\n[batching]\nbatch_size = 1\nmax_in_flight = 8\n\
         [workload]\nchat = true\nsystem_prompt = \"Be brief.\"\nprompt_tokens = {{ dist = \"uniform\", min = 4, max = 12 }}\n\
         output_tokens = {{ dist = \"uniform\", min = 2, max = 6 }}\n[workload.sessions]\nturns = 4\n\
         [profile]\nkind = \"concurrent\"\nlevels = [4]\n[stop]\nmax_requests = {requests}\n",
        urls.join(", ")
    )
}

fn run(text: &str, dir: &Path) -> Vec<batchlab::report::RequestRecord> {
    let plan = parse_str(text, "sessions-http.toml", Path::new("."), &Overrides::default()).unwrap();
    let options = RunOptions { output_dir: Some(dir.to_owned()), requests_jsonl: true, ..RunOptions::default() };
    let summary = run_blocking(&plan, options).unwrap();
    assert!(!summary.report.incomplete);
    let records: Vec<_> = read_records(&dir.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    std::fs::remove_dir_all(dir).unwrap();
    records
}

#[test]
fn each_turn_carries_the_previous_turn_and_the_servers_exact_reply_and_its_session_header() {
    let stub = Recording::start(MODEL, "x-conversation", None);
    let dir = std::env::temp_dir().join(format!("batchlab-sessions-stub-{}", std::process::id()));
    let records = run(&scenario(&[&stub.url], "session_header = \"X-Conversation\"", 40), &dir);
    assert_eq!(records.len(), 40);
    let failed: Vec<_> = records.iter().filter(|r| r.outcome != RequestOutcome::Completed).collect();
    assert!(failed.is_empty(), "{failed:?}");
    let seen = stub.seen();
    assert_eq!(seen.len(), 40);
    let (sessions, chained) = check_chains(&seen);
    assert!(sessions >= 10 && chained >= 25, "{sessions} sessions, {chained} chained turns");
    // requests.jsonl names the same sessions and turns.
    let recorded: std::collections::BTreeSet<String> = records.iter().map(|r| r.session.unwrap().to_string()).collect();
    let named: std::collections::BTreeSet<String> = seen.iter().map(|s| s.session.clone().unwrap()).collect();
    assert_eq!(recorded, named);
}

#[test]
fn session_affinity_keeps_each_session_on_one_of_two_batchlab_serve_endpoints() {
    let (a, b) = (Server::start(None, &[]), Server::start(None, &[]));
    let dir = std::env::temp_dir().join(format!("batchlab-sessions-serve-{}", std::process::id()));
    let records = run(&scenario(&[&a.url, &b.url], "routing = \"session_affinity\"", 60), &dir);
    assert!(records.iter().all(|r| r.outcome == RequestOutcome::Completed));
    let mut endpoints: BTreeMap<u64, std::collections::BTreeSet<String>> = BTreeMap::new();
    for r in &records {
        endpoints.entry(r.session.unwrap()).or_default().insert(r.endpoint.clone().expect("an endpoint"));
    }
    assert!(endpoints.len() >= 15, "{} sessions", endpoints.len());
    assert!(endpoints.values().all(|e| e.len() == 1), "a session on two endpoints: {endpoints:?}");
    // The documented rule: session `s` on endpoint `s mod 2` (both stay in rotation).
    for (session, e) in &endpoints {
        let want = if session % 2 == 0 { &a.url } else { &b.url };
        assert_eq!(e.iter().next(), Some(want), "session {session}");
    }
    let used: std::collections::BTreeSet<&String> = endpoints.values().flatten().collect();
    assert_eq!(used.len(), 2, "both endpoints serve sessions: {used:?}");
    // Each turn's prompt, as the server counted it, is longer than the last by more than the reply.
    let mut turns: BTreeMap<u64, Vec<_>> = BTreeMap::new();
    for r in &records {
        turns.entry(r.session.unwrap()).or_default().push(r);
    }
    for t in turns.values() {
        for pair in t.windows(2) {
            let (m0, m1) = (pair[0].metrics.as_ref().unwrap(), pair[1].metrics.as_ref().unwrap());
            assert!(m1.prompt_tokens.unwrap() > m0.prompt_tokens.unwrap() + m0.output_tokens.unwrap());
        }
    }
}

/// A JSONL file's conversations as sessions: each session replays one conversation's system
/// prompt and user turns, in order, with the server's replies in place of the recorded ones.
#[test]
fn a_files_conversations_are_replayed_with_the_servers_replies() {
    let stub = Recording::start(MODEL, "x-session-id", None);
    let dir = std::env::temp_dir().join(format!("batchlab-sessions-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conversations: Vec<[String; 3]> =
        (0..5).map(|c| [0, 1, 2].map(|k| format!("conversation {c}, question {k}: what next?"))).collect();
    let mut file = String::new();
    for users in &conversations {
        let mut messages = vec![json!({"role": "system", "content": "Be brief."})];
        for (k, u) in users.iter().enumerate() {
            if k > 0 {
                messages.push(json!({"role": "assistant", "content": "a recorded answer"}));
            }
            messages.push(json!({"role": "user", "content": u}));
        }
        file.push_str(&json!({"messages": messages, "max_tokens": 3}).to_string());
        file.push('\n');
    }
    std::fs::write(dir.join("conversations.jsonl"), file).unwrap();
    let text = format!(
        "name = \"sessions-file\"\n[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"{}\"]\nmodel = \"{MODEL}\"\n\
         api = \"chat\"\n[batching]\nbatch_size = 1\nmax_in_flight = 4\n[workload]\nsource = \"file\"\n\
         path = \"conversations.jsonl\"\n[workload.sessions]\n[profile]\nkind = \"concurrent\"\nlevels = [3]\n\
         [stop]\nmax_requests = 30\n",
        stub.url
    );
    let plan = parse_str(&text, "sessions-file.toml", &dir, &Overrides::default()).unwrap();
    let out = dir.join("out");
    let options = RunOptions { output_dir: Some(out.clone()), requests_jsonl: true, ..RunOptions::default() };
    run_blocking(&plan, options).unwrap();
    let records: Vec<_> = read_records(&out.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(records.iter().all(|r| r.outcome == RequestOutcome::Completed));
    let seen = stub.seen();
    let (sessions, chained) = check_chains(&seen);
    // 30 turns of 3 sessions at a time, each of 3 turns: 30 = 3 × (sessions that ended) + the turns
    // of the (up to 3) sessions the stop cut short, 1 or 2 each. So 10, 11 or 12 sessions, and the
    // turns that follow one of their own are the rest: 30 − sessions. (12 came in 10 of 25 runs of
    // this test on 2026-12-07; the bound was 11 and the test flaked.)
    assert!((10..=12).contains(&sessions) && chained == 30 - sessions, "{sessions} sessions, {chained} chained turns");
    // Session i (in start order) replays conversation i mod 5, its user turns in order (all three
    // unless the run's end cut it short).
    let mut by_session: BTreeMap<u64, Vec<&recording::Seen>> = BTreeMap::new();
    for s in &seen {
        by_session.entry(s.session.as_deref().unwrap().parse().unwrap()).or_default().push(s);
    }
    let first = *by_session.keys().next().unwrap();
    for (session, turns) in &by_session {
        let users = &conversations[((session - first) % 5) as usize];
        let last = turns.last().unwrap();
        let asked: Vec<&str> =
            last.messages.iter().filter(|m| m["role"] == "user").map(|m| m["content"].as_str().unwrap()).collect();
        let want: Vec<&str> = users.iter().take(turns.len()).map(String::as_str).collect();
        assert_eq!(asked, want, "session {session}");
        assert!(turns.len() <= 3);
    }
}
