//! The simulator's fidelity (issue 11): calibrate once from the real engine, then predict held-out
//! settings with the calibrated simulator and measure the same settings on the real engine.
//!
//! ```sh
//! PYO3_PYTHON=~/.cache/batchlab/venv/bin/python cargo bench --features vllm --bench fidelity -- \
//!     [--scenario scenarios/vllm-cpu.toml] [--rounds 15] [--out FILE] [--work DIR] [--sim-only] \
//!     [--sequential] [--profile PROFILE.toml | --calibration WORK/calibration] \
//!     [--measured WORK/measured.json] [--bootstrap 200]
//! ```
//!
//! The held-out rows are settings the design did not run: batch sizes 8, 64 and 256, prompts of 64
//! and 256 tokens and outputs of 32 and 128 (one factor at a time around the scenario's 32 × 128 →
//! 64), one constant-rate profile and one whole-dataset run (every request in one batch), each a
//! [`Plan`] run by the ordinary run loop and batcher, on the real engine and on the simulator,
//! which reads the profile through `engine.sim.profile` (virtual time). A last, control row
//! repeats a setting of the design itself (b16-p16-o64): its error is the fit's own. Every row
//! runs `--rounds` times (odd rounds in reverse row order), each run with prompts of its own (a
//! seed per row and round, shared by its real and simulated run), so no prompt is served from an
//! earlier run's prefix cache and the real engine's own run-to-run spread is measured in the same
//! run. The rows are short (one to eight batches) and the rounds many: on a machine whose speed
//! drifts over tens of seconds, many short rounds sample more of its states than a few long ones.
//!
//! 1. By default, **interleaved**: one engine start runs the warm-up, then the designed batches of
//!    `batchlab calibrate SCENARIO` (`calibrate::design_runs`) and the held-out real runs, the
//!    design spread evenly among them; then the fit of the designed batches alone (`fit_dirs`, as
//!    `batchlab calibrate` does), written to `<work>/profile.toml`. Calibration and measurement
//!    then see the same machine, and the fit still never sees a held-out setting.
//! 2. `--sequential`: exactly what `batchlab calibrate SCENARIO` does first (`calibrate_scenario`,
//!    one engine start), then the held-out rows on a second engine start: a user's workflow, with
//!    the machine's drift between the two in every error.
//! 3. The simulator predicts every row and round with the profile.
//!
//! Per row and metric (output tok/s, latency p50 and p99, TTFT p50): measured = median of the
//! real rounds, predicted = median of the simulated ones (identical: virtual time), error =
//! (predicted − measured) / measured, spread = the real rounds' interquartile range / their median
//! (the middle half of the rounds: robust to one odd round, as max − min over many rounds is not).
//! Goal: |throughput error| ≤ 5 % and |latency p50 error| ≤ 10 % on every row.
//!
//! Each error comes with a **95 % bootstrap interval** (`--bootstrap` resamples, 0 for none), so
//! that a miss can be told from the noise. Each resample draws the real rounds again with
//! replacement (the measurement's noise) and, when the design's runs are at hand, draws each
//! setting's designed batches again with replacement, refits the profile from them and predicts
//! every row again (the calibration's noise: the fit saw one draw of a noisy machine too). The
//! table then says for every goal whether its whole interval lies inside the goal, outside it, or
//! across its edge (the noise cannot decide).
//!
//! A last table takes every real batch of the held-out runs and sets its time (dispatch to return)
//! against the profile's time for that same batch, its requests replayed through the simulator's
//! scheduler: the service-time error, apart from the queueing around it. A row whose latency
//! misses while its batches do not is a row whose dynamics amplify a small error.
//!
//! The real measurements are saved to `<work>/measured.json`, each real held-out run's report and
//! requests.jsonl to `<work>/held-out/row<i>-<plan>-r<round>/`. `--profile` skips the calibration and
//! predicts with a given profile; `--measured` skips the real runs and compares with an earlier
//! run's measurements: together they re-judge a new fit against the same real numbers in
//! milliseconds (the rows must be the same). `--calibration` instead of `--profile` refits from
//! an earlier run's designed batches (its `<work>/calibration`), which also gives the bootstrap
//! the batches to resample.
//!
//! `--sim-only` (what `just bench --quick` runs, no Python): the "real" engine is the simulator
//! with the hand-set costs of `scenarios/throughput.toml`, so the table checks the whole pipeline
//! (design, fit, profile, `engine.sim.profile`) end to end in seconds. vLLM's output goes to
//! `<work>/engine.log`; progress goes to the terminal, the markdown table to `--out` (default
//! stdout, after the engine's output is released).

use std::path::{Path, PathBuf};
use std::time::Instant;

