//! The HTTP engine against peers that misbehave (tests/common/misbehaving.rs, issue 32): a hung
//! endpoint leaves the rotation within its `stall_timeout` while the other carries the rest; a
//! flood leaves the client's memory bounded; more tokens than asked, and a 200 that is not an
//! event stream, are `bad_response`, charged to the choice or the request that did it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use batchlab::engine::openai::{OpenAiConfig, OpenAiEngine};
use batchlab::engine::{Engine, EngineError, EngineRequest, RemoteErrorKind};
use serde_json::Value;

#[path = "common/misbehaving.rs"]
mod misbehaving;
use misbehaving::{Misbehaving, Mode};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

/// Serve's engine: 2 ms a step.
const STEADY: &str = "name = \"steady\"\n[engine.sim]\nfixed_overhead = \"0s\"\ndecode_step = \"2ms\"\n";

fn engine(urls: &[&str], stall_timeout: Option<Duration>) -> OpenAiEngine {
    let mut config = OpenAiConfig::new(urls[0], MODEL);
    config.urls = urls.iter().map(|u| u.to_string()).collect();
    config.timeout = Some(Duration::from_secs(20));
    config.stall_timeout = stall_timeout;
    OpenAiEngine::new(config)
}

fn batch(prompts: usize, max_tokens: u32, first_id: u64) -> Vec<EngineRequest> {
    (0..prompts as u64).map(|i| EngineRequest::tokens(vec![1, 2, 3], max_tokens).with_id(first_id + i)).collect()
}

/// Two endpoints, one of them `mode`: one prompt at a time, 24 of them. The hung endpoint fails
/// its requests as `stalled`, each within the stall timeout, and leaves the rotation: it gets only
/// its first request and the probes of its doubling backoff; the healthy one answers all the rest.
fn a_hung_endpoint_leaves_the_rotation(mode: Mode) {
    const STALL: Duration = Duration::from_millis(600);
    const REQUESTS: u64 = 24;
    let healthy = Server::start(Some(STEADY), &[]);
    let hung = Misbehaving::start(mode);
    let mut engine = engine(&[&hung.url, &healthy.url], Some(STALL));
    engine.start().expect("both endpoints list the model");
    let (mut stalled, mut answered) = (0, 0);
    let began = Instant::now();
    for id in 0..REQUESTS {
        let asked = Instant::now();
        match engine.generate(&batch(1, 8, id)) {
            Ok(outputs) => {
                assert_eq!(outputs[0].failure, None, "{mode:?}");
                assert_eq!(outputs[0].stats.endpoint.as_deref(), Some(healthy.url.as_str()));
                answered += 1;
            }
            Err(EngineError::Remote(e)) => {
                assert_eq!((e.kind, e.endpoint.as_str()), (RemoteErrorKind::Stalled, hung.url.as_str()), "{e}");
                let took = asked.elapsed();
                assert!(took >= STALL && took < STALL + Duration::from_millis(900), "{mode:?}: stalled after {took:?}");
                stalled += 1;
            }
            Err(e) => panic!("{mode:?}: {e}"),
        }
    }
    engine.shutdown().unwrap();
    // Round robin without the watch: 12 of 24 to the hung one. With it: the first, then a probe
    // after each backoff (250 ms, 500 ms, 1 s, …) while the run lasts.
    let elapsed = began.elapsed();
    assert_eq!(stalled, hung.requests() as u64, "{mode:?}: every request the hung endpoint got failed");
    assert!((1..=4).contains(&stalled), "{mode:?}: {stalled} requests stalled in {elapsed:?}");
    assert_eq!(answered + stalled, REQUESTS);
}

#[test]
fn a_hung_endpoint_is_out_of_rotation_within_its_stall_timeout() {
    a_hung_endpoint_leaves_the_rotation(Mode::Hang);
}

#[test]
fn an_endpoint_sending_only_comments_is_out_of_rotation_within_its_stall_timeout() {
    a_hung_endpoint_leaves_the_rotation(Mode::CommentsOnly);
}

#[test]
fn more_tokens_than_asked_fail_only_that_choice_as_bad_response() {
    let stub = Misbehaving::start(Mode::Overcount);
    let mut engine = engine(&[&stub.url], None);
    engine.start().unwrap();
    // One request of two prompts: the one at index 1 gets 401 tokens for max_tokens = 4.
    let outputs = engine.generate(&batch(2, 4, 70)).expect("the healthy choice keeps its output");
    engine.shutdown().unwrap();
    let (good, bad) = (&outputs[0], &outputs[1]);
    assert_eq!((good.request_id, good.failure.as_ref()), (Some(70), None));
    assert_eq!((good.output_tokens, good.text.as_deref()), (Some(4), Some("0.0 0.1 0.2 0.3 ")));
    assert_eq!(good.stats.token_ts.as_ref().map(Vec::len), Some(4));
    let failure = bad.failure.as_ref().expect("the overcounting choice fails");
    assert_eq!((bad.request_id, failure.kind), (Some(71), RemoteErrorKind::BadResponse));
    assert!(failure.message.contains("server sent 5 tokens for max_tokens = 4"), "{}", failure.message);
    assert_eq!(bad.output_tokens, None, "a refused choice counts no tokens");
}

