//! The confirmation of `batchlab tune` on a real engine: the best points, one `[matrix]`
//! combination each ([`confirmation_plan`]), run in one engine start ([`confirm`]), and each
//! prediction set against its measurement ([`confirmations`]) from the run's results in memory;
//! no report is read back.

use super::search::point_sets;
use super::{Confirmation, LoadKnob, Objective, Point, TuneError, TuneResult};
use crate::report::Report;
use crate::run::{RunError, RunOptions, RunSummary, run_blocking};
use crate::scenario::Set;
use crate::scenario::plan::Plan;

/// Which points a confirmation runs: policy, so here, on the data type the report carries.
impl TuneResult {
    /// The recommendation, then the next best points by score, `k` in all; ties on score and
    /// latency shown once.
    pub fn top(&self, k: usize) -> Vec<&Point> {
        let mut v = self.distinct(|p| p.score.is_some());
        let best = self.best_point();
        v.sort_by_key(|p| best != Some(*p));
        v.truncate(k);
        v
    }
}

/// Why a confirmation did not run.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    /// No plan to confirm (no feasible point, or a point the plan refuses).
    #[error(transparent)]
    Plan(#[from] TuneError),
    /// The confirmation run failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Runs the best `k` points of `result` ([`TuneResult::top`]) on `real`'s own engine, in one
/// engine start ([`confirmation_plan`]), as `batchlab run` runs a plan (its report and files into
/// `options.output_dir`). Set the predictions against its report with [`confirmations`].
pub fn confirm(real: &Plan, result: &TuneResult, k: usize, options: RunOptions) -> Result<RunSummary, ConfirmError> {
    let plan = confirmation_plan(real, &result.top(k), result.space.load)?;
    Ok(run_blocking(&plan, options)?)
}

/// The best `k` points of `result`, predicted, against what [`confirm`]'s run of them measured
/// (`report`, its benchmarks in the points' order).
pub fn confirmations(result: &TuneResult, k: usize, objective: &Objective, report: &Report) -> Vec<Confirmation> {
    let knob = result.space.load;
    result
        .top(k)
        .iter()
        .zip(&report.benchmarks)
        .map(|(p, b)| Confirmation {
            point: p.label(knob),
            predicted: p.score,
            measured: match objective {
                Objective::Goodput => b.slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s),
                Objective::ThroughputUnder { .. } => b.output_tokens_per_s,
            },
            predicted_latency_p99_ms: p.latency_p99_ms,
            measured_latency_p99_ms: b.metric("latency_p99_ms"),
        })
        .collect()
}

/// A `[matrix]` plan of the given points on `real` (the scenario as written): one benchmark per
/// point, all in one engine start, for confirming predictions on the real engine.
pub fn confirmation_plan(real: &Plan, points: &[&Point], knob: LoadKnob) -> Result<Plan, TuneError> {
    if points.is_empty() {
        return Err(TuneError::Unsupported("no point to confirm".into()));
    }
    let combinations: Vec<(String, Vec<Set>)> = points
        .iter()
        .map(|p| (p.label(knob), point_sets(real.profile(), p.batch_size, p.batch_timeout, p.load)))
        .collect();
    Ok(real.with_combinations(&combinations)?)
}
