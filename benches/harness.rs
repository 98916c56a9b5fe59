//! Harness overhead: an engine that answers at once, end to end through the real-time path (load
//! generator → `Batcher` threads → engine thread → mapper → aggregation), so every nanosecond
//! measured is batchlab's own. The engine ([`InstantEngine`]) has no scheduler and no per-token
//! work: each `generate` reads the clock once and returns every output.
//!
//! `--engine sim` measures the simulator's own speed instead: the simulated engine with its
//! default costs and scheduler in virtual time (what `tune` and every sim scenario run), reported
//! as simulated requests per second of wall time and the virtual time it covers.
//!
//! `cargo bench --bench harness -- [--engine instant|sim] [--requests N] [--rounds R] [--batch-sizes 1,32,256]`
//! (under `cargo test` it runs 2,000 requests once, as a smoke test)
//! prints one line per (round, batch size), then the median per batch size: requests per second
//! of wall time, its inverse in ns, and the CPU time of every thread of the process per request
//! (`CLOCK_PROCESS_CPUTIME_ID` around the whole run, warmup included), which other load on the
//! machine leaves alone. Rounds alternate over the batch sizes so machine noise hits all of them
//! alike. Nothing here asserts on speed. It allocates with mimalloc, as the `batchlab` binary does.

use std::time::{Duration, Instant};

/// The allocator of the `batchlab` binary, so the figures are the CLI's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use batchlab::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, Started,
};
use batchlab::run::{RunOptions, run_blocking, run_with_blocking};
use batchlab::scenario::Scenario;
use batchlab::time::MonotonicClock;

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// [`InstantEngine`] in real time: the harness alone.
    Instant,
    /// The simulator (default costs and limits) in virtual time: the simulator's speed.
    Sim,
}

struct Args {
    engine: Kind,
    requests: u64,
    rounds: usize,
    batch_sizes: Vec<usize>,
    prompt_tokens: u32,
}

fn parse_args() -> Args {
    let mut args = Args {
        engine: Kind::Instant,
        requests: 1_000_000,
        rounds: 5,
        batch_sizes: vec![1, 32, 256],
        prompt_tokens: 16,
    };
    // `cargo test --all-targets` runs this binary too, without `--bench`: keep that a smoke run.
    if !std::env::args().any(|a| a == "--bench") {
        args.requests = 2_000;
        args.rounds = 1;
    }
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--engine" => {
                args.engine = match value().as_str() {
                    "instant" => Kind::Instant,
                    "sim" => Kind::Sim,
                    other => panic!("--engine instant|sim, not {other}"),
                }
            }
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

/// An engine that answers at once: one clock read per batch, then every request's output, with
/// `max_tokens` tokens all "generated" at that instant (so the mapper still has timestamps to
/// turn into TTFT, TPOT and latency). No scheduler, no per-token work, no sleep.
struct InstantEngine;

impl Engine for InstantEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        Ok(EngineInfo::new("instant", "bench").into())
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        let now = MonotonicClock::read().as_secs_f64();
        let mut stats = EngineStats::default();
        stats.scheduled_ts = Some(now);
        stats.first_token_ts = Some(now);
        stats.last_token_ts = Some(now);
        Ok(batch
            .iter()
            .map(|r| {
                EngineOutput::new(Some(r.id), FinishReason::Length)
                    .with_prompt_tokens(r.prompt.token_len().map(|n| n as u32))
                    .with_output_tokens(r.max_tokens)
                    .with_stats(stats.clone())
            })
            .collect())
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }
}

/// Output tokens of every request (fixed, so tokens per second are requests per second times this).
const OUTPUT_TOKENS: u32 = 16;

/// The CPU time this process (every thread, ended ones included) has used so far.
fn process_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}

/// One run: what [`measure`] found.
struct Measured {
    /// Requests per second of wall time in the measured window (the sim: of the whole call).
    per_wall_s: f64,
    /// Wall time of the whole `run` call.
    wall: Duration,
    /// Measured requests.
    requests: u64,
    /// The measured window's own duration in seconds: virtual for the sim.
    window_s: f64,
    /// CPU time of every thread of the process per request of the run (warmup included), in ns:
    /// what a request costs, whatever else the machine runs.
    cpu_ns: f64,
}

