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
//!
//! Files: this one holds the schedule's types and one whole `generate` call's schedule
//! ([`schedule`], [`replay`]); `stepper` holds the [`Stepper`], the state machine that runs the
//! steps.

mod stepper;

use std::ops::Range;

use serde::Serialize;

use super::StepLoad;
use super::kv::{KvCache, block_hashes};
use crate::engine::ResolvedEngineConfig;
pub use stepper::{SeqId, StepOutcome, Stepper};

/// One sequence of a `generate` call.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqSpec {
    /// Prompt length in tokens (>= 1).
    pub prompt_len: u32,
    /// Tokens it generates before it finishes.
    pub output_len: u32,
    /// Where its prefix-cache hits come from.
    pub prefix: PrefixSource,
    /// Image tokens the vision encoder computes for it (those of its images that missed the
    /// encoder cache), in the step that first schedules it: [`StepLoad::encoder_tokens`].
    pub encoder_tokens: u32,
}

/// How a sequence meets the prefix cache.
#[derive(Clone, Debug, PartialEq)]
pub enum PrefixSource {
    /// Its prompt token ids: full blocks are hashed, looked up and cached (the simulator).
    Tokens(Vec<u32>),
    /// The prompt tokens a real engine said it served from its cache (a calibration replay);
    /// after a preemption its own computed prompt blocks are taken as still cached.
    Known(u32),
    /// The chained hashes of its full prompt blocks, as [`PrefixSource::Tokens`] would give them
    /// ([`prefix_hashes`]): the simulated engine's, which hashes a prompt's ids where they are
    /// (or where the request was made) rather than copy them.
    Hashes(Vec<u64>),
}

/// The chained hashes of the full blocks of a prompt of token ids `ids` under `config` (none
/// without prefix caching).
pub(crate) fn prefix_hashes(config: &ResolvedEngineConfig, ids: &[u32]) -> Vec<u64> {
    if config.prefix_caching { block_hashes(ids, config.block_size.max(1)) } else { Vec::new() }
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
    /// The steps that produced its tokens, one token each, as runs of consecutive steps in order
    /// (the per-token times: ITL). A sequence samples at every step from its first token to its
    /// last, so this is one run unless a preemption broke it.
    pub token_steps: Vec<Range<usize>>,
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
    /// A sequence that generates nothing has no place in a continuous batch.
    #[error("a request must generate at least one token")]
    NoOutput,
}

impl SeqSchedule {
    /// Its tokens of steps `steps` (consecutive, after every step it sampled in before).
    fn sampled(&mut self, steps: Range<usize>) {
        if steps.is_empty() {
            return;
        }
        self.first_token.get_or_insert(steps.start);
        self.last_token = Some(steps.end - 1);
        match self.token_steps.last_mut() {
            Some(run) if run.end == steps.start => run.end = steps.end,
            _ => self.token_steps.push(steps),
        }
    }

    /// Tokens it generated.
    pub fn tokens(&self) -> usize {
        self.token_steps.iter().map(|run| run.len()).sum()
    }
}

/// The most steps reserved up front for one `generate` call's schedule.
const MOST_STEPS_RESERVED: usize = 1 << 16;

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
    schedule_with(config, kv, specs.to_vec(), true)
}

/// [`schedule`], with its decode steps run at once ([`Stepper::decode_run`]) or one by one (the
/// reference its tests hold it to).
pub(crate) fn schedule_with(
    config: &ResolvedEngineConfig,
    kv: &mut KvCache,
    specs: Vec<SeqSpec>,
    decode_runs: bool,
) -> Result<Schedule, ScheduleError> {
    let mut stepper = Stepper::new(*config, std::mem::replace(kv, KvCache::new(0)));
    let schedule = schedule_on(&mut stepper, specs, decode_runs, Vec::new());
    *kv = stepper.into_kv();
    schedule
}

