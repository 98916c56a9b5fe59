//! One benchmark (one profile step) as a sans-IO state machine, shared by every driver.
//!
//! A step decides, at each `now`, whether to submit (and in which phase: warmup, measure,
//! cooldown), how long to wait, or that it is done. It learns about submissions, rejections,
//! outcomes and batches from the driver, maps each completion to metrics and aggregates only the
//! measured phase. It does no IO: `requests.jsonl` rows come out of [`StepRun::poll_record`] and
//! [`StepRun::finish`], display updates out of [`StepRun::status`], and the run loop
//! ([`super::driver`]) writes and draws them. Virtual and real time run the very same logic, so a
//! scenario means the same thing on a simulated hour and on a real vLLM engine.
//!
//! **Intended arrival.** Each request's dispatch delay and client lag (`metrics::client`) start
//! from when the load profile meant it to arrive, which the step decides at the submit:
//! - a rate or trace profile: the arrival's time in the schedule; an arrival that
//!   `max_concurrency` held back (the scheduler counts it in `delayed_by_cap`) was meant to go
//!   when a slot freed, so the latest outcome before its submit, when later;
//! - a closed loop (synchronous, concurrent, throughput): the latest of the step's start, the
//!   latest outcome before the submit (it freed the slot) and the time the step last waited for
//!   (a ramp-up opening a stream, a phase's end), never after the submit.
//!
//! Taking the latest candidate never overstates the client's lag: when several outcomes came in
//! before the loop reacted, the request is dated from the last of them.
//!
//! This file holds the step's state ([`StepRun`]), its construction and its accessors; its
//! behaviour is split by job: `admission` (what to do next), `events` (what the driver reports),
//! `stop`, `finish`, with `phases` (the per-phase counts), `display` (the status line) and
//! `sessions` (turns chained into sessions, `[workload.sessions]`).

mod admission;
mod display;
mod events;
mod finish;
mod phases;
mod sessions;
mod shard;
mod stop;

use std::collections::VecDeque;

pub use self::finish::Finished;
use self::phases::{PerPhase, PhaseCounts};
pub use self::stop::StopReason;
use crate::batcher::core::IdMap;
use crate::engine::image::ImageSummary;
use crate::engine::{ClockDomain, RequestId};
use crate::loadgen::{Lateness, LoadError, PrefixDesign, Scheduler, Step};
use crate::metrics::aggregate::BenchmarkAggregator;
use crate::metrics::media::MediaTally;
use crate::metrics::prompt_target::PromptTargetTally;
use crate::metrics::result::BatchesSeen;
use crate::report::{Phase, RequestRecord};
use crate::scenario::plan::{PhaseLimit, StopPlan};
use crate::time::{Timestamp, WallAnchor};

/// What the driver should do now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Submit one request in this phase, then report it with `on_submitted` or `on_rejected`.
    Submit(Phase),
    /// Wait for an outcome, or until this time if given.
    Wait(Option<Timestamp>),
    /// The next arrival is another shard's (`--shard`) and was passed over: the workload's next
    /// request is not sent (the driver moves on to the one after it); poll again.
    Pass,
    /// Nothing is in flight and nothing more will be submitted.
    Done,
}

struct Flight {
    phase: Phase,
    submitted: Timestamp,
    /// When the load profile meant it to arrive (module docs).
    intended: Timestamp,
    /// Its images, if it has any ([`StepRun::on_images`]).
    images: Option<ImageSummary>,
    /// The prompt length the workload sized it to, if it did ([`StepRun::on_prompt_target`]).
    prompt_target: Option<u32>,
    /// Its place in its session, when the step runs sessions.
    turn: Option<sessions::TurnMark>,
    /// Its index in the workload and in the single-process run (its record's `id`): the
    /// batcher's id, except in a shard (`--shard`), where the others' arrivals were passed over.
    index: RequestId,
}

/// One benchmark as a sans-IO state machine: it says when to submit ([`poll`](Self::poll)), takes
/// submissions and outcomes with their times, and returns records and a [`BenchmarkResult`]; the driver
/// does the IO.
pub struct StepRun {
    step: Step,
    scheduler: Scheduler,
    stop: StopPlan,
    warmup: Option<PhaseLimit>,
    cooldown: Option<PhaseLimit>,
    started_at: Timestamp,
    warmup_done: bool,
    measure_start: Option<Timestamp>,
    measure_end: Option<Timestamp>,
    stop_reason: Option<StopReason>,
    /// Each phase's counts: submitted, in flight (warmup: measurement waits for them), finished,
    /// failed, output tokens and the last end (measured).
    phases: PerPhase<PhaseCounts>,
    /// Requests of any phase that failed (not cancelled).
    errors: u64,
    /// Every batch of the benchmark, warmup and drain included (`Batching::whole_run`), and their
    /// total size, for the display.
    batches_seen: BatchesSeen,
    batched_requests: u64,
    /// 0-based position in the run, and the run's step count when known.
    index: usize,
    /// Which run of this benchmark (`--repeat`), 0-based, of how many.
    repeat: u32,
    repeats: u32,
    count: Option<usize>,
    /// `requests.jsonl` rows not yet taken by the driver; `None` when not recording.
    records: Option<VecDeque<RequestRecord>>,
    /// What the last admission decision was.
    admitting: Option<Phase>,
    /// The scheduler has no arrivals left: nothing more is admitted in any phase.
    schedule_done: bool,
    /// The workload's shared prefixes and the engine's KV block size, for the designed hit rate.
    prefix_design: Option<(PrefixDesign, u32)>,
    /// The measured requests' images.
    media: MediaTally,
    /// The measured requests' prompt targets against the engine's counts.
    prompt_targets: PromptTargetTally,
    in_flight: IdMap<Flight>,
    /// When the latest outcome (of any phase) arrived: it freed a slot.
    last_outcome_at: Option<Timestamp>,
    /// The time the step's last `Wait` asked to be woken at, if any.
    last_wait_until: Option<Timestamp>,
    aggregator: BenchmarkAggregator,
    domain: ClockDomain,
    anchor: Option<WallAnchor>,
    /// The step's sessions (`[workload.sessions]`); `None` sends each request once.
    sessions: Option<sessions::StepSessions>,
    /// The shard this step sends (`--shard`), and the index of its next arrival in the
    /// single-process run; `None` sends every arrival.
    shard: Option<shard::StepShard>,
}

