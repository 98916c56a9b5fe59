//! The simulated engine's settings: its seed, its step-time coefficients and its scheduler limits.
//! Faults are a wrapper around any engine: [`crate::engine::faults`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::engine::ResolvedEngineConfig;

/// What the simulated engine's time is made of (docs/simulation.md).
///
/// A `generate` call of `n` requests pays `fixed_overhead + request_overhead × n` before its
/// first engine step, `finish_overhead + finish_per_request × n` after its last one (output
/// building: the call returns then), and one step time per engine step:
///
/// ```text
/// t_step = decode_step + prefill_per_token × P + per_seq × S + context_per_1k_tokens × C / 1000
///          + tokens_squared_per_1m × T² / 10⁶ + encoder_per_image_token × E
/// ```
///
/// with `P` the prompt (prefill) tokens the step computes, `S` the sequences it schedules
/// (decoding one token or computing a prefill chunk), `C` the context tokens the step attends over
/// (for each scheduled sequence, the tokens computed before the step plus those it computes),
/// `T` all the tokens it computes (`P` plus one per decoding sequence): a step's per-token cost
/// grows with its size once its activations outgrow the caches, and `E` the image tokens it
/// encodes: those of the images, of the sequences it schedules for the first time, that missed the
/// encoder cache ([`super::encoder`]; a hit costs nothing).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostModel {
    /// Paid once per `generate` call, before its first step (Python, input and output handling).
    pub fixed_overhead: Duration,
    /// Paid per request of a `generate` call, before its first step.
    pub request_overhead: Duration,
    /// Paid by every engine step, whatever it holds (the step's fixed cost, a decode step's floor).
    pub decode_step: Duration,
    /// Per prefill token computed in a step.
    pub prefill_per_token: Duration,
    /// Per sequence a step schedules (decoding, or computing a chunk of its prompt).
    pub per_seq: Duration,
    /// Per 1000 context tokens a step attends over.
    pub context_per_1k_tokens: Duration,
    /// Per (1000 tokens)² of the tokens a step computes: the superlinear part of a big step.
    pub tokens_squared_per_1m: Duration,
    /// Per image token the vision encoder computes, charged in the step that first schedules the
    /// request, for its images that missed the encoder cache (a hit costs nothing). Per image
    /// *token* rather than per image: a ViT's work grows with its patches, which are the image's
    /// tokens (one per patch, before any merging), and vLLM budgets its encoder in those tokens
    /// too (`encoder_compute_budget`); with a fixed count per image (LLaVA's 576, the default
    /// rule) it is a cost per image divided by that count. 0 by default: images cost only their
    /// prefill tokens.
    pub encoder_per_image_token: Duration,
    /// Paid once per `generate` call after its last step, before it returns.
    pub finish_overhead: Duration,
    /// Paid per request of a `generate` call after its last step.
    pub finish_per_request: Duration,
    /// An HTTP server's frontend (`batchlab serve`): how long after a request arrives it reaches
    /// the engine's waiting queue (parsing, tokenization, the hop to the engine core). Requests
    /// overlap in it: it delays each request, not the engine. 0 for an in-process engine; set only
    /// by a profile calibrated from a URL (docs/simulation.md).
    #[serde(skip_serializing_if = "Duration::is_zero")]
    pub frontend_overhead: Duration,
    /// An HTTP server's frontend serves its requests one at a time (vLLM's is one event loop):
    /// each holds it this long, and a request that arrives while it is busy waits its turn, so
    /// a wave of k simultaneous requests reaches the engine spread over k of these. 0 (the
    /// default): requests only overlap in `frontend_overhead`. Set only by a profile calibrated
    /// from a URL.
    #[serde(skip_serializing_if = "Duration::is_zero")]
    pub frontend_per_request: Duration,
    /// The frontend's worker hands a burst on together: requests it served while others waited
    /// for it reach `frontend_overhead` when it has served the last of them, not each as it is
    /// served. A wave of k simultaneous requests then reaches the engine together, after k
    /// services (on 2 cores, vLLM's frontend busy with a wave's requests leaves its engine core
    /// no CPU until it is done: the engine's first step of a wave of 8 short prompts held all 8).
    /// `false` (the default): each request goes on as it is served.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub frontend_hands_off_bursts: bool,
    /// Probability per generated token (after `min_tokens`) of an end-of-sequence, for requests
    /// that do not ignore EOS.
    pub eos_probability: f64,
}

