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

mod display;
mod phases;
mod stop;

use std::collections::VecDeque;

use self::phases::{PerPhase, PhaseCounts};
pub use self::stop::StopReason;
use crate::batcher::core::IdMap;
use crate::batcher::{BatchRun, Outcome, RequestError};
use crate::engine::image::ImageSummary;
use crate::engine::{ClockDomain, RequestId};
use crate::loadgen::{Lateness, LoadError, Poll, PrefixDesign, Scheduler, Step};
use crate::metrics::aggregate::BenchmarkAggregator;
use crate::metrics::client::ClientTiming;
use crate::metrics::map_request;
use crate::metrics::media::MediaTally;
use crate::metrics::prompt_target::PromptTargetTally;
use crate::metrics::result::BatchesSeen;
use crate::report::{BenchmarkResult, Phase, RequestOutcome, RequestRecord};
use crate::scenario::plan::{PhaseLimit, StopPlan};
use crate::time::{Timestamp, WallAnchor};

/// What the driver should do now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Submit one request in this phase, then report it with `on_submitted` or `on_rejected`.
    Submit(Phase),
    /// Wait for an outcome, or until this time if given.
    Wait(Option<Timestamp>),
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

    /// The phase a request submitted now would belong to (advancing phases), and the next time
    /// the phase could change by the clock alone.
    fn admission(&mut self, now: Timestamp) -> (Option<Phase>, Option<Timestamp>) {
        let decision = self.decide_admission(now);
        // Draining the warmup still shows as warmup.
        self.admitting = if self.warmup_done { decision.0 } else { Some(Phase::Warmup) };
        decision
    }

    fn decide_admission(&mut self, now: Timestamp) -> (Option<Phase>, Option<Timestamp>) {
        if self.schedule_done || matches!(self.stop_reason, Some(StopReason::Interrupted | StopReason::EngineUnusable))
        {
            return (None, None);
        }
        if !self.warmup_done {
            match self.warmup {
                Some(PhaseLimit::Requests(n)) if self.phases[Phase::Warmup].submitted < n => {
                    return (Some(Phase::Warmup), None);
                }
                Some(PhaseLimit::Duration(d)) => {
                    let end = self.started_at.saturating_add(d);
                    if now < end {
                        return (Some(Phase::Warmup), Some(end));
                    }
                }
                _ => {}
            }
            // Warmup requests are all out: let them finish, so that measurement starts on a warm,
            // idle engine and no warmup generate runs inside the measured window.
            if self.phases[Phase::Warmup].in_flight > 0 {
                return (None, None);
            }
            self.warmup_done = true;
            if self.phases[Phase::Warmup].submitted > 0 {
                // The load profile starts over with the measurement (a rate's first arrival now; a
                // trace goes on with its next line).
                if let Ok(fresh) = self.scheduler.restarted(now) {
                    self.scheduler = fresh;
                }
            }
        }
        if self.measure_end.is_none() {
            let start = *self.measure_start.get_or_insert_with(|| {
                self.aggregator.start(now);
                now
            });
            let deadline = self.stop.max_duration().map(|d| start.saturating_add(d));
            if self.stop.max_requests().is_some_and(|m| self.phases[Phase::Measure].submitted >= m) {
                self.end_measure(now, StopReason::MaxRequests);
            } else if deadline.is_some_and(|d| now >= d) {
                self.end_measure(deadline.unwrap_or(now), StopReason::MaxDuration);
            } else {
                return (Some(Phase::Measure), deadline);
            }
        }
        let end = self.measure_end.unwrap_or(now);
        match self.cooldown {
            Some(PhaseLimit::Requests(n)) if self.phases[Phase::Cooldown].submitted < n => {
                (Some(Phase::Cooldown), None)
            }
            Some(PhaseLimit::Duration(d)) if now < end.saturating_add(d) => {
                (Some(Phase::Cooldown), Some(end.saturating_add(d)))
            }
            _ => (None, None),
        }
    }

    /// What the driver should do at `now`: submit one request, wait, or finish the step.
    pub fn poll(&mut self, now: Timestamp) -> Action {
        let action = self.decide(now);
        if let Action::Wait(until) = action {
            self.last_wait_until = until;
        }
        action
    }

    fn decide(&mut self, now: Timestamp) -> Action {
        let (phase, phase_deadline) = self.admission(now);
        let Some(phase) = phase else {
            return if self.in_flight.is_empty() { Action::Done } else { Action::Wait(None) };
        };
        match self.scheduler.poll(now, self.in_flight.len()) {
            Poll::SubmitNow => Action::Submit(phase),
            Poll::At(t) => Action::Wait(Some(phase_deadline.map_or(t, |d| d.min(t)))),
            Poll::WaitForCompletion => Action::Wait(phase_deadline),
            Poll::CompletionOr(t) => Action::Wait(Some(phase_deadline.map_or(t, |d| d.min(t)))),
            Poll::Exhausted => {
                // Nothing more to offer in any phase; what is in flight finishes.
                self.warmup_done = true;
                self.schedule_done = true;
                self.end_measure(now, StopReason::ScheduleEnd);
                self.admitting = None;
                if self.in_flight.is_empty() { Action::Done } else { Action::Wait(None) }
            }
        }
    }

    /// The request asked for by [`Action::Submit`] was accepted as `id` at `now`.
    pub fn on_submitted(&mut self, id: RequestId, phase: Phase, now: Timestamp) {
        let due = self.scheduler.next_arrival();
        let held_before = self.scheduler.lateness().delayed_by_cap;
        self.scheduler.on_submitted(now);
        let held_by_cap = self.scheduler.lateness().delayed_by_cap > held_before;
        let intended = self.intended_arrival(due, held_by_cap, now);
        self.in_flight.insert(id, Flight { phase, submitted: now, intended, images: None, prompt_target: None });
        match phase {
            Phase::Warmup => {
                self.phases[Phase::Warmup].submitted += 1;
                self.phases[Phase::Warmup].in_flight += 1;
            }
            Phase::Measure => {
                self.phases[Phase::Measure].submitted += 1;
                self.aggregator.record_submitted();
                if self.stop.max_requests().is_some_and(|m| self.phases[Phase::Measure].submitted >= m) {
                    self.end_measure(now, StopReason::MaxRequests);
                }
            }
            Phase::Cooldown => self.phases[Phase::Cooldown].submitted += 1,
        }
    }

    /// The images of request `id`, just submitted: its record and the benchmark's media result
    /// count them.
    pub fn on_images(&mut self, id: RequestId, images: ImageSummary) {
        if let Some(flight) = self.in_flight.get_mut(&id) {
            flight.images = Some(images);
        }
    }

    /// The prompt length request `id`, just submitted, was sized to
    /// ([`crate::loadgen::Workload::prompt_target`]): its record and the benchmark's
    /// `prompt_target` result set it against the engine's count.
    pub fn on_prompt_target(&mut self, id: RequestId, target: u32) {
        if let Some(flight) = self.in_flight.get_mut(&id) {
            flight.prompt_target = Some(target);
        }
    }

    /// When a request submitted at `now` was meant to arrive (module docs): `due` is its time in
    /// the schedule (`None` for a closed loop), `held_by_cap` whether `max_concurrency` held it.
    fn intended_arrival(&self, due: Option<Timestamp>, held_by_cap: bool, now: Timestamp) -> Timestamp {
        let released = match due {
            Some(due) if held_by_cap => due.max(self.last_outcome_at.unwrap_or(due)),
            Some(due) => due,
            None => [Some(self.started_at), self.last_outcome_at, self.last_wait_until.filter(|t| *t <= now)]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(now),
        };
        released.min(now)
    }

    /// The batcher refused a request: the engine is unusable or shutting down, so the step ends.
    pub fn on_rejected(&mut self, error: &RequestError, now: Timestamp) {
        tracing::error!(step = %self.step.name, %error, "request rejected; ending the benchmark");
        self.stop_engine_unusable(now);
    }

    /// A batch the engine ran. It counts in the batching statistics when it was dispatched in the
    /// measured window: after measurement started and while measured requests were still
    /// unfinished. Drivers report a batch before its requests' outcomes.
    pub fn on_batch(&mut self, batch: &BatchRun) {
        self.batched_requests += batch.size as u64;
        self.batches_seen.record(batch.size);
        let measured_pending =
            self.measure_end.is_none() || self.phases[Phase::Measure].finished < self.phases[Phase::Measure].submitted;
        let measuring = self.measure_start.is_some_and(|s| batch.dispatched_at >= s) && measured_pending;
        if measuring {
            self.aggregator.record_batch(
                batch.dispatched_at,
                batch.size,
                batch.reason,
                batch.returned_at.saturating_since(batch.dispatched_at),
            );
            if let Some(phases) = batch.phases {
                self.aggregator.record_step_phases(phases.prefill, phases.decode);
            }
        }
    }

    /// A request's outcome arrived at `now`. Its `requests.jsonl` row, when recording, is then
    /// ready at [`poll_record`](Self::poll_record).
    pub fn on_outcome(&mut self, id: RequestId, outcome: &Outcome, now: Timestamp) {
        let Some(flight) = self.in_flight.remove(&id) else { return };
        self.last_outcome_at = Some(self.last_outcome_at.map_or(now, |t| t.max(now)));
        match flight.phase {
            Phase::Warmup => self.phases[Phase::Warmup].in_flight -= 1,
            Phase::Cooldown => self.phases[Phase::Cooldown].finished += 1,
            Phase::Measure => {}
        }
        match outcome {
            Ok(c) => {
                let metrics = map_request(&c.times, &c.output, self.domain, self.anchor);
                let client = ClientTiming::new(flight.intended, &c.times, metrics.sent).with_wire(
                    c.times.submitted,
                    metrics.engine_first_token,
                    metrics.wire_batch,
                    c.batch_size,
                );
                if flight.phase == Phase::Measure {
                    self.aggregator.record_completion(&metrics, &c.times);
                    self.aggregator.record_client_timing(&client);
                    if let Some((design, block_size)) = self.prefix_design {
                        self.aggregator
                            .record_designed_cached(design.cached_tokens(id, block_size), metrics.prompt_tokens);
                    }
                    if let Some(images) = &flight.images {
                        self.media.record(images, c.output.stats.image_cache_hits);
                    }
                    if let Some(target) = flight.prompt_target {
                        self.prompt_targets.record(target, metrics.prompt_tokens);
                    }
                    self.phases[Phase::Measure].finished += 1;
                    self.phases[Phase::Measure].output_tokens += u64::from(metrics.output_tokens.unwrap_or(0));
                    self.phases[Phase::Measure].last_end = Some(
                        self.phases[Phase::Measure].last_end.map_or(c.times.completed, |e| e.max(c.times.completed)),
                    );
                }
                self.record(|name| {
                    let mut record = RequestRecord::completed(id, name, flight.phase, c, &metrics);
                    record.intended_ns = Some(flight.intended);
                    record.dispatch_delay_ms = Some(client.dispatch_delay.as_nanos() as f64 / 1e6);
                    record.ttft_from_submit_ms = client.ttft_from_submit.map(|t| t.as_nanos() as f64 / 1e6);
                    record.wire_batch = client.wire_batch.map(|(w, _)| w);
                    record.images = flight.images;
                    record.image_cache_hits = c.output.stats.image_cache_hits;
                    record.prompt_tokens_target = flight.prompt_target;
                    record
                });
            }
            Err(e) => {
                // The engine is gone: nothing more can be served, whatever the profile says.
                if e.engine_unusable() && self.stop_reason != Some(StopReason::Interrupted) {
                    self.stop_engine_unusable(now);
                }
                if !matches!(e, RequestError::Cancelled) {
                    self.errors += 1;
                }
                let endpoint = match e {
                    RequestError::Remote { error, .. } => Some(error.endpoint.as_str()),
                    _ => None,
                };
                if flight.phase == Phase::Measure {
                    match e {
                        RequestError::Cancelled => self.aggregator.record_cancelled(flight.submitted, now),
                        _ => {
                            self.aggregator.record_error(e.kind(), endpoint, flight.submitted, now);
                            self.phases[Phase::Measure].errors += 1;
                        }
                    }
                    self.phases[Phase::Measure].finished += 1;
                    self.phases[Phase::Measure].last_end =
                        Some(self.phases[Phase::Measure].last_end.map_or(now, |t| t.max(now)));
                    self.check_error_limits(now);
                }
                let outcome = match e {
                    RequestError::Cancelled => RequestOutcome::Cancelled,
                    _ => RequestOutcome::Error { kind: e.kind().to_owned() },
                };
                self.record(|name| {
                    let mut record =
                        RequestRecord::unfinished(id, name, flight.phase, outcome, Some(flight.submitted), Some(now));
                    record.intended_ns = Some(flight.intended);
                    record.endpoint = endpoint.map(str::to_owned);
                    record.images = flight.images;
                    record.prompt_tokens_target = flight.prompt_target;
                    record
                });
            }
        }
    }

    /// Closes the benchmark. Measured requests still in flight (an interrupted run) are counted
    /// incomplete. The window runs from the first measured submission to the last measured
    /// outcome.
    pub fn finish(mut self, now: Timestamp) -> Finished {
        let ends_run = matches!(self.stop_reason, Some(StopReason::EngineUnusable | StopReason::Interrupted));
        let mut leftovers: Vec<_> = self.in_flight.drain().collect();
        leftovers.sort_by_key(|(id, _)| *id);
        let recording = self.records.is_some();
        let mut records: Vec<RequestRecord> = self.records.take().map(Vec::from).unwrap_or_default();
        for (id, f) in &leftovers {
            if f.phase == Phase::Measure {
                self.aggregator.record_incomplete(f.submitted);
            }
            if recording {
                let mut record = RequestRecord::unfinished(
                    *id,
                    &self.step.name,
                    f.phase,
                    RequestOutcome::Incomplete,
                    Some(f.submitted),
                    None,
                );
                record.repeat = self.repeat;
                record.intended_ns = Some(f.intended);
                record.images = f.images;
                record.prompt_tokens_target = f.prompt_target;
                records.push(record);
            }
        }
        let end = if leftovers.iter().any(|(_, f)| f.phase == Phase::Measure) {
            now
        } else {
            self.phases[Phase::Measure].last_end.or(self.measure_end).unwrap_or(now)
        };
        let mut result = self.aggregator.finish(end);
        result.images = self.media.finish(result.duration_s);
        result.prompt_target = self.prompt_targets.finish();
        result.repeat = self.repeat;
        result.batching.whole_run = self.batches_seen;
        Finished { result, records, ends_run }
    }
}

/// A finished benchmark.
#[derive(Debug)]
pub struct Finished {
    /// Its measurements.
    pub result: BenchmarkResult,
    /// `requests.jsonl` rows not yet taken, and one per request still in flight (incomplete).
    pub records: Vec<RequestRecord>,
    /// The run must stop here (interrupted, or the engine became unusable): the report is
    /// incomplete.
    pub ends_run: bool,
}

#[cfg(test)]
mod tests;
