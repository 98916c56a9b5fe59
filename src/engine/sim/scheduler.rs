//! vLLM v1's scheduler, step by step: which tokens of which sequences each engine step computes.
//!
//! One call of `schedule` (or [`replay`]) is one `generate` call: every sequence starts waiting,
//! in request order. Each step, as vLLM v1's `Scheduler.schedule()`:
//! 1. **Running sequences first**, in the order they were admitted: each gets the tokens it still
//!    needs (one for a decode, the rest of its prompt for a chunked prefill), cut to the step's
//!    remaining token budget (`max_num_batched_tokens`). If the KV cache has no room for them,
//!    the **newest** running sequence is preempted (its blocks freed, its progress dropped: it is
//!    recomputed later, prompt and generated tokens alike) and put back at the front of the queue,
//!    until the allocation fits or the sequence preempted itself.
//! 2. **Then waiting sequences**, unless a preemption happened in this step, while fewer than
//!    `max_num_seqs` run and budget is left: a sequence's full prompt blocks found in the prefix
//!    cache are taken as computed (at least one token is always computed), and the rest of its
//!    tokens are scheduled up to the budget (all of them, or it waits, without chunked prefill).
//! 3. After the step, a sequence whose tokens are all computed samples one token; a sequence with
//!    all its output tokens finishes and frees its blocks (full prompt blocks stay in the prefix
//!    cache until evicted).
//!
//! The schedule depends only on token counts, token ids (for the prefix cache) and the limits,
//! never on time: [`super::CostModel`] turns it into times afterwards, and the calibration fit
//! replays it to make every timestamp a linear function of the cost coefficients.

use std::collections::VecDeque;

use serde::Serialize;

use super::StepLoad;
use super::kv::{BlockId, KvCache, block_hashes};
use crate::engine::ResolvedEngineConfig;

/// One sequence of a `generate` call.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqSpec {
    /// Prompt length in tokens (>= 1).
    pub prompt_len: u32,
    /// Tokens it generates before it finishes.
    pub output_len: u32,
    /// Where its prefix-cache hits come from.
    pub prefix: PrefixSource,
}

/// How a sequence meets the prefix cache.
#[derive(Clone, Debug, PartialEq)]
pub enum PrefixSource {
    /// Its prompt token ids: full blocks are hashed, looked up and cached (the simulator).
    Tokens(Vec<u32>),
    /// The prompt tokens a real engine said it served from its cache (a calibration replay);
    /// after a preemption its own computed prompt blocks are taken as still cached.
    Known(u32),
}

/// When one sequence was scheduled and produced tokens: step indices into [`Schedule::steps`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SeqSchedule {
    /// The step it was first scheduled in; `None` if it generates nothing.
    pub first_scheduled: Option<usize>,
    /// The step that produced its first token.
    pub first_token: Option<usize>,
    /// The step that produced its last token.
    pub last_token: Option<usize>,
    /// The step that produced each of its tokens, in order (the per-token times: ITL).
    pub token_steps: Vec<usize>,
    /// Prompt tokens taken from the prefix cache at its first admission.
    pub cached_tokens: u32,
    /// How often it was preempted.
    pub preemptions: u32,
}

/// One engine step.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Step {
    /// What it computes (what it costs).
    pub load: StepLoad,
    /// Sequences it schedules.
    pub scheduled: usize,
    /// Sequences running after admission in this step.
    pub running: usize,
    /// KV blocks held by sequences while the step runs.
    pub kv_blocks_used: u64,
    /// Sequences preempted in this step.
    pub preempted: usize,
}

/// A `generate` call's schedule.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Schedule {
    /// Every step, in order.
    pub steps: Vec<Step>,
    /// Per sequence, in input order.
    pub seqs: Vec<SeqSchedule>,
}

/// A batch the scheduler can never finish.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// A sequence needs more KV blocks than the cache has.
    #[error(
        "request {index} needs {needed} KV blocks ({tokens} tokens) but the cache has {capacity}: \
         raise `num_kv_blocks` or shorten it"
    )]
    KvTooSmall {
        /// Its position in the batch.
        index: usize,
        /// Prompt plus output tokens.
        tokens: u64,
        /// Blocks it needs at its longest.
        needed: u64,
        /// `num_kv_blocks`.
        capacity: u32,
    },
    /// Without chunked prefill a sequence must fit in one step's budget.
    #[error(
        "request {index} has {tokens} tokens but a step schedules at most {budget} and chunked prefill \
         is off: raise `max_num_batched_tokens` or turn `chunked_prefill` on"
    )]
    BudgetTooSmall {
        /// Its position in the batch.
        index: usize,
        /// Prompt plus output tokens.
        tokens: u64,
        /// `max_num_batched_tokens`.
        budget: u32,
    },
}

