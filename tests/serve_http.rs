//! `batchlab serve` as a process on an ephemeral loopback port, spoken to over HTTP: streaming,
//! chat, SSE framing, errors, overload, faults, disconnects and SIGTERM. Every wait is bounded
//! and waits for the outcome it checks.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

/// The `data:` payloads of an SSE body, checking the framing on the way.
fn sse_data(body: &str) -> Vec<String> {
    assert!(body.ends_with("\n\n"), "events end with a blank line: {body:?}");
    body.trim_end_matches("\n\n")
        .split("\n\n")
        .map(|event| {
            let data = event.strip_prefix("data: ").unwrap_or_else(|| panic!("a `data: ` line: {event:?}"));
            assert!(!data.contains('\n'), "one line per event: {event:?}");
            data.to_string()
        })
        .collect()
}

/// A slow engine (10 ms a step), for overload, disconnects and shutdown.
const SLOW: &str = r#"
name = "slow"
[engine.sim]
fixed_overhead = "0s"
decode_step = "10ms"
max_num_seqs = 1
"#;

#[tokio::test]
async fn streamed_completions_of_a_prompt_list_have_indices_usage_and_done() {
    let server = Server::start(None, &[]);
    let body = json!({
        "model": MODEL, "prompt": ["The first prompt", "Second"], "max_tokens": 5,
        "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true},
    });
    let resp = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let data = sse_data(&resp.text().await.unwrap());
    assert_eq!(data.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let (usage, tokens) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    // "The first prompt" is 16 bytes, "Second" 6: 4 + 2 tokens by the 4-bytes rule.
    assert_eq!(usage["usage"], json!({"prompt_tokens": 6, "completion_tokens": 10, "total_tokens": 16}));
    for index in [0, 1] {
        let mine: Vec<&Value> = tokens.iter().filter(|c| c["choices"][0]["index"] == index).collect();
        assert_eq!(mine.len(), 5, "choice {index}");
        for (i, c) in mine.iter().enumerate() {
            assert_eq!(c["object"], "text_completion");
            assert_eq!(c["model"], MODEL);
            let finish = &c["choices"][0]["finish_reason"];
            assert_eq!(*finish, if i == 4 { json!("length") } else { Value::Null }, "{c}");
            assert!(c["choices"][0]["text"].as_str().is_some_and(|t| !t.is_empty()));
        }
    }
    // Without include_usage: no usage chunk.
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 2, "stream": true});
    let text = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap().text().await.unwrap();
    let data = sse_data(&text);
    assert_eq!(data.len(), 3, "{data:?}");
    assert!(!data[1].contains("usage") && data[2] == "[DONE]");
    // Token-id prompts count their ids.
    for (prompt, tokens) in [(json!([1, 2, 3, 4, 5]), 5), (json!([[1, 2], [3, 4, 5]]), 5)] {
        let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 1});
        let whole: Value =
            client().post(server.url("/v1/completions")).json(&body).send().await.unwrap().json().await.unwrap();
        assert_eq!(whole["usage"]["prompt_tokens"], tokens, "{whole}");
    }
}

