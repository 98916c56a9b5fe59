//! `ServeCore`: the server's engine as a sans-IO state machine, continuous batching in time.
//!
//! Contract (quinn-proto's shape): the driver owns the clock. It hands requests in with
//! [`ServeCore::submit`] and [`ServeCore::cancel`], asks [`ServeCore::poll_timeout`] when the core
//! next wants to be woken, calls [`ServeCore::handle_timeout`] at (or after) that time, and drains
//! [`ServeCore::poll_event`]. The core never reads a clock and does no IO, so a test drives it in
//! virtual time, and the server drives it on the monotonic clock.
//!
//! One [`Stepper`] (vLLM v1's scheduler, the same one the simulated engine replays) serves every
//! request: requests that arrive while a step runs join the waiting queue and are admitted
//! between steps, as vLLM's engine loop does. A step is scheduled when it starts, priced by the
//! [`CostModel`], and its tokens are delivered when it ends. The per-call costs of the simulated
//! engine's `generate` map onto the busy periods of the server: `fixed_overhead` when the engine
//! starts from idle, `request_overhead` for each request before the step that first sees it,
//! `finish_overhead + finish_per_request × n` after the last step of a busy period (tokens are not
//! delayed; the next busy period starts later). So a group of requests that arrives at an idle
//! engine and finishes before the next one arrives takes exactly what one `generate` call of it
//! takes in `batchlab run`.
//!
//! A profile calibrated from a URL has a frontend: `frontend_per_request` of its one worker's
//! time (vLLM's frontend is one event loop: parsing and tokenizing a request, handing it to the
//! engine core), which serves requests in arrival order, one at a time, and then
//! `frontend_overhead` in which requests overlap (the hop to the engine core). A request that
//! arrives at `t` reaches the waiting queue at `max(t, worker free) + frontend_per_request +
//! frontend_overhead`, so a wave of k simultaneous requests reaches it spread over k services.
//! Such a request is held in `arriving`, in arrival order, and joins the scheduler at the first
//! step that starts at or after it is due.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use crate::engine::sim::CostModel;
use crate::engine::sim::encoder::{EncoderCache, EncoderInput};
use crate::engine::sim::scheduler::{self, PrefixSource, ScheduleError, SeqId, SeqSpec, StepOutcome, Stepper};
use crate::engine::{FinishReason, ResolvedEngineConfig};
use crate::time::Timestamp;

use super::metrics::ServeMetrics;

/// A request's id, chosen by the core.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// One sequence to generate: its prompt's token ids and how many tokens it produces.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSequence {
    /// Prompt token ids (at least one; the prefix cache hashes them).
    pub prompt_ids: Vec<u32>,
    /// Tokens it generates (at least 1, at most `max_tokens`).
    pub output_tokens: u32,
    /// The request's `max_tokens`: reaching it finishes with `length`, else `stop`.
    pub max_tokens: u32,
    /// Its images, in order: their identities (the encoder cache's keys) and tokens.
    pub images: Vec<EncoderInput>,
}

/// Why [`ServeCore::submit`] refused a request (it then holds nothing of it).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The waiting queue is full (`max_waiting`): 503.
    #[error("the server is overloaded: {waiting} requests are waiting (max_waiting = {max_waiting})")]
    Overloaded {
        /// Requests waiting now.
        waiting: usize,
        /// The bound.
        max_waiting: usize,
    },
    /// More sequences in one request than may ever wait (`max_waiting`): retrying cannot help,
    /// so a 400, not a 503.
    #[error(
        "the request has {prompts} prompts but at most {max_waiting} may wait for admission (max_waiting): \
         send at most {max_waiting} at a time"
    )]
    TooManyPrompts {
        /// Sequences in the request.
        prompts: usize,
        /// The bound.
        max_waiting: usize,
    },
    /// A prompt the scheduler could never hold, whatever its output (longer than the KV cache,
    /// or than a step's budget without chunked prefill): 400 about the prompt.
    #[error("prompt {index} has {tokens} tokens, more than the server can ever hold: {cause}")]
    PromptTooLong {
        /// Its position in the request.
        index: usize,
        /// Its tokens.
        tokens: u32,
        /// The limit it breaks.
        cause: ScheduleError,
    },
    /// A prompt that fits, but not with its output (too long for the KV cache or the budget):
    /// 400 about `max_tokens`.
    #[error("{0}")]
    Unschedulable(ScheduleError),
}

