//! `batchlab tune`: search batching settings in the simulator, print a `[batching]` snippet and
//! the front, and (for a real-engine scenario with a calibration profile) confirm the best points
//! on the real engine in one engine start.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use batchlab::report::Report;
use batchlab::scenario::Overrides;
use batchlab::scenario::plan::{EnginePlan, Plan};
use batchlab::scenario::units::{format_duration, parse_duration};
use batchlab::tune::{
    NOISE_SEEDS, Objective, STRESS, Space, TuneReport, TuneResult, available_threads, search_counting_runs, search_plan,
};

use super::{EXIT_BAD_INPUT, EXIT_ERROR};

#[derive(clap::Args, Debug)]
pub(super) struct TuneArgs {
    /// The scenario file (its profile must be one benchmark: throughput, constant with one rate, ...).
    #[arg(value_name = "SCENARIO")]
    scenario: PathBuf,
    /// An SLO objective, `KEY=VALUE` of `[slo]` (e.g. `ttft_ms=200`); repeatable. Goodput under
    /// the SLO is maximized. The scenario's own `[slo]` counts too.
    #[arg(long = "slo", value_name = "KEY=VALUE")]
    slo: Vec<String>,
    /// Without an SLO: maximize output throughput among points with latency p99 at most this.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    max_latency_p99: Option<Duration>,
    /// Keep the scenario's load (its max_concurrency or rate): search batch size and timeout only.
    #[arg(long)]
    keep_load: bool,
    /// How many points (runs in the simulator) the search may evaluate.
    #[arg(long, default_value_t = 100)]
    budget: usize,
    /// How many threads run the search's points [default: the CPUs batchlab may use]. The result
    /// is the same for any number.
    #[arg(long, value_name = "N")]
    threads: Option<NonZeroUsize>,
    /// A calibration profile (`batchlab calibrate`) to search a real-engine scenario in the simulator.
    #[arg(long, value_name = "PROFILE.TOML")]
    profile: Option<PathBuf>,
    /// With a real-engine scenario and `--profile`: how many of the best points to confirm on the
    /// real engine (one engine start); 0 skips it.
    #[arg(long, default_value_t = 3)]
    confirm: usize,
    /// Where the confirmation run writes its report (report.json, report.html, engine.log).
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Override a scenario key, like `run --set`; repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
}