#[tokio::test]
async fn a_chat_completion_streams_and_answers_whole() {
    let server = Server::start(None, &[]);
    let messages = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]);
    let body = json!({"model": MODEL, "messages": messages, "max_tokens": 3, "stream": true,
        "stream_options": {"include_usage": true}});
    let text =
        client().post(server.url("/v1/chat/completions")).json(&body).send().await.unwrap().text().await.unwrap();
    let data = sse_data(&text);
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "length");
    // The tiny model's template: "<s><|system|>\nBe brief.</s>\n<|user|>\nHi there</s>\n<|assistant|>\n",
    // 61 bytes, 16 tokens by the 4-bytes rule (as the workload's chat prompts count).
    assert_eq!(chunks[3]["usage"]["prompt_tokens"], 16);
    let body = json!({"model": MODEL, "messages": messages, "max_completion_tokens": 4});
    let whole: Value =
        client().post(server.url("/v1/chat/completions")).json(&body).send().await.unwrap().json().await.unwrap();
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["role"], "assistant");
    assert_eq!(whole["usage"]["completion_tokens"], 4);
    let models: Value = client().get(server.url("/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
    assert_eq!(client().get(server.url("/health")).send().await.unwrap().status(), 200);
}

/// Requests that can never succeed: each a 4xx naming its field, never a 503 to retry.
#[tokio::test]
async fn impossible_requests_get_a_4xx_that_names_the_field() {
    // The example profile's KV cache: 1024 blocks of 16 tokens, 16,384 tokens.
    let server = Server::start(None, &["--max-waiting", "2", "--max-body-bytes", "200000"]);
    let messages = |content: &str| json!([{"role": "user", "content": content}]);
    let too_long = "x".repeat(4 * 17_000); // 17,000 tokens by the 4-bytes rule
    for (path, body, status, kind, param) in [
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": "x", "max_tokens": "many"}),
            400,
            "BadRequestError",
            "max_tokens",
        ),
        ("/v1/completions", json!({"model": MODEL, "prompt": {"a": 1}}), 400, "BadRequestError", "prompt"),
        // Fits, but not with its output: the output's fault.
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": "x", "max_tokens": 9_000_000, "ignore_eos": true}),
            400,
            "BadRequestError",
            "max_tokens",
        ),
        ("/v1/completions", json!({"model": "gpt-9", "prompt": "x"}), 404, "NotFoundError", "model"),
        // More prompts than may ever wait: no retry can help.
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": ["a", "b", "c"], "max_tokens": 1}),
            400,
            "BadRequestError",
            "prompt",
        ),
        // Longer than the KV cache with a single output token: the prompt's fault.
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": too_long, "max_tokens": 1}),
            400,
            "BadRequestError",
            "prompt",
        ),
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "messages": messages(&too_long), "max_tokens": 1}),
            400,
            "BadRequestError",
            "messages",
        ),
        ("/v1/completions", json!({"model": MODEL, "prompt": "", "max_tokens": 1}), 400, "BadRequestError", "prompt"),
        (
            "/v1/completions",
            json!({"model": MODEL, "prompt": ["a", ""], "max_tokens": 1}),
            400,
            "BadRequestError",
            "prompt",
        ),
        (
            "/v1/chat/completions",
            json!({"model": MODEL, "messages": [{"content": "no role"}]}),
            400,
            "BadRequestError",
            "messages[0].role",
        ),
    ] {
        let resp = client().post(server.url(path)).json(&body).send().await.unwrap();
        let what = format!("{path} {}", &body.to_string()[..body.to_string().len().min(120)]);
        assert_eq!(resp.status(), status, "{what}");
        assert!(resp.headers().get("retry-after").is_none(), "{what}: nothing to retry");
        let e: Value = resp.json().await.unwrap();
        assert_eq!(
            (e["error"]["type"].as_str(), e["error"]["param"].as_str()),
            (Some(kind), Some(param)),
            "{what}: {e}"
        );
        assert_eq!(e["error"]["code"], status, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().len() > 5);
    }
    // The prompts counted: two fit in the queue, and an empty one is refused, not counted as 1.
    let ok = json!({"model": MODEL, "prompt": ["a", "b"], "max_tokens": 1});
    assert_eq!(client().post(server.url("/v1/completions")).json(&ok).send().await.unwrap().status(), 200);
    // A body past --max-body-bytes: 413 as OpenAI's JSON, not axum's plain text.
    let huge = json!({"model": MODEL, "prompt": "y".repeat(300_000)});
    let resp = client().post(server.url("/v1/completions")).json(&huge).send().await.unwrap();
    assert_eq!(resp.status(), 413);
    let e: Value = resp.json().await.expect("a JSON body");
    assert_eq!(e["error"]["type"], "RequestTooLargeError", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("--max-body-bytes"), "{e}");
}

#[tokio::test]
async fn past_max_waiting_requests_get_503_with_retry_after() {
    // One sequence runs at a time, one may wait: a third concurrent request is refused.
    let server = Server::start(Some(SLOW), &["--max-waiting", "1"]);
    let long = json!({"model": MODEL, "prompt": "x", "max_tokens": 300, "ignore_eos": true, "stream": true});
    let first = client().post(server.url("/v1/completions")).json(&long).send().await.unwrap();
    let second = client().post(server.url("/v1/completions")).json(&long).send().await.unwrap();
    assert_eq!((first.status().as_u16(), second.status().as_u16()), (200, 200));
    let third = client().post(server.url("/v1/completions")).json(&long).send().await.unwrap();
    assert_eq!(third.status(), 503);
    assert_eq!(third.headers()["retry-after"], "1");
    let e: Value = third.json().await.unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("max_waiting"), "{e}");
}

