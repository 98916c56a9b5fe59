//! batchlab's overhead against raw vLLM, measured inside one engine so that machine noise hits
//! both sides alike (issue 9: runs of the same thing differ by ±25 % on the shared 2-CPU machine,
//! so whole runs of batchlab against a raw script cannot tell 0.97 from 1.0).
//!
//! ```sh
//! PYO3_PYTHON=~/.cache/batchlab/venv/bin/python cargo bench --features vllm --bench vllm_overhead -- \
//!     [--pairs 10] [--batch-sizes 32,256] [--modes in-process,multiprocess] \
//!     [--scenario scenarios/vllm-cpu.toml] [--engine-log FILE]
//! ```
//!
//! For each mode and batch size B, one child process starts one vLLM engine (the scenario's
//! settings, `engine.vllm.in_process` set per mode) behind a real [`Batcher`] with batch size B,
//! and alternates two kinds of batch over it:
//!
//! - **batchlab**: B requests submitted to the batcher, timed from the first submit to the last
//!   outcome (submit, the engine thread's wake-up, the Rust→Python request dicts,
//!   `VllmEngine.generate`, the checks and conversion of its outputs, the completers);
//! - **raw**: the same kind of B requests, which the benchmark's own [`Engine`] wrapper
//!   (`Alternating`) routes to [`PythonEngine::bench_call`]`("bench_raw_generate", ...)` instead
//!   of `generate`. That method of the vLLM class does what a raw script does
//!   (`TokensPrompt`s, `SamplingParams`, one `LLM.generate`, like `scripts/bench_raw_vllm.py`)
//!   and times only that, with `time.perf_counter()`. The wrapper answers each request with a
//!   minimal output so the batcher completes the batch.
//!
//! Why this design: the raw calls must run on the engine thread (vLLM's `LLM`, its OpenMP team
//! and the GIL live there), and the batcher owns that thread. Routing a marked batch through the
//! batcher reaches it without any change to the batcher or the protocol; the only additions to
//! the library are one `#[doc(hidden)]` method (`bench_call`: call a named method of the started
//! protocol object with the batch) and the bench-only `bench_raw_generate` in the vLLM class.
//!
//! Every batch gets the workload's next B prompts (distinct, so no batch is helped by vLLM's
//! prefix cache: both sides do the same work, the scenario's prompt and output lengths,
//! `ignore_eos`). One batchlab and one raw batch warm both paths up first, unmeasured. A pair is
//! one batch of each, and pairs alternate which side runs first. Per pair, ratio = raw seconds /
//! batchlab seconds (≥ 1 means batchlab is as fast); the summary is the geometric mean with a 95 %
//! confidence interval from the t-distribution on the log ratios (`statrs`).
//!
//! Prints progress to stderr and a markdown table to stdout; the children's (vLLM's) output goes
//! to `--engine-log` (default: a file in the temp directory). Under `cargo test` (no `--bench`)
//! it checks its statistics and says how to run it: a real vLLM run takes minutes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use batchlab::batcher::{BatchConfig, Batcher};
use batchlab::engine::python::PythonEngine;
use batchlab::engine::{ClockDomain, Engine, EngineError, EngineOutput, EngineRequest, FinishReason, Started};
use batchlab::loadgen::Workload;
use batchlab::scenario::plan::EnginePlan;
use batchlab::scenario::{Overrides, load_file};
use batchlab::time::MonotonicClock;
use serde_json::json;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The vLLM class's bench-only method (python/batchlab_engines/vllm_engine.py).
const RAW_METHOD: &str = "bench_raw_generate";

struct Args {
    /// Pairs per batch size (`--pairs 10`, or `--pairs 32=40,256=20`).
    pairs: BTreeMap<usize, usize>,
    default_pairs: usize,
    batch_sizes: Vec<usize>,
    modes: Vec<Mode>,
    scenario: PathBuf,
    engine_log: PathBuf,
    /// Set in a child: run this one mode and batch size.
    child: Option<(Mode, usize)>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    InProcess,
    Multiprocess,
}

