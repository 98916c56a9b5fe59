//! The [`Stepper`]: vLLM v1's scheduler as a state machine, one step at a time (admission,
//! preemption, sampling; see the parent module's docs), and its fast path for the decode steps
//! between two events ([`Stepper::decode_run`]).

use std::collections::VecDeque;

use super::super::StepLoad;
use super::super::kv::{BlockId, KvCache};
use super::{PrefixSource, ScheduleError, SeqSpec, Step, blocks_for, check, prefix_hashes};
use crate::engine::ResolvedEngineConfig;

/// The most entries reserved up front for one sequence's token steps or block table.
const RESERVE_AT_MOST: usize = 4096;

#[derive(Debug)]
pub(super) struct Seq {
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
    /// Image tokens to encode when first admitted.
    encoder_tokens: u32,
}

impl Seq {
    fn num_tokens(&self) -> u32 {
        self.prompt_len + self.generated
    }

    /// Whether its next step is a decode: one token, after it has sampled one.
    fn is_decoding(&self) -> bool {
        self.generated >= 1 && self.computed + 1 == self.num_tokens()
    }
}

/// A sequence's handle in a [`Stepper`]: its slot, reused once it finished or was aborted.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(pub usize);

/// What one step of a [`Stepper`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepOutcome {
    /// The step's load and occupancy.
    pub step: Step,
    /// Sequences admitted for the first time, with the prompt tokens found in the prefix cache.
    pub admitted: Vec<(SeqId, u32)>,
    /// Sequences preempted in this step.
    pub preempted: Vec<SeqId>,
    /// Sequences that sampled one token at the end of this step, in scheduling order.
    pub sampled: Vec<SeqId>,
    /// Sequences of `sampled` that finished with it (their slots are free again).
    pub finished: Vec<SeqId>,
}

/// vLLM v1's scheduler as a state machine that sequences can join between steps: continuous
/// batching across calls (`batchlab serve`), and, with every sequence added up front, one
/// `generate` call ([`schedule`]). It never reads a clock: the caller prices and times each step.
#[derive(Debug)]
pub struct Stepper {
    pub(super) config: ResolvedEngineConfig,
    kv: KvCache,
    /// Sequences by slot; `None` slots are free (listed in `free_slots`).
    pub(super) seqs: Vec<Option<Seq>>,
    pub(super) free_slots: Vec<usize>,
    waiting: VecDeque<usize>,
    pub(super) running: Vec<usize>,
    /// The step's scheduled sequences and their new tokens: a buffer kept between steps.
    scheduled: Vec<(usize, u32)>,
    /// [`Stepper::decode_run`]'s buffers, kept between runs: where each group starts, and the
    /// sequences by group.
    run_first: Vec<usize>,
    run_order: Vec<usize>,
    /// Block tables of finished sequences, emptied, for the next admissions: a sequence's table
    /// is not allocated afresh (at most one per sequence that ever ran at once).
    spare_tables: Vec<Vec<BlockId>>,
}

impl Stepper {
    /// An idle scheduler on a fresh KV cache of `config.num_kv_blocks` blocks.
    pub fn with_config(config: ResolvedEngineConfig) -> Self {
        Stepper::new(config, KvCache::new(config.num_kv_blocks))
    }

    pub(crate) fn new(config: ResolvedEngineConfig, kv: KvCache) -> Self {
        Stepper {
            config,
            kv,
            seqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            scheduled: Vec::new(),
            run_first: Vec::new(),
            run_order: Vec::new(),
            spare_tables: Vec::new(),
        }
    }

    pub(crate) fn into_kv(self) -> KvCache {
        self.kv
    }

    /// Queues a sequence at the back of the waiting queue; an error if it could never finish.
    /// A sequence with no output tokens is refused as [`ScheduleError::NoOutput`].
    pub fn add(&mut self, spec: SeqSpec) -> Result<SeqId, ScheduleError> {
        check(&self.config, 0, &spec)?;
        if spec.output_len == 0 {
            return Err(ScheduleError::NoOutput);
        }
        Ok(self.add_checked(spec))
    }

