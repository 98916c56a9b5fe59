//! `batchlab calibrate SCENARIO` for `engine.kind = "openai"`: a profile of a server seen only
//! from outside, through its URL (docs/simulation.md, "Calibrating from a URL").
//!
//! - [`URL_DESIGN`] ([`point_plan`]): one prompt per request, closed-loop at a few
//!   concurrencies and prompt and output lengths, each point a run of its own on the one engine
//!   session, after a warm-up; requests.jsonl keeps each token's arrival (`token_ns`), stamped
//!   as the HTTP engine stamps it, and the run's `/metrics` deltas give the preemptions;
//! - [`steps`] (sans IO): the arrivals grouped into the engine's steps;
//! - [`fit`](mod@fit) (sans IO): the step costs, the frontend's overhead, the hidden limits;
//! - [`replay`] (sans IO): each point replayed on the profile: the residuals per design point.
//!
//! Uses `run/`, `scenario/` and `batchlab serve`'s engine core; nothing below uses it.

pub mod fit;
pub mod replay;
pub mod steps;

use std::path::PathBuf;

pub use fit::{PointObservation, PointResidual, UrlFit, UrlFitError, fit_url};
pub use replay::{PointShape, point_fit, replay};
pub use steps::{ObservedRequest, Step, infer_steps};

use super::design::{DesignError, DesignOptions, DesignRun, Setting, design_session, run_checked, setting_plan};
use super::{CalibrateError, utc_now_rfc3339};
use crate::engine::sim::profile::{FitSummary, HttpFit, Profile, Provenance};
use crate::report::requests::REQUESTS_FILE;
use crate::report::{Phase, RequestOutcome, read_records};
use crate::run::RunSummary;
use crate::scenario::{Plan, ScenarioError, keys};

/// One design point: `requests` requests of `prompt_tokens` and exactly `output_tokens`, one
/// prompt each, `concurrency` in flight (each client sends its next when the last one ended).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UrlPoint {
    /// Requests in flight.
    pub concurrency: u32,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens (`ignore_eos`).
    pub output_tokens: u32,
    /// Requests measured.
    pub requests: u32,
}

impl UrlPoint {
    /// `c8-p128-o32`: the run's directory name.
    pub fn name(&self) -> String {
        format!("c{}-p{}-o{}", self.concurrency, self.prompt_tokens, self.output_tokens)
    }

    /// Its shape, for a replay.
    pub fn shape(&self) -> PointShape {
        PointShape {
            name: self.name(),
            concurrency: self.concurrency,
            prompt_tokens: self.prompt_tokens,
            output_tokens: self.output_tokens,
        }
    }
}

/// The warm-up before the design (not fitted).
pub const URL_WARMUP: UrlPoint = UrlPoint { concurrency: 4, prompt_tokens: 64, output_tokens: 8, requests: 8 };

/// The design, in run order. One request at a time gives the frontend (each first step follows
/// an idle engine) and the step's fixed cost; a long prompt alone, its prefill; 4 to 16 in flight
/// give the per-sequence cost over 1 to 16 sequences, and, as each finished request's client
/// sends the next, prefills that join running decodes (the prefill cost inside busy steps); long
/// prompts at 8 add attended context. 16 in flight finds a `max_num_seqs` below 16. Prompt plus
/// output stay within 512 tokens (the tiny test model's `max_model_len`). About 3,500 generated
/// tokens: seconds on the tiny model.
pub const URL_DESIGN: &[UrlPoint] = &[
    UrlPoint { concurrency: 1, prompt_tokens: 16, output_tokens: 32, requests: 6 },
    UrlPoint { concurrency: 1, prompt_tokens: 384, output_tokens: 8, requests: 6 },
    UrlPoint { concurrency: 4, prompt_tokens: 64, output_tokens: 32, requests: 16 },
    UrlPoint { concurrency: 8, prompt_tokens: 32, output_tokens: 24, requests: 24 },
    UrlPoint { concurrency: 8, prompt_tokens: 256, output_tokens: 16, requests: 24 },
    UrlPoint { concurrency: 16, prompt_tokens: 32, output_tokens: 24, requests: 32 },
];

/// The scenario `base` reshaped to run `point`: [`setting_plan`] of one prompt a batch, with
/// `point.concurrency` batches in flight and as many clients.
pub fn point_plan(base: &Plan, point: &UrlPoint, stream: u64) -> Result<Plan, ScenarioError> {
    let setting = Setting {
        batch_size: 1,
        prompt_tokens: point.prompt_tokens,
        output_tokens: point.output_tokens,
        batches: point.requests,
    };
    let c = u64::from(point.concurrency.max(1));
    let plan = setting_plan(base, &setting, stream)?;
    plan.with_sets(&[
        keys::NAME.to(format!("{}-{}", base.name(), point.name())),
        keys::MAX_IN_FLIGHT.to(c),
        keys::PROFILE.table([keys::PROFILE_KIND.to("throughput"), keys::MAX_CONCURRENCY.to(c)]),
    ])
}

