//! `batchlab serve --timing-log`: the server's own send time of every token, per request and
//! choice, checked against a client on the same machine and clock (`CLOCK_MONOTONIC`): the
//! server hands a token to the socket before the client can read it, and the request arrives
//! after the client started sending it. Every wait is bounded.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use batchlab::time::{MonotonicClock, Timestamp};
use futures_util::StreamExt;
use serde_json::{Value, json};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

/// 5 ms a step, no other cost: a few tokens take tens of milliseconds.
const STEPS: &str = r#"
name = "steps"
[engine.sim]
fixed_overhead = "0s"
decode_step = "5ms"
max_num_seqs = 8
"#;

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

/// A streamed request as the client saw it: when it started sending, and when each choice's
/// token chunks arrived (on the server's clock).
struct Seen {
    sent: Timestamp,
    arrivals: HashMap<u64, Vec<Timestamp>>,
}

/// Sends a streamed completion and reads it to the end, timing each chunk as it is parsed.
async fn stream(server: &Server, body: Value, request_id: Option<&str>) -> Seen {
    let mut request = client().post(server.url("/v1/completions")).json(&body);
    if let Some(id) = request_id {
        request = request.header("X-Request-Id", id);
    }
    let sent = MonotonicClock::read();
    let resp = request.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut buffer = String::new();
    let mut arrivals: HashMap<u64, Vec<Timestamp>> = HashMap::new();
    while let Some(bytes) = body.next().await {
        let now = MonotonicClock::read();
        buffer.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data = event.trim_end().strip_prefix("data: ").unwrap().to_string();
            if data == "[DONE]" {
                continue;
            }
            let chunk: Value = serde_json::from_str(&data).unwrap();
            if let Some(choice) = chunk["choices"].get(0) {
                arrivals.entry(choice["index"].as_u64().unwrap()).or_default().push(now);
            }
        }
    }
    Seen { sent, arrivals }
}

fn read_log(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn ns(v: &Value) -> Timestamp {
    Timestamp::from_nanos(v.as_u64().unwrap_or_else(|| panic!("ns, found {v}")))
}

#[tokio::test]
async fn the_timing_log_has_every_streamed_choice_s_send_times_under_the_client_s_request_id() {
    let dir = std::env::temp_dir().join(format!("batchlab-serve-timing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("timing.jsonl");
    let server = Server::start(Some(STEPS), &["--timing-log", log.to_str().unwrap(), "--grace", "1"]);

    // Two prompts in one request, with the client's id; then one without an id (request 2).
    let batched =
        json!({"model": MODEL, "prompt": ["one", "two"], "max_tokens": 6, "ignore_eos": true, "stream": true});
    let a = stream(&server, batched, Some("client-7")).await;
    let single = json!({"model": MODEL, "prompt": "three", "max_tokens": 3, "ignore_eos": true, "stream": true});
    let b = stream(&server, single, None).await;
    // Not logged: a whole (non-streamed) response, and a stream the client leaves early.
    let whole = json!({"model": MODEL, "prompt": "x", "max_tokens": 2});
    assert_eq!(client().post(server.url("/v1/completions")).json(&whole).send().await.unwrap().status(), 200);
    let long = json!({"model": MODEL, "prompt": "x", "max_tokens": 10_000, "ignore_eos": true, "stream": true});
    let resp =
        client().post(server.url("/v1/completions")).header("x-request-id", "gone").json(&long).send().await.unwrap();
    let mut left = resp.bytes_stream();
    left.next().await.unwrap().unwrap();
    drop(left);

    // The file is complete once the server has exited.
    server.sigterm();
    assert_eq!(server.wait(Duration::from_secs(30)).code(), Some(0));
    let lines = read_log(&log);
    let keys: Vec<(String, u64)> =
        lines.iter().map(|l| (l["request_id"].as_str().unwrap().to_string(), l["choice"].as_u64().unwrap())).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    let expected = [("client-7", 0), ("client-7", 1), ("cmpl-2", 0)].map(|(id, choice)| (id.to_string(), choice));
    assert_eq!(sorted, expected, "{lines:?}");

    for line in &lines {
        let (seen, tokens) = match line["request_id"].as_str().unwrap() {
            "client-7" => (&a, 6),
            _ => (&b, 3),
        };
        let choice = line["choice"].as_u64().unwrap();
        let received = ns(&line["received_ns"]);
        let sent: Vec<Timestamp> = line["token_ns"].as_array().unwrap().iter().map(ns).collect();
        let arrived = &seen.arrivals[&choice];
        assert_eq!(sent.len(), tokens, "{line}");
        assert_eq!(arrived.len(), tokens, "{line}");
        // Causality on one clock: the client sends, the server receives, sends each token, and
        // only then can the client read it.
        assert!(seen.sent <= received, "received before it was sent: {line}");
        assert!(received <= sent[0], "{line}");
        assert!(sent.windows(2).all(|w| w[0] < w[1]), "one token per 5 ms step, in order: {line}");
        for (k, (s, r)) in sent.iter().zip(arrived).enumerate() {
            assert!(s <= r, "token {k} arrived ({r:?}) before the server sent it ({s:?}): {line}");
        }
    }
    // The two choices of one request ran in the same steps.
    let a_lines: Vec<&Value> = lines.iter().filter(|l| l["request_id"] == "client-7").collect();
    assert_eq!(a_lines[0]["received_ns"], a_lines[1]["received_ns"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_timing_log_that_cannot_be_created_is_bad_input() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["serve", "--port", "0", "--timing-log", "/nonexistent-dir/timing.jsonl"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        let _ = tx.send(text);
    });
    // Bounded: the error comes before anything listens.
    let stderr = rx.recv_timeout(Duration::from_secs(30));
    let _ = child.kill();
    let status = child.wait().unwrap();
    let stderr = stderr.expect("batchlab serve exits at once");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent-dir/timing.jsonl"), "{stderr}");
}
