//! `batchlab calibrate SCENARIO`: a short designed run on the scenario's engine, then the fit
//! ([`super::fit_design`]).
//!
//! The step model's coefficients (docs/simulation.md) are separable only from batches that vary
//! what each term counts: one sequence against hundreds (per-sequence decode cost against the
//! fixed step cost), short prompts against long ones (prefill tokens, attended context), short
//! outputs against long ones (prefill against decode), and batches larger than the token budget
//! or `max_num_seqs` (chunked prefill, continuous batching). [`DESIGN`] is that set of
//! [`Setting`]s, each a few full batches of one batch size and fixed prompt and output lengths.
//!
//! Each batch of a setting is a [`Plan`] of its own ([`setting_plan`]): the scenario with its
//! `[batching]`, `[workload]`, `[profile]` and `[stop]` replaced, so every batch runs through the
//! ordinary run loop and batcher and writes its own `report.json` and `requests.jsonl`; the
//! settings take turns, one batch each ([`design_runs`]). The workload is pinned (fixed lengths,
//! `ignore_eos`, greedy, a unique prefix and a seed of its own per run, so no prompt is served
//! from an earlier run's prefix cache). The engine is started **once** for all of them, each run
//! on it in turn ([`EngineSession`]); a first warm-up run, not fitted, takes the engine's
//! first-call costs.

use std::path::{Path, PathBuf};

use super::{CalibrateError, fit_design};
use crate::engine::EngineInfo;
use crate::engine::sim::Profile;
use crate::run::progress::ProgressMode;
use crate::run::progress::Screen;
use crate::run::{EngineSession, Interrupt, RunError, RunOptions, RunSummary};
use crate::scenario::plan::{EnginePlan, Plan, WorkloadSpec};
use crate::scenario::{ScenarioError, derive_seed, keys};

