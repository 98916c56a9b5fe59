//! The HTTP engine (`engine.kind = "openai"`) against `batchlab serve` as a process on an
//! ephemeral loopback port, and against a tiny stub where serve cannot misbehave the way a test
//! needs (a 500). Directly (one batch of several prompts in one request, concurrent generates),
//! and through `batchlab run` end to end: batched, one prompt per request, two endpoints of which
//! one dies, and each network fault giving per-request errors of its kind, never a hang, and
//! `lost == 0`. The API key never shows in anything batchlab writes. Every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use batchlab::engine::openai::{Api, OpenAiConfig, OpenAiEngine};
use batchlab::engine::{Engine, EngineError, EngineOutput, EngineRequest, TokenCountSource};
use serde_json::Value;

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

#[path = "common/cli.rs"]
mod cli_common;
use cli_common::{temp_dir, text};

/// Serve's engine for these tests: 2 ms a step, so a 16-token stream takes ~30 ms.
const STEADY: &str = r#"
name = "steady"
[engine.sim]
fixed_overhead = "0s"
decode_step = "2ms"
"#;

fn engine(urls: &[&str]) -> OpenAiEngine {
    let mut config = OpenAiConfig::new(urls[0], MODEL);
    config.urls = urls.iter().map(|u| u.to_string()).collect();
    config.timeout = Some(Duration::from_secs(30));
    OpenAiEngine::new(config)
}

fn token_batch(prompts: &[usize], max_tokens: u32) -> Vec<EngineRequest> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, &len)| EngineRequest::tokens((1..=len as u32).collect(), max_tokens).with_id(i as u64 + 100))
        .collect()
}

/// The checks every output of a completed prompt passes: its own id, its counts, its times in
/// order, all after the request was sent.
fn check_output(output: &EngineOutput, request: &EngineRequest, max_tokens: u32, url: &str) {
    let s = &output.stats;
    assert_eq!(output.request_id, Some(request.id));
    assert_eq!(output.output_tokens, Some(max_tokens), "{output:?}");
    assert_eq!(output.prompt_tokens, request.prompt.token_len().map(|n| n as u32));
    let ts = s.token_ts.as_deref().expect("per-token times");
    assert_eq!(ts.len(), max_tokens as usize, "one time per token");
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "times in order: {ts:?}");
    let sent = s.sent_ts.expect("sent_ts");
    assert!(sent <= ts[0], "sent {sent} before the first token {}", ts[0]);
    assert_eq!((s.first_token_ts, s.last_token_ts), (ts.first().copied(), ts.last().copied()));
    assert_eq!(s.queued_ts, Some(sent));
    assert_eq!(s.endpoint.as_deref(), Some(url));
    assert!(output.text.as_deref().is_some_and(|t| !t.is_empty()));
}

#[test]
fn a_batch_of_prompts_is_one_request_and_each_prompt_is_timed_by_its_own_chunks() {
    let server = Server::start(Some(STEADY), &[]);
    let mut e = engine(&[&server.url]);
    let started = e.start().unwrap();
    let (info, concurrent) = (started.info, started.concurrent.expect("a concurrent face"));
    let counters = concurrent.counters.expect("the servers' counters");
    assert_eq!(info.name, "openai");
    assert_eq!(info.processes, Some(vec![]), "it runs no processes of its own");

    let batch = token_batch(&[8, 16, 4, 12], 6);
    let outputs = e.generate(&batch).unwrap();
    assert_eq!(outputs.len(), 4);
    for (output, request) in outputs.iter().zip(&batch) {
        check_output(output, request, 6, &server.url);
        // Several prompts: the final usage is the request's, not a prompt's; serve sends one
        // token per chunk and no continuous usage, so counts come from chunks.
        assert_eq!(output.stats.token_count_source, Some(TokenCountSource::Chunks));
    }
    // One request: every prompt was sent at the same moment.
    let sent: Vec<f64> = outputs.iter().map(|o| o.stats.sent_ts.unwrap()).collect();
    assert!(sent.iter().all(|&t| t == sent[0]), "{sent:?}");

    // One prompt: the final usage is that prompt's own.
    let before = counters();
    let one = token_batch(&[10], 3);
    let outputs = e.generate(&one).unwrap();
    check_output(&outputs[0], &one[0], 3, &server.url);
    assert_eq!(outputs[0].stats.token_count_source, Some(TokenCountSource::Usage));

    // The server's /metrics, by batchlab's names: the request above is in the difference.
    let after = counters();
    assert_eq!((before.len(), after.len()), (1, 1));
    assert_eq!(after[0].endpoint, server.url);
    let delta = |name: &str| after[0].counters[name] - before[0].counters[name];
    assert_eq!((delta("prompt_tokens"), delta("generation_tokens")), (10.0, 3.0), "{after:?}");
    assert!(after[0].counters.contains_key("prefix_cache_queries") && after[0].counters.contains_key("preemptions"));
    e.shutdown().unwrap();
}