/// Cost keys an older batchlab had, whose meaning changed with their name: `(old, new, what
/// changed)`. A scenario (`[engine.sim]`, `--set`) or a profile that still uses an old name is told
/// the new one and why, not a near-miss spelling; neither is read as the new key, because its
/// value measured something else.
pub const RENAMED_COSTS: &[(&str, &str, &str)] =
    &[("decode_per_seq", "per_seq", "it now costs every sequence a step schedules, prefill chunks included")];

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            fixed_overhead: Duration::from_micros(500),
            request_overhead: Duration::ZERO,
            decode_step: Duration::from_micros(1_000),
            prefill_per_token: Duration::from_micros(2),
            per_seq: Duration::from_micros(20),
            context_per_1k_tokens: Duration::ZERO,
            tokens_squared_per_1m: Duration::ZERO,
            encoder_per_image_token: Duration::ZERO,
            finish_overhead: Duration::ZERO,
            finish_per_request: Duration::ZERO,
            frontend_overhead: Duration::ZERO,
            frontend_per_request: Duration::ZERO,
            frontend_hands_off_bursts: false,
            eos_probability: 0.0,
        }
    }
}

impl CostModel {
    /// A model that costs nothing: for measuring the harness itself.
    pub fn free() -> Self {
        CostModel {
            fixed_overhead: Duration::ZERO,
            request_overhead: Duration::ZERO,
            decode_step: Duration::ZERO,
            prefill_per_token: Duration::ZERO,
            per_seq: Duration::ZERO,
            context_per_1k_tokens: Duration::ZERO,
            tokens_squared_per_1m: Duration::ZERO,
            encoder_per_image_token: Duration::ZERO,
            finish_overhead: Duration::ZERO,
            finish_per_request: Duration::ZERO,
            frontend_overhead: Duration::ZERO,
            frontend_per_request: Duration::ZERO,
            frontend_hands_off_bursts: false,
            eos_probability: 0.0,
        }
    }

    /// Nanoseconds before the first step of a `generate` call of `requests` requests.
    pub fn overhead_ns(&self, requests: usize) -> f64 {
        ns(self.fixed_overhead) + ns(self.request_overhead) * requests as f64
    }

    /// Nanoseconds after the last step of a `generate` call of `requests` requests.
    pub fn finish_ns(&self, requests: usize) -> f64 {
        ns(self.finish_overhead) + ns(self.finish_per_request) * requests as f64
    }

    /// Nanoseconds a whole `generate` call of `requests` requests takes under `schedule`: its
    /// overhead, every step, and its finish (what the simulated engine's call takes, start to return).
    pub fn generate_ns(&self, schedule: &super::scheduler::Schedule, requests: usize) -> f64 {
        let costs = self.step_costs();
        self.overhead_ns(requests)
            + schedule.steps.iter().map(|s| costs.step_ns(&s.load)).sum::<f64>()
            + self.finish_ns(requests)
    }

    /// Nanoseconds one step of this load takes (the formula in the type's docs).
    pub fn step_ns(&self, load: &StepLoad) -> f64 {
        self.step_costs().step_ns(load)
    }

    /// The step-time coefficients in nanoseconds, for pricing many steps: each `Duration` is
    /// converted once, not once per step.
    pub fn step_costs(&self) -> StepCosts {
        StepCosts {
            decode_step: ns(self.decode_step),
            prefill_per_token: ns(self.prefill_per_token),
            per_seq: ns(self.per_seq),
            context_per_1k_tokens: ns(self.context_per_1k_tokens),
            tokens_squared_per_1m: ns(self.tokens_squared_per_1m),
            encoder_per_image_token: ns(self.encoder_per_image_token),
        }
    }
}