    pub(super) fn add_checked(&mut self, s: SeqSpec) -> SeqId {
        let (hashes, known_cached) = match s.prefix {
            PrefixSource::Tokens(ids) => (prefix_hashes(&self.config, &ids), None),
            PrefixSource::Hashes(hashes) if self.config.prefix_caching => (hashes, None),
            PrefixSource::Hashes(_) => (Vec::new(), None),
            PrefixSource::Known(n) => (Vec::new(), self.config.prefix_caching.then_some(n)),
        };
        let seq = Seq {
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
            encoder_tokens: s.encoder_tokens,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.seqs[slot] = Some(seq);
                slot
            }
            None => {
                self.seqs.push(Some(seq));
                self.seqs.len() - 1
            }
        };
        self.waiting.push_back(slot);
        SeqId(slot)
    }

    /// Drops a sequence wherever it is (a client gone): its blocks are freed at once. Unknown
    /// ids are ignored.
    pub fn abort(&mut self, id: SeqId) {
        let Some(Some(seq)) = self.seqs.get_mut(id.0) else { return };
        self.kv.release(&seq.blocks);
        self.retire(id.0);
        self.waiting.retain(|&w| w != id.0);
        self.running.retain(|&r| r != id.0);
    }

    /// Sequences waiting to be admitted (preempted ones included).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Sequences admitted and not finished.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// KV blocks held by sequences.
    pub fn kv_blocks_used(&self) -> u64 {
        self.kv.used_blocks()
    }

    /// Whether a step would have nothing to do.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    fn seq(&self, slot: usize) -> &Seq {
        self.seqs[slot].as_ref().expect("a scheduled slot holds a sequence")
    }

    /// Runs one step (see the module docs); `None` when idle.
    pub fn step(&mut self) -> Option<StepOutcome> {
        let mut out = StepOutcome::default();
        self.step_into(&mut out).then_some(out)
    }

    /// [`Self::step`] into `out`, whose buffers are reused: `false` (and `out` cleared) when idle.
    pub(crate) fn step_into(&mut self, out: &mut StepOutcome) -> bool {
        out.admitted.clear();
        out.preempted.clear();
        out.sampled.clear();
        out.finished.clear();
        out.step = Step::default();
        if self.is_idle() {
            return false;
        }
        let config = self.config;
        let bs = config.block_size.max(1);
        let max_seqs = config.max_num_seqs.max(1) as usize;
        let mut budget = u64::from(config.max_num_batched_tokens.max(1));
        let mut scheduled = std::mem::take(&mut self.scheduled);
        scheduled.clear();
        // Image tokens encoded in this step: the images of sequences admitted for the first time.
        let mut encoder_tokens = 0u64;

        // 1. Running sequences, oldest first; preempt the newest when the cache is full.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let r = self.running[i];
            let new = u64::from(self.seq(r).num_tokens() - self.seq(r).computed).min(budget) as u32;
            loop {
                let s = self.seq(r);
                let tokens = u64::from(s.computed + new);
                if tokens <= s.blocks.len() as u64 * u64::from(bs) {
                    // Most decode steps: the tokens fit the blocks it holds (no division per sequence).
                    scheduled.push((r, new));
                    budget -= u64::from(new);
                    i += 1;
                    break;
                }
                let want = blocks_for(tokens, bs) - s.blocks.len() as u64;
                let seq = self.seqs[r].as_mut().expect("a running slot holds a sequence");
                if self.kv.allocate_into(want, &mut seq.blocks) {
                    scheduled.push((r, new));
                    budget -= u64::from(new);
                    i += 1;
                    break;
                }
                let Some(victim) = self.running.pop() else { break };
                let seq = self.seqs[victim].as_mut().expect("a running slot holds a sequence");
                preempt(seq, &mut self.kv);
                out.preempted.push(SeqId(victim));
                self.waiting.push_front(victim);
                if victim == r {
                    break;
                }
            }
        }

        // 2. Waiting sequences, unless this step preempted.
        while out.preempted.is_empty() && budget > 0 && self.running.len() < max_seqs {
            let Some(&w) = self.waiting.front() else { break };
            let s = self.seqs[w].as_ref().expect("a waiting slot holds a sequence");
            let max_hit_blocks = ((s.num_tokens() - 1) / bs) as usize;
            // Its block table: the hits, then its new blocks.
            let mut hits = self.spare_tables.pop().unwrap_or_default();
            let hit_blocks = match s.known_cached {
                Some(known) => {
                    let blocks = if s.admitted { s.prompt_blocks_done } else { known / bs };
                    (blocks as usize).min(max_hit_blocks)
                }
                None => {
                    self.kv.lookup_into(&s.hashes[..s.hashes.len().min(max_hit_blocks)], &mut hits);
                    hits.len()
                }
            };
            let hit_tokens = hit_blocks as u32 * bs;
            let need = u64::from(s.num_tokens() - hit_tokens);
            if !config.chunked_prefill && need > budget {
                self.spare(hits);
                break;
            }
            let new = need.min(budget) as u32;
            let total = blocks_for(u64::from(hit_tokens + new), bs);
            // A replay's hits are its own blocks; the simulator's are shared with the cache.
            let fresh = total - hits.len() as u64;
            if fresh + self.kv.free_among(&hits) > self.kv.free_blocks() {
                self.spare(hits);
                break;
            }
            self.kv.touch(&hits);
            self.waiting.pop_front();
            let s = self.seqs[w].as_mut().expect("a waiting slot holds a sequence");
            let old = std::mem::replace(&mut s.blocks, hits);
            self.spare(old);
            let s = self.seqs[w].as_mut().expect("a waiting slot holds a sequence");
            s.registered = s.blocks.len();
            // Room for every block it will hold, so decoding never grows the table.
            let most = blocks_for(u64::from(s.prompt_len + s.output_len), bs) as usize;
            s.blocks.reserve(most.min(RESERVE_AT_MOST).saturating_sub(s.blocks.len()));
            let taken = self.kv.allocate_into(fresh, &mut s.blocks);
            debug_assert!(taken, "the blocks were counted free");
            s.computed = hit_tokens;
            if !s.admitted {
                s.admitted = true;
                encoder_tokens += u64::from(s.encoder_tokens);
                out.admitted.push((SeqId(w), hit_tokens));
            }
            self.running.push(w);
            scheduled.push((w, new));
            budget -= u64::from(new);
        }

        // Every sequence fits the cache and the budget (checked by `add`), so a step always has work.
        debug_assert!(!scheduled.is_empty() || !out.preempted.is_empty(), "a step with nothing to do");
        // The step's occupancy is read before its outputs free anything; its load is summed in the
        // same pass as the outputs, from each sequence's state before the step.
        let (running, kv_blocks_used) = (self.running.len(), self.kv.used_blocks());
        let mut load = StepLoad { seqs: scheduled.len() as u64, encoder_tokens, ..StepLoad::default() };

        // 3. Outputs: sample, finish, cache full prompt blocks.
        for &(r, new) in &scheduled {
            let s = self.seqs[r].as_mut().expect("a scheduled slot holds a sequence");
            if new == 1 && s.is_decoding() {
                load.decode_seqs += 1;
            } else {
                load.prefill_tokens += u64::from(new);
            }
            load.context_tokens += u64::from(s.computed + new);
            let before = s.computed;
            s.computed += new;
            // Only a step that computes prompt tokens can add prompt blocks (a sequence is admitted
            // with at most its prompt computed, so past it the count is already at its top).
            if before <= s.prompt_len {
                s.prompt_blocks_done = s.prompt_blocks_done.max(s.computed.min(s.prompt_len) / bs);
            }
            while s.registered < s.hashes.len() && (s.registered as u32 + 1) * bs <= s.computed {
                self.kv.register(s.blocks[s.registered], s.hashes[s.registered]);
                s.registered += 1;
            }
            if s.computed == s.num_tokens() {
                s.generated += 1;
                out.sampled.push(SeqId(r));
                if s.generated == s.output_len {
                    self.kv.release(&s.blocks);
                    s.blocks.clear();
                    out.finished.push(SeqId(r));
                }
            }
        }
        out.step = Step { load, scheduled: scheduled.len(), running, kv_blocks_used, preempted: out.preempted.len() };
        if !out.finished.is_empty() {
            let seqs = &self.seqs;
            self.running.retain(|&r| seqs[r].as_ref().is_some_and(|s| s.generated < s.output_len));
            for id in &out.finished {
                self.retire(id.0);
            }
        }
        self.scheduled = scheduled;
        true
    }
}