use batchlab::calibrate::{
    DESIGN, DesignOptions, DesignRun, Setting, calibrate_scenario, design_runs, design_session, fit_dirs,
    fit_measurements, read_dirs, run_designed, setting_plan, spread_evenly,
};
use batchlab::engine::sim::Profile;
use batchlab::report::BenchmarkResult;
use batchlab::rng::SplitMix64;
use batchlab::run::progress::ProgressMode;
use batchlab::run::{EngineSession, Interrupt, RunOptions};
use batchlab::scenario::plan::{EnginePlan, Plan};
use batchlab::scenario::{Overrides, keys, load_file};
use std::io::Write as _;

struct Args {
    scenario: PathBuf,
    rounds: usize,
    out: Option<PathBuf>,
    work: PathBuf,
    sim_only: bool,
    /// Skip the calibration: predict with this profile.
    profile: Option<PathBuf>,
    /// Skip the real runs: compare with these measurements (a `measured.json` of an earlier run).
    measured: Option<PathBuf>,
    /// Skip the calibration's runs: refit from these designed runs (an earlier `<work>/calibration`).
    calibration: Option<PathBuf>,
    /// Bootstrap resamples for the errors' intervals (0: none).
    bootstrap: usize,
    /// Calibrate first, then measure on a second engine start (a user's workflow: the machine's
    /// drift between the two is in every error), instead of interleaving the design's batches
    /// with the held-out runs on one engine start.
    sequential: bool,
}

fn parse_args() -> Option<Args> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("fidelity: a real vLLM run of minutes; run it with `cargo bench --features vllm --bench fidelity`");
        return None;
    }
    let mut args = Args {
        scenario: PathBuf::from("scenarios/vllm-cpu.toml"),
        rounds: 15,
        out: None,
        work: std::env::temp_dir().join(format!("batchlab-fidelity-{}", std::process::id())),
        sim_only: false,
        profile: None,
        measured: None,
        calibration: None,
        bootstrap: 200,
        sequential: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--scenario" => args.scenario = PathBuf::from(value()),
            "--rounds" => args.rounds = value().parse().expect("--rounds N"),
            "--out" => args.out = Some(PathBuf::from(value())),
            "--work" => args.work = PathBuf::from(value()),
            "--sim-only" => args.sim_only = true,
            "--profile" => args.profile = Some(PathBuf::from(value())),
            "--measured" => args.measured = Some(PathBuf::from(value())),
            "--calibration" => args.calibration = Some(PathBuf::from(value())),
            "--bootstrap" => args.bootstrap = value().parse().expect("--bootstrap N"),
            "--sequential" => args.sequential = true,
            _ => {} // `--bench` and anything libtest-ish
        }
    }
    if args.sim_only && args.scenario == Path::new("scenarios/vllm-cpu.toml") {
        args.scenario = PathBuf::from("scenarios/throughput.toml");
    }
    Some(args)
}

/// A progress line on the terminal (the engine's output may be captured).
fn say(text: &str) {
    let _ = writeln!(batchlab::sys::terminal(), "{text}");
}

/// One held-out setting: its label and the real engine's plan (the simulator's is the same plan
/// with the profile's engine).
struct Row {
    label: String,
    plan: Plan,
}

/// The held-out rows around the scenario's own setting (batch 32, prompt 128, output 64): one
/// factor at a time, then a constant rate and the whole dataset in one batch. `stream` gives each
/// run its own prompts.
fn held_out_rows(base: &Plan, stream: u64) -> Vec<Row> {
    let setting = |batch_size, prompt_tokens, output_tokens, batches| Setting {
        batch_size,
        prompt_tokens,
        output_tokens,
        batches,
    };
    let mut rows = Vec::new();
    let mut add = |label: String, plan: Plan| rows.push(Row { label, plan });
    for (i, (label, s)) in [
        ("batch 8", setting(8, 128, 64, 8)),
        ("batch 64", setting(64, 128, 64, 2)),
        ("batch 256", setting(256, 128, 64, 1)),
        ("prompt 64", setting(32, 64, 64, 4)),
        ("prompt 256", setting(32, 256, 64, 4)),
        ("output 32", setting(32, 128, 32, 4)),
        ("output 128", setting(32, 128, 128, 2)),
    ]
    .into_iter()
    .enumerate()
    {
        add(format!("{label} ({})", s.name()), setting_plan(base, &s, stream * 100 + i as u64).expect("a setting"));
    }
    // Constant rate: 96 arrivals at 30/s into batches of up to 32 (partial batches on the timeout).
    let constant = setting_plan(base, &setting(32, 128, 64, 3), stream * 100 + 50)
        .and_then(|p| {
            p.with_sets(&[keys::PROFILE.table([keys::PROFILE_KIND.to("constant"), keys::RATES.to(vec![30.0])])])
        })
        .expect("a constant-rate setting");
    add("constant 30 req/s (b32-p128-o64)".into(), constant);
    // The whole dataset in one batch: 128 requests, batch size 256 (the batch leaves on its timeout).
    let whole = setting_plan(base, &setting(128, 128, 64, 1), stream * 100 + 60)
        .and_then(|p| p.with_sets(&[keys::BATCH_SIZE.to(256)]))
        .expect("valid batching");
    add("whole dataset: 128 in one batch of ≤ 256".into(), whole);
    // A control, not held out: two batches of a setting the design ran. Its error is the fit's own
    // (and, with `--sequential`, the machine's drift between calibration and measurement); if
    // only the held-out rows miss, the model does not extrapolate.
    let control = DESIGN
        .iter()
        .find(|s| s.name() == "b16-p16-o64")
        .map(|s| Setting { batches: 2, ..*s })
        .expect("the control is a setting of the design");
    add(format!("{CONTROL} ({})", control.name()), setting_plan(base, &control, stream * 100 + 70).expect("a setting"));
    rows
}