impl StepRun {
    /// A step starting at `now`: its scheduler, stop rules and warm-up/cool-down limits; `domain` and
    /// `anchor` say how to map the engine's timestamps. Fails on an invalid rate.
    pub fn new(
        step: Step,
        stop: StopPlan,
        warmup: Option<PhaseLimit>,
        cooldown: Option<PhaseLimit>,
        now: Timestamp,
        domain: ClockDomain,
        anchor: Option<WallAnchor>,
    ) -> Result<Self, LoadError> {
        let scheduler = Scheduler::new(step.clone(), now)?;
        let aggregator = BenchmarkAggregator::new(step.name.clone());
        let first_phase = if warmup.is_some() { Phase::Warmup } else { Phase::Measure };
        Ok(StepRun {
            step,
            scheduler,
            stop,
            warmup,
            cooldown,
            started_at: now,
            warmup_done: false,
            measure_start: None,
            measure_end: None,
            stop_reason: None,
            phases: PerPhase::default(),
            errors: 0,
            batches_seen: BatchesSeen::default(),
            batched_requests: 0,
            index: 0,
            repeat: 0,
            repeats: 1,
            count: None,
            records: None,
            admitting: Some(first_phase),
            schedule_done: false,
            prefix_design: None,
            media: MediaTally::default(),
            prompt_targets: PromptTargetTally::default(),
            in_flight: IdMap::default(),
            last_outcome_at: None,
            last_wait_until: None,
            aggregator,
            domain,
            anchor,
            sessions: None,
            shard: None,
        })
    }

    /// A step with the plan's stop conditions, warmup and cooldown.
    pub fn for_plan(
        step: Step,
        plan: &crate::scenario::plan::Plan,
        now: Timestamp,
        domain: ClockDomain,
        anchor: Option<WallAnchor>,
    ) -> Result<Self, LoadError> {
        let mut run = Self::new(
            step,
            plan.stop().clone(),
            plan.warmup().cloned(),
            plan.cooldown().cloned(),
            now,
            domain,
            anchor,
        )?;
        run.aggregator.set_slo(plan.slo());
        Ok(run)
    }

    /// Marks this as run `repeat` (0-based) of `repeats` of its benchmark: its result and records
    /// carry it, and the display names it (`throughput #2/3`) when there are several.
    pub fn with_repeat(mut self, repeat: u32, repeats: u32) -> Self {
        self.repeat = repeat;
        self.repeats = repeats;
        self
    }

    /// Keeps a `requests.jsonl` row per request, for [`poll_record`](Self::poll_record) and
    /// [`finish`](Self::finish).
    pub fn with_records(mut self) -> Self {
        self.records = Some(VecDeque::new());
        self
    }

    /// Counts, for every measured completion, the prompt tokens `design` meant a prefix cache of
    /// `block_size`-token blocks to serve (the report's `prefix_cache_designed_hit_rate`).
    pub fn with_prefix_design(mut self, design: PrefixDesign, block_size: u32) -> Self {
        self.prefix_design = Some((design, block_size));
        self
    }

    /// Where this benchmark stands in the run, for the display: 0-based `index` of `count`.
    pub fn with_position(mut self, index: usize, count: Option<usize>) -> Self {
        self.index = index;
        self.count = count;
        self
    }

    /// The next `requests.jsonl` row, oldest first. Call after every `on_outcome`.
    #[must_use]
    pub fn poll_record(&mut self) -> Option<RequestRecord> {
        self.records.as_mut()?.pop_front()
    }

    fn record(&mut self, make: impl FnOnce(&str) -> RequestRecord) {
        if let Some(queue) = &mut self.records {
            let mut record = make(&self.step.name);
            record.repeat = self.repeat;
            queue.push_back(record);
        }
    }

    /// The step's name, e.g. `constant@10.00/s`.
    pub fn name(&self) -> &str {
        &self.step.name
    }

    /// Requests submitted and not yet finished, of any phase.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Requests in flight, for cancelling them on interruption.
    pub fn in_flight_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.in_flight.keys().copied()
    }

    /// Measured requests submitted so far.
    pub fn measured_submitted(&self) -> u64 {
        self.phases[Phase::Measure].submitted
    }

    /// Measured requests finished (completed or failed) so far.
    pub fn measured_finished(&self) -> u64 {
        self.phases[Phase::Measure].finished
    }

    /// The planned number of measured requests, when bounded by count.
    pub fn measured_target(&self) -> Option<u64> {
        self.stop.max_requests()
    }

    /// The phase new requests are admitted in; `None` once admission is over (draining).
    pub fn phase_now(&self) -> Option<Phase> {
        self.admitting
    }

    /// Why measured admission stopped; `None` while it goes on.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop_reason
    }

    /// How late arrivals were submitted relative to the schedule.
    pub fn lateness(&self) -> Lateness {
        self.scheduler.lateness()
    }
}

#[cfg(test)]
mod tests;