#[test]
fn concurrent_generates_are_on_the_wire_at_once() {
    let server = Server::start(Some(STEADY), &[]);
    let mut e = engine(&[&server.url]);
    let face = e.start().unwrap().concurrent.expect("a concurrent face once started").face;
    let (tx, rx) = std::sync::mpsc::channel();
    for k in 0..4 {
        let tx = tx.clone();
        let batch = token_batch(&[8, 8], 16).into_iter().map(|r| r.with_id_offset(k * 10)).collect();
        face.generate(batch, Box::new(move |r| tx.send(r).unwrap()));
    }
    let results: Vec<Vec<EngineOutput>> =
        (0..4).map(|_| rx.recv_timeout(Duration::from_secs(30)).expect("every done is called").unwrap()).collect();
    // Each of 16 tokens takes a 2 ms step: had they run one after another, the last batch would
    // have been sent after the first one's last token.
    let sent = results.iter().flatten().map(|o| o.stats.sent_ts.unwrap()).fold(f64::MIN, f64::max);
    let first_done = results.iter().flatten().map(|o| o.stats.last_token_ts.unwrap()).fold(f64::MAX, f64::min);
    assert!(sent < first_done, "all four were sent ({sent}) before any finished ({first_done})");
    for outputs in &results {
        assert_eq!(outputs.len(), 2);
        assert!(outputs.iter().all(|o| o.output_tokens == Some(16)));
    }
    e.shutdown().unwrap();
    // After the shutdown a batch still gets its answer, an error.
    let (tx, rx) = std::sync::mpsc::channel();
    face.generate(token_batch(&[1], 1), Box::new(move |r| tx.send(r).unwrap()));
    assert!(rx.recv_timeout(Duration::from_secs(10)).expect("answered").is_err());
}

/// `with_id` for a request that already has one: a distinct id per batch.
trait WithIdOffset {
    fn with_id_offset(self, offset: u64) -> Self;
}

impl WithIdOffset for EngineRequest {
    fn with_id_offset(mut self, offset: u64) -> Self {
        self.id += offset;
        self
    }
}

#[test]
fn start_fails_clearly_when_no_endpoint_answers_or_the_model_is_not_served() {
    let server = Server::start(None, &[]);
    let mut wrong_model = OpenAiEngine::new(OpenAiConfig::new(&server.url, "another-model"));
    let e = wrong_model.start().unwrap_err().to_string();
    assert!(e.contains("another-model") && e.contains(MODEL), "{e}");

    let dead = dead_url();
    let mut nobody = engine(&[&dead]);
    let e = nobody.start().unwrap_err().to_string();
    assert!(e.contains("no endpoint") && e.contains(&dead), "{e}");

    // One of two down at start: it starts, and the dead one's requests go to the other.
    let mut half = engine(&[&dead, &server.url]);
    half.start().unwrap();
    for _ in 0..3 {
        let outputs = half.generate(&token_batch(&[4], 2)).unwrap();
        assert_eq!(outputs[0].stats.endpoint.as_deref(), Some(server.url.as_str()));
    }

    let mut config = OpenAiConfig::new(&server.url, MODEL);
    config.api = Api::Chat;
    let mut chat = OpenAiEngine::new(config);
    chat.start().unwrap();
    let e = chat.generate(&token_batch(&[4], 2)).unwrap_err();
    assert!(matches!(&e, EngineError::Generate(m) if m.contains("token ids")), "{e}");
}

/// A loopback URL nobody listens on (a port that was just free).
fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("http://127.0.0.1:{port}")
}

/// `batchlab run` on `scenario` (written to a file in `dir`), its output in `dir/out`, with the
/// extra environment `env`; bounded by a watchdog that kills it after `limit`.
fn run(dir: &Path, scenario: &str, env: &[(&str, &str)], limit: Duration) -> (Output, PathBuf) {
    let path = dir.join("scenario.toml");
    std::fs::write(&path, scenario).unwrap();
    run_file(dir, &path, &[], env, limit)
}

/// `batchlab run PATH ARGS`, as [`run`] does.
fn run_file(dir: &Path, path: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> (Output, PathBuf) {
    let out = dir.join("out");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchlab"));
    cmd.args(["run", path.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl", "--quiet"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("BATCHLAB_LOG", "debug")
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            panic!("`batchlab run` did not finish within {limit:?}: a hang");
        }
    };
    (output, out)
}

fn report(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).expect("report.json")).unwrap()
}

/// Each benchmark's counts: submitted, completed, errors by kind; `lost` is 0 in every one.
fn counts(report: &Value) -> (u64, u64, std::collections::BTreeMap<String, u64>) {
    let mut totals = (0, 0, std::collections::BTreeMap::new());
    for b in report["benchmarks"].as_array().expect("benchmarks") {
        let c = &b["counts"];
        assert_eq!(c["lost"], 0, "lost requests: {c}");
        totals.0 += c["submitted"].as_u64().unwrap();
        totals.1 += c["completed"].as_u64().unwrap();
        for (kind, n) in c["errors_by_kind"].as_object().unwrap() {
            *totals.2.entry(kind.clone()).or_insert(0) += n.as_u64().unwrap();
        }
    }
    totals
}

