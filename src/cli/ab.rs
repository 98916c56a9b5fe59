//! `batchlab ab`: two commands run alternately, round by round (A B, then B A, …), each writing
//! its own output directory, then judged by the rounds (`batchlab::compare::rounds`). On a shared
//! machine whose speed drifts, this is how a change to the software is gated: A and B share each
//! round's machine state, and the round is the paired unit.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use batchlab::compare::Run;
use batchlab::compare::rounds::compare_rounds;

use super::{EXIT_BAD_INPUT, EXIT_ERROR, GateArgs, gate_exit};

#[derive(clap::Args, Debug)]
pub(crate) struct AbArgs {
    /// The baseline: a shell command that runs a benchmark and takes `--output DIR` appended,
    /// such as `batchlab run scenarios/vllm-cpu.toml --requests-jsonl --quiet`.
    #[arg(long = "a", value_name = "CMD")]
    a: String,
    /// The change, the same way (another binary, other `--set`s).
    #[arg(long = "b", value_name = "CMD")]
    b: String,
    /// Rounds, each one run of A and one of B (A first in even rounds, B first in odd ones).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..))]
    rounds: u32,
    /// Where each round's runs go (`round-N/a`, `round-N/b`, each with its `run.log`) and
    /// compare.html.
    #[arg(long, value_name = "DIR", default_value = "results/ab")]
    output: PathBuf,
    /// Keep the runs a directory already holds (their report.json) and run only the missing ones.
    #[arg(long)]
    reuse: bool,
    #[command(flatten)]
    gate: GateArgs,
}

/// A shell word for `sh -c`: single-quoted.
fn quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Runs `command --output dir` with its output in `dir/run.log`; Ok once `dir/report.json` is
/// there, whatever the command's exit code (3, a failed expectation, still measured).
fn run_side(command: &str, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log_path = dir.join("run.log");
    let log = std::fs::File::create(&log_path).map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{command} --output {}", quoted(dir)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .status()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    if dir.join("report.json").is_file() {
        return Ok(());
    }
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(10).collect();
    Err(format!(
        "`{command}` ({status}) wrote no report.json in {}; the end of {}:\n{}",
        dir.display(),
        log_path.display(),
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

pub(super) fn main(args: AbArgs) -> ExitCode {
    let mut rounds = Vec::with_capacity(args.rounds as usize);
    for round in 0..args.rounds {
        let dir = args.output.join(format!("round-{round}"));
        let sides = [("a", &args.a), ("b", &args.b)];
        let order = if round % 2 == 0 { [sides[0], sides[1]] } else { [sides[1], sides[0]] };
        for (name, command) in order {
            let side = dir.join(name);
            if args.reuse && side.join("report.json").is_file() {
                eprintln!("round {}/{}: {} kept ({})", round + 1, args.rounds, name.to_uppercase(), side.display());
                continue;
            }
            let started = Instant::now();
            if let Err(e) = run_side(command, &side) {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_ERROR);
            }
            let took = started.elapsed().as_secs_f64();
            eprintln!("round {}/{}: {} in {took:.1} s", round + 1, args.rounds, name.to_uppercase());
        }
        let load = |name: &str| Run::load(&dir.join(name));
        match load("a").and_then(|a| Ok((a, load("b")?))) {
            Ok(pair) => rounds.push(pair),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let (a, b) = (format!("{} (A)", args.a), format!("{} (B)", args.b));
    match compare_rounds(&rounds, (&a, &b), &args.gate.options()) {
        Ok(comparison) => {
            let (ra, rb) = (&rounds[0].0, &rounds[0].1);
            gate_exit(&comparison, ra, rb, &args.output, args.gate.allow_inconclusive)
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
