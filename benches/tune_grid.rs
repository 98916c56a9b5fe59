//! `batchlab tune`'s search against a blind grid of the same budget, in virtual time
//! (scripts/bench.sh section 7, docs/performance.md): over many seeded scenarios, which finds the
//! better point?
//!
//! Each scenario is drawn from its seed: the simulator's costs, the scheduler's limit, the
//! prompt and output lengths, the load (a constant rate or a closed loop of clients) and the SLO.
//! For each budget B, the search (`tune::search`, its grid and refinement: B distinct points)
//! and a blind log-spaced grid of at most B points over the same space (as many values per
//! dimension as fit, e.g. 5 × 5 × 4 = 100) each run every point once. Compared: the highest
//! goodput each found; a difference under 1 % is a tie. Also the search's recommendation (which
//! prefers headroom and simplicity within the noise, so it may give up a little goodput) against
//! the grid's best.
//!
//! `cargo bench --bench tune_grid -- [--scenarios N] [--budgets 30,100]`; prints one `TUNE_GRID`
//! line per budget, one `SCENARIO` line per scenario and budget (under `cargo test`, one scenario
//! at a budget of 8, as a smoke test).

use std::path::Path;
use std::time::{Duration, Instant};

use batchlab::run::{RunOptions, run_blocking};
use batchlab::scenario::plan::Plan;
use batchlab::scenario::{Overrides, parse_str};
use batchlab::tune::{LoadKnob, Objective, Space, search, search_plan, with_point};

/// A difference smaller than this (relative) is a tie.
const TIE: f64 = 0.01;

/// splitmix64: the scenario's draws from its seed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Log-uniform between `lo` and `hi`.
    fn log(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.unit()).exp()
    }
}

/// The scenario of seed `seed`.
fn scenario(seed: u64) -> String {
    let mut d = Draw(seed);
    let decode_ms = d.log(0.5, 8.0);
    let prefill_us = d.log(1.0, 30.0);
    let per_seq_us = d.log(10.0, 200.0);
    let fixed_ms = d.log(0.2, 5.0);
    let max_num_seqs = d.log(32.0, 256.0).round() as u32;
    let prompt_max = d.log(64.0, 1024.0).round() as u32;
    let output_max = d.log(16.0, 256.0).round() as u32;
    // A rough capacity (requests/s with full batches), so that the load and the SLO land where
    // settings matter: the load from a third to twice it, the SLO from 2 to 20 times a step.
    let steps = f64::from(output_max) / 2.0;
    let capacity = f64::from(max_num_seqs) / (steps * (decode_ms + per_seq_us * 1e-3 * 16.0) * 1e-3);
    let profile = if d.unit() < 0.5 {
        format!("kind = \"constant\"\nrates = [{:.2}]", capacity * d.log(0.3, 2.0))
    } else {
        format!("kind = \"throughput\"\nmax_concurrency = {}", d.log(8.0, 256.0).round() as u32)
    };
    let ttft_ms = (decode_ms + fixed_ms + prefill_us * 1e-3 * f64::from(prompt_max)) * d.log(2.0, 20.0);
    let tpot_ms = (decode_ms + per_seq_us * 1e-3 * 16.0) * d.log(1.2, 6.0);
    format!(
        "name = \"grid-{seed}\"\nseed = {seed}\n[engine]\nkind = \"sim\"\n[engine.sim]\ntime = \"virtual\"\n\
         decode_step = \"{:.0}us\"\nprefill_per_token = \"{:.0}ns\"\nper_seq = \"{:.0}ns\"\nfixed_overhead = \"{:.0}us\"\n\
         max_num_seqs = {max_num_seqs}\n\
         [workload]\nprompt_tokens = {{ dist = \"uniform\", min = 16, max = {prompt_max} }}\n\
         output_tokens = {{ dist = \"uniform\", min = 4, max = {output_max} }}\nignore_eos = true\n\
         [profile]\n{profile}\n[stop]\nmax_requests = 300\n[warmup]\nrequests = 20\n\
         [slo]\nttft_ms = {ttft_ms:.1}\ntpot_ms = {tpot_ms:.2}\n",
        decode_ms * 1e3,
        prefill_us * 1e3,
        per_seq_us * 1e3,
        fixed_ms * 1e3,
    )
}

/// Values per dimension for a grid of at most `budget` points: as equal as possible, the
/// product as large as fits (100 over three dimensions: 5 × 5 × 4).
fn grid_shape(budget: usize, dims: usize) -> Vec<usize> {
    let mut shape = vec![1usize; dims];
    loop {
        let i = (0..dims).min_by_key(|&i| shape[i]).unwrap_or(0);
        shape[i] += 1;
        if shape.iter().product::<usize>() > budget {
            shape[i] -= 1;
            return shape;
        }
    }
}

