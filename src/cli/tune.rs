//! `batchlab tune`: search batching settings in the simulator, print a `[batching]` snippet and
//! the front, and (for a real-engine scenario with a calibration profile) confirm the best points
//! on the real engine in one engine start. The order of those steps is `batchlab::tune::tune`'s;
//! this parses, prints what each step shows, runs the confirmation in `batchlab run`'s session,
//! and picks the exit code.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use batchlab::report::Report;
use batchlab::scenario::Overrides;
use batchlab::scenario::plan::Plan;
use batchlab::scenario::units::parse_duration;
use batchlab::tune::{
    ConfirmRun, Confirmation, NOISE_SEEDS, Objective, STRESS, Searched, TuneOptions, TuneResult, TuneSteps,
    WorkflowError,
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
    let options = TuneOptions {
        max_latency_p99: args.max_latency_p99,
        keep_load: args.keep_load,
        budget: args.budget,
        threads: args.threads,
        profile: args.profile,
        confirm: args.confirm,
        output: args.output,
    };
    let mut printer = Printer { stopped: None };
    match batchlab::tune::tune(&plan, &options, &mut printer) {
        Ok(tuned) => {
            match (tuned.tune.confirmed.is_empty(), &tuned.written) {
                (false, [json, html]) => eprintln!("added the search to {} and {}", json.display(), html.display()),
                (true, paths) => {
                    eprintln!("wrote {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))
                }
            }
            ExitCode::SUCCESS
        }
        // The confirmation's session said why it stopped, and chose the code.
        Err(WorkflowError::ConfirmStopped) => printer.stopped.unwrap_or(ExitCode::from(EXIT_ERROR)),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(if e.bad_input() { EXIT_BAD_INPUT } else { EXIT_ERROR })
        }
    }
}

/// What `batchlab tune` shows between the workflow's steps, and the confirmation run in
/// `batchlab run`'s session.
struct Printer {
    /// The exit code of a confirmation run that did not finish.
    stopped: Option<ExitCode>,
}

impl TuneSteps for Printer {
    fn searched(&mut self, searched: &Searched<'_>) {
        let Searched { objective, tune, threads } = searched;
        let on = if threads.get() == 1 { "1 thread".to_string() } else { format!("{threads} threads") };
        eprintln!(
            "searched {} points in the simulator in {:.2} s on {on} ({} runs simulated, {} taken from a run proven the same)",
            tune.result.points.len(),
            tune.search_s,
            tune.runs.simulated,
            tune.runs.reused
        );
        print!("{}", front_table(&tune.result, objective));
        if let Some(snippet) = tune.result.snippet() {
            println!("\nrecommended (best {objective}):\n\n{snippet}");
        }
    }

    /// Runs the best points on the real engine in the session `batchlab run` has (engine.log
    /// captured, Ctrl-C handled, the run's table printed and its report written), and gives back
    /// the confirmation run's report, from memory.
    fn confirm(&mut self, real: &Plan, points: usize, output: &Path, run: ConfirmRun) -> Option<Report> {
        eprintln!("confirming the best {points} points on the real engine (one engine start)");
        let run_args = super::RunArgs {
            output: Some(output.to_path_buf()),
            requests_jsonl: false,
            quiet: false,
            verbose: false,
            repeat: 1,
            shard: None,
        };
        match super::run_in_session(real.engine(), real.name(), real.output().dir().map(PathBuf::from), run_args, run) {
            Ok((code, Some(summary))) if code == ExitCode::SUCCESS => Some(summary.report),
            Ok((code, _)) => {
                eprintln!("error: the confirmation run did not finish; its report is in {}", output.display());
                self.stopped = Some(code);
                None
            }
            Err(e) => {
                eprintln!("error: confirmation run: {e:#}");
                self.stopped = Some(ExitCode::from(EXIT_ERROR));
                None
            }
        }
    }

    fn confirmed(&mut self, confirmed: &[Confirmation]) {
        println!("predicted (simulator) against measured (real engine):");
        println!(
            "{:<54} {:>14} {:>14} {:>8} {:>14} {:>14}",
            "point", "pred score", "meas score", "err %", "pred p99 ms", "meas p99 ms"
        );
        for c in confirmed {
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
