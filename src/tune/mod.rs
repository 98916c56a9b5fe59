//! `batchlab tune`: searches the batching settings (batch size, batch timeout, and the load: the
//! throughput profile's `max_concurrency` or the constant profile's rate) for the highest goodput
//! under the scenario's `[slo]`, or, without one, the highest output throughput whose latency p99
//! stays under a bound the user names. The whole job above `run/`:
//!
//! - [`search`](mod@search): the search in the simulator and its recommendation ([`search()`],
//!   [`search_plan`], [`Space::for_plan`]);
//! - `ties`: when the data cannot tell two points apart (the tie band, the paired tie check, the
//!   plateau) and which of two tied settings is the simpler;
//! - `parallel`: each phase's independent runs on a pool of threads, the results taken in the
//!   serial search's order, so the answer is the same for any number of threads
//!   ([`search_with_threads`]);
//! - [`confirm`](mod@confirm): the best points on the real engine in one engine start
//!   ([`confirm()`], [`confirmations`]), from the run's results in memory;
//! - [`workflow`]: the order of the steps, written once ([`tune()`]: the objective, the search,
//!   the confirmation or the recommendation, the report), shaped like `calibrate_scenario`.
//!
//! Every point is a whole run of the scenario on the simulator in virtual time (the scenario's own
//! sim engine, or one built from a calibration profile for a real-engine scenario), so a point
//! costs milliseconds and a seed gives the same answer every time.
//!
//! The result types ([`Point`], [`TuneResult`], …) live in [`crate::report::tuning`], because a
//! report carries them; the policy over them (the search's bounds, the plateau, which points to
//! confirm) lives here. The CLI (`cli/tune.rs`) parses, calls [`tune()`] and prints; this calls
//! `run/`, and nothing here calls back up. Each point is the middle level of a run
//! (`run::run_plan_benchmarks`: the plan's own engine, the results in memory, no report), the
//! search's plan checked once by `run::preflight` before the first; only the recommendation's run
//! (or the confirmation's) makes a report, the one written.

pub mod confirm;
mod memo;
mod parallel;
pub mod search;
mod ties;
pub mod workflow;

use crate::scenario::ScenarioError;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::report::tuning::{Confirmation, LoadKnob, Point, SearchRuns, Space, TuneReport, TuneResult};
pub use confirm::{ConfirmError, confirm, confirmation_plan, confirmations};
pub use parallel::available_threads;
pub use search::{
    NOISE_SEEDS, PLATEAU, STRESS, paired_tie, search, search_counting_runs, search_plan, search_with_threads, simpler,
    stressed, tie_band, with_point,
};
pub use workflow::{ConfirmRun, Searched, TuneOptions, TuneSteps, Tuned, WorkflowError, objective, tune};

use crate::report::{Report, ReportError};
use crate::run::{RunError, RunOptions, run_blocking};
use crate::scenario::plan::Plan;
use crate::scenario::units::format_duration;

/// Why a search cannot run.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// A point's run failed.
    #[error("run failed at {point}: {source}")]
    Run {
        /// The point's label.
        point: String,
        /// The failure.
        source: RunError,
    },
    /// The search's plan is one a run refuses before its engine starts ([`crate::run::preflight`]),
    /// checked once before the first point.
    #[error("the scenario cannot run: {0}")]
    Preflight(RunError),
    /// The scenario cannot be tuned as asked.
    #[error("{0}")]
    Unsupported(String),
    /// The calibration profile could not be read.
    #[error("{0}")]
    Profile(String),
    /// A point's settings do not make a valid scenario.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// What the search maximizes.
#[derive(Clone, Debug, PartialEq)]
pub enum Objective {
    /// Goodput (output tokens/s of requests that met the scenario's `[slo]`).
    Goodput,
    /// Output tokens/s among points whose latency p99 is at most this.
    ThroughputUnder {
        /// The latency p99 bound.
        max_latency_p99: Duration,
    },
}

/// How the report and the CLI name the objective.
impl std::fmt::Display for Objective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Objective::Goodput => f.write_str("goodput under the SLO"),
            Objective::ThroughputUnder { max_latency_p99 } => {
                write!(f, "output throughput with latency p99 <= {}", format_duration(*max_latency_p99))
            }
        }
    }
}

/// The report of a search without a confirmation: the recommendation ([`TuneResult::best_point`])
/// run once more on the search's plan `sim`, quietly; `None` when no point met the objective.
pub fn recommendation_report(sim: &Plan, result: &TuneResult) -> Result<Option<Report>, TuneError> {
    let Some(best) = result.best_point() else { return Ok(None) };
    let plan = with_point(sim, best.batch_size, best.batch_timeout, best.load)?;
    let summary = run_blocking(&plan, RunOptions::quiet())
        .map_err(|source: RunError| TuneError::Run { point: best.label(result.space.load), source })?;
    Ok(Some(summary.report))
}

/// `report` with the search in it (report.json's `tune`), written again as report.json and
/// report.html in `dir`.
pub fn write_report(report: &mut Report, tune: TuneReport, dir: &Path) -> Result<[PathBuf; 2], ReportError> {
    report.tune = Some(tune);
    crate::report::prepare_output_dir(dir)?;
    let json = crate::report::write::write_json(report, dir)?;
    let html = crate::report::html::write_html(report, dir)?;
    Ok([json, html])
}