struct Seq {
    prompt_len: u32,
    output_len: u32,
    /// Full prompt blocks' hashes (empty unless prefix caching with token ids).
    hashes: Vec<u64>,
    known_cached: Option<u32>,
    generated: u32,
    computed: u32,
    blocks: Vec<BlockId>,
    /// Blocks of `blocks` already registered in the prefix cache.
    registered: usize,
    /// Most full prompt blocks ever computed (a replay's guess after a preemption).
    prompt_blocks_done: u32,
    admitted: bool,
}

impl Seq {
    fn num_tokens(&self) -> u32 {
        self.prompt_len + self.generated
    }
}

fn blocks_for(tokens: u64, block_size: u32) -> u64 {
    tokens.div_ceil(u64::from(block_size.max(1)))
}

/// Schedules one `generate` call on `kv`, the engine's KV cache (it persists between calls, and
/// with it the prefix cache). See the module docs.
pub(crate) fn schedule(
    config: &ResolvedEngineConfig,
    kv: &mut KvCache,
    specs: &[SeqSpec],
) -> Result<Schedule, ScheduleError> {
    let bs = config.block_size.max(1);
    let mut seqs: Vec<Seq> = Vec::with_capacity(specs.len());
    for (index, s) in specs.iter().enumerate() {
        let tokens = u64::from(s.prompt_len.max(1)) + u64::from(s.output_len);
        // The last sampled token is never computed, so it needs no KV slot.
        let needed = blocks_for(tokens - 1, bs);
        if s.output_len > 0 && needed > u64::from(config.num_kv_blocks) {
            return Err(ScheduleError::KvTooSmall { index, tokens, needed, capacity: config.num_kv_blocks });
        }
        if s.output_len > 0 && !config.chunked_prefill && tokens - 1 > u64::from(config.max_num_batched_tokens) {
            return Err(ScheduleError::BudgetTooSmall { index, tokens, budget: config.max_num_batched_tokens });
        }
        let (hashes, known_cached) = match &s.prefix {
            PrefixSource::Tokens(ids) if config.prefix_caching => (block_hashes(ids, bs), None),
            PrefixSource::Tokens(_) => (Vec::new(), None),
            PrefixSource::Known(n) => (Vec::new(), config.prefix_caching.then_some(*n)),
        };
        seqs.push(Seq {
            prompt_len: s.prompt_len.max(1),
            output_len: s.output_len,
            hashes,
            known_cached,
            generated: 0,
            computed: 0,
            blocks: Vec::new(),
            registered: 0,
            prompt_blocks_done: 0,
            admitted: false,
        });
    }

    let mut out = Schedule { steps: Vec::new(), seqs: vec![SeqSchedule::default(); specs.len()] };
    let mut waiting: VecDeque<usize> = (0..seqs.len()).filter(|&i| seqs[i].output_len > 0).collect();
    let mut running: Vec<usize> = Vec::new();
    let max_seqs = config.max_num_seqs.max(1) as usize;

    while !waiting.is_empty() || !running.is_empty() {
        let step_index = out.steps.len();
        let mut budget = u64::from(config.max_num_batched_tokens.max(1));
        let mut scheduled: Vec<(usize, u32)> = Vec::new();
        let mut preempted = 0usize;

        // 1. Running sequences, oldest first; preempt the newest when the cache is full.
        let mut i = 0;
        while i < running.len() && budget > 0 {
            let r = running[i];
            let new = u64::from(seqs[r].num_tokens() - seqs[r].computed).min(budget) as u32;
            loop {
                let s = &seqs[r];
                let want = blocks_for(u64::from(s.computed + new), bs).saturating_sub(s.blocks.len() as u64);
                if let Some(blocks) = kv.allocate(want) {
                    seqs[r].blocks.extend(blocks);
                    scheduled.push((r, new));
                    budget -= u64::from(new);
                    i += 1;
                    break;
                }
                let Some(victim) = running.pop() else { break };
                preempt(&mut seqs[victim], kv);
                out.seqs[victim].preemptions += 1;
                preempted += 1;
                waiting.push_front(victim);
                if victim == r {
                    break;
                }
            }
        }

        // 2. Waiting sequences, unless this step preempted.
        while preempted == 0 && budget > 0 && running.len() < max_seqs {
            let Some(&w) = waiting.front() else { break };
            let s = &seqs[w];
            let max_hit_blocks = ((s.num_tokens() - 1) / bs) as usize;
            let (hits, hit_blocks) = match s.known_cached {
                Some(known) => {
                    let blocks = if s.admitted { s.prompt_blocks_done } else { known / bs };
                    (Vec::new(), (blocks as usize).min(max_hit_blocks))
                }
                None => {
                    let hits = kv.lookup(&s.hashes[..s.hashes.len().min(max_hit_blocks)]);
                    let n = hits.len();
                    (hits, n)
                }
            };
            let hit_tokens = hit_blocks as u32 * bs;
            let need = u64::from(s.num_tokens() - hit_tokens);
            if !config.chunked_prefill && need > budget {
                break;
            }
            let new = need.min(budget) as u32;
            let total = blocks_for(u64::from(hit_tokens + new), bs);
            // A replay's hits are its own blocks; the simulator's are shared with the cache.
            let fresh = total - hits.len() as u64;
            if fresh + kv.free_among(&hits) > kv.free_blocks() {
                break;
            }
            kv.touch(&hits);
            let Some(fresh_blocks) = kv.allocate(fresh) else { break };
            waiting.pop_front();
            let s = &mut seqs[w];
            s.blocks = hits;
            s.registered = s.blocks.len();
            s.blocks.extend(fresh_blocks);
            s.computed = hit_tokens;
            if !s.admitted {
                s.admitted = true;
                out.seqs[w].cached_tokens = hit_tokens;
                out.seqs[w].first_scheduled = Some(step_index);
            }
            running.push(w);
            scheduled.push((w, new));
            budget -= u64::from(new);
        }

        // Every sequence fits the cache and the budget (checked above), so a step always has work.
        debug_assert!(!scheduled.is_empty() || preempted > 0, "a step with nothing to do");
        let mut load = StepLoad::default();
        for &(r, new) in &scheduled {
            let s = &seqs[r];
            if s.generated >= 1 && new == 1 && s.computed + 1 == s.num_tokens() {
                load.decode_seqs += 1;
            } else {
                load.prefill_tokens += u64::from(new);
            }
            load.context_tokens += u64::from(s.computed + new);
        }
        load.seqs = scheduled.len() as u64;
        out.steps.push(Step {
            load,
            scheduled: scheduled.len(),
            running: running.len(),
            kv_blocks_used: kv.used_blocks(),
            preempted,
        });

        // 3. Outputs: sample, finish, cache full prompt blocks.
        let mut finished = false;
        for &(r, new) in &scheduled {
            let s = &mut seqs[r];
            s.computed += new;
            s.prompt_blocks_done = s.prompt_blocks_done.max(s.computed.min(s.prompt_len) / bs);
            while s.registered < s.hashes.len() && (s.registered as u32 + 1) * bs <= s.computed {
                kv.register(s.blocks[s.registered], s.hashes[s.registered]);
                s.registered += 1;
            }
            if s.computed == s.num_tokens() {
                s.generated += 1;
                let times = &mut out.seqs[r];
                times.first_token.get_or_insert(step_index);
                times.last_token = Some(step_index);
                times.token_steps.push(step_index);
                if s.generated == s.output_len {
                    kv.release(&s.blocks);
                    s.blocks.clear();
                    finished = true;
                }
            }
        }
        if finished {
            running.retain(|&r| seqs[r].generated < seqs[r].output_len);
        }
    }
    Ok(out)
}

/// Schedules one `generate` call on a fresh KV cache: a calibration replay, whose sequences say
/// their own prefix-cache hits ([`PrefixSource::Known`]).
pub fn replay(config: &ResolvedEngineConfig, specs: &[SeqSpec]) -> Result<Schedule, ScheduleError> {
    schedule(config, &mut KvCache::new(config.num_kv_blocks), specs)
}

fn preempt(s: &mut Seq, kv: &mut KvCache) {
    kv.release(&s.blocks);
    s.blocks.clear();
    s.registered = 0;
    s.computed = 0;
}
