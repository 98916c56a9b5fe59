//! `batchlab tune`'s order of steps, written once ([`tune`]): the objective, the search's plan,
//! the search, then either the confirmation of the best points on the real engine or the
//! recommendation run once more in the simulator, and the report written with the search in it.
//!
//! Shaped like `calibrate::calibrate_scenario`: the parsed inputs in ([`TuneOptions`]), a result
//! out ([`Tuned`]). What the caller shows between the steps, and how the real engine's run is
//! carried out (its session: engine.log, Ctrl-C, the run's own table and files), come in through
//! [`TuneSteps`]; the CLI (`cli/tune.rs`) parses, calls this and prints.

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::parallel::available_threads;
use super::search::{search_counting_runs, search_plan};
use super::{
    ConfirmError, Confirmation, Objective, Space, TuneError, TuneReport, confirm, confirmations, recommendation_report,
    write_report,
};
use crate::report::{Report, ReportError};
use crate::run::{RunOptions, RunSummary};
use crate::scenario::plan::{EnginePlan, Plan};

/// What `batchlab tune` was asked, parsed.
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// Without an SLO (the scenario's or set): maximize output throughput among points with
    /// latency p99 at most this. With one, goodput under it is maximized.
    pub max_latency_p99: Option<Duration>,
    /// Keep the scenario's load: search the batch size and timeout only ([`Space::at_own_load`]).
    pub keep_load: bool,
    /// How many points the search may evaluate.
    pub budget: usize,
    /// How many threads run the search's points; `None`: every CPU the process may use. The
    /// result is the same for any number.
    pub threads: Option<NonZeroUsize>,
    /// A calibration profile, to search a real-engine scenario in the simulator.
    pub profile: Option<PathBuf>,
    /// With a real-engine scenario and a profile: how many of the best points to confirm on the
    /// real engine (one engine start); 0 skips the confirmation.
    pub confirm: usize,
    /// Where report.json and report.html go (and the confirmation run's files);
    /// `None`: `results/<name>-tune`.
    pub output: Option<PathBuf>,
}

/// The search, done: what [`TuneSteps::searched`] is shown.
#[derive(Debug)]
pub struct Searched<'a> {
    /// What the search maximized.
    pub objective: &'a Objective,
    /// The search (its points, the recommendation, how many runs it made, how long it took).
    pub tune: &'a TuneReport,
    /// The threads it ran on.
    pub threads: NonZeroUsize,
}

/// The confirmation's run on the real engine, given the options the caller runs it with.
pub type ConfirmRun = Box<dyn FnOnce(RunOptions) -> Result<RunSummary, ConfirmError> + Send>;

/// What the caller of [`tune`] does between its steps.
pub trait TuneSteps {
    /// The search is done (shown before anything else runs, whether a point met the objective or
    /// not).
    fn searched(&mut self, searched: &Searched<'_>);

    /// Runs the confirmation of the best `points` points on `real`'s own engine (`run`, a
    /// `[matrix]` run of one engine start, writing into `output`) in the caller's session, and
    /// gives back its report; `None` when it did not finish (the caller has said why, and keeps
    /// what it needs of it, such as an exit code).
    fn confirm(&mut self, real: &Plan, points: usize, output: &Path, run: ConfirmRun) -> Option<Report>;

    /// The confirmation's predictions against its measurements.
    fn confirmed(&mut self, confirmed: &[Confirmation]);
}

/// What [`tune`] made.
#[derive(Debug)]
pub struct Tuned {
    /// What the search maximized.
    pub objective: Objective,
    /// The search, and the confirmation when there was one (report.json's `tune`).
    pub tune: TuneReport,
    /// report.json and report.html, with the search in them.
    pub written: [PathBuf; 2],
}

/// Why [`tune`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// Neither an SLO nor a latency bound: nothing to optimize.
    #[error(
        "name what to optimize: an SLO (`--slo ttft_ms=200`, or `[slo]` in the scenario) or `--max-latency-p99 500ms`"
    )]
    NoObjective,
    /// The scenario cannot be searched as asked (a real engine without a profile, a bad profile).
    #[error("{0}")]
    Plan(TuneError),
    /// The search failed.
    #[error("{0}")]
    Search(TuneError),
    /// No point met the objective.
    #[error("no point met the objective; loosen the SLO or the latency bound")]
    NoRecommendation,
    /// The recommendation's run in the simulator failed.
    #[error("running the recommendation: {0}")]
    Recommendation(TuneError),
    /// The confirmation's run did not finish ([`TuneSteps::confirm`] gave no report).
    #[error("the confirmation run did not finish")]
    ConfirmStopped,
    /// report.json or report.html could not be written.
    #[error("{0}")]
    Write(ReportError),
}