fn scenario(urls: &[&str], batch_size: usize, requests: u64, extra: &str) -> String {
    let urls: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        r#"name = "http-test"
[engine]
kind = "openai"
[engine.openai]
urls = [{}]
model = "{MODEL}"
{extra}
[batching]
batch_size = {batch_size}
batch_timeout = "5ms"
[workload]
prompt_tokens = 16
output_tokens = 8
[profile]
kind = "concurrent"
levels = [{}]
[stop]
max_requests = {requests}
"#,
        urls.join(", "),
        batch_size * 2,
    )
}

#[test]
fn batchlab_run_end_to_end_batched_and_one_per_request() {
    let log_dir = temp_dir("run-timing");
    let log = log_dir.join("timing.jsonl");
    let server = Server::start(Some(STEADY), &["--timing-log", log.to_str().unwrap(), "--grace", "1"]);
    for batch_size in [8, 1] {
        let dir = temp_dir(&format!("run-{batch_size}"));
        let mut toml = scenario(&[&server.url], batch_size, 48, "");
        if batch_size == 1 {
            // One prompt per request, 8 requests on the wire at once: the other tools' client.
            toml = toml
                .replace("[batching]\n", "[batching]\nmax_in_flight = 8\n")
                .replace("levels = [2]", "levels = [16]");
        }
        let (output, out) = run(&dir, &toml, &[], Duration::from_secs(120));
        assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
        let report = report(&out);
        let (submitted, completed, errors) = counts(&report);
        assert_eq!((submitted, completed), (48, 48), "every request ok: {errors:?}");
        assert!(errors.is_empty(), "{errors:?}");
        let b = &report["benchmarks"][0];
        assert_eq!(b["tokens"]["output"], 48 * 8, "{}", b["tokens"]);
        assert_eq!(b["distributions"]["ttft"]["count"], 48, "TTFT of every request");
        if b["distributions"]["itl"]["count"] != 48 * 7 {
            let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
            panic!(
                "batch {batch_size} every gap: {}\nanomalies {}\n{records}",
                b["distributions"]["itl"], b["anomalies"]
            );
        }
        for (anomaly, n) in b["anomalies"].as_object().unwrap() {
            assert!(n == 0 || n == false, "the mapper flagged {anomaly}: {}", b["anomalies"]);
        }
        let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
        assert_eq!(records.lines().count(), 48);
        // How many requests were on the wire at once, at most: from their sends to their ends.
        let mut edges: Vec<(u64, i32)> = Vec::new();
        for line in records.lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            edges.push((r["sent_ns"].as_u64().unwrap(), 1));
            edges.push((r["finished_ns"].as_u64().unwrap(), -1));
        }
        edges.sort();
        let most = edges
            .iter()
            .scan(0, |open, (_, d)| {
                *open += d;
                Some(*open)
            })
            .max()
            .unwrap();
        if batch_size == 1 {
            assert!((2..=8).contains(&most), "up to max_in_flight = 8 requests at once, several: {most}");
        } else {
            assert_eq!(most, 8, "one request of 8 prompts at a time (max_in_flight = 1)");
        }
        for line in records.lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            // The client's own times: when the request was written, when each token's chunk came.
            let sent = r["sent_ns"].as_u64().expect("sent_ns");
            let tokens: Vec<u64> =
                r["token_ns"].as_array().expect("token_ns").iter().map(|t| t.as_u64().unwrap()).collect();
            assert_eq!(tokens.len(), 8, "{line}");
            assert!(sent < tokens[0] && tokens.windows(2).all(|w| w[0] <= w[1]), "{line}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // Every request named itself to the server: `X-Request-Id: batchlab-<start>-<ids of its
    // prompts>`, one start per run, the prompts in choice order.
    server.sigterm();
    assert!(server.wait(Duration::from_secs(30)).success());
    let mut by_start: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let (start, ids) = r["request_id"].as_str().unwrap().rsplit_once('-').expect("batchlab-<start>-<ids>");
        assert!(start.starts_with("batchlab-"), "{line}");
        let ids: Vec<u64> = ids.split(',').map(|i| i.parse().unwrap()).collect();
        by_start.entry(start.to_owned()).or_default().push(ids[r["choice"].as_u64().unwrap() as usize]);
    }
    assert_eq!(by_start.len(), 2, "one id prefix per run: {:?}", by_start.keys());
    for ids in by_start.values_mut() {
        ids.sort();
        assert_eq!(*ids, (0..48).collect::<Vec<u64>>());
    }
    std::fs::remove_dir_all(&log_dir).unwrap();
}

