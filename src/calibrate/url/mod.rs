//! `batchlab calibrate SCENARIO` for `engine.kind = "openai"`: a profile of a server seen only
//! from outside, through its URL (docs/simulation.md, "Calibrating from a URL").
//!
//! - [`URL_DESIGN`] ([`point_plan`]): one prompt per request, closed-loop at a few
//!   concurrencies and prompt and output lengths, each point a run of its own on the one engine
//!   session, after a warm-up; requests.jsonl keeps each token's arrival (`token_ns`), stamped
//!   as the HTTP engine stamps it, and the run's `/metrics` deltas give the preemptions;
//! - [`steps`] (sans IO): the arrivals grouped into the engine's steps;
//! - [`fit`](mod@fit) (sans IO): the step costs, the frontend's overhead, the hidden limits;
//! - [`replay`] (sans IO): each point replayed on the profile: the residuals per design point,
//!   and the frontend's queue ([`fit_frontend_queue`]), chosen so that the replays give the
//!   waves' TTFT.
//!
//! Uses `run/`, `scenario/` and `batchlab serve`'s engine core; nothing below uses it.

pub mod fit;
pub mod replay;
pub mod steps;

use std::path::PathBuf;

pub use fit::{PointObservation, PointResidual, UrlFit, UrlFitError, fit_url};
pub use replay::{PointShape, QueuePoint, fit_frontend_queue, point_fit, replay};
pub use steps::{ObservedRequest, Span, Step, infer_steps, span_steps};

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

/// The design: each point's `requests` in total, run in [`URL_ROUNDS`] interleaved rounds
/// ([`url_schedule`]). One request at a time gives the frontend (each first step follows an idle
/// engine) and the step's fixed cost; a long prompt alone, its prefill; 4 to 16 in flight give
/// the per-sequence cost over 1 to 16 sequences, and, as each finished request's client sends
/// the next, prefills that join running decodes (the prefill cost inside busy steps); long
/// prompts at 8 add attended context. 16 in flight finds a `max_num_seqs` below 16. Prompt plus
/// output stay within 512 tokens (the tiny test model's `max_model_len`). About 15,000 measured
/// tokens: on the tiny model each point is about a second of load, so a machine's stall of a
/// tenth of a second moves a point's time by a few percent, not by half of it (the first design,
/// of 0.1 to 0.5 s a point, did; docs/simulation.md). The points of one request at a time run 6
/// a round (were 2): a round's first request after a busier point ran slower than its second
/// (TPOT 2.71 against 2.46 ms and the like on a real `vllm serve`), and the point, at 2 a round,
/// measured its decode 20 % slower than runs of 96 requests a minute later.
pub const URL_DESIGN: &[UrlPoint] = &[
    UrlPoint { concurrency: 1, prompt_tokens: 16, output_tokens: 32, requests: 48 },
    UrlPoint { concurrency: 1, prompt_tokens: 384, output_tokens: 8, requests: 48 },
    UrlPoint { concurrency: 4, prompt_tokens: 64, output_tokens: 32, requests: 64 },
    UrlPoint { concurrency: 8, prompt_tokens: 32, output_tokens: 24, requests: 128 },
    UrlPoint { concurrency: 8, prompt_tokens: 256, output_tokens: 16, requests: 128 },
    UrlPoint { concurrency: 16, prompt_tokens: 32, output_tokens: 24, requests: 256 },
];

/// Rounds the design runs in: every point once a round, an eighth of its requests each time, so
/// that a change in what else the machine runs (a build starting next to the server) falls on
/// every point alike instead of on the one that ran then.
pub const URL_ROUNDS: u32 = 8;

/// The design's runs in order: (index into `design`, round, the point with that round's share of
/// its requests). Each round runs every point, the odd rounds in reverse order, so that a
/// point's rounds sit at both ends of the design as often as in its middle.
pub fn url_schedule(design: &[UrlPoint], rounds: u32) -> Vec<(usize, u32, UrlPoint)> {
    let rounds = rounds.max(1);
    let mut runs = Vec::with_capacity(design.len() * rounds as usize);
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..design.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let point = design[i];
            // The share of this round; the first rounds take what does not divide.
            let share = point.requests / rounds + u32::from(round < point.requests % rounds);
            if share > 0 {
                runs.push((i, round, UrlPoint { requests: share, ..point }));
            }
        }
    }
    runs
}

