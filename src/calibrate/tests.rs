use std::time::Duration;

use super::*;
use crate::engine::sim::profile::Coefficients;
use crate::engine::sim::scheduler;
use crate::engine::sim::{CostModel, SimConfig, SimEngine};
use crate::engine::{Engine, EngineOutput, EngineRequest, ResolvedEngineConfig};
use crate::rng::SplitMix64;
use crate::time::Clock;

/// Known, distinct coefficients, each large enough to matter in the timestamps.
pub(crate) fn known_cost() -> CostModel {
    CostModel {
        fixed_overhead: Duration::from_micros(2_000),
        request_overhead: Duration::from_micros(40),
        decode_step: Duration::from_micros(900),
        prefill_per_token: Duration::from_nanos(5_300),
        per_seq: Duration::from_micros(31),
        context_per_1k_tokens: Duration::from_micros(17),
        tokens_squared_per_1m: Duration::from_micros(450),
        encoder_per_image_token: Duration::ZERO,
        finish_overhead: Duration::from_micros(700),
        finish_per_request: Duration::from_micros(12),
        frontend_overhead: Duration::ZERO,
        frontend_per_request: Duration::ZERO,
        frontend_hands_off_bursts: false,
        eos_probability: 0.0,
    }
}

/// Small limits, so chunked prefill and preemption both happen.
pub(crate) fn tight_limits(prefix_caching: bool) -> ResolvedEngineConfig {
    ResolvedEngineConfig {
        max_num_seqs: 8,
        max_num_batched_tokens: 256,
        num_kv_blocks: 48,
        block_size: 16,
        prefix_caching,
        chunked_prefill: true,
    }
}

fn assert_recovered(fitted: &Coefficients, truth: &CostModel) {
    let truth = Coefficients::of(truth);
    for ((name, got), want) in Coefficients::NAMES.iter().zip(fitted.to_array()).zip(truth.to_array()) {
        let err = (got - want).abs() / want;
        assert!(err < 0.01, "{name}: fitted {got} ns, true {want} ns ({:.3} %)", err * 100.0);
    }
}

/// Runs batches of several sizes and prompt/output lengths through one engine start and returns
/// them as the fit sees them (times from each generate's start).
fn simulate(config: &SimConfig, shared_prefix: usize) -> Vec<BatchObservation> {
    let (mut engine, clock) = SimEngine::virtual_time(config.clone());
    engine.start().expect("start");
    let mut rng = SplitMix64::new(11);
    let mut id = 0;
    let mut out = Vec::new();
    for (size, prompt_max, output_max) in
        [(1, 64, 16), (3, 300, 8), (8, 200, 40), (12, 120, 60), (5, 500, 5), (16, 40, 30)]
    {
        let batch: Vec<EngineRequest> = (0..size)
            .map(|_| {
                id += 1;
                let prompt_len = 1 + (rng.next_u64() % prompt_max) as usize;
                let output = 1 + (rng.next_u64() % output_max) as u32;
                let prompt: Vec<u32> = (0..prompt_len)
                    .map(|j| if j < shared_prefix { j as u32 } else { (id * 10_000 + j) as u32 })
                    .collect();
                EngineRequest::tokens(prompt, output).with_id(id as u64)
            })
            .collect();
        let start = clock.now().as_secs_f64();
        let outputs = engine.generate(&batch).expect("generate");
        let since = |t: Option<f64>| t.map(|t| (t - start) * 1e9);
        out.push(BatchObservation {
            returned_ns: since(Some(clock.now().as_secs_f64())),
            requests: outputs
                .iter()
                .map(|o: &EngineOutput| RequestObservation {
                    prompt_tokens: o.prompt_tokens.unwrap(),
                    output_tokens: o.output_tokens.unwrap(),
                    cached_tokens: o.stats.cached_tokens.unwrap(),
                    images: 0,
                    encoder_tokens: 0,
                    scheduled_ns: since(o.stats.scheduled_ts),
                    first_token_ns: since(o.stats.first_token_ts),
                    last_token_ns: since(o.stats.last_token_ts),
                })
                .collect(),
        });
    }
    out
}

fn replays(config: &ResolvedEngineConfig, batches: &[BatchObservation]) -> Vec<scheduler::Schedule> {
    batches.iter().map(|b| scheduler::replay(config, &b.specs()).expect("replay")).collect()
}

