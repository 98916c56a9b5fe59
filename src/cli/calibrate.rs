//! `batchlab calibrate`: fit a simulator profile and write profile.toml, either from the output
//! directories of earlier runs or from a scenario, whose engine then runs the designed settings of
//! `batchlab::calibrate::design` first (one engine start).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use batchlab::calibrate::{CalibrateError, fit_dirs};
use batchlab::calibrate::{DesignError, DesignOptions, calibrate_scenario, default_runs_dir};
use batchlab::engine::sim::Profile;
use batchlab::run::progress::ProgressMode;
use batchlab::scenario::Overrides;

use super::{EXIT_BAD_INPUT, EXIT_ERROR};

#[derive(clap::Args, Debug)]
pub(super) struct CalibrateArgs {
    /// Either one scenario file (`.toml`) whose engine runs the designed settings first, or the
    /// output directories of earlier runs, each with requests.jsonl (run with `--requests-jsonl`)
    /// and report.json. All must come from one engine configuration.
    #[arg(required = true, value_name = "SCENARIO | DIR...")]
    sources: Vec<PathBuf>,
    /// Where to write the profile.
    #[arg(long, value_name = "FILE", default_value = "profile.toml")]
    output: PathBuf,
    /// With a scenario: where the designed runs write their reports, requests.jsonl and
    /// engine.log [default: `<profile stem>-runs/` next to the profile].
    #[arg(long, value_name = "DIR")]
    runs: Option<PathBuf>,
    /// With a scenario: override any of its keys, as `batchlab run --set` does. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// With a scenario: override its master seed.
    #[arg(long)]
    seed: Option<u64>,
    /// With a scenario: no progress display.
    #[arg(long, short)]
    quiet: bool,
    /// With a scenario: stream the engine's own output instead of keeping it in `<runs>/engine.log`.
    #[arg(long, short)]
    verbose: bool,
}

/// What the sources name.
#[derive(Debug, PartialEq)]
enum Sources {
    /// The output directories of earlier runs, to fit.
    Dirs(Vec<PathBuf>),
    /// A scenario to run the designed settings on, then fit.
    Scenario(PathBuf),
}

/// Directories, or exactly one scenario file; nothing else.
fn calibrate_sources(sources: &[PathBuf]) -> anyhow::Result<Sources> {
    if let [one] = sources
        && one.is_file()
    {
        return Ok(Sources::Scenario(one.clone()));
    }
    for s in sources {
        if s.is_file() {
            anyhow::bail!("{} is a file: give one scenario file, or output directories of earlier runs", s.display());
        }
        if !s.is_dir() {
            anyhow::bail!(
                "{} is not a directory, nor a scenario file: give one scenario, or the output directories of \
                 earlier runs",
                s.display()
            );
        }
    }
    Ok(Sources::Dirs(sources.to_vec()))
}

