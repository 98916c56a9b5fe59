//! The `batchlab` command line. A thin shell over the library: parse arguments, load the scenario,
//! run it, print the report, and turn the result into an exit code.
//!
//! Files under `cli/`: one per subcommand. `session.rs` is the one scaffold of a real-engine
//! session (engine.log captured, Ctrl-C and SIGTERM firing the run's `Interrupt`, the log's tail
//! when the engine failed) that `run`, `calibrate SCENARIO` and `tune`'s confirmation share;
//! `calibrate.rs` parses and prints, the work is in `calibrate/`; `tune.rs` parses, calls
//! `tune::tune` (the order of tune's steps) and prints what each step shows; `ab.rs` runs `batchlab ab`'s commands; `serve.rs` binds,
//! prints `listening on` and maps the outcome to exit codes. The CLI is the only place `anyhow` is
//! used.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use batchlab::run::progress::{ENGINE_STEP_TARGET, EngineStepLayer, LogWriter, ProgressMode, Screen};
use batchlab::run::{RunOptions, RunSummary, run_blocking};
use batchlab::scenario::plan::EnginePlan;
use batchlab::scenario::{Overrides, load_file, to_toml_on};
use clap::{Parser, Subcommand};

/// Exit codes, documented in README.md.
const EXIT_ERROR: u8 = 1;
const EXIT_BAD_INPUT: u8 = 2;
const EXIT_EXPECTATIONS: u8 = 3;
const EXIT_REGRESSION: u8 = 4;
/// `batchlab compare`: no regression shown, but a gated metric not shown within its margin.
const EXIT_INCONCLUSIVE: u8 = 5;
/// `batchlab merge`: a shard is missing or failed; the merged report is marked incomplete.
const EXIT_INCOMPLETE: u8 = 6;
/// 128 + the signal's number, the shell's convention: SIGINT (Ctrl-C) 130, SIGTERM 143.
const EXIT_SIGINT: u8 = 130;
const EXIT_SIGTERM: u8 = 143;

/// The scenario at `path` with `overrides`, or its problems printed (file, line, column) and the
/// bad-input exit code: every command that reads a scenario reads it here.
pub(crate) fn load_scenario(path: &Path, overrides: &Overrides) -> Result<batchlab::scenario::Plan, ExitCode> {
    load_file(path, overrides).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(EXIT_BAD_INPUT)
    })
}

#[derive(Parser, Debug)]
#[command(name = "batchlab", version, about = "Benchmark and test batched LLM inference", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug)]
struct ScenarioArgs {
    /// The scenario file (TOML; see docs/scenarios.md).
    scenario: PathBuf,
    /// Override any scenario key, e.g. `--set batching.batch_size=64`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Override the scenario's master seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Print only the resolved engine kind (one of `engine.kind`'s, after every `--set`) and exit.
    #[arg(long, help = engine_kind_help())]
    engine_kind: bool,
}

