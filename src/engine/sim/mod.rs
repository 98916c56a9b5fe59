//! The deterministic simulated engine: a step-level model of vLLM v1's scheduler.
//!
//! It exists so that everything above the [`Engine`] boundary can be tested and benchmarked
//! without Python or a model, and so that a profile calibrated on a real engine
//! (docs/simulation.md) answers "what would this setting give" in milliseconds. Inside one
//! `generate` call, [`scheduler`] runs vLLM's continuous batching (a token budget per step, chunked
//! prefill, a KV cache in blocks with preemption, the prefix cache, which persists between calls)
//! and [`CostModel`] prices each step; every request's scheduled, first-token and last-token times
//! come from the steps. Prompts are counted by [`prompt`]: chat prompts after templating, text by
//! batchlab's one counting rule. Faults are not its business:
//! [`crate::engine::faults::FaultyEngine`] wraps it like any other engine. All randomness comes
//! from the seed and the request id, so a seed always gives the same run. With a [`VirtualClock`]
//! no wall time passes at all.

pub mod config;
pub mod encoder;
mod kv;
mod prefetch;
pub mod profile;
pub mod prompt;
pub mod scheduler;

use std::sync::Arc;
use std::time::Duration;

pub use config::{
    CostModel, DEFAULT_SCHEDULER, RENAMED_COSTS, SimConfig, StepCosts, StepLoad, TimeMode, UNLIMITED_SCHEDULER,
};
pub use profile::{Profile, ProfileError, predicted_generate};

use crate::engine::chat::TemplateError;
use crate::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, PreparedPrompt, Prompt,
    RequestPrep, ResolvedEngineConfig, Started, StepEnds, StepTokens, TimedEngine, VirtualTimeEngine,
};
use crate::rng::SplitMix64;
use crate::time::{Clock, MonotonicClock, VirtualClock, WallAnchor};
use scheduler::{PrefixSource, SeqSpec, Stepper};

/// The simulated engine. See the module docs.
pub struct SimEngine {
    config: SimConfig,
    clock: Arc<dyn Clock>,
    anchor: WallAnchor,
    started: bool,
    /// The scheduler, idle between calls, with the KV cache (and prefix cache) it keeps for the
    /// engine's life: reset by `start`.
    stepper: Stepper,
    /// The last call's schedule steps, cleared: the next call's buffer.
    steps: Vec<scheduler::Step>,
    /// The pictures it has encoded, for its life: reset by `start`.
    encoder: encoder::EncoderCache,
}

impl SimEngine {
    /// An engine in real time: it sleeps on [`MonotonicClock`], anchored on the wall clock now.
    /// `config.time` is not looked at; [`SimEngine::timed`] honours it.
    pub fn new(config: SimConfig) -> Self {
        SimEngine::on_clock(config, Arc::new(MonotonicClock), WallAnchor::now())
    }

    /// An engine that passes time on `clock`, whose wall-clock times derive from `anchor`.
    pub fn on_clock(config: SimConfig, clock: Arc<dyn Clock>, anchor: WallAnchor) -> Self {
        let stepper = Stepper::with_config(config.scheduler);
        SimEngine { config, clock, anchor, started: false, stepper, steps: Vec::new(), encoder: Default::default() }
    }

    /// An engine in the time `config.time` names.
    pub fn timed(config: SimConfig) -> TimedEngine {
        match config.time {
            TimeMode::Real => TimedEngine::real_time(SimEngine::new(config)),
            TimeMode::Virtual => TimedEngine::virtual_time(SimEngine::new(config)),
        }
    }

    /// An engine on a fresh virtual clock, and that clock.
    pub fn virtual_time(config: SimConfig) -> (Self, VirtualClock) {
        let clock = VirtualClock::new();
        let mut engine = SimEngine::new(config);
        engine.use_virtual_clock(clock.clone());
        (engine, clock)
    }

    /// The settings the engine was built with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }
}