impl Mode {
    fn parse(s: &str) -> Mode {
        match s {
            "in-process" => Mode::InProcess,
            "multiprocess" => Mode::Multiprocess,
            _ => panic!("a mode is in-process or multiprocess, not {s}"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Mode::InProcess => "in-process",
            Mode::Multiprocess => "multiprocess",
        }
    }
}

impl Args {
    fn pairs_for(&self, batch_size: usize) -> usize {
        self.pairs.get(&batch_size).copied().unwrap_or(self.default_pairs)
    }
}

fn parse_args() -> Option<Args> {
    if !std::env::args().any(|a| a == "--bench") {
        check_statistics();
        println!(
            "vllm_overhead: a real vLLM run of minutes; run it with `cargo bench --features vllm --bench vllm_overhead`"
        );
        return None;
    }
    let mut args = Args {
        pairs: BTreeMap::new(),
        default_pairs: 10,
        batch_sizes: vec![32, 256],
        modes: vec![Mode::InProcess, Mode::Multiprocess],
        scenario: PathBuf::from("scenarios/vllm-cpu.toml"),
        engine_log: std::env::temp_dir().join(format!("batchlab-vllm-overhead-{}.log", std::process::id())),
        child: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--pairs" => {
                for item in value().split(',') {
                    match item.split_once('=') {
                        Some((bs, n)) => {
                            args.pairs.insert(
                                bs.trim().parse().expect("--pairs B=N"),
                                n.trim().parse().expect("--pairs B=N"),
                            );
                        }
                        None => args.default_pairs = item.trim().parse().expect("--pairs N"),
                    }
                }
            }
            "--batch-sizes" => {
                args.batch_sizes = value().split(',').map(|s| s.trim().parse().expect("--batch-sizes 32,256")).collect()
            }
            "--modes" => args.modes = value().split(',').map(|s| Mode::parse(s.trim())).collect(),
            "--scenario" => args.scenario = PathBuf::from(value()),
            "--engine-log" => args.engine_log = PathBuf::from(value()),
            "--child" => {
                let v = value();
                let (mode, bs) = v.split_once(':').expect("--child MODE:BATCH_SIZE");
                args.child = Some((Mode::parse(mode), bs.parse().expect("--child MODE:BATCH_SIZE")));
            }
            _ => {} // `--bench` and anything libtest-ish
        }
    }
    Some(args)
}

/// The real engine, except that a batch marked raw goes to [`RAW_METHOD`], whose seconds are kept
/// for the driver, and is answered with minimal outputs.
struct Alternating {
    inner: PythonEngine,
    raw_next: Arc<AtomicBool>,
    raw_seconds: Arc<Mutex<Option<f64>>>,
}

impl Engine for Alternating {
    fn start(&mut self) -> Result<Started, EngineError> {
        self.inner.start()
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        if !self.raw_next.swap(false, Ordering::SeqCst) {
            return self.inner.generate(batch);
        }
        let seconds = self.inner.bench_call(RAW_METHOD, batch)?;
        *self.raw_seconds.lock().unwrap() = Some(seconds);
        Ok(batch
            .iter()
            .map(|r| EngineOutput::new(Some(r.id), FinishReason::Length).with_output_tokens(r.max_tokens))
            .collect())
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.inner.shutdown()
    }

    fn clock_domain(&self) -> ClockDomain {
        self.inner.clock_domain()
    }
}

/// One batch of `requests` through the batcher; seconds from the first submit to the last outcome.
fn drive(batcher: &Batcher, requests: Vec<EngineRequest<()>>) -> f64 {
    let expected: Vec<u32> = requests.iter().map(|r| r.max_tokens).collect();
    let n = requests.len();
    let t0 = Instant::now();
    let tickets: Vec<_> = requests.into_iter().map(|r| batcher.submit(r).expect("submit")).collect();
    let outcomes: Vec<_> = tickets.into_iter().map(|t| t.wait()).collect();
    let seconds = t0.elapsed().as_secs_f64();
    for (outcome, max_tokens) in outcomes.into_iter().zip(expected) {
        let c = outcome.expect("every request completes");
        assert_eq!(c.batch_size, n, "the whole batch ran as one generate");
        assert_eq!(c.output.generated_tokens(), Some(max_tokens), "ignore_eos: exactly max_tokens");
    }
    seconds
}

