//! `batchlab calibrate`: fit a simulator profile and write profile.toml.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use batchlab::calibrate::{CalibrateError, fit_dirs};
use batchlab::engine::sim::Profile;

use super::{EXIT_BAD_INPUT, EXIT_ERROR};

#[derive(clap::Args, Debug)]
pub(super) struct CalibrateArgs {
    /// Output directories of earlier runs, each with requests.jsonl (run with `--requests-jsonl`)
    /// and report.json. All must come from one engine configuration.
    #[arg(required = true, value_name = "DIR")]
    sources: Vec<PathBuf>,
    /// Where to write the profile.
    #[arg(long, value_name = "FILE", default_value = "profile.toml")]
    output: PathBuf,
}

/// What the sources name: the output directories to fit.
fn calibrate_sources(sources: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    for s in sources {
        if !s.is_dir() {
            anyhow::bail!("{} is not a directory: give the output directories of earlier runs", s.display());
        }
    }
    Ok(sources.to_vec())
}

pub(super) fn main(args: CalibrateArgs) -> ExitCode {
    let dirs = match calibrate_sources(&args.sources) {
        Ok(dirs) => dirs,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
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
    for (name, v) in names.iter().zip(p.coefficients.to_array()) {
        let note = if p.fit.unidentified.iter().any(|u| u == name) { "  (not identified by these runs)" } else { "" };
        out += &format!("  {name:<22} {:>14.1} ns{note}\n", v);
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