/// What the core tells its driver.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A sequence produced a token at `at` (the end of the step that computed it).
    Token {
        /// The sequence.
        id: RequestId,
        /// The token's position in the output, from 0.
        index: u32,
        /// Set on the last token: why it finished.
        finish: Option<FinishReason>,
        /// When the step ended.
        at: Timestamp,
    },
}

struct Live {
    seq: SeqId,
    arrived: Timestamp,
    prompt_tokens: u32,
    max_tokens: u32,
    generated: u32,
    last_token: Option<Timestamp>,
    preemptions: u32,
    /// An embedding: its one "token" is the end of its prefill, not a generated token.
    pooling: bool,
}

/// A request in the frontend: it joins the scheduler at `due`.
struct Arriving {
    due: Timestamp,
    /// Its sequences, with the ids the core already handed out.
    sequences: Vec<(RequestId, SeqSpec, u32)>,
    arrived: Timestamp,
    /// An embeddings request's inputs ([`ServeCore::submit_pooling`]).
    pooling: bool,
}

/// A step that has been scheduled and has not ended yet.
struct InFlight {
    ends: Timestamp,
    /// Who samples a token at its end, and whether it finishes with it.
    tokens: Vec<(RequestId, bool)>,
}

/// The server's engine. See the module docs.
pub struct ServeCore {
    cost: CostModel,
    stepper: Stepper,
    max_waiting: usize,
    scheduler: ResolvedEngineConfig,
    /// The request each occupied scheduler slot belongs to.
    slots: Vec<Option<RequestId>>,
    live: HashMap<RequestId, Live>,
    in_flight: Option<InFlight>,
    /// When the engine can start its next busy period (after the last one's finish costs).
    idle_from: Timestamp,
    /// When the current busy period's next step may start; `None` while idle.
    next_step_at: Option<Timestamp>,
    /// Requests added since the last step started (each pays `request_overhead`).
    joined: usize,
    /// Requests finished in the current busy period (each pays `finish_per_request` at its end).
    finished_in_period: usize,
    /// Whether a step of the current busy period has started (`fixed_overhead` is paid once).
    period_started: bool,
    next_id: u64,
    events: VecDeque<Event>,
    metrics: ServeMetrics,
    /// The pictures it has encoded: `vllm:mm_cache_*`.
    encoder: EncoderCache,
    /// Requests in the frontend (`frontend_per_request`, `frontend_overhead`), oldest first.
    arriving: VecDeque<Arriving>,
    /// When the frontend's worker has served every request that arrived so far.
    frontend_free: Timestamp,
}

impl ServeCore {
    /// An idle engine: `cost` prices each step, `scheduler` sets its limits, at most `max_waiting`
    /// requests wait. `metrics` is updated as requests come and go.
    pub fn new(cost: CostModel, scheduler: ResolvedEngineConfig, max_waiting: usize, metrics: ServeMetrics) -> Self {
        ServeCore {
            cost,
            stepper: Stepper::with_config(scheduler),
            max_waiting,
            scheduler,
            slots: Vec::new(),
            live: HashMap::new(),
            in_flight: None,
            idle_from: Timestamp::ZERO,
            next_step_at: None,
            joined: 0,
            finished_in_period: 0,
            period_started: false,
            next_id: 0,
            events: VecDeque::new(),
            metrics,
            encoder: EncoderCache::default(),
            arriving: VecDeque::new(),
            frontend_free: Timestamp::ZERO,
        }
    }

