//! Harness overhead: the simulated engine at zero cost, end to end through the real-time path
//! (load generator → `Batcher` threads → engine thread → mapper → aggregation), so every
//! nanosecond measured is batchlab's own.
//!
//! `cargo bench --bench harness -- [--requests N] [--rounds R] [--batch-sizes 1,32,256]`
//! (under `cargo test` it runs 2,000 requests once, as a smoke test)
//! prints one line per (round, batch size), then the median per batch size. Rounds alternate
//! over the batch sizes so machine noise hits all of them alike. Nothing here asserts on speed.

use std::time::{Duration, Instant};

use batchlab::engine::sim::{CostModel, UNLIMITED_SCHEDULER};
use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::Scenario;

struct Args {
    requests: u64,
    rounds: usize,
    batch_sizes: Vec<usize>,
    prompt_tokens: u32,
}

fn parse_args() -> Args {
    let mut args = Args { requests: 1_000_000, rounds: 5, batch_sizes: vec![1, 32, 256], prompt_tokens: 16 };
    // `cargo test --all-targets` runs this binary too, without `--bench`: keep that a smoke run.
    if !std::env::args().any(|a| a == "--bench") {
        args.requests = 2_000;
        args.rounds = 1;
    }
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--requests" => args.requests = value().parse().expect("--requests N"),
            "--rounds" => args.rounds = value().parse().expect("--rounds N"),
            "--prompt-tokens" => args.prompt_tokens = value().parse().expect("--prompt-tokens N"),
            "--batch-sizes" => {
                args.batch_sizes = value().split(',').map(|s| s.trim().parse().expect("--batch-sizes 1,32")).collect()
            }
            // `cargo bench` passes `--bench`; ignore it and anything else libtest-ish.
            _ => {}
        }
    }
    args
}

/// One run; returns (requests/s as batchlab reported it, wall time of the whole `run` call).
fn measure(batch_size: usize, args: &Args) -> (f64, Duration, u64) {
    // Batch 1 is ~40x slower per request: fewer requests keep its round short.
    let requests = if batch_size == 1 { (args.requests / 10).max(1) } else { args.requests };
    let plan = Scenario::builder()
        .name(&format!("harness-b{batch_size}"))
        .sim_real()
        .sim_cost(&CostModel::free())
        .sim_scheduler(&UNLIMITED_SCHEDULER)
        .batch_size(batch_size)
        .batch_timeout(Duration::from_millis(1))
        .synthetic(args.prompt_tokens, 16)
        .profile_throughput(1024)
        .max_requests(requests)
        .warmup_requests(requests / 20)
        .build()
        .expect("the harness scenario is valid");
    let t0 = Instant::now();
    let summary = run_blocking(&plan, RunOptions::default()).expect("the run succeeds");
    let wall = t0.elapsed();
    let b = &summary.report.benchmarks[0];
    assert_eq!(b.counts.completed, requests, "every measured request completes");
    assert_eq!(b.counts.lost, 0);
    (b.requests_per_s.unwrap_or(0.0), wall, requests)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn main() {
    let args = parse_args();
    println!(
        "harness: sim engine, zero cost, real time; throughput profile, max_concurrency 1024; \
         {} measured requests ({} at batch 1), prompt {} tokens, output 16; {} rounds",
        args.requests,
        (args.requests / 10).max(1),
        args.prompt_tokens,
        args.rounds
    );
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); args.batch_sizes.len()];
    for round in 0..args.rounds {
        // Alternate the order each round so drift does not favour one batch size.
        let mut order: Vec<usize> = (0..args.batch_sizes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let bs = args.batch_sizes[i];
            let (rps, wall, n) = measure(bs, &args);
            println!(
                "round {round} batch {bs:>4}: {rps:>12.0} requests/s  {:>8.0} ns/request  (run() wall {:.3} s for {n})",
                1e9 / rps,
                wall.as_secs_f64()
            );
            rates[i].push(rps);
        }
    }
    println!("median over {} rounds:", args.rounds);
    for (i, bs) in args.batch_sizes.iter().enumerate() {
        let m = median(&mut rates[i]);
        println!("HARNESS batch_size={bs} requests_per_s={m:.0} ns_per_request={:.0}", 1e9 / m);
    }
}
