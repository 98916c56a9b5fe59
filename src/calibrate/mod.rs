//! `batchlab calibrate`: a simulator [`Profile`] fitted from real runs.
//!
//! A run's output directory holds what a fit needs: `requests.jsonl` (written with
//! `--requests-jsonl`) gives every request's batch, token counts, prefix-cache hits and engine
//! timestamps; `report.json` gives the configuration the engine resolved
//! (`environment.engine_config`) and its name and version. [`fit_dirs`] reads them, groups the
//! rows into `generate` calls and hands them to [`fit::fit`] (the model and the least-squares
//! method are described there and in docs/simulation.md).
//!
//! Knows the report's file formats and the simulator's model; knows nothing of scenarios or runs
//! (a caller that runs a scenario first, then fits its output, lives above: the CLI).

pub mod fit;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use fit::{BatchFit, BatchObservation, FitError, FitResult, RequestObservation, fit};

use crate::engine::ResolvedEngineConfig;
use crate::engine::sim::profile::{BatchSizeFit, FitSummary, Profile, Provenance};
use crate::report::requests::REQUESTS_FILE;
use crate::report::{JSON_FILE, RequestOutcome, RequestRecord, read_records};
use crate::time::Timestamp;

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

/// The batches of a set of output directories, and what they ran on.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurements {
    /// The configuration every directory's engine resolved.
    pub config: ResolvedEngineConfig,
    /// The engine's name and version (from the first directory).
    pub engine: (String, String),
    /// Usable batches, in directory and dispatch order.
    pub batches: Vec<BatchObservation>,
    /// Batches left out.
    pub skipped: u64,
}

/// Reads the batches of `dirs` (each a run's output directory).
pub fn read_dirs(dirs: &[PathBuf]) -> Result<Measurements, CalibrateError> {
    let mut config: Option<(PathBuf, ResolvedEngineConfig)> = None;
    let mut engine = None;
    let mut batches = Vec::new();
    let mut skipped = 0;
    for dir in dirs {
        let report_path = dir.join(JSON_FILE);
        // The one report reader: it refuses a report of another schema first.
        let env = crate::report::read_report(&report_path)?.environment;
        let this = env.engine_config.ok_or_else(|| CalibrateError::NoEngineConfig { path: report_path.clone() })?;
        match &config {
            Some((first_path, first)) if *first != this => {
                return Err(CalibrateError::ConfigMismatch {
                    first_path: first_path.clone(),
                    first: *first,
                    other_path: report_path,
                    other: this,
                });
            }
            Some(_) => {}
            None => config = Some((report_path, this)),
        }
        engine.get_or_insert((env.engine_name, env.engine_version));
        let (mut found, left_out) = read_batches(&dir.join(REQUESTS_FILE))?;
        batches.append(&mut found);
        skipped += left_out;
    }
    let (Some((_, config)), Some(engine)) = (config, engine) else { return Err(CalibrateError::NoSources) };
    Ok(Measurements { config, engine, batches, skipped })
}

/// Fits a profile from the output directories of earlier runs (see the module docs).
pub fn fit_dirs(dirs: &[PathBuf]) -> Result<Profile, CalibrateError> {
    let m = read_dirs(dirs)?;
    if m.batches.is_empty() {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(CalibrateError::NoBatches { dirs: names.join(", "), skipped: m.skipped });
    }
    fit_measurements(&m, dirs)
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

/// The usable batches of one `requests.jsonl`, and how many were left out.
fn read_batches(path: &Path) -> Result<(Vec<BatchObservation>, u64), CalibrateError> {
    let mut by_batch: BTreeMap<u64, (Option<usize>, Vec<RequestRecord>)> = BTreeMap::new();
    let mut unbatched = false;
    for row in read_records(path)? {
        let row = row?;
        match row.batch {
            Some(b) => {
                let entry = by_batch.entry(b).or_insert((row.batch_size, Vec::new()));
                entry.1.push(row);
            }
            None => unbatched |= row.outcome == RequestOutcome::Completed,
        }
    }
    if unbatched && by_batch.is_empty() {
        return Err(CalibrateError::Parse {
            path: path.to_path_buf(),
            line: 1,
            message: "rows have no `batch`: written by a batchlab without calibration fields".into(),
        });
    }
    let mut batches = Vec::new();
    let mut skipped = 0;
    for (_, (size, mut rows)) in by_batch {
        rows.sort_by_key(|r| r.id);
        match observe(size, &rows) {
            Some(b) => batches.push(b),
            None => skipped += 1,
        }
    }
    Ok((batches, skipped))
}

/// A batch whose rows are all there, completed, timed and counted; else `None`.
fn observe(size: Option<usize>, rows: &[RequestRecord]) -> Option<BatchObservation> {
    if size != Some(rows.len()) {
        return None;
    }
    let dispatched = rows.first()?.dispatched_ns?;
    let since = |t: Option<Timestamp>| t.map(|t| t.as_nanos() as f64 - dispatched.as_nanos() as f64);
    let requests = rows
        .iter()
        .map(|r| {
            let complete = r.outcome == RequestOutcome::Completed
                && r.dispatched_ns == Some(dispatched)
                && r.engine_first_token_ns.is_some()
                && r.engine_last_token_ns.is_some();
            if !complete {
                return None;
            }
            let metrics = r.metrics.as_ref()?;
            Some(RequestObservation {
                prompt_tokens: metrics.prompt_tokens?,
                output_tokens: metrics.output_tokens?,
                cached_tokens: r.cached_tokens.unwrap_or(0),
                scheduled_ns: since(r.engine_scheduled_ns),
                first_token_ns: since(r.engine_first_token_ns),
                last_token_ns: since(r.engine_last_token_ns),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    // Every row of a batch completes when its generate returns.
    let returned = rows.iter().map(|r| r.finished_ns).collect::<Option<Vec<_>>>().and_then(|f| f.into_iter().max());
    Some(BatchObservation { requests, returned_ns: since(returned) })
}

/// Now, UTC, as `2026-12-01T11:00:00Z`.
fn utc_now_rfc3339() -> String {
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