    /// Queues `sequences` (one HTTP request's choices) at `now`, all or none: their ids in order.
    pub fn submit(&mut self, now: Timestamp, sequences: Vec<NewSequence>) -> Result<Vec<RequestId>, SubmitError> {
        if sequences.len() > self.max_waiting {
            return Err(SubmitError::TooManyPrompts { prompts: sequences.len(), max_waiting: self.max_waiting });
        }
        let waiting = self.stepper.waiting() + self.arriving.iter().map(|a| a.sequences.len()).sum::<usize>();
        if waiting + sequences.len() > self.max_waiting {
            return Err(SubmitError::Overloaded { waiting, max_waiting: self.max_waiting });
        }
        let mut specs: Vec<SeqSpec> = sequences
            .iter()
            .map(|s| SeqSpec {
                prompt_len: u32::try_from(s.prompt_ids.len()).unwrap_or(u32::MAX).max(1),
                output_len: s.output_tokens,
                prefix: PrefixSource::Tokens(s.prompt_ids.clone()),
                encoder_tokens: 0,
            })
            .collect();
        // Checked whole before anything is added: the prompt alone first (with one output
        // token), so a 400 blames the prompt only when no `max_tokens` could make it fit.
        for (index, spec) in specs.iter().enumerate() {
            let prompt_only = SeqSpec {
                prompt_len: spec.prompt_len,
                output_len: 1,
                prefix: PrefixSource::Known(0),
                encoder_tokens: 0,
            };
            if let Err(cause) = scheduler::check(&self.scheduler, index, &prompt_only) {
                return Err(SubmitError::PromptTooLong { index, tokens: spec.prompt_len, cause });
            }
            scheduler::check(&self.scheduler, index, spec).map_err(SubmitError::Unschedulable)?;
            if spec.output_len == 0 {
                return Err(SubmitError::Unschedulable(ScheduleError::NoOutput));
            }
        }
        // Every sequence will be added: its images meet the encoder cache now, in order, and its
        // misses are encoded in the step that first schedules it.
        for (spec, s) in specs.iter_mut().zip(&sequences) {
            let work = self.encoder.encode(s.images.iter().copied());
            spec.encoder_tokens = work.tokens;
            self.metrics.mm_cache_queries.inc_by(s.images.len() as u64);
            self.metrics.mm_cache_hits.inc_by(u64::from(work.hits));
        }
        self.metrics.prompt_tokens.inc_by(sequences.iter().map(|s| s.prompt_ids.len().max(1) as u64).sum());
        if !self.cost.frontend_overhead.is_zero() || !self.cost.frontend_per_request.is_zero() {
            // The worker serves this request after those before it, then the hop.
            let busy = now < self.frontend_free;
            let burst_due = self.frontend_free.saturating_add(self.cost.frontend_overhead);
            self.frontend_free = now.max(self.frontend_free).saturating_add(self.cost.frontend_per_request);
            let due = self.frontend_free.saturating_add(self.cost.frontend_overhead);
            if self.cost.frontend_hands_off_bursts && busy {
                // The burst it joins goes on with it: the requests still waiting for the worker's
                // hand-off (all due at the burst's end, the newest last) are due with it.
                for a in self.arriving.iter_mut().rev().take_while(|a| a.due == burst_due) {
                    a.due = due;
                }
            }
            let sequences: Vec<(RequestId, SeqSpec, u32)> = specs
                .into_iter()
                .zip(&sequences)
                .map(|(spec, s)| {
                    let id = RequestId(self.next_id);
                    self.next_id += 1;
                    (id, spec, s.max_tokens)
                })
                .collect();
            let ids = sequences.iter().map(|(id, _, _)| *id).collect();
            self.arriving.push_back(Arriving { due, sequences, arrived: now, pooling: false });
            if self.next_step_at.is_none() && self.in_flight.is_none() {
                self.next_step_at = Some(due.max(self.idle_from));
            }
            self.update_gauges();
            return Ok(ids);
        }
        let mut ids = Vec::with_capacity(specs.len());
        for (spec, s) in specs.into_iter().zip(&sequences) {
            let prompt_tokens = spec.prompt_len;
            match self.stepper.add(spec) {
                Ok(seq) => {
                    let id = RequestId(self.next_id);
                    self.next_id += 1;
                    if self.slots.len() <= seq.0 {
                        self.slots.resize(seq.0 + 1, None);
                    }
                    self.slots[seq.0] = Some(id);
                    self.live.insert(
                        id,
                        Live {
                            seq,
                            arrived: now,
                            prompt_tokens,
                            max_tokens: s.max_tokens,
                            generated: 0,
                            last_token: None,
                            preemptions: 0,
                            pooling: false,
                        },
                    );
                    ids.push(id);
                }
                Err(e) => {
                    for id in ids {
                        self.remove(id);
                    }
                    return Err(SubmitError::Unschedulable(e));
                }
            }
        }
        self.joined += ids.len();
        if self.next_step_at.is_none() && self.in_flight.is_none() {
            // Idle: the busy period starts now (or when the last one's finish costs are paid).
            self.next_step_at = Some(now.max(self.idle_from));
        }
        self.update_gauges();
        Ok(ids)
    }