impl Stepper {
    /// Frees a sequence's slot, its block table (its blocks already released) kept for a later
    /// admission.
    fn retire(&mut self, slot: usize) {
        if let Some(seq) = self.seqs[slot].take() {
            self.spare(seq.blocks);
        }
        self.free_slots.push(slot);
    }

    /// Keeps an emptied block table for a later admission.
    fn spare(&mut self, mut table: Vec<BlockId>) {
        if table.capacity() > 0 {
            table.clear();
            self.spare_tables.push(table);
        }
    }

    /// Runs at once the decode steps before the next event, and appends them to `steps`: the
    /// steps in which nothing is admitted, preempted or finished and every running sequence
    /// decodes one token. Exactly what as many [`Stepper::step_into`] calls would do (blocks
    /// handed out in the same order, so the prefix cache evolves the same), in O(sequences +
    /// steps + blocks) instead of O(sequences × steps). Returns the steps run: 0 when the next
    /// step is not such a step, when the KV cache might not hold the run (a preemption would
    /// come), or while sequences wait (one could be admitted).
    pub(crate) fn decode_run(&mut self, steps: &mut Vec<Step>) -> usize {
        let n = self.running.len();
        if n == 0 || !self.waiting.is_empty() || n as u64 > u64::from(self.config.max_num_batched_tokens.max(1)) {
            return 0;
        }
        let bs = self.config.block_size.max(1);
        // The sequence closest to its end finishes in its last token's step: that step is
        // `step_into`'s, so the run stops one before.
        let mut left = u32::MAX;
        let mut context = 0u64;
        for &r in &self.running {
            let s = self.seq(r);
            // A decoding sequence holds the blocks of its computed tokens and no more (see `phase`).
            if !s.is_decoding() || s.blocks.len() as u64 != blocks_for(u64::from(s.computed), bs) {
                return 0;
            }
            left = left.min(s.output_len - s.generated);
            context += u64::from(s.computed);
        }
        let m = left.saturating_sub(1);
        if m == 0 {
            return 0;
        }
        // Blocks the run takes: while they are free, no allocation fails, so nobody is preempted.
        let needed: u64 = self
            .running
            .iter()
            .map(|&r| {
                let s = self.seq(r);
                blocks_for(u64::from(s.computed + m), bs) - s.blocks.len() as u64
            })
            .sum();
        if needed > self.kv.free_blocks() {
            return 0;
        }
        // A sequence holding `b` blocks with `c` tokens computed takes a block in step
        // `b·bs − c + 1` of the run, and every `bs` steps after: sequences grouped by that first
        // step (in running order within a group), so each step visits only those that allocate.
        let phases = bs.min(m) as usize;
        let mut first = std::mem::take(&mut self.run_first);
        let mut order = std::mem::take(&mut self.run_order);
        first.clear();
        first.resize(phases + 1, 0);
        order.clear();
        // With `ceil(c / bs)` blocks held, that first step is in 1..=bs.
        let phase = |s: &Seq| s.blocks.len() as u64 * u64::from(bs) + 1 - u64::from(s.computed);
        for &r in &self.running {
            let p = phase(self.seq(r));
            if p <= phases as u64 {
                first[p as usize] += 1;
            }
        }
        // Counting sort: `first[p]` becomes where phase `p`'s group starts in `order`.
        let mut at = 0;
        for count in first.iter_mut() {
            let c = *count;
            *count = at;
            at += c;
        }
        order.resize(at, 0);
        let mut next = first.clone();
        for &r in &self.running {
            let p = phase(self.seq(r));
            if p <= phases as u64 {
                order[next[p as usize]] = r;
                next[p as usize] += 1;
            }
        }
        // Phase p's group is `first[p]..first[p + 1]`: the sentinel closes the last.
        first.push(at);
        steps.reserve(m as usize);
        for j in 1..=m as usize {
            let p = (j - 1) % bs as usize + 1;
            if p <= phases {
                for &r in &order[first[p]..first[p + 1]] {
                    let seq = self.seqs[r].as_mut().expect("a running slot holds a sequence");
                    let taken = self.kv.allocate_into(1, &mut seq.blocks);
                    debug_assert!(taken, "the run's blocks were counted free");
                }
            }
            let load = StepLoad {
                prefill_tokens: 0,
                decode_seqs: n as u64,
                seqs: n as u64,
                context_tokens: context + n as u64 * j as u64,
                encoder_tokens: 0,
            };
            steps.push(Step { load, scheduled: n, running: n, kv_blocks_used: self.kv.used_blocks(), preempted: 0 });
        }
        for &r in &self.running {
            let s = self.seqs[r].as_mut().expect("a running slot holds a sequence");
            s.computed += m;
            s.generated += m;
            debug_assert!(u64::from(s.computed) <= s.blocks.len() as u64 * u64::from(bs));
            debug_assert!(s.registered == s.hashes.len(), "a decoding sequence has its prompt blocks cached");
        }
        self.run_first = first;
        self.run_order = order;
        m as usize
    }
}

fn preempt(s: &mut Seq, kv: &mut KvCache) {
    kv.release(&s.blocks);
    s.blocks.clear();
    s.registered = 0;
    s.computed = 0;
}