pub(super) fn main(args: CalibrateArgs) -> ExitCode {
    let dirs = match calibrate_sources(&args.sources) {
        Ok(Sources::Dirs(dirs)) => dirs,
        Ok(Sources::Scenario(path)) => return from_scenario(&path, &args),
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if !args.sets.is_empty() || args.seed.is_some() || args.runs.is_some() {
        eprintln!("error: --set, --seed and --runs need a scenario, not output directories");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    match fit_dirs(&dirs) {
        Ok(profile) => match write(&profile, &args.output) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(EXIT_ERROR)
            }
        },
        Err(e @ (CalibrateError::Fit(_) | CalibrateError::NoBatches { .. })) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn write(profile: &Profile, path: &Path) -> anyhow::Result<()> {
    profile.write(path).with_context(|| format!("writing {}", path.display()))?;
    println!("{}", summary(profile));
    println!("wrote {}", path.display());
    Ok(())
}

/// The coefficients and residuals, one line each.
fn summary(p: &Profile) -> String {
    let mut out = format!(
        "fitted {} batches ({} skipped), {} timestamps, engine {} {}\n",
        p.fit.batches, p.fit.skipped_batches, p.fit.samples, p.provenance.engine_name, p.provenance.engine_version
    );
    let names = batchlab::engine::sim::profile::Coefficients::NAMES;
    // The encoder's coefficient only when the runs had images (after the step costs).
    let encoder = p
        .coefficients
        .encoder_per_image_token_ns
        .map(|v| (batchlab::engine::sim::profile::Coefficients::ENCODER_NAME, v));
    let all = names.iter().copied().zip(p.coefficients.to_array());
    let all: Vec<(&str, f64)> = all.clone().take(7).chain(encoder).chain(all.skip(7)).collect();
    for (name, v) in all {
        let note = if p.fit.unidentified.iter().any(|u| u == name) { "  (not identified by these runs)" } else { "" };
        out += &format!("  {name:<23} {:>14.1} ns{note}\n", v);
    }
    if let Some(f) = p.coefficients.frontend_overhead_ns {
        out +=
            &format!("  {:<23} {:>14.1} ns  (from a URL: each request, before the engine)\n", "frontend_overhead", f);
    }
    if let Some(f) = p.coefficients.frontend_per_request_ns {
        out += &format!(
            "  {:<23} {:>14.1} ns  (from a URL: the frontend's time per request, one at a time, from the waves' TTFT)\n",
            "frontend_per_request", f
        );
        let (hands_off, how) = if p.coefficients.frontend_hands_off_bursts {
            ("bursts", "a wave's requests reach the engine together, when the frontend has served the last")
        } else {
            ("each", "each request reaches the engine as the frontend has served it")
        };
        out += &format!("  {:<23} {:>17}  (from a URL: {how})\n", "frontend_hands_off", hands_off);
    }
    if let Some(http) = &p.fit.http {
        out += &format!(
            "  {} engine steps timed from token arrivals ({} dropped as stalls); per design point, the fit's residual \
             on its steps (± the point's own noise: the 95 % interval over its rounds), and its requests' means \
             replayed on the profile:\n",
            p.fit.samples, p.fit.skipped_batches
        );
        for pt in &http.points {
            out += &format!(
                "  point {:<14} residual {:>5.2} %{} ({:>4} steps); {:>3} req: TTFT measured {:>8.2} ms, replayed \
                 {:>8.2} ms; TPOT measured {:>7.2} ms, replayed {:>7.2} ms\n",
                pt.name,
                pt.residual * 100.0,
                pt.residual_noise.map_or(String::new(), |n| format!(" ± {:>4.1} %", n * 100.0)),
                pt.steps,
                pt.requests,
                pt.measured_ttft_ms,
                pt.predicted_ttft_ms,
                pt.measured_tpot_ms,
                pt.predicted_tpot_ms,
            );
        }
        for e in &http.estimated {
            out += &format!("  engine.{:<22} {:>8} {} ({})\n", e.key, e.value, e.source.to_uppercase(), e.how);
        }
    }
    for b in &p.fit.by_batch_size {
        out += &format!(
            "  batch size {:<5} {:>3} batches: last token measured {:>10.3} ms, predicted {:>10.3} ms ({:+.1} %)\n",
            b.size,
            b.batches,
            b.measured_ms,
            b.predicted_ms,
            b.mean_rel_error * 100.0
        );
    }
    for (metric, r) in &p.residuals {
        out += &format!(
            "  residual {metric:<12} n={:<6} mean {:.3} ms  p50 {:.3} ms  p99 {:.3} ms  ({:.2} % / {:.2} % / {:.2} %)\n",
            r.samples,
            r.mean_abs_ms,
            r.p50_abs_ms,
            r.p99_abs_ms,
            r.mean_rel * 100.0,
            r.p50_rel * 100.0,
            r.p99_rel * 100.0
        );
    }
    out.trim_end().to_owned()
}

/// `batchlab calibrate SCENARIO`: the designed settings on the scenario's engine (started once),
/// each into `<runs>/<setting>/`, then the fit of those directories.
fn from_scenario(path: &Path, args: &CalibrateArgs) -> ExitCode {
    let overrides = Overrides { sets: args.sets.clone(), seed: args.seed };
    let plan = match super::load_scenario(path, &overrides) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    let runs = args.runs.clone().unwrap_or_else(|| default_runs_dir(&args.output));
    match design_and_fit(plan, runs, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn design_and_fit(plan: batchlab::scenario::Plan, runs: PathBuf, args: &CalibrateArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&runs).with_context(|| format!("creating {}", runs.display()))?;
    let session = super::session::Session::start(plan.engine(), &runs, args.verbose)?;
    let options = DesignOptions {
        runs_dir: runs.clone(),
        progress: ProgressMode::detect(args.quiet),
        screen: super::screen().clone(),
        interrupt: session.interrupt(),
    };
    let ended = session.run(move || calibrate_scenario(&plan, &options));
    let signal = ended.first_signal();
    if let Err(DesignError::Run(_) | DesignError::Incomplete { .. }) = &ended.value {
        ended.print_log_tail();
    }
    match ended.value {
        Ok((profile, design)) => {
            if profile.fit.http.is_some() {
                eprintln!("ran {} designed points against the URL in {}", design.dirs.len(), runs.display());
            } else {
                let settings = batchlab::calibrate::DESIGN.len();
                eprintln!("ran {} designed batches of {settings} settings in {}", design.dirs.len(), runs.display());
            }
            write(&profile, &args.output)?;
            Ok(ExitCode::SUCCESS)
        }
        Err(DesignError::Interrupted) => {
            eprintln!("error: {}", DesignError::Interrupted);
            Ok(ExitCode::from(signal))
        }
        Err(e) => Err(e).with_context(|| format!("calibrating from {}", args.sources[0].display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_one_scenario_or_directories() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let scenario = root.join("scenarios/vllm-cpu.toml");
        let dir = root.join("scenarios");
        assert_eq!(calibrate_sources(std::slice::from_ref(&scenario)).unwrap(), Sources::Scenario(scenario.clone()));
        assert_eq!(calibrate_sources(&[dir.clone(), root.clone()]).unwrap(), Sources::Dirs(vec![dir.clone(), root]));
        let err = calibrate_sources(&[scenario.clone(), dir.clone()]).unwrap_err().to_string();
        assert!(err.contains("is a file"), "{err}");
        let err = calibrate_sources(&[dir.join("missing.toml")]).unwrap_err().to_string();
        assert!(err.contains("is not a directory, nor a scenario file"), "{err}");
    }
}