    /// Queues one embeddings request's inputs (token ids) at `now`, all or none: prefill only. Each
    /// is a sequence of one step's worth of output, so it is priced by the steps that prefill it
    /// and no decode step; its [`Event::Token`] (index 0, finish `stop`) is the end of its prefill,
    /// when its embedding is ready. It counts no generated token, TTFT or ITL in `/metrics`.
    pub fn submit_pooling(&mut self, now: Timestamp, inputs: Vec<Vec<u32>>) -> Result<Vec<RequestId>, SubmitError> {
        let sequences = inputs
            .into_iter()
            .map(|prompt_ids| NewSequence { prompt_ids, output_tokens: 1, max_tokens: 1, images: Vec::new() })
            .collect();
        let ids = self.submit(now, sequences)?;
        if let Some(a) = self.arriving.back_mut()
            && a.sequences.first().map(|(id, _, _)| *id) == ids.first().copied()
        {
            a.pooling = true;
        }
        for id in &ids {
            if let Some(live) = self.live.get_mut(id) {
                live.pooling = true;
            }
        }
        Ok(ids)
    }

    /// Drops a request wherever it is (its client went away): its sequence and KV blocks are
    /// freed at once, and it produces no more events. Unknown ids are ignored.
    pub fn cancel(&mut self, _now: Timestamp, id: RequestId) {
        if self.remove(id) {
            self.metrics.finished(&FinishReason::Abort);
            self.update_gauges();
        }
    }

    fn remove(&mut self, id: RequestId) -> bool {
        for a in &mut self.arriving {
            if let Some(at) = a.sequences.iter().position(|(i, _, _)| *i == id) {
                a.sequences.remove(at);
                return true;
            }
        }
        let Some(live) = self.live.remove(&id) else { return false };
        if self.slot(live.seq) == Some(id) {
            self.stepper.abort(live.seq);
            self.slots[live.seq.0] = None;
        }
        true
    }

    /// Requests admitted and not finished, and requests waiting.
    pub fn occupancy(&self) -> (usize, usize) {
        (self.stepper.running(), self.stepper.waiting())
    }

    /// Requests the core holds (waiting, running, or with tokens still to be delivered).
    pub fn live_requests(&self) -> usize {
        self.live.len() + self.arriving.iter().map(|a| a.sequences.len()).sum::<usize>()
    }

