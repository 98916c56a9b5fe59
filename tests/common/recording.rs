//! A chat server on 127.0.0.1, in the test's process, that records every request it gets (its
//! session header and its messages) and the reply it gave, for the session tests: it either
//! streams a reply of its own whose text names the request (`r7.0 r7.1 …`, so no two replies are
//! alike), or forwards the request to a real server (`vllm serve`) and returns that server's
//! stream as it was, the reply read from it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};

/// One chat request it got: its session header, its messages, the reply's text.
#[derive(Clone, Debug)]
pub struct Seen {
    pub session: Option<String>,
    pub messages: Vec<Value>,
    pub reply: String,
}

/// A running recorder; stops when dropped.
pub struct Recording {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Recording {
    /// A recorder that serves `model`, reads the session from `header_name` and answers itself
    /// (`upstream = None`) or through `upstream`'s `/v1/chat/completions`.
    pub fn start(model: &'static str, header_name: &'static str, upstream: Option<String>) -> Recording {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let client = reqwest::Client::new();
        let app = axum::Router::new()
            .route(
                "/v1/models",
                get(move || async move { axum::Json(json!({"object": "list", "data": [{"id": model}]})) }),
            )
            .route(
                "/v1/chat/completions",
                post(move |headers: HeaderMap, body: axum::Json<Value>| {
                    let (log, client, upstream) = (log.clone(), client.clone(), upstream.clone());
                    async move {
                        let session = headers.get(header_name).map(|v| v.to_str().unwrap().to_owned());
                        let messages = body.0["messages"].as_array().cloned().unwrap_or_default();
                        let (reply, events) = match upstream {
                            Some(url) => forward(&client, &url, &body.0).await,
                            None => {
                                let n = log.lock().unwrap().len();
                                own_reply(model, n, &body.0)
                            }
                        };
                        log.lock().unwrap().push(Seen { session, messages, reply });
                        ([(header::CONTENT_TYPE, "text/event-stream")], Body::from(events)).into_response()
                    }
                }),
            );
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Recording { url, seen, _runtime: runtime }
    }

    /// What it got so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Its own reply to request `n`: `max_completion_tokens` chunks of text naming it.
fn own_reply(model: &str, n: usize, body: &Value) -> (String, Bytes) {
    let max_tokens = body["max_completion_tokens"].as_u64().expect("the chat API's max_completion_tokens") as usize;
    let words: Vec<String> = (0..max_tokens).map(|k| format!("r{n}.{k} ")).collect();
    let mut events = String::new();
    for (k, w) in words.iter().enumerate() {
        let finish = (k + 1 == max_tokens).then_some("length");
        let chunk = json!({"object": "chat.completion.chunk", "model": model,
            "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": finish}]});
        events.push_str(&format!("data: {chunk}\n\n"));
    }
    events.push_str("data: [DONE]\n\n");
    (words.concat(), Bytes::from(events))
}

/// The request sent on to `upstream`; its whole event stream, and the reply's text read from it.
async fn forward(client: &reqwest::Client, upstream: &str, body: &Value) -> (String, Bytes) {
    let response = client.post(format!("{upstream}/v1/chat/completions")).json(body).send().await.unwrap();
    assert!(response.status().is_success(), "{upstream}: {}", response.status());
    let events = response.bytes().await.unwrap();
    let text = String::from_utf8_lossy(&events);
    let reply = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    (reply, events)
}

/// Checks that every session's turns chain: each turn's messages are the previous turn's, then
/// the reply that turn got (byte for byte), then a new user turn; the first is a system prompt
/// and a user turn. Returns the sessions and the chained turns.
pub fn check_chains(seen: &[Seen]) -> (usize, usize) {
    let mut by_session: std::collections::BTreeMap<String, Vec<&Seen>> = Default::default();
    for s in seen {
        by_session.entry(s.session.clone().expect("every turn names its session")).or_default().push(s);
    }
    let mut chained = 0;
    for (session, turns) in &by_session {
        let roles: Vec<&str> = turns[0].messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user"], "session {session}");
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
    (by_session.len(), chained)
}