/// The shipped scenarios/http.toml, against `batchlab serve` (its URL set on the command line):
/// it meets its own `[expect]`.
#[test]
fn the_shipped_http_scenario_runs_against_batchlab_serve() {
    let server = Server::start(None, &[]);
    let dir = temp_dir("shipped");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/http.toml");
    let urls = format!("engine.openai.urls=[\"{}\"]", server.url);
    let (output, out) = run_file(&dir, &path, &["--set", &urls], &[], Duration::from_secs(180));
    assert!(output.status.success(), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let (submitted, completed, _) = counts(&report(&out));
    assert_eq!(completed, submitted);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_endpoints_one_dies_mid_run_the_other_carries_on() {
    let steady = Server::start(Some(STEADY), &[]);
    // The other exits at its 6th request (status 1), dropping its connections.
    let dying = Server::start(Some(&format!("{STEADY}\n[faults]\nexit_server = {{ every = 6 }}\n")), &[]);
    let dir = temp_dir("two-endpoints");
    let scenario = scenario(&[&dying.url, &steady.url], 4, 160, "");
    let (output, out) = run(&dir, &scenario, &[], Duration::from_secs(120));
    let report = report(&out);
    let (submitted, completed, errors) = counts(&report);
    assert_eq!(submitted, 160, "{}", text(&output.stderr));
    assert!(completed >= 160 / 2, "the steady endpoint served its share and more: {completed}, {errors:?}");
    let failed: u64 = errors.values().sum();
    assert!(failed > 0, "the dead endpoint's requests failed");
    assert_eq!(completed + failed, 160);
    for kind in errors.keys() {
        assert!(kind == "connect_failed" || kind == "stream_dropped", "{errors:?}");
    }
    assert!(errors.contains_key("connect_failed"), "requests after the death could not connect: {errors:?}");
    // Once out of rotation, the dead endpoint gets only probes: most of the rest went to the other.
    assert!(failed < 160 / 4, "{errors:?}");
    // The report's per-endpoint view: the dead one's failures (and when they began), the steady
    // one's successes, the time until requests succeeded again; the steady server's own counters.
    let b = &report["benchmarks"][0];
    let endpoint = |url: &str| {
        let all = b["endpoints"].as_array().expect("per-endpoint results");
        all.iter().find(|e| e["endpoint"] == url).unwrap_or_else(|| panic!("{url} in {all:?}")).clone()
    };
    let (dead, alive) = (endpoint(&dying.url), endpoint(&steady.url));
    assert_eq!(dead["errors"], failed, "{dead}");
    assert_eq!(alive["errors"], 0, "{alive}");
    assert_eq!(dead["completed"].as_u64().unwrap() + alive["completed"].as_u64().unwrap(), completed);
    let failures = &dead["failures"];
    assert!(failures["began_s"].as_f64().unwrap() > 0.0, "{dead}");
    let recover = failures["time_to_recover_s"].as_f64().expect("the run recovered on the other endpoint");
    assert!(recover < 5.0, "{dead}");
    let server = b["server"].as_array().expect("the servers' /metrics deltas");
    let steady_counters =
        server.iter().find(|s| s["endpoint"] == steady.url.as_str()).expect("the steady server's deltas");
    assert!(steady_counters["counters"]["generation_tokens"].as_f64().unwrap() > 0.0, "{steady_counters}");
    let dead_status = dying.wait(Duration::from_secs(10));
    assert_eq!(dead_status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run against a server with `faults` (or against `url`) fails each request with `kind` only.
fn failing_run(name: &str, url: &str, extra: &str, requests: u64, kinds: &[&str]) {
    let dir = temp_dir(name);
    let (output, out) = run(&dir, &scenario(&[url], 1, requests, extra), &[], Duration::from_secs(120));
    let report = report(&out);
    let (submitted, completed, errors) = counts(&report);
    assert_eq!(submitted, requests, "{name}: {}", text(&output.stderr));
    assert_eq!(completed, 0, "{name}: {errors:?}");
    assert_eq!(errors.values().sum::<u64>(), requests, "{name}: {errors:?}");
    for kind in errors.keys() {
        assert!(kinds.contains(&kind.as_str()), "{name}: {errors:?}, expected {kinds:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn faulty_server(fault: &str) -> Server {
    Server::start(Some(&format!("{STEADY}\n[faults]\n{fault}\n")), &[])
}

#[test]
fn network_faults_fail_their_requests_by_kind_and_nothing_hangs() {
    let slow = faulty_server("stall_stream = { every = 1 }\nstall_for = \"60s\"");
    failing_run("slow", &slow.url, "timeout = \"500ms\"", 3, &["timeout"]);
    let dropping = faulty_server("drop_stream = { every = 1 }");
    failing_run("drop", &dropping.url, "", 4, &["stream_dropped"]);
    let limited = faulty_server("http_429 = { every = 1 }");
    failing_run("429", &limited.url, "", 4, &["http_429"]);
    let unavailable = faulty_server("http_503 = { every = 1 }");
    failing_run("503", &unavailable.url, "", 4, &["http_5xx"]);
    let stub = Stub::start();
    failing_run("500", &stub.url, "", 4, &["http_5xx"]);
    // Killed by its first request: that one's stream drops, the rest cannot connect.
    let killed = faulty_server("exit_server = { every = 1 }");
    failing_run("killed", &killed.url, "", 4, &["stream_dropped", "connect_failed"]);
}

#[test]
fn the_api_key_never_shows_in_anything_batchlab_writes() {
    const KEY: &str = "sk-batchlab-test-7Hq2ZkP9xWv4";
    let server = Server::start(Some(STEADY), &[]);
    // The stub echoes the Authorization header back in its 500s' messages.
    let stub = Stub::start();
    for (name, url, requests) in [("key-ok", &server.url, 16), ("key-500", &stub.url, 4)] {
        let dir = temp_dir(name);
        let scenario = scenario(&[url], 1, requests, "api_key_env = \"BATCHLAB_TEST_API_KEY\"");
        let (output, out) = run(&dir, &scenario, &[("BATCHLAB_TEST_API_KEY", KEY)], Duration::from_secs(120));
        let (submitted, _, errors) = counts(&report(&out));
        assert_eq!(submitted, requests);
        if name == "key-500" {
            assert_eq!(errors.get("http_5xx"), Some(&requests), "{errors:?}");
            // The error's message (in the debug log) has the echo, the key blanked out.
            let log = text(&output.stderr);
            assert!(log.contains("you sent Bearer [redacted]"), "{log}");
        }
        assert!(!text(&output.stdout).contains(KEY) && !text(&output.stderr).contains(KEY), "{name}: in the output");
        for file in std::fs::read_dir(&out).unwrap() {
            let path = file.unwrap().path();
            let content = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            assert!(!content.contains(KEY), "{name}: the key is in {}", path.display());
        }
        assert!(stub.saw_key(KEY) || name == "key-ok", "the key was sent");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // Nor in the engine's Debug, nor in its configuration.
    let mut config = OpenAiConfig::new(&server.url, MODEL);
    config.api_key_env = Some("BATCHLAB_TEST_API_KEY".into());
    assert!(!format!("{:?}", OpenAiEngine::new(config)).contains(KEY));
    // `check` names a variable that is not set, and only its name.
    let dir = temp_dir("key-unset");
    let path = dir.join("s.toml");
    std::fs::write(&path, scenario(&[&server.url], 1, 4, "api_key_env = \"BATCHLAB_TEST_UNSET_KEY\"")).unwrap();
    let check = cli_common::batchlab(&["check", path.to_str().unwrap()]);
    assert!(!check.status.success());
    assert!(text(&check.stderr).contains("BATCHLAB_TEST_UNSET_KEY"), "{}", text(&check.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn check_refuses_the_chat_api_with_batches_at_the_line() {
    let dir = temp_dir("chat-check");
    let path = dir.join("chat.toml");
    let chat = scenario(&["http://127.0.0.1:9"], 4, 8, "api = \"chat\"");
    std::fs::write(&path, &chat).unwrap();
    let check = cli_common::batchlab(&["check", path.to_str().unwrap()]);
    let stderr = text(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "{stderr}");
    let line = chat.lines().position(|l| l.starts_with("batch_size")).unwrap() + 1;
    assert!(stderr.contains(&format!("chat.toml:{line}:")), "at batch_size's line {line}: {stderr}");
    assert!(stderr.contains("batch_size = 1"), "{stderr}");
    // With batch_size 1 it is fine.
    std::fs::write(&path, scenario(&["http://127.0.0.1:9"], 1, 8, "api = \"chat\"")).unwrap();
    let check = cli_common::batchlab(&["check", path.to_str().unwrap()]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stub OpenAI server on loopback: it lists the model and answers every completion with a 500
/// whose message repeats the request's Authorization header.
struct Stub {
    url: String,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Stub {
    fn start() -> Stub {
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::{get, post};
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let seen_by_handler = seen.clone();
        let app = axum::Router::new()
            .route("/v1/models", get(|| async { axum::Json(serde_json::json!({"data": [{"id": MODEL}]})) }))
            .route(
                "/v1/completions",
                post(move |headers: HeaderMap| {
                    let seen = seen_by_handler.clone();
                    async move {
                        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                        seen.lock().unwrap().push(auth.clone());
                        let body =
                            serde_json::json!({"error": {"message": format!("boom; you sent {auth}"), "code": 500}});
                        (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body))
                    }
                }),
            );
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        Stub { url, seen, _runtime: runtime }
    }

    fn saw_key(&self, key: &str) -> bool {
        self.seen.lock().unwrap().iter().any(|h| h == &format!("Bearer {key}"))
    }
}

#[test]
fn the_chat_api_sends_one_conversation_per_request() {
    let server = Server::start(Some(STEADY), &[]);
    let mut config = OpenAiConfig::new(&server.url, MODEL);
    config.api = Api::Chat;
    let mut e = OpenAiEngine::new(config);
    e.start().unwrap();
    // A batch of two (a library caller's): two requests at once, each answer in its place.
    let batch: Vec<EngineRequest> = ["Hello there", "Be brief"]
        .iter()
        .enumerate()
        .map(|(i, text)| EngineRequest::new(batchlab::engine::Prompt::Text(text.to_string()), 4).with_id(i as u64))
        .collect();
    let outputs = e.generate(&batch).unwrap();
    for (output, request) in outputs.iter().zip(&batch) {
        assert_eq!(output.request_id, Some(request.id));
        assert_eq!(output.output_tokens, Some(4));
        assert_eq!(output.stats.token_ts.as_ref().map(Vec::len), Some(4), "the role chunk carries the first token");
        assert_eq!(output.stats.token_count_source, Some(TokenCountSource::Usage));
        assert!(output.prompt_tokens.is_some_and(|n| n > 0));
    }
    e.shutdown().unwrap();
}

/// `[engine.openai]` as the scenario reader sees it: required keys, URLs, the key's variable.
#[test]
fn the_openai_section_is_read_and_its_problems_named() {
    use batchlab::scenario::plan::EnginePlan;
    use batchlab::scenario::{Overrides, parse_str};
    let parse = |text: &str| parse_str(text, "s.toml", Path::new("/"), &Overrides::default());
    let plan = parse(
        "[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://h:8000/v1/\", \"https://g/x\"]\nmodel = \"m\"\n\
         routing = \"least_outstanding\"\ntimeout = \"20s\"\n",
    )
    .unwrap();
    let EnginePlan::OpenAi(c) = plan.engine() else { panic!("{:?}", plan.engine()) };
    assert_eq!(c.urls, ["http://h:8000", "https://g/x"]);
    assert_eq!((c.model.as_str(), c.timeout), ("m", Some(Duration::from_secs(20))));
    assert_eq!(plan.engine().kind(), "openai");
    assert!(!plan.engine().runs_processes());
    // The batcher's timeouts follow the request's.
    assert_eq!(plan.batching().generate_timeout(), Some(Duration::from_secs(50)));
    assert_eq!(plan.batching().stall_timeout(), Some(Duration::from_secs(50)));

    let problems = |text: &str| parse(text).unwrap_err().to_string();
    let missing = problems("[engine]\nkind = \"openai\"\n");
    assert!(missing.contains("engine.openai.urls"), "{missing}");
    let missing = problems("[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://h\"]\n");
    assert!(missing.contains("engine.openai.model"), "{missing}");
    let bad = problems("[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"h:80\", \"ftp://x\"]\nmodel = \"m\"\n");
    assert!(bad.contains("urls[0]") || bad.matches("not a base URL").count() == 2, "{bad}");
    // A key written where its variable's name belongs is refused, and not repeated in the message.
    let secret = "sk-live-0123456789";
    let pasted = problems(&format!(
        "[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://h\"]\nmodel = \"m\"\napi_key_env = \"{secret}\"\n"
    ));
    assert!(pasted.contains("looks like a key itself"), "{pasted}");
    assert_shows_none_of(secret, &pasted);
}

/// No line of `output` holds any 5 characters in a row of `secret` (every line: the source
/// excerpt too).
fn assert_shows_none_of(secret: &str, output: &str) {
    let chars: Vec<char> = secret.chars().collect();
    for line in output.lines() {
        for part in chars.windows(5).map(|w| w.iter().collect::<String>()) {
            assert!(!line.contains(&part), "`{part}` of the secret in {line:?} of:\n{output}");
        }
    }
}

/// A key pasted where its variable's name belongs (`sk-…`, and `hf_…`, which is a valid name),
/// in the file or with `--set`: `check` and `run` refuse it, and no line of their stdout or
/// stderr shows any part of it.
#[test]
fn a_pasted_key_is_refused_and_no_line_of_any_output_shows_it() {
    let dir = temp_dir("pasted-key");
    for secret in ["sk-proj-Xq7Lp2Vz9Rt4Mn8Kb3Wd", "hf_AbCdEfGhIjKlMnOpQrStUvWx"] {
        let pasted = scenario(&["http://127.0.0.1:9"], 1, 4, &format!("api_key_env = \"{secret}\"  # {secret}"));
        let path = dir.join("pasted.toml");
        std::fs::write(&path, &pasted).unwrap();
        let line = pasted.lines().position(|l| l.starts_with("api_key_env")).unwrap() + 1;
        let clean = dir.join("clean.toml");
        std::fs::write(&clean, scenario(&["http://127.0.0.1:9"], 1, 4, "")).unwrap();
        let set = format!("engine.openai.api_key_env={secret}");
        for (what, args) in [
            ("check", vec!["check", path.to_str().unwrap()]),
            ("run", vec!["run", path.to_str().unwrap()]),
            ("check --set", vec!["check", clean.to_str().unwrap(), "--set", &set]),
        ] {
            let output = cli_common::batchlab(&args);
            let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
            assert_eq!(output.status.code(), Some(2), "{what}: {stderr}");
            assert!(stderr.contains("looks like a key itself"), "{what}: {stderr}");
            if what != "check --set" {
                assert!(stderr.contains(&format!("pasted.toml:{line}:")), "{what}: at the key's line: {stderr}");
            }
            assert_shows_none_of(secret, &stdout);
            assert_shows_none_of(secret, &stderr);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `max_connections` is a real cap: with one slot, concurrent batches go one after another.
#[test]
fn max_connections_caps_the_requests_in_flight_to_an_endpoint() {
    let server = Server::start(Some(STEADY), &[]);
    let mut config = OpenAiConfig::new(&server.url, MODEL);
    config.max_connections = 1;
    let mut e = OpenAiEngine::new(config);
    let face = e.start().unwrap().concurrent.unwrap().face;
    let (tx, rx) = std::sync::mpsc::channel();
    for k in 0..3 {
        let tx = tx.clone();
        let batch = token_batch(&[4], 8).into_iter().map(|r| r.with_id_offset(k)).collect();
        face.generate(batch, Box::new(move |r| tx.send(r).unwrap()));
    }
    let mut spans: Vec<(f64, f64)> = (0..3)
        .map(|_| {
            let outputs = rx.recv_timeout(Duration::from_secs(30)).expect("answered").unwrap();
            (outputs[0].stats.sent_ts.unwrap(), outputs[0].stats.last_token_ts.unwrap())
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "sent only after the one before finished: {spans:?}");
    }
    e.shutdown().unwrap();
}

/// `[faults]` of the run wraps the HTTP engine as any other: every 2nd batch fails, every 3rd
/// loses an output, the rest come back whole.
#[test]
fn the_runs_own_faults_wrap_the_http_engine() {
    let server = Server::start(Some(STEADY), &[]);
    let dir = temp_dir("run-faults");
    let faults = "\n[faults]\nfail_batch = { every = 2 }\nshort_output = { every = 3 }\n";
    let (output, out) =
        run(&dir, &format!("{}{faults}", scenario(&[&server.url], 4, 48, "")), &[], Duration::from_secs(120));
    let (submitted, completed, errors) = counts(&report(&out));
    assert_eq!(submitted, 48, "{}", text(&output.stderr));
    assert!(completed > 0, "{errors:?}");
    assert_eq!(completed + errors.values().sum::<u64>(), 48);
    assert!(errors.contains_key("engine_error") && errors.contains_key("output_count_mismatch"), "{errors:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 32's run: two endpoints, one dying, prompts of different `max_tokens` in each batch (so
/// a batch is several HTTP requests, routed apart). The steady endpoint's answers are never
/// thrown away for the dead one's failure: the tokens requests.jsonl credits to it equal its own
/// `/metrics` count of generated tokens, and every failure is charged to the dead endpoint.
#[test]
fn two_endpoints_one_dying_the_healthy_ones_tokens_equal_its_metrics_delta() {
    let steady = Server::start(Some(STEADY), &[]);
    let dying = Server::start(Some(&format!("{STEADY}\n[faults]\nexit_server = {{ every = 6 }}\n")), &[]);
    let dir = temp_dir("two-endpoints-tokens");
    let scenario = scenario(&[&dying.url, &steady.url], 8, 64, "")
        .replace("output_tokens = 8", "output_tokens = { dist = \"uniform\", min = 8, max = 64 }");
    let (output, out) = run(&dir, &scenario, &[], Duration::from_secs(120));
    let report = report(&out);
    let (submitted, completed, errors) = counts(&report);
    assert_eq!(submitted, 64, "{}", text(&output.stderr));
    assert!(errors.values().sum::<u64>() > 0, "the dying endpoint failed some: {errors:?}");
    let records = std::fs::read_to_string(out.join("requests.jsonl")).unwrap();
    let (mut steady_tokens, mut steady_completed) = (0, 0);
    for line in records.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        if r["outcome"] == "completed" && r["endpoint"] == steady.url.as_str() {
            steady_tokens += r["output_tokens"].as_u64().expect("a completed request's tokens");
            steady_completed += 1;
        }
        if r["outcome"] == "error" {
            assert_eq!(r["endpoint"], dying.url.as_str(), "a failure is charged to the dead endpoint: {r}");
        }
    }
    assert!(steady_completed > 0 && completed >= steady_completed);
    let b = &report["benchmarks"][0];
    let server = b["server"].as_array().expect("the servers' /metrics deltas");
    let counters = server.iter().find(|s| s["endpoint"] == steady.url.as_str()).expect("the steady server's deltas");
    let generated = counters["counters"]["generation_tokens"].as_f64().unwrap();
    assert_eq!(steady_tokens as f64, generated, "requests.jsonl vs the steady server's /metrics: {counters}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `check` refuses what `run` would fail on every batch: conversations on the completions API,
/// at the key that makes them (`chat = true`, `format = "sharegpt"`, a JSONL file's `messages`
/// at `path`); `request_format = "plain"` sends them as text and passes.
#[test]
fn check_refuses_chat_prompts_on_the_completions_api_at_the_keys_place() {
    let dir = temp_dir("chat-prompts");
    let check = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let output = cli_common::batchlab(&["check", path.to_str().unwrap()]);
        (output.status.code(), cli_common::text(&output.stderr))
    };
    let line_of = |text: &str, start: &str| text.lines().position(|l| l.starts_with(start)).unwrap() + 1;
    let base = scenario(&["http://127.0.0.1:9"], 4, 8, "");
    let synthetic = base.replace("output_tokens = 8\n", "output_tokens = 8\nchat = true\n");
    let (code, stderr) = check("synthetic.toml", &synthetic);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("synthetic.toml:{}:", line_of(&synthetic, "chat = true"))), "{stderr}");
    assert!(stderr.contains("\"completions\"") && stderr.contains("request_format = \"plain\""), "{stderr}");
    let plain = synthetic.replace("chat = true\n", "chat = true\nrequest_format = \"plain\"\n");
    assert_eq!(check("plain.toml", &plain), (Some(0), String::new()));

    std::fs::write(
        dir.join("prompts.jsonl"),
        "{\"prompt\": \"a text\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n",
    )
    .unwrap();
    let workload = "[workload]\nsource = \"file\"\npath = \"prompts.jsonl\"\n";
    let file = base.replace("[workload]\nprompt_tokens = 16\noutput_tokens = 8\n", workload);
    let (code, stderr) = check("file.toml", &file);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("file.toml:{}:", line_of(&file, "path = "))), "{stderr}");
    assert!(stderr.contains("entry 2 is a conversation"), "{stderr}");
    let sharegpt = file.replace("path = \"prompts.jsonl\"\n", "path = \"prompts.jsonl\"\nformat = \"sharegpt\"\n");
    let (code, stderr) = check("sharegpt.toml", &sharegpt);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("sharegpt.toml:{}:", line_of(&sharegpt, "format = "))), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 32's run: `output_tokens` uniform in 8..64 at `batch_size = 8`. Each micro-batch goes out
/// as one HTTP request per distinct `max_tokens`; the report says what went on the wire, and it
/// matches what `batchlab serve --timing-log` received: the number of HTTP requests, and each
/// request's prompts (its `X-Request-Id` names them). One warning says why.
#[test]
fn the_wire_batches_in_the_report_match_the_servers_timing_log_and_the_split_is_warned() {
    let dir = temp_dir("wire-batch");
    let log = dir.join("timing.jsonl");
    let server = Server::start(Some(STEADY), &["--timing-log", log.to_str().unwrap()]);
    // Full micro-batches are part of what is checked (`batch_size_mean` 8), so the batch timeout
    // is long: 16 in flight refill a batch of 8 at once, but under load the 5 ms of the other
    // tests once let a batch go at 7 (batch_size_mean 7.11, three busy loops on 2 cores).
    let scenario = scenario(&[&server.url], 8, 64, "")
        .replace("output_tokens = 8", "output_tokens = { dist = \"uniform\", min = 8, max = 64 }")
        .replace("batch_timeout = \"5ms\"", "batch_timeout = \"1s\"");
    let path = dir.join("scenario.toml");
    std::fs::write(&path, &scenario).unwrap();
    let out = dir.join("out");
    let run =
        cli_common::batchlab(&["run", path.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl"]);
    let printed = format!("{}{}", text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "{printed}");
    let report = report(&out);
    let b = &report["benchmarks"][0];
    assert_eq!(b["counts"]["completed"], 64, "{printed}");
    // The server's view: each HTTP request's id lists its prompts' batchlab ids.
    let mut wire: std::collections::BTreeMap<String, Vec<u64>> = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let entry: Value = serde_json::from_str(line).unwrap();
        let id = entry["request_id"].as_str().unwrap().to_owned();
        let ids = id.rsplit('-').next().unwrap().split(',').map(|i| i.parse().unwrap()).collect();
        wire.insert(id, ids);
    }
    let sizes: Vec<u32> = wire.values().map(|ids| ids.len() as u32).collect();
    let w = &b["dispatch"]["wire_batch"];
    assert_eq!(w["http_requests"], wire.len() as u64, "{w}");
    assert!(wire.len() > 64 / 8, "different max_tokens split the batches: {} HTTP requests", wire.len());
    assert_eq!(
        (w["min"].as_u64(), w["max"].as_u64()),
        (sizes.iter().min().map(|&m| m.into()), sizes.iter().max().map(|&m| m.into()))
    );
    assert!((w["mean"].as_f64().unwrap() - 64.0 / wire.len() as f64).abs() < 1e-9, "{w}");
    assert_eq!(b["batching"]["batch_size_mean"], 8.0, "the micro-batches were full");
    // Each request's wire batch is the prompts of the HTTP request the server got it in.
    let by_id: std::collections::HashMap<u64, usize> =
        wire.values().flat_map(|ids| ids.iter().map(move |&i| (i, ids.len()))).collect();
    for line in std::fs::read_to_string(out.join("requests.jsonl")).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let id = r["id"].as_u64().unwrap();
        assert_eq!(r["wire_batch"].as_u64(), by_id.get(&id).map(|&n| n as u64), "{r}");
        assert_eq!(r["batch_size"], 8);
        // TTFT from the submit is TTFT from the send plus the wait before the send.
        let waited_ms = (r["sent_ns"].as_u64().unwrap() - r["submitted_ns"].as_u64().unwrap()) as f64 / 1e6;
        let (from_submit, from_send) = (r["ttft_from_submit_ms"].as_f64().unwrap(), r["ttft_ms"].as_f64().unwrap());
        assert!(waited_ms > 0.0 && (from_submit - (from_send + waited_ms)).abs() < 1e-3, "{r}");
    }
    // The table shows it beside the batch mean, and one warning says why.
    assert!(printed.contains("wire mean (http reqs)"), "{printed}");
    assert_eq!(printed.matches("smaller than their micro-batch").count(), 1, "{printed}");
    assert!(printed.contains("max_tokens"), "{printed}");
    let warnings = b["validity_warnings"].as_array().unwrap();
    assert!(warnings.iter().any(|w| w["kind"] == "wire_batch"), "{warnings:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