/// [`schedule`] on `stepper`, an idle one that holds the engine's KV cache and is kept from call
/// to call (its buffers are reused, and it is idle again after), into `steps`, a buffer an
/// earlier schedule's steps left (cleared first). It takes `specs`, so their prefix hashes are
/// moved into the sequences rather than copied.
pub(crate) fn schedule_into(
    stepper: &mut Stepper,
    specs: Vec<SeqSpec>,
    steps: Vec<Step>,
) -> Result<Schedule, ScheduleError> {
    schedule_on(stepper, specs, true, steps)
}

fn schedule_on(
    stepper: &mut Stepper,
    specs: Vec<SeqSpec>,
    decode_runs: bool,
    mut steps: Vec<Step>,
) -> Result<Schedule, ScheduleError> {
    for (index, s) in specs.iter().enumerate() {
        check(&stepper.config, index, s)?;
    }
    debug_assert!(stepper.is_idle(), "a schedule starts on an idle stepper");
    // Every slot is free: hand them out from the first again, so the n-th added sequence is
    // `SeqId(n)`.
    stepper.seqs.clear();
    stepper.free_slots.clear();
    // A step samples at most one token of a sequence: at least as many steps as the longest
    // output, and a few more for prompts.
    let longest = specs.iter().map(|s| s.output_len as usize).max().unwrap_or(0);
    steps.clear();
    steps.reserve(longest.min(MOST_STEPS_RESERVED) + 8);
    let mut out = Schedule { steps, seqs: vec![SeqSchedule::default(); specs.len()] };
    let mut index_of = Vec::with_capacity(specs.len());
    for (index, s) in specs.into_iter().enumerate() {
        if s.output_len > 0 {
            let id = stepper.add_checked(s);
            debug_assert_eq!(id.0, index_of.len());
            index_of.push(index);
        }
    }
    // One outcome, its buffers reused from step to step.
    let mut step = StepOutcome::default();
    while stepper.step_into(&mut step) {
        let step_index = out.steps.len();
        for &(id, cached) in &step.admitted {
            let seq = &mut out.seqs[index_of[id.0]];
            seq.cached_tokens = cached;
            seq.first_scheduled = Some(step_index);
        }
        for id in &step.preempted {
            out.seqs[index_of[id.0]].preemptions += 1;
        }
        for id in &step.sampled {
            out.seqs[index_of[id.0]].sampled(step_index..step_index + 1);
        }
        out.steps.push(std::mem::take(&mut step.step));
        // The decode steps up to the next event, at once: every running sequence samples in each.
        let from = out.steps.len();
        let run = if decode_runs { stepper.decode_run(&mut out.steps) } else { 0 };
        if run > 0 {
            for &slot in &stepper.running {
                out.seqs[index_of[slot]].sampled(from..from + run);
            }
        }
    }
    Ok(out)
}

/// Whether a sequence can ever finish under `config` (`index` names it in the error).
pub(crate) fn check(config: &ResolvedEngineConfig, index: usize, s: &SeqSpec) -> Result<(), ScheduleError> {
    let bs = config.block_size.max(1);
    let tokens = u64::from(s.prompt_len.max(1)) + u64::from(s.output_len);
    // The last sampled token is never computed, so it needs no KV slot.
    let needed = blocks_for(tokens - 1, bs);
    if s.output_len > 0 && needed > u64::from(config.num_kv_blocks) {
        return Err(ScheduleError::KvTooSmall { index, tokens, needed, capacity: config.num_kv_blocks });
    }
    if s.output_len > 0 && !config.chunked_prefill && tokens - 1 > u64::from(config.max_num_batched_tokens) {
        return Err(ScheduleError::BudgetTooSmall { index, tokens, budget: config.max_num_batched_tokens });
    }
    Ok(())
}

/// Schedules one `generate` call on a fresh KV cache: a calibration replay, whose sequences say
/// their own prefix-cache hits ([`PrefixSource::Known`]).
pub fn replay(config: &ResolvedEngineConfig, specs: &[SeqSpec]) -> Result<Schedule, ScheduleError> {
    schedule(config, &mut KvCache::new(config.num_kv_blocks), specs)
}
