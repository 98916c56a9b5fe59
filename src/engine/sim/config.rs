//! The simulated engine's settings: its seed and cost model. Faults are a wrapper around any
//! engine: [`crate::engine::faults`].

use std::time::Duration;

use serde::Serialize;

/// What a batch costs. Sequences run in waves of at most `max_num_seqs`; each wave pays
/// `fixed_overhead`, then prefill (`prefill_per_token` for every prompt token of the wave), then one
/// decode step per generated token (`decode_step` plus `decode_per_seq` for every running sequence).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CostModel {
    /// Paid once per wave of sequences.
    pub fixed_overhead: Duration,
    /// Prefill cost of each prompt token of a wave.
    pub prefill_per_token: Duration,
    /// Cost of one decode step (one token for every running sequence), whatever the wave's size.
    pub decode_step: Duration,
    /// Added to each decode step for every sequence still running in it.
    pub decode_per_seq: Duration,
    /// Most sequences in one wave; a larger batch runs in several waves.
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
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SimConfig {
    /// The time [`super::SimEngine::timed`] runs the engine in.
    pub time: TimeMode,
    /// Seed of the simulator's RNG (its EOS draws); a scenario defaults it to one derived from the run seed.
    pub seed: u64,
    /// What each batch costs.
    pub cost: CostModel,
}
