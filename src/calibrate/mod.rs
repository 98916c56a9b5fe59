//! `batchlab calibrate`: a simulator [`Profile`] fitted from real runs, the whole job above `run/`.
//!
//! - [`design`]: `batchlab calibrate SCENARIO`'s designed run: the [`DESIGN`] settings as plans,
//!   run on the scenario's engine started once, each into an output directory of its own;
//! - [`read`]: what a fit needs from run output directories: `requests.jsonl` (written with
//!   `--requests-jsonl`) gives every request's batch, token counts, prefix-cache hits and engine
//!   timestamps; `report.json` gives the configuration the engine resolved
//!   (`environment.engine_config`) and its name and version (a designed run knows its engine in
//!   memory and reads no report.json back);
//! - [`fit`](mod@fit): the rows grouped into `generate` calls, replayed through the simulator's
//!   scheduler, and the least squares for the step coefficients (docs/simulation.md).
//!
//! - [`url`]: the same for a server seen only through its URL (`engine.kind = "openai"`): a
//!   closed-loop design, the steps inferred from each token's arrival, the step costs and the
//!   frontend's overhead, the hidden limits estimated.
//!
//! [`fit_dirs`] is `batchlab calibrate DIR...`; [`calibrate_scenario`] is `batchlab calibrate
//! SCENARIO`. Uses `run/` and `scenario/`; nothing below uses it.

pub mod design;
pub mod fit;
pub mod read;
pub mod url;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use design::{
    DESIGN, DesignError, DesignOptions, DesignRun, Setting, WARMUP, calibrate_scenario, default_runs_dir, design_runs,
    design_session, run_design, run_designed, setting_plan, spread_evenly,
};
pub use fit::{BatchFit, BatchObservation, FitError, FitResult, RequestObservation, fit};
pub use read::{Measurements, read_dirs, read_runs};

use crate::engine::ResolvedEngineConfig;
use crate::engine::sim::profile::{BatchSizeFit, FitSummary, Profile, Provenance};

/// Why a calibration failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// No directory was given.
    #[error("calibrate needs at least one output directory")]
    NoSources,
    /// A report.json or requests.jsonl that cannot be read back (missing, another schema,
    /// malformed; a bad line is named by file and line).
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    /// A file is not what a run writes.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for report.json as a whole).
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// The engine of a designed run did not say how it was configured.
    #[error("the engine {engine} did not report its resolved configuration: a fit needs it")]
    EngineConfigUnknown {
        /// The engine's name.
        engine: String,
    },
    /// The report does not say how the engine was configured.
    #[error(
        "{}: `environment.engine_config` is missing: the engine did not report its resolved \
         configuration (run it with a batchlab that records it)",
        path.display()
    )]
    NoEngineConfig {
        /// The report.
        path: PathBuf,
    },
    /// Two directories came from differently configured engines.
    #[error("{} ran with {other:?} but {} with {first:?}: calibrate one configuration at a time", other_path.display(), first_path.display())]
    ConfigMismatch {
        /// The first directory's report.
        first_path: PathBuf,
        /// Its configuration.
        first: ResolvedEngineConfig,
        /// The disagreeing report.
        other_path: PathBuf,
        /// Its configuration.
        other: ResolvedEngineConfig,
    },
    /// No batch had every row complete.
    #[error(
        "no usable batch in {}: every generate call needs all its requests completed, with engine \
         timestamps and token counts ({skipped} batches skipped)",
        dirs
    )]
    NoBatches {
        /// The directories, as given.
        dirs: String,
        /// Batches left out.
        skipped: u64,
    },
    /// The fit itself failed.
    #[error(transparent)]
    Fit(#[from] FitError),
}

/// Fits a profile from the output directories of earlier runs (see the module docs).
pub fn fit_dirs(dirs: &[PathBuf]) -> Result<Profile, CalibrateError> {
    fit_read(&read_dirs(dirs)?, dirs)
}

/// Fits a profile from the batches read from `dirs`; none usable is an error.
fn fit_read(m: &Measurements, dirs: &[PathBuf]) -> Result<Profile, CalibrateError> {
    if m.batches.is_empty() {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(CalibrateError::NoBatches { dirs: names.join(", "), skipped: m.skipped });
    }
    fit_measurements(m, dirs)
}

/// Fits a profile from a designed run ([`run_design`]): its directories' requests.jsonl and the
/// engine it reported in memory; no report.json is read back.
pub fn fit_design(run: &DesignRun) -> Result<Profile, CalibrateError> {
    fit_read(&read_runs(&run.dirs, &run.engine)?, &run.dirs)
}

/// Fits a profile from batches already read (`sources` are named in its provenance). A caller
/// that refits subsets of one run's batches (a bootstrap) reads the directories once.
pub fn fit_measurements(m: &Measurements, sources: &[PathBuf]) -> Result<Profile, CalibrateError> {
    let result = fit(&m.config, &m.batches)?;
    Ok(Profile {
        coefficients: result.coefficients,
        engine: m.config,
        fit: FitSummary {
            batches: m.batches.len() as u64,
            skipped_batches: m.skipped,
            samples: result.samples,
            unidentified: result.unidentified,
            by_batch_size: by_batch_size(&result.batches),
            http: None,
        },
        residuals: result.residuals,
        provenance: Provenance {
            engine_name: m.engine.0.clone(),
            engine_version: m.engine.1.clone(),
            batchlab_version: env!("CARGO_PKG_VERSION").to_owned(),
            created: utc_now_rfc3339(),
            sources: sources.iter().map(|d| d.display().to_string()).collect(),
        },
    })
}

/// The batches' makespans, grouped by batch size.
fn by_batch_size(batches: &[BatchFit]) -> Vec<BatchSizeFit> {
    let mut groups: BTreeMap<usize, Vec<(f64, f64)>> = BTreeMap::new();
    for b in batches {
        if let Some(measured) = b.measured_last_token_ns.filter(|m| *m > 0.0) {
            groups.entry(b.size).or_default().push((measured, b.predicted_last_token_ns));
        }
    }
    groups
        .into_iter()
        .map(|(size, v)| {
            let n = v.len() as f64;
            BatchSizeFit {
                size: size as u64,
                batches: v.len() as u64,
                measured_ms: v.iter().map(|(m, _)| m).sum::<f64>() / n / 1e6,
                predicted_ms: v.iter().map(|(_, p)| p).sum::<f64>() / n / 1e6,
                mean_rel_error: v.iter().map(|(m, p)| (p - m) / m).sum::<f64>() / n,
            }
        })
        .collect()
}

/// Now, UTC, as `2026-12-01T11:00:00Z`.
pub(crate) fn utc_now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests;