/// A [`CostModel`]'s step coefficients in nanoseconds ([`CostModel::step_costs`]).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct StepCosts {
    decode_step: f64,
    prefill_per_token: f64,
    per_seq: f64,
    context_per_1k_tokens: f64,
    tokens_squared_per_1m: f64,
    encoder_per_image_token: f64,
}

impl StepCosts {
    /// Nanoseconds one step of this load takes (the formula in [`CostModel`]'s docs).
    pub fn step_ns(&self, load: &StepLoad) -> f64 {
        self.decode_step
            + self.prefill_per_token * load.prefill_tokens as f64
            + self.per_seq * load.seqs as f64
            + self.context_per_1k_tokens * load.context_tokens as f64 / 1000.0
            + self.tokens_squared_per_1m * load.tokens_squared_per_1m()
            + self.encoder_per_image_token * load.encoder_tokens as f64
    }
}

fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// What one engine step computes: the inputs of [`CostModel::step_ns`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepLoad {
    /// Prompt tokens computed (prefill chunks, recomputation after a preemption included).
    pub prefill_tokens: u64,
    /// Sequences decoding one token.
    pub decode_seqs: u64,
    /// Sequences scheduled: the decoding ones and those computing a prompt chunk.
    pub seqs: u64,
    /// Context tokens attended over: for each scheduled sequence, its computed tokens after the step.
    pub context_tokens: u64,
    /// Image tokens the vision encoder computes: those of the images of the sequences scheduled for
    /// the first time that missed the encoder cache.
    #[serde(skip_serializing_if = "is_zero")]
    pub encoder_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl StepLoad {
    /// `T² / 10⁶`, with `T` the tokens the step computes (its prompt tokens and one per decoding
    /// sequence): the multiplier of [`CostModel::tokens_squared_per_1m`].
    pub fn tokens_squared_per_1m(&self) -> f64 {
        let t = (self.prefill_tokens + self.decode_seqs) as f64 / 1000.0;
        t * t
    }
}

/// The simulator's scheduler limits when a scenario sets none: vLLM v1's defaults for its offline
/// `LLM` class (256 sequences, 8192 tokens a step, 16-token blocks, chunked prefill and prefix
/// caching on) and a KV cache of 65536 blocks (1 Mi tokens).
pub const DEFAULT_SCHEDULER: ResolvedEngineConfig = ResolvedEngineConfig {
    max_num_seqs: 256,
    max_num_batched_tokens: 8192,
    num_kv_blocks: 65_536,
    block_size: 16,
    prefix_caching: true,
    chunked_prefill: true,
};

/// Scheduler limits that never bind: for measuring the harness itself.
pub const UNLIMITED_SCHEDULER: ResolvedEngineConfig = ResolvedEngineConfig {
    max_num_seqs: u32::MAX,
    max_num_batched_tokens: u32::MAX,
    num_kv_blocks: u32::MAX,
    block_size: 16,
    prefix_caching: false,
    chunked_prefill: true,
};

/// Real time sleeps for every cost; virtual time only advances a [`crate::time::VirtualClock`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeMode {
    /// Every cost is slept on the monotonic clock.
    Real,
    /// Costs advance a virtual clock; no wall time passes.
    #[default]
    Virtual,
}

/// Everything the simulated engine needs: a scenario's `[engine.sim]` table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimConfig {
    /// The time [`super::SimEngine::timed`] runs the engine in.
    pub time: TimeMode,
    /// Seed of the simulator's RNG (its EOS draws); a scenario defaults it to one derived from the run seed.
    pub seed: u64,
    /// What each step and each `generate` call costs.
    pub cost: CostModel,
    /// The scheduler's limits: sequences, tokens per step, KV cache, prefix caching.
    pub scheduler: ResolvedEngineConfig,
    /// The calibration profile the cost model and limits were loaded from, if any (already
    /// applied: only kept so the scenario prints back as it was written).
    pub profile: Option<PathBuf>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            time: TimeMode::default(),
            seed: 0,
            cost: CostModel::default(),
            scheduler: DEFAULT_SCHEDULER,
            profile: None,
        }
    }
}