/// A child: one engine, warmup, then `pairs` pairs; prints one `PAIR {json}` line per pair.
fn run_child(args: &Args, mode: Mode, batch_size: usize) {
    batchlab::sys::reset_cpu_affinity();
    batchlab::sys::become_subreaper();
    let overrides = Overrides::default()
        .set(format!("engine.vllm.in_process={}", mode == Mode::InProcess))
        .set(format!("batching.batch_size={batch_size}"));
    let plan = load_file(&args.scenario, &overrides).unwrap_or_else(|e| panic!("{e}"));
    let EnginePlan::Vllm(vllm) = &plan.engine() else { panic!("{} is not a vLLM scenario", args.scenario.display()) };
    let workload = Workload::from_plan(plan.workload()).expect("workload");
    let raw_next = Arc::new(AtomicBool::new(false));
    let raw_seconds = Arc::new(Mutex::new(None));
    let engine = Alternating { inner: vllm.engine(), raw_next: raw_next.clone(), raw_seconds: raw_seconds.clone() };
    // Batches always fill, so the batch timeout never fires; a long one makes sure a slow submit
    // loop (a preempted thread) cannot split a batch.
    let config = BatchConfig::new(batch_size, Duration::from_secs(600))
        .and_then(|c| c.with_generate_timeout(Some(Duration::from_secs(600))))
        .expect("batch config");
    let batcher = Batcher::spawn(engine, config, Arc::new(MonotonicClock));
    let t0 = Instant::now();
    batcher.preload().expect("the engine starts");
    eprintln!("[{} B={batch_size}] engine started in {:.1} s", mode.name(), t0.elapsed().as_secs_f64());

    let mut next_request = 0;
    let mut next_batch = || {
        let batch = (next_request..next_request + batch_size as u64).map(|k| workload.request(k)).collect::<Vec<_>>();
        next_request += batch_size as u64;
        batch
    };
    let batchlab = |batch| drive(&batcher, batch);
    let raw = |batch| {
        raw_next.store(true, Ordering::SeqCst);
        drive(&batcher, batch);
        raw_seconds.lock().unwrap().take().expect("the raw batch ran the raw method")
    };
    // Warmup, unmeasured.
    batchlab(next_batch());
    raw(next_batch());
    let mut sides = vec!["batchlab", "raw"]; // every LLM.generate of this process, in order
    let mut results = Vec::new();
    for pair in 0..args.pairs_for(batch_size) {
        let raw_first = pair % 2 == 1;
        let (bl, rw) = if raw_first {
            let r = raw(next_batch());
            (batchlab(next_batch()), r)
        } else {
            let b = batchlab(next_batch());
            (b, raw(next_batch()))
        };
        sides.extend(if raw_first { ["raw", "batchlab"] } else { ["batchlab", "raw"] });
        results.push((pair, raw_first, bl, rw, sides.len() - if raw_first { 1 } else { 2 }));
    }
    batcher.shutdown().expect("shutdown");
    batchlab::sys::reap_descendants(Duration::from_secs(5));
    // LLM.generate's own duration in each batchlab batch (scripts/bench_timing/sitecustomize.py,
    // which the parent put on PYTHONPATH): batchlab's time outside it is its overhead within
    // the very same batch, free of the noise between batches.
    // The engine's own start-up warm-up (one prompt, `VllmEngine.start`) is a generate too:
    // only calls of a whole batch are ours.
    let calls: Vec<f64> =
        generate_log_durations().into_iter().filter(|&(_, prompts)| prompts == batch_size).map(|(s, _)| s).collect();
    if calls.len() != sides.len() {
        eprintln!("the generate log has {} calls for {} batches: no per-batch overhead", calls.len(), sides.len());
    }
    for (pair, raw_first, bl, rw, call) in results {
        let generate_s = (calls.len() == sides.len()).then(|| calls[call]);
        let line = json!({"mode": mode.name(), "batch_size": batch_size, "pair": pair,
                          "first": if raw_first { "raw" } else { "batchlab" },
                          "batchlab_s": bl, "raw_s": rw, "batchlab_generate_s": generate_s});
        println!("PAIR {line}");
    }
}