#[test]
fn a_fit_recovers_known_coefficients_with_chunked_prefill_and_preemption() {
    let config = SimConfig { seed: 3, cost: known_cost(), scheduler: tight_limits(false), ..SimConfig::default() };
    let batches = simulate(&config, 0);
    let steps: Vec<_> = replays(&config.scheduler, &batches).into_iter().flat_map(|s| s.steps).collect();
    assert!(steps.iter().any(|s| s.preempted > 0), "the data must exercise preemption");
    assert!(
        steps.iter().any(|s| s.load.prefill_tokens > 0 && s.load.decode_seqs > 0),
        "the data must exercise chunked prefill mixed with decodes"
    );
    let fit = fit(&config.scheduler, &batches).expect("fit");
    assert_recovered(&fit.coefficients, &config.cost);
    assert!(fit.unidentified.is_empty(), "{:?}", fit.unidentified);
    let last = &fit.residuals["last_token"];
    assert!(last.samples == 45 && last.p99_rel < 1e-6, "one per request: {last:?}");
    assert_eq!(fit.residuals["finish"].samples, batches.len() as u64);

    // Replayed under the limits the engine was asked for instead of those it ran with, the same
    // data does not fit: the resolved configuration matters.
    let asked = ResolvedEngineConfig { num_kv_blocks: 4096, max_num_batched_tokens: 2048, ..config.scheduler };
    let wrong = super::fit(&asked, &batches).expect("fit");
    assert!(wrong.residuals["last_token"].p50_rel > 0.01, "{:?}", wrong.residuals["last_token"]);
}

#[test]
fn a_fit_takes_prefix_cache_hits_off_the_prefill() {
    // A shared 96-token prefix, a cache large enough that nothing is preempted.
    let scheduler = ResolvedEngineConfig { num_kv_blocks: 4096, ..tight_limits(true) };
    let config = SimConfig { seed: 3, cost: known_cost(), scheduler, ..SimConfig::default() };
    let batches = simulate(&config, 96);
    let hits: u32 = batches.iter().flat_map(|b| &b.requests).map(|r| r.cached_tokens).sum();
    assert!(hits > 1000, "the prefix cache must hit: {hits} tokens");
    let fit = fit(&config.scheduler, &batches).expect("fit");
    assert_recovered(&fit.coefficients, &config.cost);

    // Ignoring the hits charges their prefill to other coefficients: the fit is visibly worse.
    let blind: Vec<BatchObservation> = batches
        .iter()
        .map(|b| BatchObservation {
            requests: b.requests.iter().map(|r| RequestObservation { cached_tokens: 0, ..r.clone() }).collect(),
            returned_ns: b.returned_ns,
        })
        .collect();
    let blind_fit = super::fit(&config.scheduler, &blind).expect("fit");
    assert!(
        blind_fit.residuals["first_token"].mean_abs_ms > 100.0 * fit.residuals["first_token"].mean_abs_ms.max(1e-9),
        "{:?} vs {:?}",
        blind_fit.residuals["first_token"],
        fit.residuals["first_token"]
    );
}

#[test]
fn batches_of_one_size_leave_the_per_request_overhead_unidentified() {
    let config = SimConfig { seed: 3, cost: known_cost(), scheduler: tight_limits(false), ..SimConfig::default() };
    let batches: Vec<BatchObservation> = simulate(&config, 0).into_iter().filter(|b| b.requests.len() == 8).collect();
    let fit = fit(&config.scheduler, &batches).expect("fit");
    assert_eq!(fit.unidentified, vec!["request_overhead".to_owned(), "finish_per_request".to_owned()]);
    // Their costs move into the per-call overheads: 2 ms + 8 × 40 µs, 0.7 ms + 8 × 12 µs.
    let (got, tail) = (fit.coefficients.fixed_overhead_ns, fit.coefficients.finish_overhead_ns);
    assert!((got - 2_320_000.0).abs() < 2_320.0, "{got}");
    assert!((tail - 796_000.0).abs() < 796.0, "{tail}");
}