#[tokio::test]
async fn the_drop_stream_fault_cuts_the_connection_mid_stream() {
    let scenario = format!("{SLOW}\n[faults]\ndrop_stream = {{ every = 1 }}\n");
    let server = Server::start(Some(&scenario), &[]);
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 6, "ignore_eos": true, "stream": true});
    let resp = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut received = String::new();
    let error = loop {
        match stream.next().await {
            Some(Ok(bytes)) => received.push_str(std::str::from_utf8(&bytes).unwrap()),
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    assert!(error.is_some(), "the body ends in an error, not cleanly: {received:?}");
    // Cut after half the tokens (3); hyper may not flush the last of them before the cut.
    let sent = received.matches("data: ").count();
    assert!((1..=3).contains(&sent), "some tokens, then the cut: {received:?}");
    assert!(!received.contains("[DONE]"));
}

#[tokio::test]
async fn the_429_and_503_faults_refuse_their_share() {
    let scenario = format!("{SLOW}\n[faults]\nhttp_429 = {{ every = 2 }}\nhttp_503 = {{ every = 3 }}\n");
    let server = Server::start(Some(&scenario), &["--max-waiting", "100"]);
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 1});
        let resp = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap();
        if resp.status() != 200 {
            assert_eq!(resp.headers()["retry-after"], "1");
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 429, 503, 429, 200, 429]);
}

#[tokio::test]
async fn a_client_that_disconnects_frees_its_sequence() {
    let server = Server::start(Some(SLOW), &[]);
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 10_000, "ignore_eos": true, "stream": true});
    let resp = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap();
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap(); // it runs
    assert!(running(&server).await == 1);
    drop(stream);
    // Bounded: the sequence is freed at its next token (10 ms); allow 10 s on a loaded machine.
    let mut freed = false;
    for _ in 0..1000 {
        if running(&server).await == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(freed, "the sequence was never freed");
    let metrics = client().get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("finished_reason=\"abort\"} 1"), "{metrics}");
}

async fn running(server: &Server) -> u64 {
    let text = client().get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find(|l| l.starts_with("vllm:num_requests_running{")).expect("the running gauge");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn sigterm_stops_accepting_fails_streams_after_the_grace_period_and_exits_0() {
    let server = Server::start(Some(SLOW), &["--grace", "0.3"]);
    let url = server.url("/v1/completions");
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 10_000, "ignore_eos": true, "stream": true});
    let resp = client().post(&url).json(&body).send().await.unwrap();
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap();
    server.sigterm();
    let mut rest = String::new();
    while let Some(Ok(bytes)) = stream.next().await {
        rest.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    assert!(rest.contains("shutting down") && rest.ends_with("data: [DONE]\n\n"), "{rest:?}");
    let refused = client().post(&url).json(&body).send().await;
    assert!(refused.is_err() || refused.unwrap().status() == 503, "no new requests after SIGTERM");
    let status = server.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test]
async fn sigterm_lets_a_short_stream_finish_in_the_grace_period() {
    let server = Server::start(Some(SLOW), &["--grace", "30"]);
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 20, "ignore_eos": true, "stream": true});
    let resp = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap();
    let mut stream = resp.bytes_stream();
    let mut text = String::from_utf8(stream.next().await.unwrap().unwrap().to_vec()).unwrap();
    server.sigterm();
    while let Some(Ok(bytes)) = stream.next().await {
        text.push_str(std::str::from_utf8(&bytes).unwrap());
    }
    assert_eq!(text.matches("\"finish_reason\":\"length\"").count(), 1, "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert_eq!(server.wait(Duration::from_secs(20)).code(), Some(0));
}

#[tokio::test]
async fn the_exit_server_fault_exits_abruptly() {
    let scenario = format!("{SLOW}\n[faults]\nexit_server = {{ every = 3 }}\n");
    let server = Server::start(Some(&scenario), &[]);
    for _ in 0..2 {
        let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 1});
        assert_eq!(client().post(server.url("/v1/completions")).json(&body).send().await.unwrap().status(), 200);
    }
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 1});
    assert!(client().post(server.url("/v1/completions")).json(&body).send().await.is_err());
    assert_eq!(server.wait(Duration::from_secs(20)).code(), Some(1));
}