/// The (seconds, prompts) of each `LLM.generate` in `$BATCHLAB_BENCH_GENERATE_LOG` ("start end
/// prompts" per call).
fn generate_log_durations() -> Vec<(f64, usize)> {
    let Some(path) = std::env::var_os("BATCHLAB_BENCH_GENERATE_LOG") else { return Vec::new() };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let v: Vec<f64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (v.len() >= 3).then(|| (v[1] - v[0], v[2] as usize))
        })
        .collect()
}

#[derive(Clone, Debug)]
struct Pair {
    mode: String,
    batch_size: usize,
    batchlab_s: f64,
    raw_s: f64,
    /// `LLM.generate`'s own seconds inside the batchlab batch.
    batchlab_generate_s: Option<f64>,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.raw_s / self.batchlab_s
    }
    /// batchlab's seconds outside `LLM.generate`, in its own batch.
    fn overhead_s(&self) -> Option<f64> {
        self.batchlab_generate_s.map(|g| self.batchlab_s - g)
    }
}

/// Geometric mean of `ratios` and its 95 % confidence interval (t-distribution on the logs).
fn geometric_mean_ci(ratios: &[f64]) -> (f64, f64, f64) {
    let n = ratios.len() as f64;
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let mean = logs.iter().sum::<f64>() / n;
    if ratios.len() < 2 {
        return (mean.exp(), f64::NAN, f64::NAN);
    }
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = StudentsT::new(0.0, 1.0, n - 1.0).expect("n >= 2").inverse_cdf(0.975);
    let half = t * (var / n).sqrt();
    (mean.exp(), (mean - half).exp(), (mean + half).exp())
}

