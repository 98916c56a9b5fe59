//! The cost model: when each sequence of a batch is scheduled and produces its tokens.
//!
//! Sequences run in waves of at most `max_num_seqs`, in request order. A wave pays the fixed
//! overhead, then prefill for all its prompt tokens, which yields every sequence's first token;
//! then decode steps, each yielding one more token for every sequence still running and costing
//! `decode_step + decode_per_seq × running`. A sequence finishes after its drawn output length.

use std::time::Duration;

use crate::engine::EngineRequest;
use crate::rng::SplitMix64;

use super::CostModel;

/// One sequence's simulated timing, as offsets from the batch start.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqTiming {
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub scheduled: Duration,
    pub first_token: Option<Duration>,
    pub last_token: Option<Duration>,
    /// When each output token was produced (`first_token` first, `last_token` last).
    pub token_times: Vec<Duration>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub requests: Vec<SeqTiming>,
    pub total: Duration,
}

/// Output length: `max_tokens` when EOS is ignored, else an EOS may come after `min_tokens`.
fn output_tokens(req: &EngineRequest, cost: &CostModel, seed: u64) -> u32 {
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

fn scaled(d: Duration, times: u64) -> Duration {
    Duration::from_nanos(u64::try_from(d.as_nanos().saturating_mul(times as u128)).unwrap_or(u64::MAX))
}

/// Simulates one batch; `prompt_tokens[i]` is request `i`'s prompt length
/// ([`super::prompt::prompt_tokens`]).
pub fn simulate(cost: &CostModel, seed: u64, batch: &[EngineRequest], prompt_tokens: &[u32]) -> Timeline {
    let mut requests: Vec<SeqTiming> = batch
        .iter()
        .zip(prompt_tokens)
        .map(|(r, &prompt_tokens)| SeqTiming {
            prompt_tokens,
            output_tokens: output_tokens(r, cost, seed),
            scheduled: Duration::ZERO,
            first_token: None,
            last_token: None,
            token_times: Vec::new(),
        })
        .collect();
    let mut t = Duration::ZERO;
    let wave_len = cost.max_num_seqs.max(1);
    for wave in requests.chunks_mut(wave_len) {
        let prompt_total: u64 = wave.iter().map(|s| u64::from(s.prompt_tokens)).sum();
        for s in wave.iter_mut() {
            s.scheduled = t;
        }
        t = t.saturating_add(scaled(cost.fixed_overhead, 1));
        t = t.saturating_add(scaled(cost.prefill_per_token, prompt_total));
        // Decode: step k (k = 1, 2, ...) yields token k+1 for every sequence with more than k tokens.
        let mut lengths: Vec<u32> = wave.iter().map(|s| s.output_tokens).collect();
        lengths.sort_unstable();
        let mut finish_times: Vec<(u32, Duration)> = Vec::with_capacity(lengths.len());
        let first = t;
        // steps[k - 1]: when the wave's k-th token came out (for every sequence still running).
        let mut steps: Vec<Duration> = vec![first];
        let mut running = lengths.iter().filter(|&&n| n >= 1).count();
        let mut idx = lengths.iter().position(|&n| n >= 1).unwrap_or(lengths.len());
        let mut k: u32 = 1;
        // Sequences of length 1 finish at the first token.
        while idx < lengths.len() && lengths[idx] == 1 {
            finish_times.push((1, first));
            idx += 1;
            running -= 1;
        }
        while running > 0 {
            t = t.saturating_add(scaled(cost.decode_step, 1));
            t = t.saturating_add(scaled(cost.decode_per_seq, running as u64));
            k += 1;
            steps.push(t);
            while idx < lengths.len() && lengths[idx] == k {
                finish_times.push((k, t));
                idx += 1;
                running -= 1;
            }
        }
        for s in wave.iter_mut() {
            if s.output_tokens >= 1 {
                s.first_token = Some(first);
                let end = finish_times.iter().find(|(n, _)| *n == s.output_tokens).map(|(_, d)| *d).unwrap_or(first);
                s.last_token = Some(end);
                s.token_times = steps[..s.output_tokens as usize].to_vec();
            }
        }
        t = t.max(first);
    }
    Timeline { requests, total: t }
}