/// Runs [`URL_DESIGN`] against the scenario's server and fits it: the profile, and the runs'
/// directories and engine.
pub fn calibrate_url(base: &Plan, options: &DesignOptions) -> Result<(Profile, DesignRun), DesignError> {
    let mut plans = vec![("warmup".to_owned(), point_plan(base, &URL_WARMUP, 0)?)];
    for (i, point) in URL_DESIGN.iter().enumerate() {
        plans.push((point.name(), point_plan(base, point, 1 + i as u64)?));
    }
    let mut session = design_session(&plans, options)?;
    let mut observed = Vec::new();
    let mut dirs = Vec::new();
    let mut engine = None;
    let mut preemptions: Option<f64> = None;
    for (i, (name, plan)) in plans.iter().enumerate() {
        let (dir, summary) = run_checked(&mut session, name, plan, options)?;
        engine.get_or_insert_with(|| super::design::summary_engine(&summary));
        if i == 0 {
            continue;
        }
        if let Some(p) = server_preemptions(&summary) {
            *preemptions.get_or_insert(0.0) += p;
        }
        let point = URL_DESIGN[i - 1];
        observed.push(PointObservation { concurrency: point.concurrency, requests: read_point(&dir)? });
        dirs.push(dir);
    }
    session.finish()?;
    let engine = engine.unwrap_or_default();
    let fitted = fit_url(&observed, preemptions)?;
    let points = URL_DESIGN
        .iter()
        .zip(&observed)
        .zip(&fitted.residuals)
        .map(|((p, o), r)| point_fit(&fitted.coefficients, fitted.engine, &p.shape(), &o.requests, *r))
        .collect();
    let profile = Profile {
        coefficients: fitted.coefficients,
        engine: fitted.engine,
        fit: FitSummary {
            batches: 0,
            skipped_batches: fitted.dropped,
            samples: fitted.steps,
            unidentified: fitted.unidentified,
            by_batch_size: Vec::new(),
            http: Some(HttpFit { points, estimated: fitted.estimated }),
        },
        residuals: Default::default(),
        provenance: Provenance {
            engine_name: engine.name.clone(),
            engine_version: engine.version.clone(),
            batchlab_version: env!("CARGO_PKG_VERSION").to_owned(),
            created: utc_now_rfc3339(),
            sources: dirs.iter().map(|d| d.display().to_string()).collect(),
        },
    };
    Ok((profile, DesignRun { dirs, engine }))
}

/// The server's preemptions over a run, from its `/metrics` deltas; `None` when it had none.
fn server_preemptions(summary: &RunSummary) -> Option<f64> {
    let found: Vec<f64> = summary
        .report
        .benchmarks
        .iter()
        .flat_map(|b| b.server.iter())
        .filter_map(|d| d.counters.get("preemptions").copied())
        .collect();
    (!found.is_empty()).then(|| found.iter().sum())
}

/// The measured, completed requests of a point's requests.jsonl, with their token arrivals.
fn read_point(dir: &std::path::Path) -> Result<Vec<ObservedRequest>, CalibrateError> {
    let path: PathBuf = dir.join(REQUESTS_FILE);
    let mut requests = Vec::new();
    for row in read_records(&path)? {
        let row = row?;
        if row.phase != Phase::Measure || row.outcome != RequestOutcome::Completed {
            continue;
        }
        // When it went on the wire, else when it was dispatched to the HTTP engine.
        let (Some(dispatched), Some(tokens)) = (row.sent_ns.or(row.dispatched_ns), row.token_ns.as_ref()) else {
            continue;
        };
        let Some(prompt) = row.metrics.as_ref().and_then(|m| m.prompt_tokens) else { continue };
        requests.push(ObservedRequest {
            dispatched_ns: dispatched.as_nanos() as f64,
            prompt_tokens: prompt,
            token_ns: tokens.iter().map(|t| t.as_nanos() as f64).collect(),
        });
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::plan::ProfileSpec;
    use crate::scenario::{Overrides, load_file};

    #[test]
    fn a_point_sends_one_prompt_a_request_at_its_concurrency() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/vllm-serve.toml");
        let base = load_file(&path, &Overrides::default()).unwrap();
        let point = UrlPoint { concurrency: 8, prompt_tokens: 256, output_tokens: 16, requests: 24 };
        let plan = point_plan(&base, &point, 3).unwrap();
        assert_eq!(plan.batching().batch_size(), 1);
        assert_eq!(plan.batching().max_in_flight(), 8);
        assert_eq!(plan.profile(), &ProfileSpec::Throughput { max_concurrency: 8 });
        assert_eq!(plan.stop().max_requests(), Some(24));
        assert_eq!(plan.engine(), base.engine());
        assert!(plan.output().requests_jsonl());
        assert_eq!(plan.name(), "vllm-serve-c8-p256-o16");
    }

    #[test]
    fn the_design_separates_the_terms() {
        let c: std::collections::BTreeSet<u32> = URL_DESIGN.iter().map(|p| p.concurrency).collect();
        assert!(c.contains(&1) && c.len() >= 4, "one at a time (the frontend) and several levels: {c:?}");
        assert!(URL_DESIGN.iter().all(|p| p.prompt_tokens + p.output_tokens <= 512));
        let prompts: std::collections::BTreeSet<u32> = URL_DESIGN.iter().map(|p| p.prompt_tokens).collect();
        assert!(prompts.len() >= 3, "{prompts:?}");
    }
}