/// Why a designed calibration run failed.
#[derive(Debug, thiserror::Error)]
pub enum DesignError {
    /// A setting's run could not be carried out (the engine failed to start, a report could not be
    /// written, ...).
    #[error(transparent)]
    Run(#[from] RunError),
    /// The fit failed.
    #[error(transparent)]
    Calibrate(#[from] CalibrateError),
    /// The fit from a URL failed.
    #[error(transparent)]
    UrlFit(#[from] super::url::UrlFitError),
    /// A setting does not make a valid scenario of the base (a key the design sets is refused).
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The run was interrupted (Ctrl-C): no profile from a partial design.
    #[error("interrupted: the designed run did not finish, no profile written")]
    Interrupted,
    /// A setting's run finished without completing every request.
    #[error("designed setting {setting}: {problem}; a fit from it would be biased, no profile written")]
    Incomplete {
        /// The setting's name (`b32-p128-o64`).
        setting: String,
        /// What went wrong.
        problem: String,
    },
}

/// One designed setting: `batches` full batches of `batch_size` requests, each with a prompt of
/// `prompt_tokens` and exactly `output_tokens` generated tokens.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// Requests per batch (one generate call), and requests in flight.
    pub batch_size: u32,
    /// Prompt length in tokens.
    pub prompt_tokens: u32,
    /// Generated tokens per request (`ignore_eos`).
    pub output_tokens: u32,
    /// Full batches to run.
    pub batches: u32,
}

impl Setting {
    /// `b32-p128-o64`: the setting's directory name.
    pub fn name(&self) -> String {
        format!("b{}-p{}-o{}", self.batch_size, self.prompt_tokens, self.output_tokens)
    }
}

/// The warm-up run before the design (not fitted): one batch of 32 mid-length requests.
pub const WARMUP: Setting = Setting { batch_size: 32, prompt_tokens: 128, output_tokens: 16, batches: 1 };

/// The designed settings, in run order, each a few batches (the settings take turns, so a
/// machine whose speed drifts biases no single term). With vLLM's CPU defaults (`max_num_seqs`
/// 256, `max_num_batched_tokens` 4096) the prefill-heavy ones fill one step with 1,500 to 4,000
/// prompt tokens over 4 to 64 sequences, the decode-heavy ones run 1 to 160 sequences with short
/// and long contexts, and the last three exceed the token budget (chunked prefill over 4 to 8
/// steps, mixed with decodes) or `max_num_seqs` (half the batch waits and joins as the first half
/// finishes). About 135,000 generated tokens in all: under a minute of generation on the tiny
/// test model on 2 CPUs.
pub const DESIGN: &[Setting] = &[
    // One sequence: the fixed cost of a step; a long context at S = 1.
    Setting { batch_size: 1, prompt_tokens: 16, output_tokens: 64, batches: 6 },
    Setting { batch_size: 1, prompt_tokens: 384, output_tokens: 64, batches: 6 },
    // Prefill-heavy, one step each: per prompt token, per sequence, and the step size's square.
    Setting { batch_size: 4, prompt_tokens: 384, output_tokens: 4, batches: 6 },
    Setting { batch_size: 8, prompt_tokens: 256, output_tokens: 2, batches: 6 },
    Setting { batch_size: 24, prompt_tokens: 160, output_tokens: 4, batches: 6 },
    Setting { batch_size: 64, prompt_tokens: 32, output_tokens: 4, batches: 6 },
    // Decode-heavy at growing sizes: the per-sequence cost; long prompts add attended context.
    Setting { batch_size: 16, prompt_tokens: 16, output_tokens: 64, batches: 5 },
    Setting { batch_size: 16, prompt_tokens: 384, output_tokens: 32, batches: 4 },
    Setting { batch_size: 48, prompt_tokens: 32, output_tokens: 64, batches: 4 },
    Setting { batch_size: 96, prompt_tokens: 192, output_tokens: 32, batches: 4 },
    Setting { batch_size: 160, prompt_tokens: 16, output_tokens: 48, batches: 3 },
    // Beyond the token budget: 128 x 256 = 32768 prompt tokens, 8 chunked-prefill steps; 256 x 64
    // in 4 chunks mixed with the decodes of the first ones.
    Setting { batch_size: 128, prompt_tokens: 256, output_tokens: 8, batches: 3 },
    Setting { batch_size: 256, prompt_tokens: 64, output_tokens: 64, batches: 3 },
    // Beyond max_num_seqs: continuous batching inside one generate.
    Setting { batch_size: 512, prompt_tokens: 16, output_tokens: 16, batches: 3 },
];

/// The scenario `base` reshaped to run `setting`: its engine, seed and output settings kept;
/// `[batching]` of the setting's batch size (the scenario's batch timeout and generate timeout);
/// a pinned synthetic workload seeded by `stream`; a throughput profile with exactly one batch in
/// flight; `batches × batch_size` measured requests; no warm-up, cool-down, faults or
/// expectations. The prompt is shortened where prompt plus output would exceed the engine's
/// `max_model_len`.
pub fn setting_plan(base: &Plan, setting: &Setting, stream: u64) -> Result<Plan, ScenarioError> {
    let batch_size = setting.batch_size.max(1);
    let mut prompt = setting.prompt_tokens.max(1);
    if let EnginePlan::Vllm(v) = base.engine()
        && let Some(max) = v.max_model_len
    {
        prompt = prompt.min(max.saturating_sub(setting.output_tokens).max(1));
    }
    let vocab_size = match base.workload() {
        WorkloadSpec::Synthetic { vocab_size, .. } => *vocab_size,
        // A prompt file says nothing about the vocabulary; ids below 1000 exist in every model.
        WorkloadSpec::File { .. } => 1000,
    };
    // Token prompts: their lengths are exact, on every engine. A whole section set as a table
    // replaces it: every key not named here takes its default.
    let workload = keys::WORKLOAD.table([
        keys::WORKLOAD_SOURCE.to("synthetic"),
        keys::PROMPT_TOKENS.to(u64::from(prompt)),
        keys::OUTPUT_TOKENS.to(u64::from(setting.output_tokens.max(1))),
        keys::WORKLOAD_SEED.to(derive_seed(base.seed(), 0xCA11_B000 + stream)),
        keys::UNIQUE_PREFIX.to(true),
        keys::VOCAB_SIZE.to(u64::from(vocab_size)),
        keys::IGNORE_EOS.to(true),
        keys::TEMPERATURE.to(0.0),
    ]);
    let requests = u64::from(setting.batches.max(1)) * u64::from(batch_size);
    let sets = [
        keys::NAME.to(format!("{}-{}", base.name(), Setting { prompt_tokens: prompt, ..*setting }.name())),
        keys::DESCRIPTION.to(format!("batchlab calibrate: {} batches of {}", setting.batches, setting.name())),
        keys::BATCH_SIZE.to(u64::from(batch_size)),
        workload,
        keys::PROFILE.table([keys::PROFILE_KIND.to("throughput"), keys::MAX_CONCURRENCY.to(u64::from(batch_size))]),
        keys::STOP.table([keys::MAX_REQUESTS.to(requests)]),
        keys::FAULTS.table([]),
        keys::EXPECT.table([]),
        keys::OUTPUT.table([keys::REQUESTS_JSONL.to(true)]),
    ];
    base.with_changes(&[keys::WARMUP.path(), keys::COOLDOWN.path(), keys::MATRIX.path()], &sets)
}

/// How a designed run is carried out.
#[derive(Clone, Debug)]
pub struct DesignOptions {
    /// Each run writes `runs_dir/<run>/` (report.json, report.csv, requests.jsonl), named as in
    /// [`design_runs`].
    pub runs_dir: PathBuf,
    /// The live display of each run.
    pub progress: ProgressMode,
    /// Where the display draws.
    pub screen: Screen,
    /// Fire it to stop after the running setting (the CLI fires it on Ctrl-C).
    pub interrupt: Interrupt,
}

/// What a designed run produced.
#[derive(Clone, Debug)]
pub struct DesignRun {
    /// One output directory per fitted run, in run order (the warm-up's is not among them).
    pub dirs: Vec<PathBuf>,
    /// What the engine said about itself, its resolved configuration included.
    pub engine: EngineInfo,
}

/// The runs of a designed calibration, in order: the warm-up (`warmup`, not fitted), then the
/// settings **one batch per run, each setting's batches spread evenly over the whole design**:
/// batch `k` of a setting of `n` batches runs at the position `(k + ½) / n` of the design (ties in
/// setting order), so a setting of 6 batches runs one in every sixth of the design and one of 3
/// one in every third (`b1-p16-o64-r0`, `b4-p384-o4-r0`, ..., `b1-p16-o64-r1`, ...). On a machine
/// whose speed drifts (a shared CPU), each setting then sees every stretch of the design instead
/// of one, so a slow minute biases every coefficient a little rather than one a lot. Every run
/// draws prompts of its own.
pub fn design_runs(base: &Plan, design: &[Setting]) -> Result<Vec<(String, Plan)>, ScenarioError> {
    let counts: Vec<usize> = design.iter().map(|s| s.batches as usize).collect();
    let mut runs = vec![("warmup".to_owned(), setting_plan(base, &WARMUP, 0)?)];
    for (i, round) in spread_evenly(&counts) {
        let setting = &design[i];
        let one = Setting { batches: 1, ..*setting };
        let stream = 1 + (i as u64) * 64 + round as u64;
        runs.push((format!("{}-r{round}", setting.name()), setting_plan(base, &one, stream)?));
    }
    Ok(runs)
}

/// Lists of `counts[i]` items each, merged so that every list is spread evenly over the whole:
/// item `k` of list `i` stands at the position `(k + ½) / counts[i]`, ties in list order. Returns
/// `(list, item)` pairs in that order. [`design_runs`] spreads the settings' batches with it, and
/// a caller that interleaves the design with runs of its own (the fidelity bench) spreads the two.
pub fn spread_evenly(counts: &[usize]) -> Vec<(usize, usize)> {
    let mut order: Vec<(f64, usize, usize)> = counts
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| (0..n).map(move |k| ((k as f64 + 0.5) / n as f64, i, k)))
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    order.into_iter().map(|(_, i, k)| (i, k)).collect()
}

/// Runs [`design_runs`] on the engine `base` names, started once ([`design_session`]).
pub fn run_design(base: &Plan, design: &[Setting], options: &DesignOptions) -> Result<DesignRun, DesignError> {
    let plans = design_runs(base, design)?;
    let mut session = design_session(&plans, options)?;
    let mut dirs = Vec::new();
    let mut info = None;
    for (i, (name, plan)) in plans.iter().enumerate() {
        let (dir, engine) = run_designed(&mut session, name, plan, options)?;
        info.get_or_insert(engine);
        if i > 0 {
            dirs.push(dir);
        }
    }
    session.finish()?;
    let engine = info.unwrap_or_default();
    Ok(DesignRun { dirs, engine })
}

/// The engine session the runs of [`design_runs`] (`plans`) run on: the engine they name, not yet
/// started, with their `[faults]` (none) and `options.interrupt`.
pub fn design_session(plans: &[(String, Plan)], options: &DesignOptions) -> Result<EngineSession, DesignError> {
    let (_, first) = plans.first().ok_or_else(|| RunError::Internal("a design of no runs".into()))?;
    Ok(EngineSession::new(first, &options.interrupt)?)
}

/// Runs one of [`design_runs`] (`name`, `plan`) on `session` into `options.runs_dir/<name>/`,
/// with requests.jsonl: its directory and what the engine said about itself. A run that does not
/// complete every request, or Ctrl-C, is an error (a fit from it would be biased). For a caller
/// that interleaves the design with runs of its own on the same engine start (the fidelity
/// bench); [`run_design`] runs the whole design.
pub fn run_designed(
    session: &mut EngineSession,
    name: &str,
    plan: &Plan,
    options: &DesignOptions,
) -> Result<(PathBuf, EngineInfo), DesignError> {
    let (dir, summary) = run_checked(session, name, plan, options)?;
    Ok((dir, summary_engine(&summary)))
}

/// [`run_designed`]'s run: its directory and its summary, once checked complete.
pub(super) fn run_checked(
    session: &mut EngineSession,
    name: &str,
    plan: &Plan,
    options: &DesignOptions,
) -> Result<(PathBuf, RunSummary), DesignError> {
    if options.interrupt.is_fired() {
        return Err(DesignError::Interrupted);
    }
    let dir = options.runs_dir.join(name);
    let run_options = RunOptions {
        output_dir: Some(dir.clone()),
        requests_jsonl: true,
        progress: options.progress,
        screen: options.screen.clone(),
        interrupt: options.interrupt.clone(),
        repeat: 1,
        shard: None,
    };
    let summary = session.run(plan, run_options)?;
    check_complete(&summary, name)?;
    Ok((dir, summary))
}

/// `batchlab calibrate SCENARIO`: [`run_design`] with [`DESIGN`], then [`fit_design`] on its
/// directories and the engine it ran on.
/// An `openai` scenario is calibrated from its URL instead ([`super::url::calibrate_url`]).
pub fn calibrate_scenario(base: &Plan, options: &DesignOptions) -> Result<(Profile, DesignRun), DesignError> {
    if let EnginePlan::OpenAi(_) = base.engine() {
        return super::url::calibrate_url(base, options);
    }
    let run = run_design(base, DESIGN, options)?;
    let profile = fit_design(&run)?;
    Ok((profile, run))
}

pub(super) fn summary_engine(summary: &RunSummary) -> EngineInfo {
    let env = &summary.report.environment;
    EngineInfo {
        name: env.engine_name.clone(),
        version: env.engine_version.clone(),
        resolved_config: env.engine_config,
        processes: None,
        engine_thread: None,
    }
}

/// A designed run must complete every request: a fit from a partial run would be silently biased.
fn check_complete(summary: &RunSummary, name: &str) -> Result<(), DesignError> {
    if summary.interrupted {
        return Err(DesignError::Interrupted);
    }
    let problems: Vec<String> = summary
        .report
        .benchmarks
        .iter()
        .filter(|b| b.counts.completed != b.counts.submitted || b.counts.errors > 0)
        .map(|b| {
            format!("{} of {} requests completed ({} errors)", b.counts.completed, b.counts.submitted, b.counts.errors)
        })
        .collect();
    if summary.report.incomplete || !problems.is_empty() {
        return Err(DesignError::Incomplete {
            setting: name.to_owned(),
            problem: if problems.is_empty() { "the run is incomplete".into() } else { problems.join("; ") },
        });
    }
    Ok(())
}

/// The directory `batchlab calibrate SCENARIO` runs the design in when not told: next to the
/// profile, `<profile stem>-runs/`.
pub fn default_runs_dir(profile: &Path) -> PathBuf {
    let stem = profile.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    profile.with_file_name(format!("{stem}-runs"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::plan::{ProfileSpec, TokenDist};
    use crate::scenario::{Overrides, load_file};

    fn shipped(name: &str) -> Result<Plan, ScenarioError> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name);
        load_file(&path, &Overrides::default())
    }

    #[test]
    fn a_setting_plan_pins_the_workload_and_keeps_the_engine() {
        let base = shipped("vllm-cpu.toml").expect("a shipped scenario");
        let setting = Setting { batch_size: 8, prompt_tokens: 600, output_tokens: 64, batches: 3 };
        let plan = setting_plan(&base, &setting, 5).unwrap();
        assert_eq!(plan.engine(), base.engine());
        assert_eq!(plan.batching().batch_size(), 8);
        assert_eq!(plan.batching().batch_timeout(), base.batching().batch_timeout());
        assert_eq!(plan.profile(), &ProfileSpec::Throughput { max_concurrency: 8 });
        assert_eq!(plan.stop().max_requests(), Some(24));
        assert!(plan.warmup().is_none() && plan.expect().is_empty() && plan.output().requests_jsonl());
        let WorkloadSpec::Synthetic {
            prompt_tokens, output_tokens, ignore_eos, unique_prefix, vocab_size, seed, ..
        } = &plan.workload()
        else {
            panic!("synthetic: {:?}", plan.workload())
        };
        // vllm-cpu.toml has max_model_len = 512: the prompt leaves room for the output.
        assert_eq!((prompt_tokens, output_tokens), (&TokenDist::Fixed { value: 448 }, &TokenDist::Fixed { value: 64 }));
        assert!(*ignore_eos && *unique_prefix);
        assert_eq!(*vocab_size, 4000, "the scenario's vocabulary (the tiny model has 4096 tokens)");
        assert_eq!(plan.name(), "vllm-cpu-b8-p448-o64");
        let other = setting_plan(&base, &setting, 6).unwrap();
        let WorkloadSpec::Synthetic { seed: other_seed, .. } = other.workload() else { unreachable!() };
        assert_ne!(seed, other_seed, "every setting draws prompts of its own: no prefix-cache hits across settings");
    }

    #[test]
    fn the_design_spans_the_terms_of_the_step_model() {
        let budget = 4096; // vLLM's CPU default max_num_batched_tokens
        let max_num_seqs = 256;
        assert!(DESIGN.iter().any(|s| s.batch_size == 1), "a lone sequence");
        assert!(DESIGN.iter().any(|s| s.batch_size * s.prompt_tokens > budget), "chunked prefill");
        assert!(DESIGN.iter().any(|s| s.batch_size > max_num_seqs), "continuous batching");
        let prompts: std::collections::BTreeSet<_> = DESIGN.iter().map(|s| s.prompt_tokens).collect();
        let outputs: std::collections::BTreeSet<_> = DESIGN.iter().map(|s| s.output_tokens).collect();
        assert!(prompts.len() >= 3 && outputs.len() >= 3, "{prompts:?} {outputs:?}");
        let tokens: u32 = DESIGN.iter().map(|s| s.batch_size * s.output_tokens * s.batches).sum();
        assert!(tokens < 150_000, "the design stays short: {tokens} generated tokens");
        for s in DESIGN {
            assert!(s.prompt_tokens + s.output_tokens <= 512, "{} fits vllm-cpu.toml's max_model_len", s.name());
        }
    }

    #[test]
    fn the_runs_interleave_the_settings_one_batch_each() {
        let base = shipped("vllm-cpu.toml").expect("a shipped scenario");
        let design = [
            Setting { batch_size: 1, prompt_tokens: 16, output_tokens: 8, batches: 3 },
            Setting { batch_size: 8, prompt_tokens: 16, output_tokens: 8, batches: 1 },
            Setting { batch_size: 4, prompt_tokens: 16, output_tokens: 8, batches: 2 },
        ];
        let runs = design_runs(&base, &design).unwrap();
        let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            // At 1/6, 1/4, 1/2 (b1 before b8), 1/2, 3/4, 5/6 of the design.
            ["warmup", "b1-p16-o8-r0", "b4-p16-o8-r0", "b1-p16-o8-r1", "b8-p16-o8-r0", "b4-p16-o8-r1", "b1-p16-o8-r2"]
        );
        for (name, plan) in &runs[1..] {
            assert_eq!(plan.stop().max_requests(), Some(plan.batching().batch_size() as u64), "{name}: one batch");
        }
        let seeds: std::collections::BTreeSet<u64> = runs
            .iter()
            .map(|(_, p)| match &p.workload() {
                WorkloadSpec::Synthetic { seed, .. } => *seed,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seeds.len(), runs.len(), "every run draws prompts of its own");
        assert_eq!(
            design_runs(&base, DESIGN).unwrap().len(),
            1 + DESIGN.iter().map(|s| s.batches as usize).sum::<usize>()
        );
    }

    #[test]
    fn default_runs_dir_is_next_to_the_profile() {
        assert_eq!(default_runs_dir(Path::new("out/cpu.toml")), PathBuf::from("out/cpu-runs"));
        assert_eq!(default_runs_dir(Path::new("profile.toml")), PathBuf::from("profile-runs"));
    }
}