/// `--engine-kind`'s help, with the kinds from their one list ([`batchlab::scenario::ENGINE_KINDS`]).
fn engine_kind_help() -> String {
    let kinds: Vec<String> = batchlab::scenario::ENGINE_KINDS.iter().map(|k| format!("`{k}`")).collect();
    let (last, rest) = kinds.split_last().expect("engine kinds");
    format!(
        "Print only the resolved engine kind ({} or {last}, after every `--set`) and exit. The justfile picks the build with it",
        rest.join(", ")
    )
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario and report.
    Run {
        #[command(flatten)]
        scenario: ScenarioArgs,
        /// Where to write report.json, report.csv and requests.jsonl [default: the scenario's
        /// `output.dir`, else results/<name>].
        #[arg(long, value_name = "DIR")]
        output: Option<PathBuf>,
        /// Also write one line per request to requests.jsonl.
        #[arg(long)]
        requests_jsonl: bool,
        /// No progress display.
        #[arg(long, short)]
        quiet: bool,
        /// Stream the engine's own output (vLLM's log lines, warnings) live, instead of keeping it
        /// in `<output>/engine.log`.
        #[arg(long, short)]
        verbose: bool,
        /// Run every benchmark N times in one engine start (interleaved: a b c a b c); the report
        /// keeps each repeat and adds every metric's mean, spread and 95 % confidence interval.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        #[command(flatten)]
        shard: shard::ShardArgs,
    },
    /// Compare two saved runs metric by metric: exits 0 when every gated metric passes, 4 on a
    /// regression, 5 when inconclusive.
    ///
    /// Each metric's change gets an interval in its unit of independence, never the request (whole
    /// batches or blocks of time of requests.jsonl, the repeats, the time series; shares at their
    /// effective size). A gated metric passes when the interval's worse bound is within the margin,
    /// regresses when the interval excludes no change on the worse side and the change is beyond
    /// the margin, and is otherwise inconclusive, with the run size that would decide it
    /// (docs/compare.md).
    Compare {
        /// The baseline run: a report.json or an output directory.
        a: PathBuf,
        /// The run judged against it.
        b: PathBuf,
        #[command(flatten)]
        gate: GateArgs,
        /// Where to write compare.html [default: B's directory].
        #[arg(long, value_name = "DIR")]
        output: Option<PathBuf>,
    },
    /// Validate a scenario and print it fully resolved, with every default.
    Check {
        #[command(flatten)]
        scenario: ScenarioArgs,
    },
    /// Re-render report.html (next to report.json) and print the summary table from a saved report.
    Report {
        /// An output directory, or its report.json.
        #[arg(value_name = "DIR|REPORT.JSON")]
        report: PathBuf,
    },
    /// Fit a simulator profile (docs/simulation.md) from the output directories of earlier runs.
    Calibrate(calibrate::CalibrateArgs),
    /// Search batching settings in the simulator for the best goodput under an SLO (docs/tuning.md).
    Tune(tune::TuneArgs),
    /// Serve the simulator as an OpenAI-compatible HTTP server, in real time (docs/serve.md).
    Serve(serve::ServeArgs),
    /// Print the Kubernetes manifests of a distributed run: an Indexed Job of N shards into a
    /// shared volume, and the merge Job that follows (docs/distributed.md; not run on a cluster
    /// here).
    K8s(k8s::K8sArgs),
    /// Merge the output directories of a sharded run's shards (`run --shard K/N`) into one report,
    /// every percentile from the union of their raw records; exits 6 when a shard is missing or
    /// failed (docs/distributed.md).
    Merge(merge::MergeArgs),
    /// Run two commands alternately (A B, B A, …) and gate B against A by rounds: the way to gate a
    /// change on a shared, drifting machine (docs/compare.md).
    Ab(ab::AbArgs),
}

/// How `batchlab compare` and `batchlab ab` judge: the margins, the level, the gated metrics.
#[derive(clap::Args, Debug)]
pub(crate) struct GateArgs {
    /// The margin of a gated metric, a fraction of A's value: `5%` or `0.05`.
    #[arg(long, value_name = "FRACTION", default_value = "5%", value_parser = parse_fraction)]
    max_regression: f64,
    /// The intervals are at 1 − alpha.
    #[arg(long, default_value_t = 0.05, value_parser = parse_alpha)]
    alpha: f64,
    /// B fails when its error share is certainly above this, whatever A did: `0.5%`.
    #[arg(long, value_name = "FRACTION", default_value = "0.5%", value_parser = parse_fraction)]
    max_error_rate: f64,
    /// The margin of a gated share (errors, SLO attainment), in points: `1pp` (or `0.01`).
    #[arg(long, value_name = "POINTS", default_value = "1pp", value_parser = parse_points)]
    max_error_increase: f64,
    /// Exit 0 rather than 5 when nothing regressed but something is inconclusive (says so).
    #[arg(long)]
    allow_inconclusive: bool,
    /// Gate this metric (repeatable; replaces the default gates, see docs/compare.md).
    #[arg(long = "gate", value_name = "METRIC")]
    gates: Vec<String>,
}

impl GateArgs {
    fn options(&self) -> batchlab::compare::CompareOptions {
        let defaults = batchlab::compare::CompareOptions::default();
        batchlab::compare::CompareOptions {
            max_regression: self.max_regression,
            alpha: self.alpha,
            gates: if self.gates.is_empty() { defaults.gates } else { self.gates.clone() },
            max_error_rate: self.max_error_rate,
            max_error_increase: self.max_error_increase,
        }
    }
}

mod ab;
mod calibrate;
mod k8s;
mod merge;
mod serve;
mod session;
mod shard;
mod tune;

