//! The simulated engine's settings: its cost model and its faults.

use std::time::Duration;

use serde::Serialize;

/// What a batch costs. Sequences run in waves of at most `max_num_seqs`; each wave pays
/// `fixed_overhead`, then prefill (`prefill_per_token` for every prompt token of the wave), then one
/// decode step per generated token (`decode_step` plus `decode_per_seq` for every running sequence).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostModel {
    pub fixed_overhead: Duration,
    pub prefill_per_token: Duration,
    pub decode_step: Duration,
    pub decode_per_seq: Duration,
    pub max_num_seqs: usize,
    /// Probability per generated token (after `min_tokens`) of an end-of-sequence, for requests
    /// that do not ignore EOS.
    pub eos_probability: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            fixed_overhead: Duration::from_micros(500),
            prefill_per_token: Duration::from_micros(2),
            decode_step: Duration::from_micros(1_000),
            decode_per_seq: Duration::from_micros(20),
            max_num_seqs: 256,
            eos_probability: 0.0,
        }
    }
}

impl CostModel {
    /// A model that costs nothing: for measuring the harness itself.
    pub fn free() -> Self {
        CostModel {
            fixed_overhead: Duration::ZERO,
            prefill_per_token: Duration::ZERO,
            decode_step: Duration::ZERO,
            decode_per_seq: Duration::ZERO,
            max_num_seqs: usize::MAX,
            eos_probability: 0.0,
        }
    }
}

/// When a fault fires: on every `every`-th opportunity (1-based), and/or with `probability`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultTrigger {
    pub every: Option<u64>,
    pub probability: f64,
}

impl FaultTrigger {
    pub const NEVER: FaultTrigger = FaultTrigger { every: None, probability: 0.0 };

    pub fn every(n: u64) -> Self {
        FaultTrigger { every: Some(n), probability: 0.0 }
    }

    pub fn probability(p: f64) -> Self {
        FaultTrigger { every: None, probability: p }
    }

    pub fn is_never(&self) -> bool {
        self.every.is_none_or(|n| n == 0) && self.probability.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    }
}

/// Faults the simulated engine injects. Batch faults are checked in this order and at most one
/// fires per batch: panic, hang, fail, short output, extra output, wrong id; `slow` combines with
/// any of them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Faults {
    /// The batch fails with an engine error.
    pub fail_batch: FaultTrigger,
    /// One output fewer than requests.
    pub short_output: FaultTrigger,
    /// One output more than requests.
    pub extra_output: FaultTrigger,
    /// One output carries the id of a request that is not in the batch.
    pub wrong_id: FaultTrigger,
    /// generate panics.
    pub panic: FaultTrigger,
    /// generate takes `slow_factor` times its cost.
    pub slow: FaultTrigger,
    pub slow_factor: f64,
    /// generate blocks for `hang_for` (a hung engine, as far as any sane timeout can tell).
    pub hang: FaultTrigger,
    pub hang_for: Duration,
    /// start fails.
    pub start_fails: bool,
    /// start takes this long.
    pub start_delay: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            fail_batch: FaultTrigger::NEVER,
            short_output: FaultTrigger::NEVER,
            extra_output: FaultTrigger::NEVER,
            wrong_id: FaultTrigger::NEVER,
            panic: FaultTrigger::NEVER,
            slow: FaultTrigger::NEVER,
            slow_factor: 10.0,
            hang: FaultTrigger::NEVER,
            hang_for: Duration::from_secs(3600),
            start_fails: false,
            start_delay: Duration::ZERO,
        }
    }
}

/// Real time sleeps for every cost; virtual time only advances a [`crate::time::VirtualClock`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeMode {
    Real,
    #[default]
    Virtual,
}

/// Everything the simulated engine needs; a scenario's `[engine.sim]` (and `[faults]`) table.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SimConfig {
    /// The time [`super::SimEngine::timed`] runs the engine in.
    pub time: TimeMode,
    pub seed: u64,
    pub cost: CostModel,
    pub faults: Faults,
}