impl Engine for SimEngine {
    fn start(&mut self) -> Result<Started, EngineError> {
        self.started = true;
        self.stepper = Stepper::with_config(self.config.scheduler);
        self.encoder = Default::default();
        Ok(Started::blocking(EngineInfo {
            name: "sim".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            resolved_config: Some(self.config.scheduler),
            processes: Some(Vec::new()),
            engine_thread: None,
        }))
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        if !self.started {
            return Err(EngineError::Generate("generate before start".into()));
        }
        let start = self.clock.now();
        let cost = &self.config.cost;
        let scheduler = &self.config.scheduler;
        // A prompt worked out ahead under these settings is taken as it is (`request_prep`).
        let ready = |r| prepared_under(r, scheduler);
        // The other prompts were written by the thread that made the requests: ask for them all
        // now, rather than wait on each in turn while hashing.
        for r in batch {
            if let (None, Prompt::Tokens(ids)) = (ready(r), &r.prompt) {
                prefetch::prefetch_slice(ids);
            }
        }
        let mut specs = batch
            .iter()
            .map(|r| {
                let output_len = output_tokens(r, cost, self.config.seed);
                let spec = |prompt_len, hashes| SeqSpec {
                    prompt_len,
                    output_len,
                    prefix: PrefixSource::Hashes(hashes),
                    encoder_tokens: 0,
                };
                match ready(r) {
                    Some(p) => Ok(spec(p.prompt_len, p.hashes.clone())),
                    None => read_prompt(scheduler, &r.prompt).map(|p| spec(p.prompt_len, p.hashes)),
                }
            })
            .collect::<Result<Vec<SeqSpec>, _>>()
            .map_err(|e| EngineError::Generate(e.to_string()))?;
        let image_work = encode_images(&mut self.encoder, scheduler, batch, &mut specs)?;
        // The schedule takes the specs (their hashes move into its sequences); their lengths stay.
        let lengths: Vec<(u32, u32)> = specs.iter().map(|s| (s.prompt_len, s.output_len)).collect();
        let buffer = std::mem::take(&mut self.steps);
        let schedule = scheduler::schedule_into(&mut self.stepper, specs, buffer)
            .map_err(|e| EngineError::Generate(e.to_string()))?;
        // When each step's tokens come out, once per step, shared by every sequence it samples:
        // step k runs from the end of step k - 1 (of the per-call overhead, for the first) to
        // step_ends[k], in ns after `start` summed in step order.
        let at = |ns: f64| start.as_secs_f64() + ns / 1e9;
        let costs = cost.step_costs();
        let overhead = cost.overhead_ns(batch.len());
        let mut t = overhead;
        let mut step_ends = Vec::with_capacity(schedule.steps.len());
        for step in &schedule.steps {
            t += costs.step_ns(&step.load);
            step_ends.push(at(t));
        }
        let scheduler::Schedule { steps, seqs } = schedule;
        self.steps = steps;
        let token_steps = Arc::new(StepEnds::new(step_ends));
        let step_ends = token_steps.secs();
        // Step k starts when step k - 1 ends.
        let step_start = |k: usize| if k == 0 { at(overhead) } else { step_ends[k - 1] };
        let arrival_wall = self.anchor.wall_secs + start.saturating_since(self.anchor.mono).as_secs_f64();

        let outputs: Vec<EngineOutput> = batch
            .iter()
            .zip(lengths)
            .zip(seqs)
            .zip(image_work)
            .map(|(((req, (prompt_len, output_len)), seq), work)| {
                let finish = if output_len >= req.max_tokens { FinishReason::Length } else { FinishReason::Stop };
                EngineOutput::new(Some(req.id), finish)
                    .with_prompt_tokens(prompt_len)
                    .with_output_tokens(output_len)
                    .with_stats(EngineStats {
                        arrival_wall: Some(arrival_wall),
                        queued_ts: Some(at(0.0)),
                        scheduled_ts: Some(seq.first_scheduled.map_or(at(overhead), step_start)),
                        first_token_ts: seq.first_token.map(|k| step_ends[k]),
                        last_token_ts: seq.last_token.map(|k| step_ends[k]),
                        cached_tokens: Some(seq.cached_tokens),
                        image_cache_hits: work.map(|w| w.hits),
                        token_steps: Some(StepTokens { ends: Arc::clone(&token_steps), runs: seq.token_steps }),
                        ..EngineStats::default()
                    })
            })
            .collect();
        let returns = t + cost.finish_ns(batch.len());
        self.clock.sleep(Duration::from_nanos(returns.round() as u64));

        Ok(outputs)
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.started = false;
        Ok(())
    }
}