/// The process's one terminal (its stderr), made in [`main`]: logging, the panic hook and every
/// run's display draw on it, so log lines go above the bars and engine steps reach the spinner.
fn screen() -> &'static Screen {
    static SCREEN: std::sync::OnceLock<Screen> = std::sync::OnceLock::new();
    SCREEN.get_or_init(Screen::stderr)
}

fn init_logging(screen: &'static Screen) {
    use tracing_subscriber::filter::{FilterExt, Targets, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{Layer, fmt};
    let filter = tracing_subscriber::EnvFilter::try_from_env("BATCHLAB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Engine steps are for the display only, whatever BATCHLAB_LOG says.
    let not_engine_steps = filter_fn(|m| m.target() != ENGINE_STEP_TARGET);
    let log = fmt::layer()
        .with_writer(LogWriter::new(screen))
        .with_ansi(batchlab::sys::terminal_is_tty())
        .with_target(false)
        .with_filter(filter.and(not_engine_steps));
    let engine_steps =
        EngineStepLayer::new(screen).with_filter(Targets::new().with_target(ENGINE_STEP_TARGET, tracing::Level::INFO));
    tracing_subscriber::registry().with(log).with(engine_steps).init();
    // A panic inside an engine call (an injected `faults.panic`, a bug in an engine) is caught by
    // the batcher and fails its batch: one log line is enough, whatever RUST_BACKTRACE says. Any
    // other panic is a bug in batchlab: Rust's default report (a backtrace with RUST_BACKTRACE=1),
    // printed with the progress bars out of its way.
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !batchlab::batcher::in_engine_call() {
            return screen.suspend(|| default(info));
        }
        let thread = std::thread::current();
        let message = batchlab::batcher::panic_message(info.payload());
        let location = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        tracing::warn!(thread = thread.name().unwrap_or("unnamed"), "engine panic: {message}{location}");
    }));
}

/// An error and its causes on one line, each cause left out when the message before already
/// quotes it (`cannot write x: Permission denied` does not repeat `Permission denied`).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// The exit code of a run that failed before it produced a report: 2 when the input is at fault
/// (a workload file, the output directory, an engine this build or machine cannot have), else 1.
fn run_error_code(e: &anyhow::Error) -> u8 {
    use batchlab::engine::EngineError;
    use batchlab::run::RunError;
    match e.downcast_ref::<RunError>() {
        Some(
            RunError::Load(_)
            | RunError::Output(_)
            | RunError::Shard(_)
            | RunError::Engine(EngineError::Unsupported(_)),
        ) => EXIT_BAD_INPUT,
        _ => EXIT_ERROR,
    }
}

/// How long leftover engine processes get to exit on SIGTERM before SIGKILL.
/// (multiprocessing's resource tracker ignores SIGTERM, so after an engine death this is paid.)
const REAP_GRACE: Duration = Duration::from_secs(2);

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(screen());
    // Before the tokio runtime, the engine or any other thread: all of them inherit the mask.
    batchlab::sys::reset_cpu_affinity();
    batchlab::sys::become_subreaper();
    // Every way out (return, error, panic) goes through here: no engine process outlives us.
    let code = std::panic::catch_unwind(|| real_main(cli));
    let reaped = batchlab::sys::reap_descendants(REAP_GRACE);
    if reaped > 0 {
        tracing::warn!(reaped, "terminated leftover engine processes");
    }
    code.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// What to do with the loaded plan.
enum Task {
    Run(RunArgs),
    Print,
    PrintEngineKind,
}

/// `5%` is 0.05; a bare number is a fraction, at most 1.
fn parse_fraction(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.trim().strip_suffix('%') {
        Some(percent) => (percent.trim(), 0.01),
        None => (text.trim(), 1.0),
    };
    match number.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 && v * scale <= 1.0 => Ok(v * scale),
        Ok(v) if v.is_finite() && v > 1.0 => Err(format!("{text} is more than 100 %; did you mean {v}%?")),
        _ => Err(format!("expected a percentage such as 5% or a fraction such as 0.05, found {text:?}")),
    }
}

/// Share points: `1pp` is 0.01; a percentage or a fraction as [`parse_fraction`].
fn parse_points(text: &str) -> Result<f64, String> {
    match text.trim().strip_suffix("pp") {
        Some(points) => parse_fraction(&format!("{}%", points.trim())),
        None => parse_fraction(text),
    }
}