fn measure(batch_size: usize, args: &Args) -> Measured {
    // Batch 1 is ~40x slower per request: fewer requests keep its round short.
    let requests = if batch_size == 1 { (args.requests / 10).max(1) } else { args.requests };
    let builder = Scenario::builder()
        .name(&format!("harness-b{batch_size}"))
        .batch_size(batch_size)
        .batch_timeout(Duration::from_millis(1))
        .synthetic(args.prompt_tokens, OUTPUT_TOKENS)
        .profile_throughput(1024)
        .max_requests(requests)
        .warmup_requests(requests / 20);
    let (t0, cpu0) = (Instant::now(), process_cpu());
    let summary = match args.engine {
        Kind::Instant => {
            let plan = builder.build().expect("the harness scenario is valid");
            run_with_blocking(&plan, InstantEngine, RunOptions::default())
        }
        Kind::Sim => {
            let plan = builder.sim_virtual().build().expect("the simulator scenario is valid");
            run_blocking(&plan, RunOptions::default())
        }
    }
    .expect("the run succeeds");
    let (wall, cpu) = (t0.elapsed(), process_cpu().saturating_sub(cpu0));
    let b = &summary.report.benchmarks[0];
    assert_eq!(b.counts.completed, requests, "every measured request completes");
    assert_eq!(b.counts.lost, 0);
    let per_wall_s = match args.engine {
        // Real time: the measured window is wall time, as batchlab reports it.
        Kind::Instant => b.requests_per_s.unwrap_or(0.0),
        // Virtual time: the run's requests (warmup included) per second of the whole call.
        Kind::Sim => (requests + requests / 20) as f64 / wall.as_secs_f64(),
    };
    let cpu_ns = cpu.as_nanos() as f64 / (requests + requests / 20) as f64;
    Measured { per_wall_s, wall, requests, window_s: b.duration_s, cpu_ns }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn main() {
    let args = parse_args();
    let (what, tag) = match args.engine {
        Kind::Instant => ("harness: an engine that answers at once, real time", "HARNESS"),
        Kind::Sim => ("simulator: default costs and scheduler, virtual time", "SIM"),
    };
    println!(
        "{what}; throughput profile, max_concurrency 1024; {} measured requests ({} at batch 1), \
         prompt {} tokens, output {OUTPUT_TOKENS}; {} rounds",
        args.requests,
        (args.requests / 10).max(1),
        args.prompt_tokens,
        args.rounds
    );
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); args.batch_sizes.len()];
    let mut speedups: Vec<Vec<f64>> = vec![Vec::new(); args.batch_sizes.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); args.batch_sizes.len()];
    for round in 0..args.rounds {
        // Alternate the order each round so drift does not favour one batch size.
        let mut order: Vec<usize> = (0..args.batch_sizes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let bs = args.batch_sizes[i];
            let m = measure(bs, &args);
            println!(
                "round {round} batch {bs:>4}: {:>12.0} requests/s  {:>8.0} ns/request  {:>8.0} CPU ns/request  (run() wall {:.3} s for {}; measured window {:.3} s)",
                m.per_wall_s,
                1e9 / m.per_wall_s,
                m.cpu_ns,
                m.wall.as_secs_f64(),
                m.requests,
                m.window_s,
            );
            rates[i].push(m.per_wall_s);
            speedups[i].push(m.window_s / m.wall.as_secs_f64());
            cpu[i].push(m.cpu_ns);
        }
    }
    println!("median over {} rounds:", args.rounds);
    for (i, bs) in args.batch_sizes.iter().enumerate() {
        let m = median(&mut rates[i]);
        let extra = match args.engine {
            Kind::Instant => String::new(),
            // Simulated output tokens per second of wall time: every request generates OUTPUT_TOKENS.
            Kind::Sim => format!(
                " output_tokens_per_s={:.0} virtual_per_wall={:.0}",
                m * f64::from(OUTPUT_TOKENS),
                median(&mut speedups[i])
            ),
        };
        println!(
            "{tag} batch_size={bs} requests_per_s={m:.0} ns_per_request={:.0} cpu_ns_per_request={:.0}{extra}",
            1e9 / m,
            median(&mut cpu[i])
        );
    }
}
