//! `[workload.images]` end to end: `check` refuses bad settings at their line; scenarios/vision.toml
//! on the simulator (reproducible, the encoder cache's hit rate at the designed reuse) and against
//! `batchlab serve` (chat bodies with `image_url` parts, the server's prompt tokens per request by
//! batchlab's rule, its `vllm:mm_cache_*` counters at the designed reuse).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use batchlab::engine::Prompt;
use batchlab::engine::image::prompt_images;
use batchlab::loadgen::{Workload, WorkloadSpec};
use batchlab::report::{Phase, RequestOutcome, read_records};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::{Overrides, load_file, parse_str};
use serde_json::{Value, json};

#[path = "common/serve_process.rs"]
mod serve_process;
use serve_process::{MODEL, Server};

fn vision() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/vision.toml")
}

/// The error text of `source` (read as `scenarios/bad.toml`).
fn problems(source: &str) -> String {
    match parse_str(source, "scenarios/bad.toml", Path::new("scenarios"), &Overrides::default()) {
        Ok(_) => panic!("expected problems in:\n{source}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts `text` has a problem at `line` that says `says`.
fn at_line(text: &str, line: usize, says: &str) {
    let place = format!("--> scenarios/bad.toml:{line}:");
    assert!(
        text.split("error: ").any(|problem| problem.contains(&place) && problem.contains(says)),
        "no problem at line {line} saying {says:?} in:\n{text}"
    );
}

const CHAT: &str = "[workload]\nchat = true\n[workload.images]\n";

#[test]
fn check_refuses_bad_image_settings_at_their_line() {
    // A bucket with a side of 0, and probabilities that do not sum to 1: at the buckets' line.
    let text = problems(&format!("{CHAT}buckets = \"{{(0, 256, 1): 0.5, (720, 1280, 1): 0.4}}\"\n"));
    at_line(&text, 4, "bucket (0, 256) has a side of 0 pixels");
    at_line(&text, 4, "the bucket probabilities sum to 0.9, not 1");
    // A limit below the base count: at the limit's line.
    let text = problems(&format!("{CHAT}base_items_per_request = 3\nlimit_per_prompt = 2\n"));
    at_line(&text, 5, "`workload.images.limit_per_prompt` (2) is below `workload.images.base_items_per_request` (3)");
    // Images with the completions API: at the images' table.
    let text = problems(&format!(
        "[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://127.0.0.1:9\"]\nmodel = \"m\"\n\
         api = \"completions\"\n{CHAT}buckets = \"720p\"\n"
    ));
    at_line(&text, 9, "needs `engine.openai.api = \"chat\"`: the completions API takes no images");
    // Images without chat prompts, a video bucket, an unknown preset, a bad quality.
    at_line(&problems("[workload.images]\npool = 2\n"), 1, "needs chat prompts");
    at_line(&problems(&format!("{CHAT}buckets = \"{{(720, 1280, 16): 1.0}}\"\n")), 4, "a video");
    at_line(&problems(&format!("{CHAT}buckets = \"8k\"\n")), 4, "expected vLLM's");
    at_line(&problems(&format!("{CHAT}quality = 101\n")), 4, "above 100");
    at_line(&problems(&format!("{CHAT}contents = \"noise\"\n")), 4, "unknown key `contents`");
    // A good one: the vLLM literal and a preset read, and printed back as the literal.
    let plan = parse_str(
        &format!("{CHAT}buckets = \"{{(256, 256, 1): 0.25, (720, 1280): 0.75}}\"\n"),
        "scenarios/good.toml",
        Path::new("scenarios"),
        &Overrides::default(),
    )
    .unwrap();
    let json = batchlab::scenario::to_json(&plan);
    assert_eq!(json["workload"]["images"]["buckets"], "{(256, 256, 1): 0.25, (720, 1280, 1): 0.75}");
}

#[test]
fn the_vision_scenario_on_the_simulator_hits_its_designed_reuse_and_is_reproducible() {
    let dir = std::env::temp_dir().join(format!("batchlab-images-sim-{}", std::process::id()));
    let plan = load_file(&vision(), &Overrides::default()).unwrap();
    let run = || {
        let options = RunOptions { output_dir: Some(dir.clone()), requests_jsonl: true, ..RunOptions::default() };
        let summary = run_blocking(&plan, options).unwrap();
        let records: Vec<_> = read_records(&dir.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
        std::fs::remove_dir_all(&dir).unwrap();
        (summary, records)
    };
    let (summary, records) = run();
    let b = &summary.report.benchmarks[0];
    let images = b.images.as_ref().expect("an images result");
    assert_eq!(images.requests, 800);
    // 1 to 3 images a request (base 2, range ratio 0.5), of 64 × 64 or 48 × 96 pixels.
    assert!((1400..=1800).contains(&images.images), "{images:?}");
    let (small, large) = (images.images * 64 * 64, images.images * 48 * 96);
    assert!(images.pixels > small && images.pixels < large, "both buckets: {images:?}");
    assert!(images.bytes > 0 && images.bytes_per_s.unwrap() > 0.0);
    assert_eq!(images.image_tokens, images.images * 576);
    assert!((images.designed_reuse - 0.5).abs() < 0.05, "{images:?}");
    let hit = images.cache_hit_rate.expect("the simulator counts its encoder cache");
    assert!((hit - images.designed_reuse).abs() <= 0.02, "hit {hit} vs designed {}", images.designed_reuse);

    // Token-exact prompts: every request's engine count is its target, and the report says so.
    let target = b.prompt_target.as_ref().expect("a prompt target result");
    assert_eq!((target.requests, target.differ, target.max_abs_diff, target.unmeasured), (800, 0, 0, 0), "{target:?}");

    // Per request: images, pixels, bytes and hits. Token-exact prompts: the whole prompt (the
    // template's tokens, the user turn's words and its images' tokens) is the length drawn for it
    // (the same workload without images draws the same lengths, all of words), and the engine's
    // count of it; the record has both.
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let mut text_only = plan.workload().clone();
    let WorkloadSpec::Synthetic { images: spec, .. } = &mut text_only else { panic!("synthetic") };
    *spec = None;
    let text_only = Workload::from_plan(&text_only).unwrap();
    let words = |prompt: &Prompt| {
        let Prompt::Chat(chat) = prompt else { panic!("chat") };
        batchlab::engine::tokens::text_tokens(&chat.messages[0].content) as u64
    };
    let measured: Vec<_> = records.iter().filter(|r| r.phase == Phase::Measure).collect();
    assert_eq!(measured.len(), 800);
    for r in &measured {
        assert_eq!(r.outcome, RequestOutcome::Completed);
        let request = workload.request(r.id);
        let s = r.images.expect("every request has images");
        assert_eq!(s, batchlab::engine::image::summary(&request.prompt).unwrap());
        assert!(r.image_cache_hits.unwrap() <= s.pooled, "only pool images can hit: {r:?}");
        let drawn = words(&text_only.request(r.id).prompt);
        assert_eq!(words(&request.prompt) + s.tokens + 8, drawn, "the template's 8 tokens, request {}", r.id);
        let prompt_tokens = r.metrics.as_ref().unwrap().prompt_tokens.unwrap();
        assert_eq!(Ok(prompt_tokens), batchlab::engine::sim::prompt::prompt_tokens(&request.prompt));
        assert_eq!(u64::from(prompt_tokens), drawn, "request {}", r.id);
        assert_eq!(r.prompt_tokens_target, Some(prompt_tokens), "request {}", r.id);
        assert_eq!(workload.prompt_target(r.id), Some(prompt_tokens));
    }

    // Same seed, same images, same report.
    let (again, again_records) = run();
    assert_eq!(
        serde_json::to_string(&again.report.benchmarks).unwrap(),
        serde_json::to_string(&summary.report.benchmarks).unwrap()
    );
    assert_eq!(again_records, records);
}

/// A chat body with one image: `batchlab serve` reads the `image_url` part, charges its 576
/// tokens, and counts it in `vllm:mm_cache_*`; the same picture again is a hit.
#[tokio::test]
async fn batchlab_serve_takes_image_parts_and_charges_their_tokens() {
    let server = Server::start(None, &[]);
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let png = {
        let mut out = Vec::new();
        image::ImageEncoder::write_image(
            image::codecs::png::PngEncoder::new(&mut out),
            &[200u8; 3 * 4 * 2],
            4,
            2,
            image::ExtendedColorType::Rgb8,
        )
        .unwrap();
        format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(out))
    };
    let body = |url: &str| {
        json!({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": url}}]}]})
    };
    let text_only = json!({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]});
    let post = |b: Value| client.post(server.url("/v1/chat/completions")).json(&b).send();
    let plain: Value = post(text_only).await.unwrap().json().await.unwrap();
    let with_image: Value = post(body(&png)).await.unwrap().json().await.unwrap();
    let tokens = |v: &Value| v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(tokens(&with_image), tokens(&plain) + 576, "{with_image}");
    let _: Value = post(body(&png)).await.unwrap().json().await.unwrap();
    let metrics = client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let counter = |name: &str| {
        metrics.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
    };
    assert_eq!((counter("vllm:mm_cache_queries_total"), counter("vllm:mm_cache_hits_total")), (Some(2.0), Some(1.0)));
    // Not an image: a 400 naming the part.
    let bad = post(body("data:image/png;base64,AAAA")).await.unwrap();
    assert_eq!(bad.status(), 400);
    let err: Value = bad.json().await.unwrap();
    assert_eq!(err["error"]["param"], "messages[0].content[1]", "{err}");
}

/// scenarios/vision.toml's workload through the HTTP engine against `batchlab serve` of the same
/// scenario: every request's images reach the server (its prompt tokens are batchlab's rule's),
/// and the server's multimodal cache counters show the designed reuse.
#[test]
fn the_vision_scenario_runs_against_batchlab_serve() {
    let server = Server::start(Some(&std::fs::read_to_string(vision()).unwrap()), &[]);
    let dir = std::env::temp_dir().join(format!("batchlab-images-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The scenario with its engine swapped for the HTTP one, one conversation per request.
    let text = std::fs::read_to_string(vision()).unwrap();
    let (head, rest) = text.split_once("[engine]").unwrap();
    let (_, rest) = rest.split_once("[batching]").unwrap();
    let http = format!(
        "{head}[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"{}\"]\nmodel = \"{MODEL}\"\napi = \"chat\"\n\
         [batching]{rest}",
        server.url
    );
    let path = dir.join("vision-http.toml");
    std::fs::write(&path, http).unwrap();
    let out = dir.join("out");
    let sets =
        ["batching.batch_size=1", "batching.max_in_flight=32", "stop.max_requests=160", "expect.completed=\"== 160\""];
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batchlab"));
    cmd.args(["run", path.to_str().unwrap(), "--output", out.to_str().unwrap(), "--requests-jsonl", "--quiet"]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let output = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let b = &report["benchmarks"][0];
    assert_eq!(b["images"]["requests"], 160, "{}", b["images"]);
    let designed = b["images"]["designed_reuse"].as_f64().unwrap();
    let images = b["images"]["images"].as_f64().unwrap();
    // The server's own count of the images it already had, over the measured requests: each pool
    // picture it first saw in them is one miss more than designed.
    let server_rate = b["server"][0]["mm_cache_hit_rate"].as_f64().expect("the server's mm cache counters");
    assert!(server_rate <= designed + 1e-9 && server_rate >= designed - 8.0 / images, "{server_rate} vs {designed}");

    // Token-exact prompts: the server counted every prompt at its target.
    assert_eq!(
        b["prompt_target"],
        json!({"requests": 160, "differ": 0, "max_abs_diff": 0, "mean_diff": 0.0, "unmeasured": 0})
    );

    // Per request, the server's prompt tokens are the simulator's count of what batchlab sent,
    // and the length the workload sized the prompt to.
    let overrides = Overrides { sets: sets.iter().map(|s| (*s).to_owned()).collect(), seed: None };
    let plan = load_file(&path, &overrides).unwrap();
    let workload = Workload::from_plan(plan.workload()).unwrap();
    let records: Vec<_> = read_records(&out.join("requests.jsonl")).unwrap().map(Result::unwrap).collect();
    assert_eq!(records.len(), 192, "32 warmup and 160 measured");
    for r in &records {
        let request = workload.request(r.id);
        assert_eq!(r.images.unwrap().images as usize, prompt_images(&request.prompt).count());
        let expected = batchlab::engine::sim::prompt::prompt_tokens(&request.prompt).unwrap();
        assert_eq!(r.metrics.as_ref().unwrap().prompt_tokens, Some(expected), "request {}", r.id);
        assert_eq!(r.prompt_tokens_target, Some(expected), "request {}", r.id);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A target the template and images alone overshoot cannot be hit: the text is one word, and the
/// report and each record show by how much the engine's count is over.
#[test]
fn a_target_the_images_overshoot_is_reported_as_missed() {
    let source = "[workload]\nchat = true\nprompt_tokens = 100\noutput_tokens = 4\n\
                  [workload.images]\nbuckets = \"{(16, 16, 1): 1.0}\"\nbase_items_per_request = 1\n\
                  tokens_per_image = 576\ncount_in_prompt = true\n[stop]\nmax_requests = 8\n[warmup]\nrequests = 0\n";
    let plan = parse_str(source, "scenarios/over.toml", Path::new("scenarios"), &Overrides::default()).unwrap();
    let dir = std::env::temp_dir().join(format!("batchlab-images-over-{}", std::process::id()));
    let options = RunOptions { output_dir: Some(dir.clone()), requests_jsonl: true, ..RunOptions::default() };
    let summary = run_blocking(&plan, options).unwrap();
    let target = summary.report.benchmarks[0].prompt_target.clone().expect("targets");
    // One word and the template's 8 tokens over the 576 of the image: 585, 485 over.
    assert_eq!((target.requests, target.differ, target.max_abs_diff, target.mean_diff), (8, 8, 485, 485.0));
    for r in read_records(&dir.join("requests.jsonl")).unwrap().map(Result::unwrap) {
        assert_eq!((r.prompt_tokens_target, r.metrics.unwrap().prompt_tokens), (Some(100), Some(585)));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