/// The scenario `base` reshaped to run `point`: [`setting_plan`] of one prompt a batch, with
/// `point.concurrency` batches in flight and as many clients, after a warm-up of one wave.
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
        // One wave first, not measured: a run's first requests open the client's connections,
        // which took their TTFT 2 to 33 ms above the later waves' on a real server.
        keys::WARMUP.table([keys::WARMUP_REQUESTS.to(c)]),
    ])
}

/// Runs [`URL_DESIGN`] against the scenario's server and fits it: the profile, and the runs'
/// directories and engine.
pub fn calibrate_url(base: &Plan, options: &DesignOptions) -> Result<(Profile, DesignRun), DesignError> {
    let schedule = url_schedule(URL_DESIGN, URL_ROUNDS);
    let mut plans = vec![("warmup".to_owned(), point_plan(base, &URL_WARMUP, 0)?)];
    for (k, (_, round, point)) in schedule.iter().enumerate() {
        plans.push((format!("{}-r{round}", point.name()), point_plan(base, point, 1 + k as u64)?));
    }
    let mut session = design_session(&plans, options)?;
    let mut observed: Vec<PointObservation> =
        URL_DESIGN.iter().map(|p| PointObservation { concurrency: p.concurrency, requests: Vec::new() }).collect();
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
        // A point's rounds are one observation: their requests never overlap in time.
        observed[schedule[i - 1].0].requests.extend(read_point(&dir, schedule[i - 1].1)?);
        dirs.push(dir);
    }
    session.finish()?;
    let engine = engine.unwrap_or_default();
    let mut fitted = fit_url(&observed, preemptions)?;
    let per_run = |p: &UrlPoint| p.requests.div_ceil(URL_ROUNDS) as usize;
    // The frontend's queue, which only the waves' TTFT shows (the linear fit sees a request alone).
    let queue: Vec<QueuePoint<'_>> =
        URL_DESIGN.iter().zip(&observed).map(|(p, o)| (p.shape(), o.requests.as_slice(), per_run(p))).collect();
    fitted.coefficients = fit_frontend_queue(&fitted.coefficients, fitted.engine, &queue);
    let points = URL_DESIGN
        .iter()
        .zip(&observed)
        .zip(&fitted.residuals)
        .map(|((p, o), r)| point_fit(&fitted.coefficients, fitted.engine, &p.shape(), &o.requests, per_run(p), *r))
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

/// The measured, completed requests of a point's requests.jsonl from `round`, with their token
/// arrivals.
fn read_point(dir: &std::path::Path, round: u32) -> Result<Vec<ObservedRequest>, CalibrateError> {
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
            round,
        });
    }
    Ok(requests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::plan::{PhaseLimit, ProfileSpec};
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
        assert_eq!(plan.warmup(), Some(&PhaseLimit::Requests(8)), "one wave, not measured");
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

    #[test]
    fn the_design_runs_in_interleaved_rounds_that_share_each_points_requests() {
        let design = [
            UrlPoint { concurrency: 1, prompt_tokens: 16, output_tokens: 8, requests: 10 },
            UrlPoint { concurrency: 4, prompt_tokens: 64, output_tokens: 8, requests: 8 },
            UrlPoint { concurrency: 8, prompt_tokens: 32, output_tokens: 8, requests: 2 },
        ];
        let runs = url_schedule(&design, 4);
        let order: Vec<(usize, u32, u32)> = runs.iter().map(|(i, r, p)| (*i, *r, p.requests)).collect();
        // Every point in every round (while it has requests), odd rounds backwards; a remainder
        // goes to the first rounds.
        assert_eq!(
            order,
            [
                (0, 0, 3),
                (1, 0, 2),
                (2, 0, 1),
                (2, 1, 1),
                (1, 1, 2),
                (0, 1, 3),
                (0, 2, 2),
                (1, 2, 2),
                (1, 3, 2),
                (0, 3, 2)
            ]
        );
        for (i, point) in design.iter().enumerate() {
            let total: u32 = runs.iter().filter(|(j, _, _)| *j == i).map(|(_, _, p)| p.requests).sum();
            assert_eq!(total, point.requests);
            assert!(runs.iter().filter(|(j, _, _)| *j == i).all(|(_, _, p)| p.name() == point.name()));
        }
        // The shipped design: whole waves each round.
        for (_, _, p) in url_schedule(URL_DESIGN, URL_ROUNDS) {
            assert_eq!(p.requests % p.concurrency, 0, "{p:?}");
        }
        assert_eq!(url_schedule(URL_DESIGN, 0).len(), URL_DESIGN.len());
    }
}