fn parse_alpha(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 1.0 => Ok(v),
        _ => Err(format!("expected a significance level between 0 and 1, such as 0.05, found {text:?}")),
    }
}

/// `batchlab compare`: the table on stdout, compare.html in `output`, the exit code from the gate.
fn compare_runs(a: &Path, b: &Path, gate: &GateArgs, output: Option<PathBuf>) -> ExitCode {
    use batchlab::compare::{Run, compare};
    let loaded = Run::load(a).and_then(|ra| Ok((ra, Run::load(b)?)));
    let compared = loaded.and_then(|(ra, rb)| Ok((compare(&ra, &rb, &gate.options())?, ra, rb)));
    match compared {
        Ok((comparison, run_a, run_b)) => {
            let dir = output.unwrap_or_else(|| run_b.dir.clone());
            gate_exit(&comparison, &run_a, &run_b, &dir, gate.allow_inconclusive)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Prints a comparison, writes its compare.html into `dir`, and exits by its outcome: 0, 4, or 5
/// (0 with `allow_inconclusive`, said).
fn gate_exit(
    comparison: &batchlab::compare::Comparison,
    run_a: &batchlab::compare::Run,
    run_b: &batchlab::compare::Run,
    dir: &Path,
    allow_inconclusive: bool,
) -> ExitCode {
    use batchlab::compare::{Outcome, table::render_comparison};
    print!("{}", render_comparison(comparison));
    match batchlab::compare::html::write_html(comparison, run_a, run_b, dir) {
        Ok(path) => eprintln!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    }
    match comparison.outcome() {
        Outcome::Pass => ExitCode::SUCCESS,
        Outcome::Regression => ExitCode::from(EXIT_REGRESSION),
        Outcome::Inconclusive if allow_inconclusive => {
            println!("--allow-inconclusive: exiting 0 although the gate is inconclusive (it would exit 5)");
            ExitCode::SUCCESS
        }
        Outcome::Inconclusive => ExitCode::from(EXIT_INCONCLUSIVE),
    }
}

fn real_main(cli: Cli) -> ExitCode {
    let (args, task) = match cli.command {
        Command::Report { report } => return rerender_report(&report),
        Command::Compare { a, b, gate, output } => return compare_runs(&a, &b, &gate, output),
        Command::Ab(args) => return ab::main(args),
        Command::Merge(args) => return merge::main(args),
        Command::K8s(args) => return k8s::main(args),
        Command::Calibrate(args) => return calibrate::main(args),
        Command::Tune(args) => return tune::main(args),
        Command::Serve(args) => return serve::main(args),
        Command::Run { scenario, .. } | Command::Check { scenario } if scenario.engine_kind => {
            (scenario, Task::PrintEngineKind)
        }
        Command::Run { scenario, output, requests_jsonl, quiet, verbose, repeat, shard } => {
            let shard = shard.shard_run();
            (scenario, Task::Run(RunArgs { output, requests_jsonl, quiet, verbose, repeat, shard }))
        }
        Command::Check { scenario } => (scenario, Task::Print),
    };
    let overrides = Overrides { sets: args.sets, seed: args.seed };
    let plan = match load_scenario(&args.scenario, &overrides) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let run_args = match task {
        Task::Print => {
            // The very checks a run makes before its engine starts.
            if let Err(e) = batchlab::run::preflight(&plan) {
                eprintln!("error: {}", error_text(&anyhow::Error::new(e)));
                return ExitCode::from(EXIT_BAD_INPUT);
            }
            print!("{}", to_toml_on(&plan, batchlab::sys::usable_cpus()));
            return ExitCode::SUCCESS;
        }
        Task::PrintEngineKind => {
            println!("{}", plan.engine().kind());
            return ExitCode::SUCCESS;
        }
        Task::Run(run_args) => run_args,
    };
    match run_scenario(plan, run_args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(run_error_code(&e))
        }
    }
}

/// `batchlab report`: report.html again from report.json, and the table.
fn rerender_report(path: &Path) -> ExitCode {
    let report = match batchlab::report::read_report(path) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let json = batchlab::report::read::report_path(path);
    let dir = json.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match batchlab::report::write_html(&report, dir) {
        Ok(written) => {
            print!("{}", batchlab::report::render_table(&report));
            eprint!("{}", batchlab::report::render_failures(&report.expectations));
            eprintln!("wrote {}", written.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// `batchlab run`'s own flags.
pub(crate) struct RunArgs {
    pub(crate) output: Option<PathBuf>,
    pub(crate) requests_jsonl: bool,
    pub(crate) quiet: bool,
    pub(crate) verbose: bool,
    pub(crate) repeat: u32,
    /// `--shard` and its start: one shard of a distributed run.
    pub(crate) shard: Option<batchlab::run::shard::ShardRun>,
}

pub(crate) fn run_scenario(plan: batchlab::scenario::Plan, args: RunArgs) -> anyhow::Result<ExitCode> {
    let (engine, name, dir) = (plan.engine().clone(), plan.name().to_owned(), plan.output().dir().map(PathBuf::from));
    let (code, _) = run_in_session(&engine, &name, dir, args, move |options| run_blocking(&plan, options))?;
    Ok(code)
}

/// `batchlab run`'s session ([`session::Session`]: engine.log, Ctrl-C) around `run`, which runs
/// the scenario `name` with the options it is given, then its table, the files written and the
/// exit code. Also returns the summary, for a caller that adds to the report (`tune`).
pub(crate) fn run_in_session<E>(
    engine: &EnginePlan,
    name: &str,
    plan_dir: Option<PathBuf>,
    args: RunArgs,
    run: impl FnOnce(RunOptions) -> Result<RunSummary, E> + Send + 'static,
) -> anyhow::Result<(ExitCode, Option<RunSummary>)>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let RunArgs { output, requests_jsonl, quiet, verbose, repeat, shard } = args;
    let output_dir = output.or(plan_dir).unwrap_or_else(|| PathBuf::from("results").join(name));
    // Before anything else: an unwritable output directory must not cost a run.
    if let Err(e) = batchlab::report::prepare_output_dir(&output_dir) {
        eprintln!("error: {e}");
        return Ok((ExitCode::from(EXIT_BAD_INPUT), None));
    }
    let session = session::Session::start(engine, &output_dir, verbose)?;
    let options = RunOptions {
        output_dir: Some(output_dir.clone()),
        requests_jsonl,
        progress: ProgressMode::detect(quiet),
        screen: screen().clone(),
        interrupt: session.interrupt(),
        repeat,
        shard,
    };
    let ended = session.run(move || run(options));
    let engine_failed = match &ended.value {
        Err(_) => true,
        Ok(s) => s.report.incomplete && !s.interrupted,
    };
    if engine_failed {
        ended.print_log_tail();
    }
    let signal = ended.first_signal();
    let summary = ended.value.with_context(|| format!("running scenario {name}"))?;
    print!("{}", summary.table);
    if !summary.table.ends_with('\n') {
        println!();
    }
    for path in &summary.written {
        eprintln!("wrote {}", path.display());
    }
    if let Some(error) = &summary.report.error {
        eprintln!("error: {error}");
    }
    // The table is out; a report file that could not be written is an error all the same.
    for e in &summary.write_errors {
        eprintln!("error: {e}");
    }
    let code = if summary.interrupted || summary.report.incomplete {
        eprintln!("the run is incomplete: report marked \"incomplete\": true");
        ExitCode::from(if summary.interrupted { signal } else { EXIT_ERROR })
    } else if !summary.write_errors.is_empty() {
        ExitCode::from(EXIT_ERROR)
    } else if summary.report.shard.is_some() {
        // A shard sends part of the run: `batchlab merge` judges the expectations on the whole.
        eprintln!("a shard: the scenario's expectations are judged on the merged report (batchlab merge)");
        ExitCode::SUCCESS
    } else if !summary.report.passed() {
        eprint!("{}", batchlab::report::render_failures(&summary.report.expectations));
        ExitCode::from(EXIT_EXPECTATIONS)
    } else if let nothing @ [_, ..] = summary.report.completed_nothing().as_slice() {
        eprintln!(
            "FAIL no request completed in {}: the run measured nothing (set expect.completed = \">= 0\" to allow it)",
            nothing.join(", ")
        );
        ExitCode::from(EXIT_EXPECTATIONS)
    } else {
        if !summary.report.expectations.is_empty() {
            eprintln!("all {} expectations met", summary.report.expectations.len());
        }
        ExitCode::SUCCESS
    };
    Ok((code, Some(summary)))
}