/// What `<work>/measured.json` holds: the real engine's metrics per row and round.
#[derive(serde::Serialize, serde::Deserialize)]
struct Measurements {
    labels: Vec<String>,
    /// Per row (in `labels` order), per round.
    rounds: Vec<Vec<Measured>>,
    /// [`host_probe_ms`] before each real run, in run order (empty in files from before it).
    #[serde(default)]
    host_probe_ms: Vec<f64>,
}

/// The time of a fixed piece of CPU work (eight 128 × 128 matrix products in plain Rust: no
/// Python, no vLLM, no allocation), in ms. Run before every held-out real run, its spread is the
/// host's own noise at the same moments: what no model of the engine can predict.
fn host_probe_ms() -> f64 {
    const N: usize = 128;
    let a: Vec<f32> = (0..N * N).map(|i| (i % 7) as f32 * 0.25).collect();
    let mut c = vec![0.0f32; N * N];
    let t = Instant::now();
    let mut b = a.clone();
    for _ in 0..8 {
        for i in 0..N {
            for j in 0..N {
                let mut sum = 0.0f32;
                for k in 0..N {
                    sum += a[i * N + k] * b[k * N + j];
                }
                c[i * N + j] = sum * 1e-3;
            }
        }
        std::mem::swap(&mut b, &mut c);
        std::hint::black_box(&b);
    }
    t.elapsed().as_secs_f64() * 1e3
}

/// The label of the in-sample control row, which has no goal.
const CONTROL: &str = "control, in the design";

/// The metrics the table compares, from a run's one benchmark.
#[derive(Copy, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Measured {
    output_tok_s: f64,
    latency_p50: f64,
    latency_p99: f64,
    ttft_p50: f64,
}