impl VirtualTimeEngine for SimEngine {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock);
        self.anchor = WallAnchor::VIRTUAL;
    }
}

/// The work a [`SimEngine`] under `scheduler`'s settings would do on each request from the
/// request alone, to be done where the requests are made: a prompt's length and block hashes
/// ([`read_prompt`]). A prompt whose ids cannot be made (a chat template that fails to render) is
/// left for the engine, which reports the error. The engine takes what this prepared only under
/// the same settings ([`prepared_under`]), so its results are the same with it as without.
pub(crate) fn request_prep(scheduler: ResolvedEngineConfig) -> RequestPrep {
    Arc::new(move |request: &mut EngineRequest<()>| {
        request.prepared = read_prompt(&scheduler, &request.prompt).ok();
    })
}

/// Looks `batch`'s images up in `cache`, in the batch's order (the order the scheduler admits
/// them in), and sets each spec's tokens to encode (its misses', encoded in the step that first
/// schedules it). Per request: its hits and misses, `None` without images. A batch the scheduler
/// would refuse under `limits` leaves the cache as it was.
fn encode_images(
    cache: &mut encoder::EncoderCache,
    limits: &ResolvedEngineConfig,
    batch: &[EngineRequest],
    specs: &mut [SeqSpec],
) -> Result<Vec<Option<encoder::EncoderWork>>, EngineError> {
    let has_images = |r: &EngineRequest| crate::engine::image::prompt_images(&r.prompt).next().is_some();
    if !batch.iter().any(has_images) {
        return Ok(vec![None; batch.len()]);
    }
    for (index, spec) in specs.iter().enumerate() {
        scheduler::check(limits, index, spec).map_err(|e| EngineError::Generate(e.to_string()))?;
    }
    Ok(batch
        .iter()
        .zip(specs)
        .map(|(r, spec)| {
            let mut images = crate::engine::image::prompt_images(&r.prompt).peekable();
            images.peek()?;
            let work = cache.encode(images.map(encoder::EncoderInput::of));
            spec.encoder_tokens = work.tokens;
            Some(work)
        })
        .collect())
}

/// `r`'s prompt as worked out ahead, if it was under `scheduler`'s settings.
fn prepared_under<'r>(r: &'r EngineRequest, scheduler: &ResolvedEngineConfig) -> Option<&'r PreparedPrompt> {
    r.prepared.as_ref().filter(|p| p.block_size == scheduler.block_size && p.prefix_caching == scheduler.prefix_caching)
}

/// `prompt` as [`SimEngine::generate`] reads it under `scheduler`: its length in token ids and
/// its prefix hashes, wherever that is worked out (the engine's thread, or ahead).
fn read_prompt(scheduler: &ResolvedEngineConfig, prompt: &Prompt) -> Result<PreparedPrompt, TemplateError> {
    prompt::with_prompt_ids(prompt, |ids| PreparedPrompt {
        block_size: scheduler.block_size,
        prefix_caching: scheduler.prefix_caching,
        prompt_len: u32::try_from(ids.len()).unwrap_or(u32::MAX),
        hashes: scheduler::prefix_hashes(scheduler, ids),
    })
}

/// Output length: `max_tokens` when EOS is ignored, else an EOS may come after `min_tokens`.
pub(crate) fn output_tokens(req: &EngineRequest, cost: &CostModel, seed: u64) -> u32 {
    if req.ignore_eos || cost.eos_probability <= 0.0 || req.max_tokens == 0 {
        return req.max_tokens;
    }
    let mut rng = SplitMix64::derive(seed ^ 0x05EE_DE05, req.seed.unwrap_or(req.id));
    let floor = req.min_tokens.clamp(1, req.max_tokens);
    // A geometric draw, by inversion, capped at max_tokens.
    let p = cost.eos_probability.min(1.0);
    let extra = if p >= 1.0 { 0.0 } else { (1.0 - rng.next_f64()).ln() / (1.0 - p).ln() };
    let extra = if extra.is_finite() { extra.floor().min(u32::MAX as f64) as u32 } else { u32::MAX };
    floor.saturating_add(extra).min(req.max_tokens)
}

#[cfg(test)]
mod tests;