impl WorkflowError {
    /// Whether the input is at fault (the scenario, the objective, the profile), not a run.
    pub fn bad_input(&self) -> bool {
        matches!(self, WorkflowError::NoObjective | WorkflowError::Plan(_))
    }
}

/// The objective `plan` and a latency bound name: goodput under the plan's `[slo]` when it has
/// one, else output throughput under `max_latency_p99`; `None` with neither.
pub fn objective(plan: &Plan, max_latency_p99: Option<Duration>) -> Option<Objective> {
    match (plan.slo().is_set(), max_latency_p99) {
        (true, _) => Some(Objective::Goodput),
        (false, Some(max_latency_p99)) => Some(Objective::ThroughputUnder { max_latency_p99 }),
        (false, None) => None,
    }
}

/// `batchlab tune` on `plan` (the scenario as loaded, its sets applied): the objective, the
/// search in the simulator ([`search_plan`], [`search_counting_runs`]), then, for a real-engine
/// scenario searched on a profile with `options.confirm` above 0, the best points run on the real
/// engine ([`confirm`], through `steps`), else the recommendation run once more in the simulator
/// ([`recommendation_report`]); that run's report, with the search in it, is written to the
/// output directory ([`write_report`]).
pub fn tune(plan: &Plan, options: &TuneOptions, steps: &mut dyn TuneSteps) -> Result<Tuned, WorkflowError> {
    let objective = objective(plan, options.max_latency_p99).ok_or(WorkflowError::NoObjective)?;
    let sim = search_plan(plan, options.profile.as_deref()).map_err(WorkflowError::Plan)?;
    let space = if options.keep_load { Space::for_plan(&sim).at_own_load(&sim) } else { Space::for_plan(&sim) };
    let threads = options.threads.unwrap_or_else(available_threads);
    let started = std::time::Instant::now();
    let (result, runs) =
        search_counting_runs(&sim, &objective, options.budget, space, threads).map_err(WorkflowError::Search)?;
    let search_s = started.elapsed().as_secs_f64();
    let mut tune = TuneReport { objective: objective.to_string(), search_s, runs, result, confirmed: Vec::new() };
    steps.searched(&Searched { objective: &objective, tune: &tune, threads });
    if tune.result.best_point().is_none() {
        return Err(WorkflowError::NoRecommendation);
    }
    let output =
        options.output.clone().unwrap_or_else(|| PathBuf::from("results").join(format!("{}-tune", plan.name())));
    let real = !matches!(plan.engine(), EnginePlan::Sim(_));
    let mut report = if real && options.profile.is_some() && options.confirm > 0 {
        let k = options.confirm;
        let (real_plan, result) = (plan.clone(), tune.result.clone());
        let run: ConfirmRun = Box::new(move |run_options| confirm(&real_plan, &result, k, run_options));
        let points = tune.result.top(k).len();
        let report = steps.confirm(plan, points, &output, run).ok_or(WorkflowError::ConfirmStopped)?;
        tune.confirmed = confirmations(&tune.result, k, &objective, &report);
        steps.confirmed(&tune.confirmed);
        report
    } else {
        recommendation_report(&sim, &tune.result)
            .map_err(WorkflowError::Recommendation)?
            .ok_or(WorkflowError::NoRecommendation)?
    };
    let written = write_report(&mut report, tune.clone(), &output).map_err(WorkflowError::Write)?;
    Ok(Tuned { objective, tune, written })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::environment::detections_on_this_thread;
    use crate::scenario::{Overrides, load_file, parse_str};

    /// What the workflow showed its caller, and the confirmation it asked for.
    #[derive(Default)]
    struct Recorded {
        searched: Vec<(Objective, TuneReport)>,
        confirms: Vec<(String, usize, PathBuf)>,
        confirmed: Vec<Vec<Confirmation>>,
    }

    impl TuneSteps for Recorded {
        fn searched(&mut self, searched: &Searched<'_>) {
            self.searched.push((searched.objective.clone(), searched.tune.clone()));
        }

        /// Runs nothing: the real engine's report is the plan's, with no benchmarks.
        fn confirm(&mut self, real: &Plan, points: usize, output: &Path, _run: ConfirmRun) -> Option<Report> {
            self.confirms.push((real.engine().kind().to_owned(), points, output.to_path_buf()));
            let environment = crate::report::tests::redacted_environment();
            Some(Report::new(real, environment, Vec::new(), false))
        }

        fn confirmed(&mut self, confirmed: &[Confirmation]) {
            self.confirmed.push(confirmed.to_vec());
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("batchlab-tune-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn options(output: &Path) -> TuneOptions {
        TuneOptions {
            max_latency_p99: None,
            keep_load: true,
            budget: 8,
            threads: Some(NonZeroUsize::MIN),
            profile: None,
            confirm: 3,
            output: Some(output.to_path_buf()),
        }
    }

    /// `tune` on scenarios/slo.toml (the simulator, an `[slo]`): the search is shown once, then
    /// the recommendation runs once more and its report, with the search in it, is written. The
    /// points run on the middle level: the machine is read (`Environment::detect`) once, for that
    /// one report, not once per run (8 points, their seed and stress runs), on the one thread all
    /// of them run on.
    #[test]
    fn a_tune_makes_one_report_its_recommendations_and_no_point_makes_one() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let plan = load_file(&root.join("scenarios/slo.toml"), &Overrides::default()).unwrap();
        let dir = temp_dir("workflow");
        let mut steps = Recorded::default();
        let before = detections_on_this_thread();
        let tuned = tune(&plan, &options(&dir), &mut steps).unwrap();
        assert_eq!(detections_on_this_thread() - before, 1, "one report: the recommendation's");
        assert_eq!(tuned.objective, Objective::Goodput, "the scenario's [slo]");
        assert_eq!(tuned.tune.result.points.len(), 8, "the budget is spent");
        assert!(tuned.tune.runs.simulated > 8, "and seed runs: {:?}", tuned.tune.runs);
        assert_eq!(steps.searched, vec![(Objective::Goodput, tuned.tune.clone())], "shown once, before the report");
        assert!(steps.confirms.is_empty() && steps.confirmed.is_empty(), "a sim scenario is not confirmed");
        assert_eq!(tuned.written, [dir.join("report.json"), dir.join("report.html")]);
        let report = crate::report::read_report(&dir).unwrap();
        assert_eq!(report.tune.as_ref(), Some(&tuned.tune));
        let best = tuned.tune.result.best_point().expect("a recommendation");
        assert_eq!(report.benchmarks.len(), 1, "the recommendation, run again");
        assert_eq!(report.benchmarks[0].slo.as_ref().and_then(|s| s.goodput_output_tokens_per_s), best.score);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A real-engine scenario searched on a calibration profile: after the search, the best points
    /// go to the caller's confirmation run (in one engine start, on the scenario's own engine),
    /// and the report written is that run's, not the simulator's recommendation.
    #[test]
    fn a_real_engine_scenario_on_a_profile_is_confirmed_through_the_caller() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(root.join("scenarios/slo.toml")).unwrap().replace(
            "[engine.sim]\ntime = \"virtual\"",
            "[engine]\nkind = \"openai\"\n[engine.openai]\nurls = [\"http://127.0.0.1:9\"]\nmodel = \"m\"",
        );
        let plan = parse_str(&text, "slo.toml", root, &Overrides::default()).unwrap();
        let dir = temp_dir("confirm");
        let mut steps = Recorded::default();
        let no_profile = tune(&plan, &options(&dir), &mut steps).unwrap_err();
        assert!(matches!(no_profile, WorkflowError::Plan(TuneError::Unsupported(_))), "{no_profile}");
        assert!(no_profile.bad_input());
        let on_profile = TuneOptions { profile: Some(root.join("scenarios/profiles/example.toml")), ..options(&dir) };
        let tuned = tune(&plan, &on_profile, &mut steps).unwrap();
        assert_eq!(steps.searched.len(), 1);
        let points = tuned.tune.result.top(3).len();
        assert!(points >= 1);
        assert_eq!(steps.confirms, vec![("openai".to_owned(), points, dir.clone())]);
        assert_eq!(steps.confirmed, vec![Vec::new()], "the confirmation's report has no benchmarks");
        let report = crate::report::read_report(&dir).unwrap();
        assert_eq!(report.scenario.pointer("/engine/kind").and_then(|k| k.as_str()), Some("openai"));
        assert!(report.benchmarks.is_empty(), "the confirmation's report, not a run of the recommendation");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