fn log_values(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if n <= 1 || hi <= lo {
        return vec![lo];
    }
    (0..n).map(|i| (lo.ln() + (hi.ln() - lo.ln()) * i as f64 / (n - 1) as f64).exp()).collect()
}

fn goodput(plan: &Plan) -> f64 {
    let run = run_blocking(plan, RunOptions::quiet()).expect("a run");
    run.report.benchmarks.first().and_then(|b| b.slo.as_ref()?.goodput_output_tokens_per_s).unwrap_or(0.0)
}

/// The blind grid's best goodput over `space`, at most `budget` points.
fn grid_best(sim: &Plan, space: &Space, budget: usize) -> (f64, usize) {
    let dims = if space.load == LoadKnob::None { 2 } else { 3 };
    let shape = grid_shape(budget, dims);
    let sizes = log_values(f64::from(space.batch_size.0), f64::from(space.batch_size.1), shape[0]);
    let timeouts = log_values(space.batch_timeout_us.0 as f64, space.batch_timeout_us.1 as f64, shape[1]);
    let loads: Vec<Option<f64>> = if dims == 3 {
        log_values(space.load_range.0, space.load_range.1, shape[2]).into_iter().map(Some).collect()
    } else {
        vec![None]
    };
    let (mut best, mut n) = (0.0f64, 0);
    for &load in &loads {
        for &b in &sizes {
            for &t in &timeouts {
                let load = match (space.load, load) {
                    (LoadKnob::MaxConcurrency, Some(l)) => Some(l.round()),
                    (LoadKnob::Rate, Some(l)) => Some((l * 1000.0).round() / 1000.0),
                    _ => None,
                };
                let timeout = Duration::from_micros(((t.round() as u64).div_ceil(100) * 100).max(100));
                let plan = with_point(sim, b.round() as u32, timeout, load).expect("a grid point");
                best = best.max(goodput(&plan));
                n += 1;
            }
        }
    }
    (best, n)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    // `cargo test --all-targets` runs this binary too, without `--bench`: keep that a smoke run.
    let smoke = !args.iter().any(|a| a == "--bench");
    let scenarios: u64 = arg("--scenarios").map_or(if smoke { 1 } else { 50 }, |v| v.parse().expect("--scenarios N"));
    let budgets: Vec<usize> = arg("--budgets")
        .unwrap_or_else(|| if smoke { "8".into() } else { "30,100".into() })
        .split(',')
        .map(|v| v.parse().expect("--budgets 30,100"))
        .collect();
    let started = Instant::now();
    for &budget in &budgets {
        let (mut search_better, mut grid_better, mut ties) = (0, 0, 0);
        let (mut rec_ok, mut ratios) = (0, Vec::new());
        for seed in 1..=scenarios {
            let text = scenario(seed);
            let plan = parse_str(&text, "grid.toml", Path::new("."), &Overrides::default()).expect("a valid scenario");
            let sim = search_plan(&plan, None).expect("a sim plan");
            let space = Space::for_plan(&sim);
            let result = search(&sim, &Objective::Goodput, budget, space.clone()).expect("a search");
            let found = result.points.iter().filter_map(|p| p.score).fold(0.0f64, f64::max);
            let recommended = result.best_point().and_then(|p| p.score).unwrap_or(0.0);
            let (grid, n) = grid_best(&sim, &space, budget);
            let ratio = if grid > 0.0 { found / grid } else { f64::NAN };
            if (found - grid).abs() <= TIE * found.max(grid) {
                ties += 1;
            } else if found > grid {
                search_better += 1;
            } else {
                grid_better += 1;
            }
            if recommended >= grid * (1.0 - TIE) {
                rec_ok += 1;
            }
            if ratio.is_finite() {
                ratios.push(ratio);
            }
            println!(
                "SCENARIO budget={budget} seed={seed} search_points={} grid_points={n} search_best={found:.1} \
                 recommended={recommended:.1} grid_best={grid:.1}",
                result.points.len()
            );
        }
        ratios.sort_by(f64::total_cmp);
        let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
        let worst = ratios.first().copied().unwrap_or(f64::NAN);
        println!(
            "TUNE_GRID budget={budget} scenarios={scenarios} search_better={search_better} grid_better={grid_better} \
             ties={ties} recommended_not_worse={rec_ok} median_ratio={median:.3} worst_ratio={worst:.3}"
        );
    }
    eprintln!("tune_grid: {:.1} s", started.elapsed().as_secs_f64());
}
