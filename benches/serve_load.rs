//! `batchlab serve`'s ceiling (scripts/bench.sh section 8): a closed-loop load of streamed
//! completions against a running server, from a Rust client that costs little next to it.
//!
//! ```sh
//! cargo bench --bench serve_load -- --url http://127.0.0.1:PORT --concurrency 64 --seconds 10 [--warmup 1] [--pid PID]
//! ```
//!
//! Each of `--concurrency` tasks sends a streamed completion (`max_tokens` 16, `ignore_eos`),
//! reads it to `[DONE]`, and sends the next; `--warmup` seconds (default 1) go unmeasured. Prints one `SERVE_LOAD` line: completions a second,
//! tokens a second, failures, and, with `--pid`, the server's resident memory (VmRSS) at the
//! start and end of the measurement and its peak (VmHWM).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

struct Args {
    url: String,
    concurrency: usize,
    seconds: f64,
    tokens: u32,
    pid: Option<u32>,
    warmup: f64,
}

fn parse() -> Args {
    let mut args = Args { url: String::new(), concurrency: 64, seconds: 10.0, tokens: 16, pid: None, warmup: 1.0 };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--url" => args.url = value(),
            "--concurrency" => args.concurrency = value().parse().expect("--concurrency N"),
            "--seconds" => args.seconds = value().parse().expect("--seconds S"),
            "--tokens" => args.tokens = value().parse().expect("--tokens N"),
            "--pid" => args.pid = Some(value().parse().expect("--pid PID")),
            "--warmup" => args.warmup = value().parse().expect("--warmup S"),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    args
}

/// (VmRSS, VmHWM) of `pid` in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let args = parse();
    if args.url.is_empty() {
        // `cargo test --all-targets` runs every bench once with no arguments: nothing to measure.
        println!("serve_load: no --url given, nothing measured (scripts/bench_serve.sh runs it against a server)");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let client = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build().unwrap();
    let url = format!("{}/v1/completions", args.url);
    let body = serde_json::json!({
        "model": "batchlab-sim", "prompt": "sixteen tokens of prompt text, give or take a few.....",
        "max_tokens": args.tokens, "ignore_eos": true, "stream": true,
    })
    .to_string();
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        let (measuring, stop, done, failed) = (measuring.clone(), stop.clone(), done.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let ok = stream_one(&client, &url, &body).await;
                if measuring.load(Ordering::Relaxed) {
                    if ok { &done } else { &failed }.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Warmup: connections open, the server's buffers and allocator at their working size.
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let before = args.pid.map(memory);
    measuring.store(true, Ordering::SeqCst);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    measuring.store(false, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    let after = args.pid.map(memory);
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    let n = done.load(Ordering::SeqCst);
    let mem = match (before, after) {
        (Some((rss0, _)), Some((rss1, hwm))) => format!(" rss_start_kib={rss0} rss_end_kib={rss1} peak_kib={hwm}"),
        _ => String::new(),
    };
    println!(
        "SERVE_LOAD concurrency={} completions_per_s={:.0} tokens_per_s={:.0} failed={}{mem}",
        args.concurrency,
        n as f64 / elapsed,
        (n * u64::from(args.tokens)) as f64 / elapsed,
        failed.load(Ordering::SeqCst)
    );
}

/// One streamed completion, read to `[DONE]`.
async fn stream_one(client: &reqwest::Client, url: &str, body: &str) -> bool {
    let Ok(resp) = client.post(url).header("content-type", "application/json").body(body.to_string()).send().await
    else {
        return false;
    };
    if !resp.status().is_success() {
        return false;
    }
    let mut stream = resp.bytes_stream();
    let mut tail = Vec::new();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { return false };
        tail.extend_from_slice(&chunk);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
    }
    tail.ends_with(b"data: [DONE]\n\n")
}