#[tokio::test]
async fn the_stall_stream_fault_holds_a_stream_after_its_first_token() {
    let scenario = format!("{SLOW}\n[faults]\nstall_stream = {{ every = 1 }}\nstall_for = \"400ms\"\n");
    let server = Server::start(Some(&scenario), &[]);
    let body = json!({"model": MODEL, "prompt": "x", "max_tokens": 3, "ignore_eos": true, "stream": true});
    let sent = std::time::Instant::now();
    let text = client().post(server.url("/v1/completions")).json(&body).send().await.unwrap().text().await.unwrap();
    // Three 10 ms steps, but the stall holds the stream for 400 ms after its first token: it
    // cannot end sooner (a lower bound, whatever the machine's load).
    assert!(sent.elapsed() >= Duration::from_millis(400), "{:?}", sent.elapsed());
    assert_eq!(text.matches("data: {").count(), 3, "{text:?}");
    assert!(text.ends_with("data: [DONE]\n\n"), "a stalled stream still completes: {text:?}");
}

/// Reads `stream` until the server closes it (EOF or a reset), at most `within`: what it sent,
/// and how long the close took from `since`. Panics if it is still open after `within`.
fn read_until_closed(stream: &mut TcpStream, since: Instant, within: Duration) -> (String, Duration) {
    stream.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("still open after {within:?}; received {:?}", String::from_utf8_lossy(&got))
            }
            Err(_) => break, // reset: closed too
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), since.elapsed())
}

fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(server.url.strip_prefix("http://").unwrap()).unwrap()
}

/// `n` connections, each answered one `/health` (200) and then held open, kept alive.
fn hold_served(server: &Server, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = connect(server);
            s.write_all(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
            let mut head = [0u8; 12];
            s.read_exact(&mut head).unwrap();
            assert_eq!(&head, b"HTTP/1.1 200");
            s
        })
        .collect()
}

/// A partial request head, a partial body, an idle kept-alive connection and a silent one are
/// each closed by the server within their timeout (1 s here; 30 s by default).
#[test]
fn slow_partial_and_idle_connections_are_closed_within_their_timeouts() {
    let server = Server::start(None, &["--header-read-timeout", "1", "--body-read-timeout", "1"]);
    let within = Duration::from_secs(10);
    let cases: [(&str, &[u8]); 3] = [
        ("silent", b""),
        ("partial head", b"POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-type: app"),
        (
            "partial body",
            b"POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\": ",
        ),
    ];
    let threads: Vec<_> = cases
        .into_iter()
        .map(|(what, sent)| {
            let mut stream = connect(&server);
            std::thread::spawn(move || {
                let t0 = Instant::now();
                stream.write_all(sent).unwrap();
                let (got, took) = read_until_closed(&mut stream, t0, within);
                (what, got, took)
            })
        })
        .collect();
    // Idle: one whole request, its answer, then nothing.
    let mut idle = connect(&server);
    idle.write_all(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    idle.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let (_, took) = read_until_closed(&mut idle, Instant::now(), within);
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "idle: closed after {took:?}");
    // A stream being answered is not idle: 150 steps of 10 ms outlast the 1 s timeout, whole.
    let slow = Server::start(Some(SLOW), &["--header-read-timeout", "1"]);
    let mut stream = connect(&slow);
    let body =
        json!({"model": MODEL, "prompt": "x", "max_tokens": 150, "ignore_eos": true, "stream": true}).to_string();
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(format!("{head}{body}").as_bytes()).unwrap();
    let (got, took) = read_until_closed(&mut stream, Instant::now(), Duration::from_secs(30));
    assert!(took > Duration::from_secs(1), "{took:?}");
    assert_eq!(got.matches("\"finish_reason\":\"length\"").count(), 1, "the stream was cut: {got:?}");
    assert!(got.contains("data: [DONE]"), "{got:?}");
    for t in threads {
        let (what, got, took) = t.join().unwrap();
        assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(5), "{what}: closed after {took:?}");
        if what == "partial body" {
            assert!(got.starts_with("HTTP/1.1 408"), "{what}: {got:?}");
            assert!(got.contains("RequestTimeoutError") && got.contains("--body-read-timeout"), "{what}: {got:?}");
        }
    }
}