    /// When the core next wants [`ServeCore::handle_timeout`]: the end of the running step, or
    /// the start of the next one; `None` while idle.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match &self.in_flight {
            Some(step) => Some(step.ends),
            None => self.next_step_at,
        }
    }

    /// Ends every step due by `now` (delivering its tokens) and starts the next ones.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        loop {
            if let Some(step) = &self.in_flight {
                if step.ends > now {
                    return;
                }
                let step = self.in_flight.take().expect("checked above");
                self.deliver(step);
                continue;
            }
            let Some(start) = self.next_step_at else { return };
            if start > now {
                return;
            }
            self.admit_arrivals(start);
            self.start_step(start);
        }
    }

    /// The next event, in the order things happened.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The requests of the frontend due by `at` join the waiting queue, in arrival order.
    fn admit_arrivals(&mut self, at: Timestamp) {
        while self.arriving.front().is_some_and(|a| a.due <= at) {
            let Some(a) = self.arriving.pop_front() else { break };
            for (id, spec, max_tokens) in a.sequences {
                let prompt_tokens = spec.prompt_len;
                // Checked whole when submitted; a refusal now still gets its one outcome.
                let Ok(seq) = self.stepper.add(spec) else {
                    self.metrics.finished(&FinishReason::Abort);
                    self.events.push_back(Event::Token { id, index: 0, finish: Some(FinishReason::Abort), at });
                    continue;
                };
                if self.slots.len() <= seq.0 {
                    self.slots.resize(seq.0 + 1, None);
                }
                self.slots[seq.0] = Some(id);
                let live = Live {
                    seq,
                    arrived: a.arrived,
                    prompt_tokens,
                    max_tokens,
                    generated: 0,
                    last_token: None,
                    preemptions: 0,
                    pooling: a.pooling,
                };
                self.live.insert(id, live);
                self.joined += 1;
            }
        }
    }

    fn start_step(&mut self, start: Timestamp) {
        let from_idle = !self.period_started;
        let Some(outcome) = self.stepper.step() else {
            self.end_period(start);
            return;
        };
        let mut overhead = self.cost.request_overhead.as_nanos() as f64 * self.joined as f64;
        if from_idle {
            overhead += self.cost.fixed_overhead.as_nanos() as f64;
        }
        self.joined = 0;
        self.period_started = true;
        let ns = overhead + self.cost.step_ns(&outcome.step.load);
        let ends = start.saturating_add(Duration::from_nanos(ns.round().max(0.0) as u64));
        let tokens = self.account(&outcome);
        self.metrics
            .iteration_tokens
            .observe((outcome.step.load.prefill_tokens + outcome.step.load.decode_seqs) as f64);
        self.in_flight = Some(InFlight { ends, tokens });
        self.next_step_at = None;
        self.update_gauges();
    }

    /// What a step's outcome means for requests: preemptions, prefix-cache hits, who samples.
    fn account(&mut self, outcome: &StepOutcome) -> Vec<(RequestId, bool)> {
        for &(seq, cached) in &outcome.admitted {
            if let Some(id) = self.slot(seq) {
                if let Some(live) = self.live.get(&id) {
                    self.metrics.prefix_cache_queries.inc_by(u64::from(live.prompt_tokens));
                    self.metrics.prefix_cache_hits.inc_by(u64::from(cached));
                }
            }
        }
        for &seq in &outcome.preempted {
            self.metrics.preemptions.inc();
            if let Some(live) = self.slot(seq).and_then(|id| self.live.get_mut(&id)) {
                live.preemptions += 1;
            }
        }
        let finished: Vec<SeqId> = outcome.finished.clone();
        let tokens =
            outcome.sampled.iter().filter_map(|&seq| self.slot(seq).map(|id| (id, finished.contains(&seq)))).collect();
        for seq in finished {
            if let Some(slot) = self.slots.get_mut(seq.0) {
                *slot = None;
            }
        }
        tokens
    }

    fn slot(&self, seq: SeqId) -> Option<RequestId> {
        self.slots.get(seq.0).copied().flatten()
    }

    fn deliver(&mut self, step: InFlight) {
        let at = step.ends;
        for (id, finishes) in step.tokens {
            let Some(live) = self.live.get_mut(&id) else { continue };
            let index = live.generated;
            live.generated += 1;
            match (live.pooling, live.last_token) {
                (true, _) => {}
                (false, None) => self.metrics.ttft.observe(secs(at, live.arrived)),
                (false, Some(last)) => self.metrics.itl.observe(secs(at, last)),
            }
            live.last_token = Some(at);
            if !live.pooling {
                self.metrics.generation_tokens.inc();
            }
            let reason = if live.generated >= live.max_tokens && !live.pooling {
                FinishReason::Length
            } else {
                FinishReason::Stop
            };
            let finish = finishes.then_some(reason);
            if let Some(reason) = &finish {
                self.metrics.e2e.observe(secs(at, live.arrived));
                self.metrics.finished(reason);
                self.metrics.request_preemptions.observe(f64::from(live.preemptions));
                self.live.remove(&id);
                self.finished_in_period += 1;
            }
            self.events.push_back(Event::Token { id, index, finish, at });
        }
        if self.stepper.is_idle() {
            self.end_period(at);
        } else {
            self.next_step_at = Some(at);
        }
        self.update_gauges();
    }

    /// The busy period ended at `at`: pay its finish costs before the next one can start.
    fn end_period(&mut self, at: Timestamp) {
        let ns = if self.period_started { self.cost.finish_ns(self.finished_in_period) } else { 0.0 };
        self.idle_from = at.saturating_add(Duration::from_nanos(ns.round().max(0.0) as u64));
        self.finished_in_period = 0;
        self.period_started = false;
        self.next_step_at = None;
        if !self.stepper.is_idle() {
            // Everything that was running was cancelled, but some arrived meanwhile.
            self.next_step_at = Some(self.idle_from);
        } else if let Some(a) = self.arriving.front() {
            // Requests still in the frontend start the next busy period when they are due.
            self.next_step_at = Some(a.due.max(self.idle_from));
        }
    }

    fn update_gauges(&self) {
        self.metrics.running.set(self.stepper.running() as i64);
        self.metrics.waiting.set(self.stepper.waiting() as i64);
        let usage = self.stepper.kv_blocks_used() as f64 / f64::from(self.scheduler.num_kv_blocks.max(1));
        self.metrics.kv_cache_usage.set(usage);
    }
}

fn secs(later: Timestamp, earlier: Timestamp) -> f64 {
    later.saturating_since(earlier).as_secs_f64()
}