#[test]
fn a_200_with_a_json_body_is_bad_response_never_stream_dropped() {
    for mode in [Mode::Json200, Mode::Json200Untyped] {
        let stub = Misbehaving::start(mode);
        let mut engine = engine(&[&stub.url], None);
        engine.start().unwrap();
        let e = engine.generate(&batch(2, 4, 0)).expect_err("not an answer batchlab can time");
        engine.shutdown().unwrap();
        let EngineError::Remote(e) = e else { panic!("{mode:?}: {e}") };
        assert_eq!(e.kind, RemoteErrorKind::BadResponse, "{mode:?}: {e}");
        assert!(e.message.contains("not an event stream"), "{mode:?}: {e}");
        assert!(e.message.contains("answer 0"), "{mode:?}: the body is shown: {e}");
    }
}

/// The peak resident memory (`VmHWM`) of process `pid`, in bytes, if it still runs.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn a_flooding_server_leaves_the_client_under_100_mb() {
    // The run: 4 requests, each prompt answered with 150 chunks of 1 MiB.
    let stub = Misbehaving::start(Mode::Flood);
    let dir = std::env::temp_dir().join(format!("batchlab-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = format!(
        "name = \"flood\"\n[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"{}\"]\nmodel = \"{MODEL}\"\n\
         [batching]\nbatch_size = 2\nbatch_timeout = \"5ms\"\n[workload]\nprompt_tokens = 16\noutput_tokens = 8\n\
         [profile]\nkind = \"concurrent\"\nlevels = [4]\n[stop]\nmax_requests = 4\n\
         [expect]\ncompleted = \">= 0\"\n",
        stub.url
    );
    std::fs::write(dir.join("s.toml"), scenario).unwrap();
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_batchlab"))
        .args(["run", dir.join("s.toml").to_str().unwrap(), "--output", out.to_str().unwrap(), "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (mut peak, began) = (0, Instant::now());
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(peak_rss(pid).unwrap_or(0));
        assert!(began.elapsed() < Duration::from_secs(120), "the run hangs");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(child.wait().unwrap().success(), "{stderr}");
    assert!(peak > 0, "the client's memory was read");
    assert!(peak < 100 << 20, "the client's peak RSS is {} MB", peak >> 20);
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let counts = &report["benchmarks"][0]["counts"];
    assert_eq!(counts["errors_by_kind"]["bad_response"], counts["submitted"], "{counts}");
    assert!(stub.requests() >= 2, "the flood was sent");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A batch of two `max_tokens` is two HTTP requests, routed in turn: the one that went to the
/// broken endpoint fails its own prompts, charged to that endpoint; the healthy one's prompts
/// keep their outputs.
#[test]
fn a_failed_sub_request_fails_only_its_own_prompts_charged_to_its_endpoint() {
    let healthy = Server::start(Some(STEADY), &[]);
    let broken = Misbehaving::start(Mode::Json200);
    let mut engine = engine(&[&broken.url, &healthy.url], None);
    engine.start().unwrap();
    // Interleaved: ids 0 and 2 ask 4 tokens (the first request, to the broken endpoint), ids 1
    // and 3 ask 6 (the second, to the healthy one).
    let requests: Vec<EngineRequest> =
        (0..4u64).map(|i| EngineRequest::tokens(vec![1, 2, 3], if i % 2 == 0 { 4 } else { 6 }).with_id(i)).collect();
    let outputs = engine.generate(&requests).expect("the healthy request's prompts keep their outputs");
    engine.shutdown().unwrap();
    for (i, output) in outputs.iter().enumerate() {
        assert_eq!(output.request_id, Some(i as u64), "each output in its request's place");
        if i % 2 == 0 {
            let failure = output.failure.as_ref().expect("the broken endpoint's prompts fail");
            assert_eq!((failure.kind, failure.endpoint.as_str()), (RemoteErrorKind::BadResponse, broken.url.as_str()));
        } else {
            assert_eq!(output.failure, None, "{output:?}");
            assert_eq!((output.output_tokens, output.stats.endpoint.as_deref()), (Some(6), Some(healthy.url.as_str())));
        }
    }
}

/// The watch is per endpoint: a request that waits in a busy server's queue longer than the stall
/// timeout is not stalled while the server makes progress on another of our requests.
#[test]
fn a_request_queued_behind_others_on_a_busy_server_is_not_stalled() {
    let busy = Misbehaving::start(Mode::Queued);
    let mut engine = engine(&[&busy.url], Some(Duration::from_millis(600)));
    let face = engine.start().unwrap().concurrent.expect("a concurrent face").face;
    let (tx, rx) = std::sync::mpsc::channel();
    // The first streams 20 tokens over 2 s; the second waits 1.5 s in the queue, longer than the
    // stall timeout, while the first goes on.
    for (k, first_id) in [(0u64, 0u64), (1, 10)] {
        let tx = tx.clone();
        face.generate(batch(1, 20, first_id), Box::new(move |r| tx.send((k, r)).unwrap()));
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..2 {
        let (k, result) = rx.recv_timeout(Duration::from_secs(20)).expect("answered");
        let outputs = result.unwrap_or_else(|e| panic!("request {k}: {e}"));
        assert_eq!((outputs[0].failure.as_ref(), outputs[0].output_tokens), (None, Some(20)), "request {k}");
    }
    engine.shutdown().unwrap();
}