pub(super) fn main(args: TuneArgs) -> ExitCode {
    let mut sets = args.sets.clone();
    sets.extend(args.slo.iter().map(|s| format!("slo.{s}")));
    let plan = match super::load_scenario(&args.scenario, &Overrides { sets, seed: None }) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let objective = match (plan.slo().is_set(), args.max_latency_p99) {
        (true, _) => Objective::Goodput,
        (false, Some(max_latency_p99)) => Objective::ThroughputUnder { max_latency_p99 },
        (false, None) => {
            eprintln!(
                "error: name what to optimize: an SLO (`--slo ttft_ms=200`, or `[slo]` in the scenario) or `--max-latency-p99 500ms`"
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let sim = match search_plan(&plan, args.profile.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let space = if args.keep_load { Space::for_plan(&sim).at_own_load(&sim) } else { Space::for_plan(&sim) };
    let threads = args.threads.unwrap_or_else(available_threads);
    let started = std::time::Instant::now();
    let (result, runs) = match search_counting_runs(&sim, &objective, args.budget, space, threads) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let search_s = started.elapsed().as_secs_f64();
    let on = if threads.get() == 1 { "1 thread".to_string() } else { format!("{threads} threads") };
    eprintln!(
        "searched {} points in the simulator in {search_s:.2} s on {on} ({} runs simulated, {} taken from a run proven the same)",
        result.points.len(),
        runs.simulated,
        runs.reused
    );
    print!("{}", front_table(&result, &objective));
    let Some(snippet) = result.snippet() else {
        eprintln!("error: no point met the objective; loosen the SLO or the latency bound");
        return ExitCode::from(EXIT_ERROR);
    };
    println!("\nrecommended (best {}):\n\n{snippet}", objective_name(&objective));
    let output = args.output.clone().unwrap_or_else(|| PathBuf::from("results").join(format!("{}-tune", plan.name())));
    let mut tune = TuneReport { objective: objective_name(&objective), search_s, runs, result, confirmed: Vec::new() };
    let real = !matches!(plan.engine(), EnginePlan::Sim(_));
    let report = if real && args.profile.is_some() && args.confirm > 0 {
        match confirm(&plan, &mut tune, &objective, args.confirm, &output) {
            Ok(report) => report,
            Err(code) => return code,
        }
    } else {
        // The recommendation, run once more in the simulator, is the report's benchmark.
        match batchlab::tune::recommendation_report(&sim, &tune.result) {
            Ok(Some(report)) => report,
            Ok(None) => return ExitCode::from(EXIT_ERROR),
            Err(e) => {
                eprintln!("error: running the recommendation: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
        }
    };
    let mut report = report;
    let confirmed = !tune.confirmed.is_empty();
    match batchlab::tune::write_report(&mut report, tune, &output) {
        Ok([json, html]) if confirmed => {
            eprintln!("added the search to {} and {}", json.display(), html.display())
        }
        Ok(paths) => eprintln!("wrote {}", paths.map(|p| p.display().to_string()).join(", ")),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    }
    ExitCode::SUCCESS
}

/// Runs the best `k` points on the real engine in one engine start ([`batchlab::tune::confirm`],
/// in the session `batchlab run` has: engine.log captured, Ctrl-C handled, the report written),
/// prints predicted against measured and records it in `tune`; returns the confirmation run's
/// report, from memory.
fn confirm(
    plan: &Plan,
    tune: &mut TuneReport,
    objective: &Objective,
    k: usize,
    output: &std::path::Path,
) -> Result<Report, ExitCode> {
    eprintln!("confirming the best {} points on the real engine (one engine start)", tune.result.top(k).len());
    let run_args = super::RunArgs {
        output: Some(output.to_path_buf()),
        requests_jsonl: false,
        quiet: false,
        verbose: false,
        repeat: 1,
    };
    let (real, result) = (plan.clone(), tune.result.clone());
    let run = move |options| batchlab::tune::confirm(&real, &result, k, options);
    let summary = match super::run_in_session(
        plan.engine(),
        plan.name(),
        plan.output().dir().map(PathBuf::from),
        run_args,
        run,
    ) {
        Ok((code, Some(summary))) if code == ExitCode::SUCCESS => summary,
        Ok((code, _)) => {
            eprintln!("error: the confirmation run did not finish; its report is in {}", output.display());
            return Err(code);
        }
        Err(e) => {
            eprintln!("error: confirmation run: {e:#}");
            return Err(ExitCode::from(EXIT_ERROR));
        }
    };
    let confirmed = batchlab::tune::confirmations(&tune.result, k, objective, &summary.report);
    println!("predicted (simulator) against measured (real engine):");
    println!(
        "{:<54} {:>14} {:>14} {:>8} {:>14} {:>14}",
        "point", "pred score", "meas score", "err %", "pred p99 ms", "meas p99 ms"
    );
    for c in &confirmed {
        println!(
            "{:<54} {:>14} {:>14} {:>8} {:>14} {:>14}",
            c.point,
            num(c.predicted),
            num(c.measured),
            c.error_pct().map_or_else(|| "-".into(), |e| format!("{e:+.1}")),
            num(c.predicted_latency_p99_ms),
            num(c.measured_latency_p99_ms)
        );
    }
    tune.confirmed = confirmed;
    Ok(summary.report)
}

fn objective_name(o: &Objective) -> String {
    match o {
        Objective::Goodput => "goodput under the SLO".into(),
        Objective::ThroughputUnder { max_latency_p99 } => {
            format!("output throughput with latency p99 <= {}", format_duration(*max_latency_p99))
        }
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The first `n` labels, then how many more.
fn shown(labels: &[String], n: usize) -> String {
    let mut s = labels.iter().take(n).cloned().collect::<Vec<_>>().join("; ");
    if labels.len() > n {
        s.push_str(&format!("; and {} more", labels.len() - n));
    }
    s
}

/// The front of the evaluated points (score up, latency p99 down), best score first.
fn front_table(result: &TuneResult, objective: &Objective) -> String {
    let score = match objective {
        Objective::Goodput => "goodput tok/s",
        Objective::ThroughputUnder { .. } => "out tok/s (ok)",
    };
    let stress = format!("at x{STRESS} load");
    let mut out = format!(
        "{:<54} {:>14} {:>12} {:>12} {:>14} {:>6}\n",
        "front and plateau (of every point evaluated)", score, "out tok/s", "lat p99 ms", stress, "found"
    );
    let front = result.distinct(|p| p.front || p.plateau);
    for p in front {
        let mark = if result.best_point() == Some(p) {
            " <- best"
        } else if p.tied {
            " (tied)"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:<54} {:>14} {:>12} {:>12} {:>14} {:>6}{mark}\n",
            p.label(result.space.load),
            num(p.score),
            num(p.throughput),
            num(p.latency_p99_ms),
            if p.plateau { num(p.stress_score) } else { String::new() },
            if p.grid { "grid" } else { "refine" }
        ));
    }
    let tied: Vec<String> = result.points.iter().filter(|p| p.tied).map(|p| p.label(result.space.load)).collect();
    if let (Some(noise), true) = (result.noise, tied.len() > 1) {
        out.push_str(&format!(
            "\ntied within noise ({} points: over the same {NOISE_SEEDS} seeds as the best, their goodput differs from it \
             by less than a 95 % paired interval or 2 %, and at x{STRESS} load by less than 2 %; the best point's spread \
             over the seeds: {:.1} %): {}\nthe data cannot tell them apart; recommending the simplest (the smallest \
             batch, then the longest timeout)\n",
            tied.len(),
            noise * 100.0,
            shown(&tied, 6),
        ));
    }
    out
}