#[test]
fn too_few_timestamps_is_an_error() {
    let one = BatchObservation {
        requests: vec![RequestObservation {
            prompt_tokens: 4,
            output_tokens: 1,
            cached_tokens: 0,
            images: 0,
            encoder_tokens: 0,
            scheduled_ns: Some(1.0),
            first_token_ns: Some(2.0),
            last_token_ns: Some(2.0),
        }],
        returned_ns: Some(3.0),
    };
    let err = fit(&tight_limits(false), &[one]).unwrap_err();
    assert_eq!(err, FitError::TooFewSamples { samples: 3, needed: 7 });
}

#[test]
fn noisy_timestamps_give_close_coefficients_and_residuals_that_show_the_noise() {
    let config = SimConfig { seed: 3, cost: known_cost(), scheduler: tight_limits(false), ..SimConfig::default() };
    let mut rng = SplitMix64::new(5);
    // ±0.5 % on every timestamp, as a real engine's jitter.
    let mut jitter = |t: Option<f64>| t.map(|t| t * (1.0 + 0.005 * (2.0 * rng.next_f64() - 1.0)));
    let noisy: Vec<BatchObservation> = simulate(&config, 0)
        .into_iter()
        .map(|b| BatchObservation {
            requests: b
                .requests
                .iter()
                .map(|r| RequestObservation {
                    scheduled_ns: jitter(r.scheduled_ns),
                    first_token_ns: jitter(r.first_token_ns),
                    last_token_ns: jitter(r.last_token_ns),
                    ..r.clone()
                })
                .collect(),
            returned_ns: b.returned_ns,
        })
        .collect();
    let fit = fit(&config.scheduler, &noisy).expect("fit");
    let rel = fit.residuals["last_token"].mean_rel;
    assert!(rel > 0.0005 && rel < 0.005, "the residuals show the jitter: {rel}");
    // The coefficients that carry most of the time stay within a few percent.
    let truth = Coefficients::of(&config.cost);
    for (name, got, want) in [
        ("decode_step", fit.coefficients.decode_step_ns, truth.decode_step_ns),
        ("per_seq", fit.coefficients.per_seq_ns, truth.per_seq_ns),
        ("prefill_per_token", fit.coefficients.prefill_per_token_ns, truth.prefill_per_token_ns),
    ] {
        assert!((got - want).abs() / want < 0.05, "{name}: {got} vs {want}");
    }
}

#[test]
fn without_scheduled_timestamps_the_head_is_fitted_with_the_steps() {
    let config = SimConfig { seed: 3, cost: known_cost(), scheduler: tight_limits(false), ..SimConfig::default() };
    let batches: Vec<BatchObservation> = simulate(&config, 0)
        .into_iter()
        .map(|b| BatchObservation {
            requests: b.requests.iter().map(|r| RequestObservation { scheduled_ns: None, ..r.clone() }).collect(),
            returned_ns: b.returned_ns,
        })
        .collect();
    let fit = fit(&config.scheduler, &batches).expect("fit");
    assert_recovered(&fit.coefficients, &config.cost);
    assert!(!fit.residuals.contains_key("head") && !fit.residuals.contains_key("scheduled"), "{:?}", fit.residuals);
    assert_eq!(fit.batches.len(), batches.len());
    for b in &fit.batches {
        let measured = b.measured_last_token_ns.unwrap();
        assert!((b.predicted_last_token_ns - measured).abs() < 1e-6 * measured, "{b:?}");
    }
}

#[test]
fn the_encoder_is_fitted_only_when_a_request_had_images() {
    let config = SimConfig { seed: 3, cost: known_cost(), scheduler: tight_limits(false), ..SimConfig::default() };
    let batches = simulate(&config, 0);
    // No images: left out, not unidentified.
    let fit = fit(&config.scheduler, &batches).expect("fit");
    assert_eq!(fit.coefficients.encoder_per_image_token_ns, None);
    assert!(fit.unidentified.is_empty(), "{:?}", fit.unidentified);
    // Images that were all cache hits: nothing was encoded, so the data cannot see the cost.
    let mut hits = batches.clone();
    hits[0].requests[0].images = 2;
    let fit = super::fit(&config.scheduler, &hits).expect("fit");
    assert_eq!(fit.coefficients.encoder_per_image_token_ns, Some(0.0));
    assert_eq!(fit.unidentified, vec!["encoder_per_image_token".to_owned()]);
    assert_recovered(&fit.coefficients, &config.cost);
}
