//! `[workload.sessions]` over HTTP (`engine.kind = "openai"`, the chat API): each turn carries
//! the previous turn's messages and the reply text the server streamed, byte for byte, and its
//! session in `X-Session-ID` (a recording stub shows what went on the wire); against two
//! `batchlab serve` endpoints, `routing = "session_affinity"` keeps each session on one of them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use batchlab::report::{RequestOutcome, read_records};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, parse_str};
use serde_json::{Value, json};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::Server;

const MODEL: &str = "batchlab-sim";

/// One chat request the stub got: its session header, its messages, the reply it streamed.
#[derive(Clone, Debug)]
struct Seen {
    session: Option<String>,
    messages: Vec<Value>,
    reply: String,
}

/// A chat server on 127.0.0.1 that records every request and streams a reply of `max_tokens`
/// chunks whose text names the request (`r7.0 r7.1 …`), so no two replies are alike.
struct Recording {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Recording {
    fn start(header_name: &'static str) -> Recording {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let app = axum::Router::new()
            .route("/v1/models", get(|| async { axum::Json(json!({"object": "list", "data": [{"id": MODEL}]})) }))
            .route(
                "/v1/chat/completions",
                post(move |headers: HeaderMap, body: axum::Json<Value>| {
                    let log = log.clone();
                    async move { answer(&log, header_name, &headers, &body.0) }
                }),
            );
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Recording { url, seen, _runtime: runtime }
    }
}

fn answer(log: &Mutex<Vec<Seen>>, header_name: &str, headers: &HeaderMap, body: &Value) -> Response {
    let max_tokens = body["max_completion_tokens"].as_u64().expect("the chat API's max_completion_tokens") as usize;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let session = headers.get(header_name).map(|v| v.to_str().unwrap().to_owned());
    let mut log = log.lock().unwrap();
    let n = log.len();
    let words: Vec<String> = (0..max_tokens).map(|k| format!("r{n}.{k} ")).collect();
    log.push(Seen { session, messages, reply: words.concat() });
    let mut events: Vec<Bytes> = words
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let finish = (k + 1 == max_tokens).then_some("length");
            let chunk = json!({"object": "chat.completion.chunk", "model": MODEL,
                "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": finish}]});
            Bytes::from(format!("data: {chunk}\n\n"))
        })
        .collect();
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let body = Body::from_stream(futures_util::stream::iter(events.into_iter().map(Ok::<_, std::io::Error>)));
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

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
    let stub = Recording::start("x-conversation");
    let dir = std::env::temp_dir().join(format!("batchlab-sessions-stub-{}", std::process::id()));
    let records = run(&scenario(&[&stub.url], "session_header = \"X-Conversation\"", 40), &dir);
    assert_eq!(records.len(), 40);
    let failed: Vec<_> = records.iter().filter(|r| r.outcome != RequestOutcome::Completed).collect();
    assert!(failed.is_empty(), "{failed:?}");
    let seen = stub.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 40);
    let mut by_session: BTreeMap<String, Vec<&Seen>> = BTreeMap::new();
    for s in &seen {
        by_session.entry(s.session.clone().expect("every turn names its session")).or_default().push(s);
    }
    assert!(by_session.len() >= 10, "{} sessions", by_session.len());
    let mut chained = 0;
    for (session, turns) in &by_session {
        // The first turn: the system prompt and a user turn.
        let roles = |s: &Seen| s.messages.iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        assert_eq!(roles(turns[0]), ["system", "user"], "session {session}");
        for pair in turns.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            let n = before.messages.len();
            assert_eq!(after.messages.len(), n + 2, "session {session}");
            assert_eq!(after.messages[..n], before.messages[..], "session {session}: the history as sent before");
            assert_eq!(after.messages[n], json!({"role": "assistant", "content": before.reply}), "session {session}");
            assert_eq!(after.messages[n + 1]["role"], "user");
            chained += 1;
        }
    }
    assert!(chained >= 25, "{chained} chained turns");
    // requests.jsonl names the same sessions and turns.
    let sessions: std::collections::BTreeSet<String> = records.iter().map(|r| r.session.unwrap().to_string()).collect();
    assert_eq!(sessions, by_session.keys().cloned().collect());
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
