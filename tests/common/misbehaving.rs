//! A misbehaving OpenAI-compatible server for the HTTP engine's tests: on 127.0.0.1 only, in the
//! test's process, serving at most [`MAX_REQUESTS`] completion requests (later ones get a 503)
//! and never holding one longer than [`HOLD_CAP`], so no test can hang on it.
//!
//! Its modes are the peers issue 32 met: one that hangs, one that sends only SSE comments, one
//! that floods, one that sends more tokens than asked, and one that ignores `stream: true`.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The model it lists.
pub const MODEL: &str = "batchlab-sim";
/// Most completion requests it serves.
pub const MAX_REQUESTS: usize = 1_000;
/// Longest it holds a request (a hang, a comment stream) before giving up on it.
pub const HOLD_CAP: Duration = Duration::from_secs(30);
/// The flood: chunks per prompt, and bytes of text in each.
pub const FLOOD_CHUNKS: usize = 150;
pub const FLOOD_CHUNK_BYTES: usize = 1 << 20;
/// The tokens `overcount` sends for a prompt at an odd index, whatever was asked.
pub const OVERCOUNT_TOKENS: usize = 401;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Accepts the request and never answers (no response head).
    Hang,
    /// Sends the head, then only `: keep-alive` comments, every 50 ms.
    CommentsOnly,
    /// Each prompt gets [`FLOOD_CHUNKS`] chunks of [`FLOOD_CHUNK_BYTES`] bytes of text.
    Flood,
    /// Prompts at odd indices get [`OVERCOUNT_TOKENS`] tokens, the others exactly `max_tokens`,
    /// each token its own chunk with its own text (`"<index>.<k> "`).
    Overcount,
    /// A 200 with the whole answer as JSON (`content-type: application/json`), as a proxy that
    /// ignores `stream: true` sends it.
    Json200,
    /// The same JSON body, labelled `text/plain`.
    Json200Untyped,
    /// A busy but healthy server: its first request streams a token every [`QUEUED_STEP`]
    /// (`max_tokens` of them), while every later one waits in its queue for [`QUEUED_WAIT`]
    /// before its head, then streams at once.
    Queued,
}

/// `Queued`'s gap between the first request's tokens, and the later requests' wait.
pub const QUEUED_STEP: Duration = Duration::from_millis(100);
pub const QUEUED_WAIT: Duration = Duration::from_millis(1500);

/// A running stub; stops when dropped.
pub struct Misbehaving {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    requests: Arc<AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

impl Misbehaving {
    pub fn start(mode: Mode) -> Misbehaving {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        let app = axum::Router::new()
            .route("/v1/models", get(|| async { axum::Json(json!({"object": "list", "data": [{"id": MODEL}]})) }))
            .route(
                "/v1/completions",
                post(move |body: axum::Json<Value>| {
                    let n = counted.fetch_add(1, Ordering::Relaxed);
                    async move {
                        if n >= MAX_REQUESTS {
                            return (StatusCode::SERVICE_UNAVAILABLE, "the stub's request budget is spent")
                                .into_response();
                        }
                        answer(mode, &body.0, n).await
                    }
                }),
            );
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Misbehaving { url, requests, _runtime: runtime }
    }

    /// Completion requests it got so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }
}

/// The number of prompts and the `max_tokens` of a completions body.
fn shape(body: &Value) -> (usize, usize) {
    let prompts = match &body["prompt"] {
        Value::Array(items) if items.iter().all(|p| p.is_array() || p.is_string()) && !items.is_empty() => items.len(),
        _ => 1,
    };
    (prompts, body["max_tokens"].as_u64().unwrap_or(16) as usize)
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn chunk(index: usize, text: &str, finish: Option<&str>) -> Bytes {
    event(&json!({"object": "text_completion", "model": MODEL,
        "choices": [{"index": index, "text": text, "finish_reason": finish}]}))
}

fn stream(events: impl futures_util::Stream<Item = Bytes> + Send + 'static) -> Response {
    use futures_util::StreamExt;
    let body = Body::from_stream(events.map(Ok::<_, std::io::Error>));
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn answer(mode: Mode, body: &Value, n: usize) -> Response {
    use futures_util::stream;
    let (prompts, max_tokens) = shape(body);
    match mode {
        Mode::Hang => {
            tokio::time::sleep(HOLD_CAP).await;
            (StatusCode::INTERNAL_SERVER_ERROR, "gave up hanging").into_response()
        }
        Mode::CommentsOnly => {
            let ticks = (HOLD_CAP.as_millis() / 50) as usize;
            stream(stream::unfold(0, move |k| async move {
                if k >= ticks {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                Some((Bytes::from_static(b": keep-alive\n\n"), k + 1))
            }))
        }
        Mode::Flood => {
            let chunks: Vec<Bytes> = (0..prompts).map(|i| chunk(i, &"x".repeat(FLOOD_CHUNK_BYTES), None)).collect();
            let total = prompts * FLOOD_CHUNKS;
            stream(stream::iter((0..total).map(move |k| chunks[k % prompts].clone())))
        }
        Mode::Overcount => {
            let mut events = Vec::new();
            for i in 0..prompts {
                let tokens = if i % 2 == 1 { OVERCOUNT_TOKENS } else { max_tokens };
                for k in 0..tokens {
                    let finish = (k + 1 == tokens).then_some("length");
                    events.push(chunk(i, &format!("{i}.{k} "), finish));
                }
            }
            events.push(Bytes::from_static(b"data: [DONE]\n\n"));
            stream(stream::iter(events))
        }
        Mode::Queued => {
            let step = if n == 0 { QUEUED_STEP } else { Duration::ZERO };
            if n > 0 {
                tokio::time::sleep(QUEUED_WAIT).await;
            }
            let events: Vec<Bytes> = (0..prompts)
                .flat_map(|i| {
                    (0..max_tokens)
                        .map(move |k| chunk(i, &format!("{i}.{k} "), (k + 1 == max_tokens).then_some("length")))
                })
                .chain(std::iter::once(Bytes::from_static(b"data: [DONE]\n\n")))
                .collect();
            stream(stream::unfold(events.into_iter(), move |mut rest| async move {
                let next = rest.next()?;
                tokio::time::sleep(step).await;
                Some((next, rest))
            }))
        }
        Mode::Json200 | Mode::Json200Untyped => {
            let choices: Vec<Value> = (0..prompts)
                .map(|i| json!({"index": i, "text": format!("answer {i}"), "finish_reason": "length"}))
                .collect();
            let answer = json!({"object": "text_completion", "model": MODEL, "choices": choices,
                "usage": {"prompt_tokens": 3, "completion_tokens": max_tokens * prompts}});
            let kind = if mode == Mode::Json200 { "application/json" } else { "text/plain" };
            ([(header::CONTENT_TYPE, kind)], answer.to_string()).into_response()
        }
    }
}