/// Under `cargo test`: the interval against one worked by hand (logs 0, ±0.1: sd 0.1, n 3,
/// t(0.975, 2) = 4.3027, half-width 0.24841).
fn check_statistics() {
    let (gm, lo, hi) = geometric_mean_ci(&[1.0, 0.1f64.exp(), (-0.1f64).exp()]);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-4;
    assert!(close(gm, 1.0) && close(lo, (-0.24841f64).exp()) && close(hi, 0.24841f64.exp()), "{gm} {lo} {hi}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn main() {
    let Some(args) = parse_args() else { return };
    if let Some((mode, bs)) = args.child {
        run_child(&args, mode, bs);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let log = std::fs::File::create(&args.engine_log).expect("engine log");
    eprintln!(
        "vllm_overhead: pairs per mode for batch sizes {:?}: {:?}, engine output in {}",
        args.batch_sizes,
        args.batch_sizes.iter().map(|&b| args.pairs_for(b)).collect::<Vec<_>>(),
        args.engine_log.display()
    );
    let mut pairs = Vec::new();
    let timing = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/bench_timing");
    for &mode in &args.modes {
        for &bs in &args.batch_sizes {
            let generate_log = std::env::temp_dir().join(format!("batchlab-vllm-overhead-{}-{bs}.log", mode.name()));
            let _ = std::fs::remove_file(&generate_log);
            let mut child = Command::new(&exe)
                .args(["--bench", "--child", &format!("{}:{bs}", mode.name())])
                .args(["--pairs", &args.pairs_for(bs).to_string()])
                .env("PYTHONPATH", &timing)
                .env("BATCHLAB_BENCH_GENERATE_LOG", &generate_log)
                .arg("--scenario")
                .arg(&args.scenario)
                .stdout(Stdio::piped())
                .stderr(log.try_clone().expect("engine log"))
                .spawn()
                .expect("spawn the benchmark child");
            let stdout = child.stdout.take().expect("piped");
            for line in BufReader::new(stdout).lines() {
                let line = line.expect("child output");
                let Some(json) = line.strip_prefix("PAIR ") else { continue };
                let v: serde_json::Value = serde_json::from_str(json).expect("PAIR json");
                let p = Pair {
                    mode: v["mode"].as_str().unwrap().to_owned(),
                    batch_size: v["batch_size"].as_u64().unwrap() as usize,
                    batchlab_s: v["batchlab_s"].as_f64().unwrap(),
                    raw_s: v["raw_s"].as_f64().unwrap(),
                    batchlab_generate_s: v["batchlab_generate_s"].as_f64(),
                };
                eprintln!(
                    "[{} B={}] pair {:>2} ({} first): batchlab {:.4} s (overhead {:.2} ms), raw {:.4} s, raw/batchlab {:.4}",
                    p.mode,
                    p.batch_size,
                    v["pair"],
                    v["first"].as_str().unwrap(),
                    p.batchlab_s,
                    p.overhead_s().unwrap_or(f64::NAN) * 1e3,
                    p.raw_s,
                    p.ratio()
                );
                pairs.push(p);
            }
            let status = child.wait().expect("wait for the child");
            assert!(
                status.success(),
                "the {} B={bs} child failed ({status}); see {}",
                mode.name(),
                args.engine_log.display()
            );
        }
    }
    print_table(&pairs);
}

fn print_table(pairs: &[Pair]) {
    let mut groups: BTreeMap<(usize, String), Vec<&Pair>> = BTreeMap::new();
    for p in pairs {
        groups.entry((p.batch_size, p.mode.clone())).or_default().push(p);
    }
    println!(
        "| mode | batch size | pairs | median batchlab (s) | median raw (s) | geometric mean raw/batchlab | 95 % CI | lower bound ≥ 0.97 | batchlab outside `LLM.generate`, median (ms) | share |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|:---:|---:|---:|");
    for ((bs, mode), ps) in &groups {
        let ratios: Vec<f64> = ps.iter().map(|p| p.ratio()).collect();
        let (gm, lo, hi) = geometric_mean_ci(&ratios);
        let overheads: Vec<f64> = ps.iter().filter_map(|p| p.overhead_s()).collect();
        let shares: Vec<f64> = ps.iter().filter_map(|p| p.overhead_s().map(|o| o / p.batchlab_s)).collect();
        let (overhead, share) = if overheads.is_empty() {
            ("–".to_owned(), "–".to_owned())
        } else {
            (format!("{:.1}", median(overheads) * 1e3), format!("{:.2} %", median(shares) * 100.0))
        };
        println!(
            "| {mode} | {bs} | {} | {:.4} | {:.4} | **{gm:.4}** | {lo:.4} – {hi:.4} | {} | {overhead} | {share} |",
            ps.len(),
            median(ps.iter().map(|p| p.batchlab_s).collect()),
            median(ps.iter().map(|p| p.raw_s).collect()),
            if lo >= 0.97 { "yes" } else { "no" }
        );
        eprintln!(
            "SUMMARY mode={mode} batch_size={bs} pairs={} geomean={gm:.4} ci_low={lo:.4} ci_high={hi:.4}",
            ps.len()
        );
    }
    println!();
    println!("<details><summary>Every pair</summary>");
    println!();
    println!(
        "| mode | batch size | pair | batchlab (s) | raw (s) | raw/batchlab | batchlab outside `LLM.generate` (ms) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for ((bs, mode), ps) in &groups {
        for (i, p) in ps.iter().enumerate() {
            let overhead = p.overhead_s().map_or("–".to_owned(), |o| format!("{:.1}", o * 1e3));
            println!("| {mode} | {bs} | {i} | {:.4} | {:.4} | {:.4} | {overhead} |", p.batchlab_s, p.raw_s, p.ratio());
        }
    }
    println!();
    println!("</details>");
}