/// A `GET /health` on a new connection: the status line's code, or None if the server closed it
/// unanswered.
fn health_status(server: &Server) -> Option<(u16, String)> {
    let mut stream = connect(server);
    stream.write_all(b"GET /health HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").ok()?;
    let (got, _) = read_until_closed(&mut stream, Instant::now(), Duration::from_secs(10));
    let code = got.get(9..12)?.parse().ok()?;
    Some((code, got))
}

#[test]
fn past_max_connections_a_new_connection_gets_503_and_is_closed() {
    let server = Server::start(None, &["--max-connections", "3"]);
    let mut held = hold_served(&server, 3);
    let (code, text) = health_status(&server).expect("an answer, not a hang");
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("retry-after: 1") && text.contains("ServiceUnavailableError"), "{text}");
    assert!(text.contains("--max-connections"), "{text}");
    // One held connection goes: a new client is served again (bounded: the server notices the
    // close at once; allow 10 s on a loaded machine).
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match health_status(&server) {
            Some((200, _)) => break,
            other => assert!(Instant::now() < deadline, "not served after a connection closed: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 1,000 connections that never send a byte, against a server whose file-descriptor limit (512)
/// is below them and whose connection cap (400) is below that: the cap answers the excess 503
/// (not a hang in the accept queue), the header-read timeout closes the idle ones, and a new
/// client is served.
#[test]
fn a_thousand_idle_connections_do_not_keep_a_new_client_out() {
    raise_fd_limit();
    let server = Server::start(None, &["--header-read-timeout", "1", "--max-connections", "400"]);
    limit_fds(&server, 512);
    let idle: Vec<TcpStream> = (0..1000).map(|_| connect(&server)).collect();
    let started = Instant::now();
    let mut seen = Vec::new();
    let served = loop {
        let answer = health_status(&server);
        seen.push(answer.as_ref().map(|(c, _)| *c));
        if matches!(answer, Some((200, _))) {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "never served: {seen:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("a new client served {served:?} after 1,000 idle connections; answers before: {seen:?}");
    drop(idle);
}

/// This process holds 1,000 sockets: its soft descriptor limit raised to the hard one.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut mine = getrlimit(Resource::Nofile);
    mine.current = mine.maximum;
    setrlimit(Resource::Nofile, mine).unwrap();
    assert!(getrlimit(Resource::Nofile).current.is_none_or(|n| n >= 1100), "the test needs 1,100 descriptors");
}

/// The running server's descriptor limit set to `n` (after its start, which raised it).
fn limit_fds(server: &Server, n: u64) {
    use rustix::process::{Pid, Resource, Rlimit, prlimit};
    let pid = Pid::from_raw(server.pid() as i32).unwrap();
    prlimit(Some(pid), Resource::Nofile, Rlimit { current: Some(n), maximum: Some(n) }).unwrap();
}

/// A cap above what the descriptors allow: `accept` fails (`EMFILE`) while 300 silent
/// connections hold them; the server backs off, goes on accepting as the header-read timeout
/// frees descriptors, and serves a new client, and is still alive.
#[test]
fn when_accept_fails_for_want_of_descriptors_the_server_backs_off_and_serves_again() {
    raise_fd_limit();
    let mut server = Server::start(None, &["--header-read-timeout", "1", "--max-connections", "1000"]);
    limit_fds(&server, 128);
    let silent: Vec<TcpStream> = (0..300).map(|_| connect(&server)).collect();
    let started = Instant::now();
    let served = loop {
        if let Some((200, _)) = health_status(&server) {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never served after accept failed");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(server.is_running(), "the server died");
    let stderr = server.stderr_so_far();
    assert!(stderr.contains("accept failed"), "the failure is said: {stderr}");
    eprintln!("served {served:?} after 300 silent connections against 128 descriptors");
    drop(silent);
}

/// Started under a descriptor limit of 200 that it cannot raise, the server lowers its cap to
/// what the limit leaves (200 - 64) and says so: a client past it gets the 503, not a failed
/// `accept`.
#[test]
fn the_connection_cap_is_lowered_to_what_the_descriptor_limit_allows() {
    let mut server = Server::start_with_fd_limit(200, &["--max-connections", "4096"]);
    let held = hold_served(&server, 136);
    let (code, text) = health_status(&server).expect("an answer, not a hang");
    assert_eq!(code, 503, "{text}");
    let stderr = server.stderr_so_far();
    assert!(stderr.contains("--max-connections 4096 lowered to 136"), "{stderr}");
    drop(held);
}