impl Measured {
    const NAMES: [&'static str; 4] = ["output tok/s", "latency p50 (ms)", "latency p99 (ms)", "TTFT p50 (ms)"];

    fn of(b: &BenchmarkResult) -> Self {
        let d = &b.distributions;
        Measured {
            output_tok_s: b.output_tokens_per_s.unwrap_or(f64::NAN),
            latency_p50: d.latency.p50.unwrap_or(f64::NAN),
            latency_p99: d.latency.p99.unwrap_or(f64::NAN),
            ttft_p50: d.ttft.p50.unwrap_or(f64::NAN),
        }
    }

    fn get(&self, i: usize) -> f64 {
        [self.output_tok_s, self.latency_p50, self.latency_p99, self.ttft_p50][i]
    }
}

/// The `q` quantile of sorted `values`, linearly interpolated between ranks.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => {
            let at = q * (n - 1) as f64;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

/// Where the real held-out runs write their reports, under the work directory.
const HELD_OUT: &str = "held-out";

/// The start of the name of every held-out run directory of row `row`.
fn held_out_prefix(row: usize) -> String {
    format!("row{row}-")
}

/// The output directory of row `row`'s real run in `round`: `<work>/held-out/row<i>-<plan>-r<round>`.
fn held_out_dir(work: &Path, row: usize, round: usize, plan: &Plan) -> PathBuf {
    work.join(HELD_OUT).join(format!("{}{}-r{round}", held_out_prefix(row), plan.name()))
}

/// Runs `plan` and returns its one benchmark's metrics; a run with errors or lost requests fails.
fn run_row(session: &mut EngineSession, plan: &Plan) -> Measured {
    run_row_into(session, plan, None)
}

/// [`run_row`], its report and requests.jsonl written to `output` (the real runs: for a look at
/// each batch afterwards, e.g. with `batchlab calibrate` or a replay under the profile).
fn run_row_into(session: &mut EngineSession, plan: &Plan, output: Option<PathBuf>) -> Measured {
    let options = RunOptions { requests_jsonl: output.is_some(), output_dir: output, ..RunOptions::quiet() };
    let summary = session.run(plan, options).unwrap_or_else(|e| panic!("{}: {e}", plan.name()));
    let b = summary.report.benchmarks.first().unwrap_or_else(|| panic!("{}: no benchmark", plan.name()));
    assert!(
        !summary.report.incomplete && b.counts.errors == 0 && b.counts.completed == b.counts.submitted,
        "{}: {} of {} completed, {} errors",
        plan.name(),
        b.counts.completed,
        b.counts.submitted,
        b.counts.errors
    );
    Measured::of(b)
}

fn main() {
    let Some(args) = parse_args() else { return };
    batchlab::sys::reset_cpu_affinity();
    batchlab::sys::become_subreaper();
    std::fs::create_dir_all(&args.work).expect("creating the work directory");
    let started = Instant::now();
    let base = load_file(&args.scenario, &Overrides::default()).unwrap_or_else(|e| panic!("{e}"));
    let real_runs = !args.sim_only && args.measured.is_none();
    let capture = real_runs.then(|| {
        batchlab::sys::EngineLog::redirect(&args.work.join("engine.log")).expect("capturing the engine's output")
    });

    let earlier: Option<Measurements> = args.measured.as_ref().map(|path| {
        serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    });
    // With earlier measurements, the rows they have (an older run may lack the newer rows).
    let wanted = |label: &str| earlier.as_ref().is_none_or(|m| m.labels.iter().any(|l| l == label));
    let labels: Vec<String> = held_out_rows(&base, 0).into_iter().map(|r| r.label).filter(|l| wanted(l)).collect();
    if let Some(m) = &earlier {
        assert!(m.labels.iter().all(|l| labels.contains(l)), "{:?} has rows this bench does not know", args.measured);
    }
    let rounds = earlier.as_ref().map_or(args.rounds, |m| m.rounds[0].len());
    // The held-out runs, round by round (odd rounds in reverse row order): (row, round, plan).
    let mut held: Vec<(usize, usize, Plan)> = Vec::new();
    for round in 0..rounds {
        let rows: Vec<Row> = held_out_rows(&base, 1 + round as u64).into_iter().filter(|r| wanted(&r.label)).collect();
        let mut order: Vec<usize> = (0..rows.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        held.extend(order.into_iter().map(|i| (i, round, rows[i].plan.clone())));
    }
    let options = DesignOptions {
        runs_dir: args.work.join("calibration"),
        progress: ProgressMode::Off,
        screen: Default::default(),
        interrupt: Interrupt::never(),
    };
    let mut measured: Vec<Vec<Measured>> = vec![Vec::new(); labels.len()];
    let mut host_ms: Vec<f64> = Vec::new();
    let measure_real = |real: &mut EngineSession,
                        row: usize,
                        round: usize,
                        plan: &Plan,
                        measured: &mut Vec<Vec<Measured>>,
                        host_ms: &mut Vec<f64>| {
        host_ms.push(host_probe_ms());
        let m = run_row_into(real, plan, Some(held_out_dir(&args.work, row, round, plan)));
        say(&format!(
            "fidelity: round {round} {}: real {:.0} tok/s, p50 {:.1} ms",
            labels[row], m.output_tok_s, m.latency_p50
        ));
        measured[row].push(m);
    };
    let interleaved = args.profile.is_none() && args.measured.is_none() && !args.sequential;
    let t0 = Instant::now();
    let mut measure_s = 0.0;
    // 1. The profile: calibrated as `batchlab calibrate SCENARIO` does, interleaved with the
    // held-out runs or before them, or given.
    let fitted = if interleaved {
        // The design's runs and the held-out runs on one engine start, the design spread evenly
        // among the held-out runs (each at its fractional position, the warm-up first); the fit
        // sees only the design's directories.
        say(&format!("fidelity: calibrating from {} with the held-out runs interleaved ...", args.scenario.display()));
        let design = design_runs(&base, DESIGN).unwrap_or_else(|e| panic!("calibrate: {e}"));
        let mut real = design_session(&design, &options).unwrap_or_else(|e| panic!("calibrate: {e}"));
        let (warmup, rest) = design.split_first().expect("a warm-up run");
        run_designed(&mut real, &warmup.0, &warmup.1, &options).unwrap_or_else(|e| panic!("calibrate: {e}"));
        let mut dirs = Vec::new();
        let mut engine = None;
        // List 0: the design's runs, list 1: the held-out runs.
        for (list, i) in spread_evenly(&[rest.len(), held.len()]) {
            if list == 0 {
                let (name, plan) = &rest[i];
                let (dir, info) =
                    run_designed(&mut real, name, plan, &options).unwrap_or_else(|e| panic!("calibrate: {e}"));
                dirs.push(dir);
                engine.get_or_insert(info);
            } else {
                let (row, round, plan) = &held[i];
                measure_real(&mut real, *row, *round, plan, &mut measured, &mut host_ms);
            }
        }
        real.finish().unwrap_or_else(|e| panic!("shutting the engine down: {e}"));
        measure_s = t0.elapsed().as_secs_f64();
        let profile = fit_dirs(&dirs).unwrap_or_else(|e| panic!("calibrate: {e}"));
        Some((profile, DesignRun { dirs, engine: engine.unwrap_or_default() }))
    } else if let Some(dir) = &args.calibration {
        // An earlier run's designed batches, refitted.
        let dirs: Vec<PathBuf> = design_runs(&base, DESIGN)
            .expect("the design")
            .into_iter()
            .skip(1)
            .map(|(name, _)| dir.join(name))
            .collect();
        let profile = fit_dirs(&dirs).unwrap_or_else(|e| panic!("calibrate from {}: {e}", dir.display()));
        Some((profile, DesignRun { dirs, engine: Default::default() }))
    } else if args.profile.is_none() {
        say(&format!("fidelity: calibrating from {} ...", args.scenario.display()));
        Some(calibrate_scenario(&base, &options).unwrap_or_else(|e| panic!("calibrate: {e}")))
    } else {
        None
    };
    let (profile_path, design) = match (fitted, &args.profile) {
        (Some((profile, design)), _) => {
            let path = args.work.join("profile.toml");
            profile.write(&path).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
            (path, Some(design))
        }
        (None, Some(path)) => (path.clone(), None),
        (None, None) => unreachable!("a profile is fitted unless one is given"),
    };
    let calibrate_s = t0.elapsed().as_secs_f64() - measure_s;
    say(&format!("fidelity: profile {} ({:.1} s)", profile_path.display(), t0.elapsed().as_secs_f64()));

    // The simulator's engine, through `engine.sim.profile` as a user's scenario names it.
    let sim_scenario = args.work.join("fidelity-sim.toml");
    let absolute = std::fs::canonicalize(&profile_path).unwrap_or_else(|e| panic!("{}: {e}", profile_path.display()));
    std::fs::write(
        &sim_scenario,
        format!(
            "name = \"fidelity-sim\"\n\n[engine]\nkind = \"sim\"\n\n[engine.sim]\ntime = \"virtual\"\nprofile = {:?}\n",
            absolute.display().to_string()
        ),
    )
    .expect("writing the simulator's scenario");
    let sim_engine = load_file(&sim_scenario, &Overrides::default()).unwrap_or_else(|e| panic!("{e}")).engine().clone();

    // 2-3. The held-out rows: measured (unless interleaved above, or taken from an earlier run)
    // and predicted, row by row.
    // Each engine is started once, for plans like the first held-out one (no faults).
    let first = &held.first().expect("a held-out run").2;
    let mut real = (real_runs && !interleaved)
        .then(|| EngineSession::new(first, &Interrupt::never()).unwrap_or_else(|e| panic!("{e}")));
    let sim_first = first.with_engine(&sim_engine).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = EngineSession::new(&sim_first, &Interrupt::never()).unwrap_or_else(|e| panic!("{e}"));
    let mut predicted: Vec<Vec<Measured>> = vec![Vec::new(); labels.len()];
    let t1 = Instant::now();
    for (i, round, plan) in &held {
        let (i, round) = (*i, *round);
        if !interleaved {
            match (&mut real, &earlier) {
                (Some(real), _) => measure_real(real, i, round, plan, &mut measured, &mut host_ms),
                (None, Some(e)) => {
                    if host_ms.is_empty() {
                        host_ms.clone_from(&e.host_probe_ms);
                    }
                    let at = e.labels.iter().position(|l| *l == labels[i]).expect("a measured row");
                    measured[i].push(e.rounds[at][round]);
                }
                // --sim-only: the scenario's own (simulated) engine stands in for the real one.
                (None, None) => {
                    host_ms.push(host_probe_ms());
                    let dir = held_out_dir(&args.work, i, round, plan);
                    let mut stand_in = EngineSession::new(plan, &Interrupt::never()).expect("the simulator");
                    measured[i].push(run_row_into(&mut stand_in, plan, Some(dir)));
                    stand_in.finish().expect("the simulator shuts down");
                }
            }
        }
        let sim_plan = plan.with_engine(&sim_engine).unwrap_or_else(|e| panic!("{e}"));
        let p = run_row(&mut sim, &sim_plan);
        say(&format!(
            "fidelity: round {round} {}: sim {:.0} tok/s, p50 {:.1} ms",
            labels[i], p.output_tok_s, p.latency_p50
        ));
        predicted[i].push(p);
    }
    if let Some(real) = real {
        real.finish().unwrap_or_else(|e| panic!("shutting the engine down: {e}"));
    }
    sim.finish().expect("the simulator shuts down");
    if !interleaved {
        measure_s = t1.elapsed().as_secs_f64();
    }
    if let Some(capture) = capture {
        let _ = capture.restore();
    }
    // The measurements, to compare another profile with them later (`--measured`).
    let saved = Measurements { labels: labels.clone(), rounds: measured.clone(), host_probe_ms: host_ms.clone() };
    let saved_path = args.work.join("measured.json");
    std::fs::write(&saved_path, serde_json::to_vec_pretty(&saved).expect("json"))
        .unwrap_or_else(|e| panic!("writing {}: {e}", saved_path.display()));

    // The errors' intervals: the rounds resampled and, with the design's runs, the fit too.
    // Round 0 runs the rows in row order.
    let first_plans: Vec<Plan> = held.iter().filter(|(_, round, _)| *round == 0).map(|(_, _, p)| p.clone()).collect();
    assert_eq!(first_plans.len(), labels.len(), "round 0 runs every row once");
    let resampled = design.as_ref().map(|d| d.dirs.as_slice()).filter(|_| args.bootstrap > 0).map(|dirs| {
        say(&format!("fidelity: bootstrap, {} refits of the profile ...", args.bootstrap));
        let first: Vec<Measured> = predicted.iter().map(|p| p[0]).collect();
        refit_predictions(dirs, &sim_engine, &first_plans, &first, args.bootstrap)
    });
    let intervals = error_intervals(&measured, &predicted, resampled.as_deref(), args.bootstrap);
    let table = render(&labels, &measured, &predicted, &intervals, (args.bootstrap, resampled.is_some()), rounds);
    let mut text = String::new();
    let profile = batchlab::engine::sim::Profile::load(&profile_path).unwrap_or_else(|e| panic!("{e}"));
    let rows = labels.iter().filter(|l| !l.starts_with(CONTROL)).count();
    let control = if labels.iter().any(|l| l.starts_with(CONTROL)) { " and a control" } else { "" };
    let whole = started.elapsed().as_secs_f64();
    match &design {
        Some(_) if args.calibration.is_some() => text.push_str(&format!(
            "Refitted from the designed batches in `{}`; {rows} held-out rows{control} × {rounds} rounds {}; \
             whole bench {whole:.0} s.\n\n",
            args.calibration.as_ref().expect("a calibration directory").display(),
            if args.measured.is_some() { "taken from an earlier run" } else { "measured" },
        )),
        Some(design) if interleaved => text.push_str(&format!(
            "Calibrated from `{}` ({} {}): the {} designed batches interleaved with the {rows} held-out rows{control} × \
             {rounds} rounds on one engine start, {measure_s:.0} s; the fit saw only the designed batches; \
             whole bench {whole:.0} s.\n\n",
            args.scenario.display(),
            design.engine.name,
            design.engine.version,
            design.dirs.len(),
        )),
        Some(design) => text.push_str(&format!(
            "Calibrated from `{}` ({} {}) in {calibrate_s:.0} s ({} designed batches, one engine start), then \
             {rows} held-out rows{control} × {rounds} rounds measured on a second engine start in {measure_s:.0} s; \
             whole bench {whole:.0} s.\n\n",
            args.scenario.display(),
            design.engine.name,
            design.engine.version,
            design.dirs.len(),
        )),
        None => {
            let source = if args.measured.is_some() { "taken from an earlier run" } else { "measured" };
            text.push_str(&format!(
                "Profile `{}`; {rows} held-out rows{control} × {rounds} rounds {source} in {measure_s:.0} s; \
                 whole bench {whole:.0} s.\n\n",
                profile_path.display()
            ))
        }
    }
    {
        let c = profile.engine;
        text.push_str(&format!(
            "Resolved engine configuration: max_num_seqs {}, max_num_batched_tokens {}, {} KV blocks of {} tokens, \
             prefix caching {}, chunked prefill {}.\n\n",
            c.max_num_seqs,
            c.max_num_batched_tokens,
            c.num_kv_blocks,
            c.block_size,
            if c.prefix_caching { "on" } else { "off" },
            if c.chunked_prefill { "on" } else { "off" },
        ));
    }
    if host_ms.len() >= 4 {
        let mut v = host_ms.clone();
        let m = median(&mut v);
        text.push_str(&format!(
            "The host's own noise: a fixed piece of CPU work (`host_probe_ms`: no Python, no vLLM) run before \
             each of the {} real runs took a median {m:.1} ms, its interquartile range {:.1} % of that, its 5–95 % \
             range {:.1}–{:.1} ms.\n\n",
            v.len(),
            (quantile(&v, 0.75) - quantile(&v, 0.25)) / m * 100.0,
            quantile(&v, 0.05),
            quantile(&v, 0.95),
        ));
    }
    // The profile's coefficients and engine tables (its residuals and provenance are in the file).
    let profile_text = std::fs::read_to_string(&profile_path).unwrap_or_default();
    let mut keep = false;
    text.push_str("```toml\n");
    for line in profile_text.lines() {
        if line.starts_with('[') {
            keep = line.starts_with("[coefficients]") || line.starts_with("[engine]");
        }
        if keep {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str("```\n\n");
    text.push_str(&table);
    text.push_str(&batch_table(&labels, &args.work, &profile));
    match &args.out {
        Some(path) => std::fs::write(path, &text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display())),
        None => print!("{text}"),
    }
}

/// Per row, every real batch's own time (dispatch to return) against the profile's time for the
/// same batch (its composition replayed: `CostModel::generate_ns`): the service-time error apart
/// from the queueing around it. A row whose latency misses while its batches do not is a row whose
/// dynamics amplify a small error (a queue that builds up). Empty without the held-out runs'
/// directories (`--measured`).
fn batch_table(labels: &[String], work: &Path, profile: &Profile) -> String {
    let Ok(entries) = std::fs::read_dir(work.join(HELD_OUT)) else { return String::new() };
    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_dir()).collect();
    dirs.sort();
    let mut cost = batchlab::engine::sim::CostModel::default();
    let mut scheduler = profile.engine;
    profile.apply(&mut cost, &mut scheduler);
    let mut out = String::from(
        "\nEvery real batch of the held-out runs against the profile's time for that same batch (its requests \
         replayed through the simulator's scheduler, no queueing): the service-time error, median and \
         interquartile range over the row's batches.\n\n| held-out row | batches | batch time error, median | \
         middle half |\n|---|---:|---:|---:|\n",
    );
    let mut any = false;
    for (r, label) in labels.iter().enumerate() {
        let prefix = held_out_prefix(r);
        let mine: Vec<PathBuf> = dirs
            .iter()
            .filter(|d| d.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
            .cloned()
            .collect();
        let Ok(m) = read_dirs(&mine) else { continue };
        let mut errors: Vec<f64> = m
            .batches
            .iter()
            .filter_map(|b| {
                let measured = b.returned_ns.filter(|t| *t > 0.0)?;
                let schedule = batchlab::engine::sim::scheduler::replay(&scheduler, &b.specs()).ok()?;
                Some(cost.generate_ns(&schedule, b.requests.len()) / measured - 1.0)
            })
            .collect();
        if errors.is_empty() {
            continue;
        }
        any = true;
        let med = median(&mut errors);
        out.push_str(&format!(
            "| {label} | {} | {:+.1} % | {:+.1} … {:+.1} % |\n",
            errors.len(),
            med * 100.0,
            quantile(&errors, 0.25) * 100.0,
            quantile(&errors, 0.75) * 100.0
        ));
    }
    if any { out } else { String::new() }
}

/// The bootstrap's seed: the intervals are the same for the same measurements.
const BOOTSTRAP_SEED: u64 = 0x0B00_7571;

/// Per bootstrap resample, per row: the metrics a profile refitted from a resample of the design
/// predicts for the row's first round, as ratios to what the full fit predicts for it (`first`).
/// Each resample draws every setting's designed batches again, with replacement, so it keeps the
/// design's shape (every setting, as many batches of each) and the fit stays identified.
fn refit_predictions(
    dirs: &[PathBuf],
    sim_engine: &EnginePlan,
    first_plans: &[Plan],
    first: &[Measured],
    resamples: usize,
) -> Vec<Vec<[f64; 4]>> {
    // The designed runs, each read once, grouped by setting (a run is `<setting>-r<k>`).
    let mut settings: Vec<(String, Vec<batchlab::calibrate::Measurements>)> = Vec::new();
    for dir in dirs {
        let m = read_dirs(std::slice::from_ref(dir)).unwrap_or_else(|e| panic!("bootstrap: {e}"));
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let setting = name.rsplit_once("-r").map_or(name.as_str(), |(s, _)| s).to_owned();
        match settings.iter_mut().find(|(s, _)| *s == setting) {
            Some((_, runs)) => runs.push(m),
            None => settings.push((setting, vec![m])),
        }
    }
    let template = settings[0].1[0].clone();
    (0..resamples)
        .map(|b| {
            let mut rng = SplitMix64::derive(BOOTSTRAP_SEED, b as u64);
            let mut batches = Vec::new();
            for (_, runs) in &settings {
                for _ in 0..runs.len() {
                    let pick = rng.range_u64(0, runs.len() as u64 - 1) as usize;
                    batches.extend(runs[pick].batches.iter().cloned());
                }
            }
            let m = batchlab::calibrate::Measurements { batches, skipped: 0, ..template.clone() };
            let profile: Profile = fit_measurements(&m, dirs).unwrap_or_else(|e| panic!("bootstrap refit: {e}"));
            let mut engine = sim_engine.clone();
            if let EnginePlan::Sim(config) = &mut engine {
                profile.apply(&mut config.cost, &mut config.scheduler);
            }
            let plans: Vec<Plan> =
                first_plans.iter().map(|plan| plan.with_engine(&engine).unwrap_or_else(|e| panic!("{e}"))).collect();
            let mut session = EngineSession::new(&plans[0], &Interrupt::never()).unwrap_or_else(|e| panic!("{e}"));
            let ratios = plans
                .iter()
                .zip(first)
                .map(|(plan, full)| {
                    let p = run_row(&mut session, plan);
                    std::array::from_fn(|k| p.get(k) / full.get(k))
                })
                .collect();
            session.finish().expect("the simulator shuts down");
            ratios
        })
        .collect()
}

/// Per row and metric, the 95 % bootstrap interval of the error (None without resamples). Each
/// resample draws the real rounds again with replacement and, when `refits` is given, scales the
/// prediction by that resample's refitted ratio: both the measurement's and the calibration's
/// noise are in the interval.
fn error_intervals(
    measured: &[Vec<Measured>],
    predicted: &[Vec<Measured>],
    refits: Option<&[Vec<[f64; 4]>]>,
    resamples: usize,
) -> Vec<[Option<(f64, f64)>; 4]> {
    measured
        .iter()
        .zip(predicted)
        .enumerate()
        .map(|(r, (real, sim))| {
            std::array::from_fn(|k| {
                if resamples == 0 || real.is_empty() {
                    return None;
                }
                let p = median(&mut sim.iter().map(|m| m.get(k)).collect::<Vec<_>>());
                let mut rng = SplitMix64::derive(BOOTSTRAP_SEED ^ 0x5EED, (r * 4 + k) as u64);
                let mut errors: Vec<f64> = (0..resamples)
                    .map(|b| {
                        let mut draw: Vec<f64> = (0..real.len())
                            .map(|_| real[rng.range_u64(0, real.len() as u64 - 1) as usize].get(k))
                            .collect();
                        let ratio = refits.map_or(1.0, |f| f[b % f.len()][r][k]);
                        p * ratio / median(&mut draw) - 1.0
                    })
                    .collect();
                errors.sort_by(f64::total_cmp);
                Some((quantile(&errors, 0.025), quantile(&errors, 0.975)))
            })
        })
        .collect()
}

/// The markdown table: per row and metric, predicted, measured, error with its interval and the
/// real spread.
fn render(
    labels: &[String],
    measured: &[Vec<Measured>],
    predicted: &[Vec<Measured>],
    intervals: &[[Option<(f64, f64)>; 4]],
    (resamples, refitted): (usize, bool),
    rounds: usize,
) -> String {
    let mut out = String::new();
    out.push_str("| held-out row | metric | predicted | measured | error | 95 % interval | real spread |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    let mut misses = Vec::new();
    // Goals whose whole interval is inside the goal, outside it, or across its edge.
    let (mut inside, mut outside, mut across) = (Vec::new(), Vec::new(), Vec::new());
    for (r, label) in labels.iter().enumerate() {
        for (k, name) in Measured::NAMES.iter().enumerate() {
            let mut real: Vec<f64> = measured[r].iter().map(|m| m.get(k)).collect();
            let mut sim: Vec<f64> = predicted[r].iter().map(|m| m.get(k)).collect();
            let m = median(&mut real);
            let p = median(&mut sim);
            let spread = (quantile(&real, 0.75) - quantile(&real, 0.25)) / m;
            let error = (p - m) / m;
            let goal = match k {
                _ if label.starts_with(CONTROL) => None,
                0 => Some(0.05),
                1 => Some(0.10),
                _ => None,
            };
            let verdict = match goal {
                Some(g) if error.abs() > g => {
                    misses.push(format!("{label} {name} {:+.1} %", error * 100.0));
                    " ✗"
                }
                Some(_) => " ✓",
                None => "",
            };
            let interval = intervals[r][k];
            if let (Some(g), Some((lo, hi))) = (goal, interval) {
                let short = format!("{} {name}", label.split(" (").next().unwrap_or(label));
                if -g <= lo && hi <= g {
                    inside.push(short);
                } else if hi < -g || lo > g {
                    outside.push(short);
                } else {
                    across.push(short);
                }
            }
            let interval =
                interval.map_or(String::new(), |(lo, hi)| format!("{:+.1} … {:+.1} %", lo * 100.0, hi * 100.0));
            let row = if k == 0 { label.as_str() } else { "" };
            out.push_str(&format!(
                "| {row} | {name} | {p:.1} | {m:.1} | {:+.1} %{verdict} | {interval} | {:.1} % |\n",
                error * 100.0,
                spread * 100.0
            ));
        }
    }
    out.push_str(&format!(
        "\nMeasured: median of {rounds} real rounds; spread: their interquartile range / their median. Goal \
         (✓/✗, held-out rows): throughput within ±5 %, latency p50 within ±10 %. The control row ran \
         a setting of the design itself, not held out: its error is the fit's own and the engine's noise \
         (with `--sequential`, also the machine's drift between calibration and measurement), not the \
         model's extrapolation. "
    ));
    if misses.is_empty() {
        out.push_str("Every row meets the goal.\n");
    } else {
        out.push_str(&format!("Misses: {}.\n", misses.join("; ")));
    }
    if intervals.iter().flatten().any(Option::is_some) {
        let list = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join("; ") };
        out.push_str(&format!(
            "\n95 % interval: the error's bootstrap interval over the real rounds{} ({} resamples). The goal's {} \
             checks: the whole interval inside the goal: {}; across its edge (this run's noise cannot decide): {}; \
             the whole interval outside it (a miss beyond the noise): {}.\n",
            if refitted { " and the design's batches, refitted each time" } else { "" },
            resamples,
            inside.len() + outside.len() + across.len(),
            list(&inside),
            list(&across),
            list(&outside),
        ));
    }
    out
}
