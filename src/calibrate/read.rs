//! Reading run output directories for a fit: each run's `requests.jsonl` rows, grouped by `batch`
//! into `generate` calls ([`BatchObservation`]s), and what its engine was (report.json's
//! `environment.engine_config`, or the engine a designed run reported in memory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::CalibrateError;
use super::fit::{BatchObservation, RequestObservation};
use crate::engine::{EngineInfo, ResolvedEngineConfig};
use crate::report::requests::REQUESTS_FILE;
use crate::report::{JSON_FILE, RequestOutcome, RequestRecord, read_records};
use crate::time::Timestamp;

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

/// The batches of `dirs`' requests.jsonl, from runs of `engine`, which the caller already knows
/// (a designed run: its engine reported itself in memory, so no report.json is read back).
pub fn read_runs(dirs: &[PathBuf], engine: &EngineInfo) -> Result<Measurements, CalibrateError> {
    let config =
        engine.resolved_config.ok_or_else(|| CalibrateError::EngineConfigUnknown { engine: engine.name.clone() })?;
    if dirs.is_empty() {
        return Err(CalibrateError::NoSources);
    }
    let mut batches = Vec::new();
    let mut skipped = 0;
    for dir in dirs {
        let (mut found, left_out) = read_batches(&dir.join(REQUESTS_FILE))?;
        batches.append(&mut found);
        skipped += left_out;
    }
    Ok(Measurements { config, engine: (engine.name.clone(), engine.version.clone()), batches, skipped })
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
            let (images, encoder_tokens) = encoded(r);
            Some(RequestObservation {
                prompt_tokens: metrics.prompt_tokens?,
                output_tokens: metrics.output_tokens?,
                cached_tokens: r.cached_tokens.unwrap_or(0),
                images,
                encoder_tokens,
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

/// A request's images and the image tokens its engine encoded: those of the images its encoder
/// cache did not hold (`image_cache_hits`; every image when the engine does not say). A row gives
/// its images' tokens together, so the misses' share is taken as the images' mean: exact when a
/// request's images cost alike (a fixed count per image, the default rule, or one size).
fn encoded(r: &RequestRecord) -> (u32, u32) {
    let Some(s) = r.images.filter(|s| s.images > 0) else { return (0, 0) };
    let misses = s.images - r.image_cache_hits.unwrap_or(0).min(s.images);
    let tokens = (s.tokens * u64::from(misses) + u64::from(s.images) / 2) / u64::from(s.images);
    (s.images, u32::try_from(tokens).unwrap_or(u32::MAX))
}
