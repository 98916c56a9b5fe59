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

use std::collections::VecDeque;

use super::status::{DisplayPhase, StepStatus};
use crate::batcher::core::IdMap;
use crate::batcher::{BatchRun, Outcome, RequestError};
use crate::engine::image::ImageSummary;
use crate::engine::{ClockDomain, RequestId};
use crate::loadgen::{Lateness, LoadError, Poll, PrefixDesign, Scheduler, Step};
use crate::metrics::aggregate::BenchmarkAggregator;
use crate::metrics::client::ClientTiming;
use crate::metrics::map_request;
use crate::metrics::media::MediaTally;
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

/// Why a step stopped admitting measured requests.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `stop.max_requests` measured requests were submitted.
    MaxRequests,
    /// `stop.max_duration` of measurement passed.
    MaxDuration,
    /// `stop.max_errors` measured requests failed.
    MaxErrors,
    /// The measured error rate exceeded `stop.max_error_rate`; judged once 20 measured requests finished.
    MaxErrorRate,
    /// The engine rejects everything (it failed to start, or is wedged).
    EngineUnusable,
    /// The run was interrupted (Ctrl-C or [`crate::run::Interrupt::fire`]).
    Interrupted,
    /// The profile's schedule has no more arrivals: a trace's last line was submitted.
    ScheduleEnd,
}

struct Flight {
    phase: Phase,
    submitted: Timestamp,
    /// When the load profile meant it to arrive (module docs).
    intended: Timestamp,
    /// Its images, if it has any ([`StepRun::on_images`]).
    images: Option<ImageSummary>,
}

/// Minimum finished requests before `max_error_rate` is judged, so one early error is not 100 %.
const ERROR_RATE_MIN_SAMPLE: u64 = 20;

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
    warmup_submitted: u64,
    /// Warmup requests not finished yet; measurement waits for them.
    warmup_in_flight: u64,
    measured_submitted: u64,
    cooldown_submitted: u64,
    measured_finished: u64,
    measured_errors: u64,
    last_measured_end: Option<Timestamp>,
    measured_output_tokens: u64,
    cooldown_finished: u64,
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
            warmup_submitted: 0,
            warmup_in_flight: 0,
            measured_submitted: 0,
            cooldown_submitted: 0,
            measured_finished: 0,
            measured_errors: 0,
            last_measured_end: None,
            measured_output_tokens: 0,
            cooldown_finished: 0,
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
        self.measured_submitted
    }

    /// Measured requests finished (completed or failed) so far.
    pub fn measured_finished(&self) -> u64 {
        self.measured_finished
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

    fn end_measure(&mut self, now: Timestamp, reason: StopReason) {
        if self.measure_end.is_none() {
            // A step that ends before measuring anything still has a (zero-length) window.
            if self.measure_start.is_none() {
                self.measure_start = Some(now);
                self.aggregator.start(now);
            }
            self.measure_end = Some(now);
            self.stop_reason = Some(reason);
        }
    }

    /// Stops admitting anything; what is in flight still finishes (or is cancelled by the driver).
    pub fn interrupt(&mut self, now: Timestamp) {
        self.warmup_done = true;
        self.end_measure(now, StopReason::Interrupted);
        self.stop_reason = Some(StopReason::Interrupted);
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
                Some(PhaseLimit::Requests(n)) if self.warmup_submitted < n => return (Some(Phase::Warmup), None),
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
            if self.warmup_in_flight > 0 {
                return (None, None);
            }
            self.warmup_done = true;
            if self.warmup_submitted > 0 {
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
            if self.stop.max_requests().is_some_and(|m| self.measured_submitted >= m) {
                self.end_measure(now, StopReason::MaxRequests);
            } else if deadline.is_some_and(|d| now >= d) {
                self.end_measure(deadline.unwrap_or(now), StopReason::MaxDuration);
            } else {
                return (Some(Phase::Measure), deadline);
            }
        }
        let end = self.measure_end.unwrap_or(now);
        match self.cooldown {
            Some(PhaseLimit::Requests(n)) if self.cooldown_submitted < n => (Some(Phase::Cooldown), None),
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
        self.in_flight.insert(id, Flight { phase, submitted: now, intended, images: None });
        match phase {
            Phase::Warmup => {
                self.warmup_submitted += 1;
                self.warmup_in_flight += 1;
            }
            Phase::Measure => {
                self.measured_submitted += 1;
                self.aggregator.record_submitted();
                if self.stop.max_requests().is_some_and(|m| self.measured_submitted >= m) {
                    self.end_measure(now, StopReason::MaxRequests);
                }
            }
            Phase::Cooldown => self.cooldown_submitted += 1,
        }
    }

    /// The images of request `id`, just submitted: its record and the benchmark's media result
    /// count them.
    pub fn on_images(&mut self, id: RequestId, images: ImageSummary) {
        if let Some(flight) = self.in_flight.get_mut(&id) {
            flight.images = Some(images);
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

    /// Ends admission for good: the engine can serve nothing more.
    fn stop_engine_unusable(&mut self, now: Timestamp) {
        self.warmup_done = true;
        self.end_measure(now, StopReason::EngineUnusable);
        self.stop_reason = Some(StopReason::EngineUnusable);
    }

    /// A batch the engine ran. It counts in the batching statistics when it was dispatched in the
    /// measured window: after measurement started and while measured requests were still
    /// unfinished. Drivers report a batch before its requests' outcomes.
    pub fn on_batch(&mut self, batch: &BatchRun) {
        self.batched_requests += batch.size as u64;
        self.batches_seen.record(batch.size);
        let measured_pending = self.measure_end.is_none() || self.measured_finished < self.measured_submitted;
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
            Phase::Warmup => self.warmup_in_flight -= 1,
            Phase::Cooldown => self.cooldown_finished += 1,
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
                    self.measured_finished += 1;
                    self.measured_output_tokens += u64::from(metrics.output_tokens.unwrap_or(0));
                    self.last_measured_end =
                        Some(self.last_measured_end.map_or(c.times.completed, |e| e.max(c.times.completed)));
                }
                self.record(|name| {
                    let mut record = RequestRecord::completed(id, name, flight.phase, c, &metrics);
                    record.intended_ns = Some(flight.intended);
                    record.dispatch_delay_ms = Some(client.dispatch_delay.as_nanos() as f64 / 1e6);
                    record.ttft_from_submit_ms = client.ttft_from_submit.map(|t| t.as_nanos() as f64 / 1e6);
                    record.wire_batch = client.wire_batch.map(|(w, _)| w);
                    record.images = flight.images;
                    record.image_cache_hits = c.output.stats.image_cache_hits;
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
                            self.measured_errors += 1;
                        }
                    }
                    self.measured_finished += 1;
                    self.last_measured_end = Some(self.last_measured_end.map_or(now, |t| t.max(now)));
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
                    record
                });
            }
        }
    }

    fn check_error_limits(&mut self, now: Timestamp) {
        if self.measure_end.is_some() {
            return;
        }
        if self.stop.max_errors().is_some_and(|m| self.measured_errors >= m) {
            self.end_measure(now, StopReason::MaxErrors);
        } else if let Some(rate) = self.stop.max_error_rate() {
            let finished = self.measured_finished;
            if finished >= ERROR_RATE_MIN_SAMPLE && self.measured_errors as f64 / finished as f64 > rate {
                self.end_measure(now, StopReason::MaxErrorRate);
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
                records.push(record);
            }
        }
        let end = if leftovers.iter().any(|(_, f)| f.phase == Phase::Measure) {
            now
        } else {
            self.last_measured_end.or(self.measure_end).unwrap_or(now)
        };
        let mut result = self.aggregator.finish(end);
        result.images = self.media.finish(result.duration_s);
        result.repeat = self.repeat;
        result.batching.whole_run = self.batches_seen;
        Finished { result, records, ends_run }
    }

    /// For progress displays: (requests/s, output tokens/s) over the measured window so far.
    pub fn rates_so_far(&self, now: Timestamp) -> (Option<f64>, Option<f64>) {
        let Some(start) = self.measure_start else { return (None, None) };
        let secs = now.saturating_since(start).as_secs_f64();
        if secs <= 0.0 {
            return (None, None);
        }
        (Some(self.measured_finished as f64 / secs), Some(self.measured_output_tokens as f64 / secs))
    }

    /// What the display shows at `now`: the current phase with its own finished count and its
    /// own target (warmup counts warmup requests, measuring counts measured ones). The
    /// measurement shows as such until its last request finished, even once all are submitted;
    /// `Draining` is what runs after an interruption, or after the cooldown's last submission.
    pub fn status(&self, now: Timestamp) -> StepStatus {
        let limit = |p: &Option<PhaseLimit>| match p {
            Some(PhaseLimit::Requests(n)) => (Some(*n), None),
            Some(PhaseLimit::Duration(d)) => (None, Some(d.as_secs_f64())),
            None => (None, None),
        };
        let since = |t: Option<Timestamp>| t.map_or(0.0, |t| now.saturating_since(t).as_secs_f64());
        let measured_total = self.stop.max_requests();
        let measured_limit = self.stop.max_duration().map(|d| d.as_secs_f64());
        // Admission over, but measured requests still running: the measurement is what runs.
        let stopped_early = matches!(self.stop_reason, Some(StopReason::Interrupted | StopReason::EngineUnusable));
        let measuring = self.measure_start.is_some() && self.measured_finished < self.measured_submitted;
        let phase_now = match self.phase_now() {
            None if measuring && !stopped_early => Some(Phase::Measure),
            p => p,
        };
        let (phase, done, (total, duration_limit_s), elapsed_s) = match phase_now {
            Some(Phase::Warmup) => (
                DisplayPhase::Warmup,
                self.warmup_submitted - self.warmup_in_flight,
                limit(&self.warmup),
                since(Some(self.started_at)),
            ),
            Some(Phase::Measure) => (
                DisplayPhase::Measuring,
                self.measured_finished,
                (measured_total, measured_limit),
                since(self.measure_start),
            ),
            Some(Phase::Cooldown) => {
                (DisplayPhase::Cooldown, self.cooldown_finished, limit(&self.cooldown), since(self.measure_end))
            }
            None => (
                DisplayPhase::Draining,
                self.measured_finished,
                (measured_total, measured_limit),
                since(self.measure_start),
            ),
        };
        let (requests_per_s, output_tokens_per_s) = self.rates_so_far(now);
        let benchmark = if self.repeats > 1 {
            format!("{} #{}/{}", self.step.name, self.repeat + 1, self.repeats)
        } else {
            self.step.name.clone()
        };
        StepStatus {
            benchmark,
            index: self.index,
            count: self.count,
            phase,
            done,
            total,
            elapsed_s,
            duration_limit_s,
            requests_per_s,
            output_tokens_per_s,
            mean_batch_size: (self.batches_seen.batches > 0)
                .then(|| self.batched_requests as f64 / self.batches_seen.batches as f64),
            errors: self.errors,
        }
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
mod tests {
    use super::*;
    use crate::batcher::{Completion, RequestTimes};
    use crate::engine::{EngineOutput, FinishReason};
    use crate::loadgen::StepKind;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    fn done(id: RequestId, submitted: u64, completed: u64) -> Outcome {
        Ok(Completion {
            output: EngineOutput::new(Some(id), FinishReason::Length).with_prompt_tokens(4).with_output_tokens(2),
            times: RequestTimes { submitted: at(submitted), dispatched: at(submitted), completed: at(completed) },
            batch_id: 0,
            batch_size: 1,
        })
    }

    fn step(warmup: Option<PhaseLimit>, max_requests: u64) -> StepRun {
        let stop = crate::scenario::Scenario::builder().max_requests(max_requests).build().unwrap().stop().clone();
        let step = Step::new(StepKind::Throughput { max_concurrency: 4 });
        StepRun::new(step, stop, warmup, None, at(0), ClockDomain::Monotonic, None).unwrap()
    }

    #[test]
    fn warmup_drains_before_measurement_starts() {
        let mut run = step(Some(PhaseLimit::Requests(2)), 2);
        for id in 0..2 {
            assert_eq!(run.poll(at(0)), Action::Submit(Phase::Warmup));
            run.on_submitted(id, Phase::Warmup, at(0));
        }
        // Concurrency allows more, but measurement waits for the warmup to finish.
        assert_eq!(run.poll(at(0)), Action::Wait(None));
        assert_eq!(run.phase_now(), Some(Phase::Warmup));
        run.on_outcome(0, &done(0, 0, 10), at(10));
        assert_eq!(run.poll(at(10)), Action::Wait(None));
        run.on_outcome(1, &done(1, 0, 20), at(20));
        for id in 2..4 {
            assert_eq!(run.poll(at(20)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(20));
        }
        assert_eq!(run.poll(at(20)), Action::Wait(None));
        run.on_outcome(2, &done(2, 20, 30), at(30));
        run.on_outcome(3, &done(3, 20, 40), at(40));
        assert_eq!(run.poll(at(40)), Action::Done);
        let r = run.finish(at(40)).result;
        assert_eq!(r.counts.completed, 2, "warmup requests are not counted");
        // The window is the measured requests' alone: 20 ms to 40 ms.
        assert!((r.duration_s - 0.020).abs() < 1e-9, "{}", r.duration_s);
    }

    #[test]
    fn batches_count_while_measured_requests_are_unfinished() {
        use crate::batcher::FlushReason;
        let batch = |id, at_ms| BatchRun {
            id,
            size: 2,
            reason: FlushReason::Full,
            dispatched_at: at(at_ms),
            returned_at: at(at_ms + 5),
            phases: None,
        };
        let mut run = step(None, 2);
        for id in 0..2 {
            assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(0));
        }
        // Every measured request was submitted at 0 ms; its batch goes out at 1 ms and counts.
        run.on_batch(&batch(0, 1));
        run.on_outcome(0, &done(0, 0, 6), at(6));
        run.on_outcome(1, &done(1, 0, 6), at(6));
        // Nothing measured is left: a later batch (cooldown, say) does not count.
        run.on_batch(&batch(1, 7));
        let r = run.finish(at(7)).result;
        assert_eq!(r.batching.batches, 1);
    }

    #[test]
    fn measured_phase_stops_at_max_requests_and_lost_is_zero() {
        let mut run = step(None, 3);
        let mut id = 0;
        while let Action::Submit(phase) = run.poll(at(0)) {
            assert_eq!(phase, Phase::Measure);
            run.on_submitted(id, phase, at(0));
            id += 1;
        }
        assert_eq!(id, 3, "max_requests bounds submissions even below the concurrency cap");
        run.on_outcome(0, &done(0, 0, 5), at(5));
        run.on_outcome(1, &Err(RequestError::Cancelled), at(6));
        let engine_error = RequestError::Engine { batch_id: 0, batch_size: 1, message: "x".into() };
        run.on_outcome(2, &Err(engine_error), at(7));
        assert_eq!(run.poll(at(7)), Action::Done);
        let r = run.finish(at(7)).result;
        assert_eq!((r.counts.completed, r.counts.cancelled, r.counts.errors, r.counts.lost), (1, 1, 1, 0));
    }

    fn counts(run: &StepRun, now: Timestamp) -> (DisplayPhase, u64, Option<u64>) {
        let s = run.status(now);
        (s.phase, s.done, s.total)
    }

    #[test]
    fn repeats_are_named_in_the_display_and_carried_by_results_and_records() {
        let mut run = step(None, 1).with_records().with_repeat(1, 3);
        assert_eq!(run.status(at(0)).benchmark, "throughput #2/3");
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(0, Phase::Measure, at(0));
        run.on_outcome(0, &done(0, 0, 5), at(5));
        assert_eq!(run.poll_record().map(|r| r.repeat), Some(1));
        let finished = run.finish(at(5));
        assert_eq!((finished.result.name.as_str(), finished.result.repeat), ("throughput", 1));
        assert_eq!(step(None, 1).status(at(0)).benchmark, "throughput", "one run: the plain name");
    }

    #[test]
    fn status_counts_each_phase_on_its_own() {
        // Issue 9: the warmup showed "0 requests" and the measurement began at "32/32": each
        // phase must show its own finished count against its own target.
        let mut run = step(Some(PhaseLimit::Requests(2)), 3).with_position(1, Some(4));
        assert_eq!(counts(&run, at(0)), (DisplayPhase::Warmup, 0, Some(2)));
        for id in 0..2 {
            assert_eq!(run.poll(at(0)), Action::Submit(Phase::Warmup));
            run.on_submitted(id, Phase::Warmup, at(0));
        }
        assert_eq!(counts(&run, at(0)), (DisplayPhase::Warmup, 0, Some(2)), "submitted is not finished");
        run.on_outcome(0, &done(0, 0, 10), at(10));
        assert_eq!(run.poll(at(10)), Action::Wait(None));
        assert_eq!(counts(&run, at(10)), (DisplayPhase::Warmup, 1, Some(2)));
        run.on_outcome(1, &done(1, 0, 20), at(20));
        assert_eq!(run.poll(at(20)), Action::Submit(Phase::Measure));
        assert_eq!(counts(&run, at(20)), (DisplayPhase::Measuring, 0, Some(3)), "measuring starts at 0 of its own");
        run.on_submitted(2, Phase::Measure, at(20));
        run.on_outcome(2, &done(2, 20, 30), at(30));
        let s = run.status(at(30));
        assert_eq!((s.phase, s.done, s.total), (DisplayPhase::Measuring, 1, Some(3)));
        assert_eq!((s.benchmark.as_str(), s.index, s.count), ("throughput", 1, Some(4)));
        assert!((s.elapsed_s - 0.010).abs() < 1e-9, "{}", s.elapsed_s);
        assert_eq!(s.requests_per_s, Some(100.0));
        assert_eq!(s.errors, 0);
    }

    #[test]
    fn status_measures_until_the_last_measured_request_and_drains_after_an_interrupt() {
        let mut run = step(None, 3);
        assert_eq!(counts(&run, at(0)), (DisplayPhase::Measuring, 0, Some(3)), "no warmup, none shown");
        for id in 0..3 {
            assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(0));
        }
        // All submitted: admission is over, but the measurement is still what runs.
        assert_eq!(run.poll(at(0)), Action::Wait(None));
        let engine_error = RequestError::Engine { batch_id: 0, batch_size: 1, message: "x".into() };
        run.on_outcome(0, &Err(engine_error), at(5));
        let s = run.status(at(5));
        assert_eq!((s.phase, s.done, s.total, s.errors), (DisplayPhase::Measuring, 1, Some(3), 1));
        run.interrupt(at(6));
        let s = run.status(at(6));
        assert_eq!((s.phase, s.done, s.total), (DisplayPhase::Draining, 1, Some(3)));
    }

    #[test]
    fn records_come_out_of_the_step_and_leftovers_are_incomplete() {
        let mut run = step(None, 2).with_records();
        for id in 0..2 {
            assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(0));
        }
        run.on_outcome(0, &done(0, 0, 5), at(5));
        let record = run.poll_record().expect("a row for the completed request");
        assert_eq!((record.id, record.outcome), (0, RequestOutcome::Completed));
        assert!(run.poll_record().is_none());
        run.interrupt(at(6));
        let finished = run.finish(at(6));
        assert!(finished.ends_run);
        let rows: Vec<_> = finished.records.iter().map(|r| (r.id, r.outcome.clone())).collect();
        assert_eq!(rows, [(1, RequestOutcome::Incomplete)]);
    }

    /// A completion of `id` submitted at `submitted`, dispatched at `dispatched`, done at `done` ms.
    fn ran(id: RequestId, submitted: u64, dispatched: u64, done_ms: u64) -> Outcome {
        let mut outcome = done(id, submitted, done_ms);
        if let Ok(c) = &mut outcome {
            c.times.dispatched = at(dispatched);
        }
        outcome
    }

    fn kind_step(kind: StepKind, max_requests: u64) -> StepRun {
        let stop = crate::scenario::Scenario::builder().max_requests(max_requests).build().unwrap().stop().clone();
        StepRun::new(Step::new(kind), stop, None, None, at(0), ClockDomain::Monotonic, None).unwrap().with_records()
    }

    /// (intended ms after the step's start, dispatch delay ms) of every record, in id order.
    fn intended(run: &mut StepRun) -> Vec<(u64, f64)> {
        let mut rows: Vec<_> = std::iter::from_fn(|| run.poll_record())
            .map(|r| (r.id, (r.intended_ns.unwrap().as_nanos() - at(0).as_nanos()) / 1_000_000, r.dispatch_delay_ms))
            .collect();
        rows.sort_by_key(|r| r.0);
        rows.into_iter().map(|(_, i, d)| (i, d.unwrap())).collect()
    }

    #[test]
    fn a_scheduled_arrival_is_meant_for_its_due_time_and_a_late_submit_lags() {
        // 100/s: due at 0 and 10 ms. The second is submitted at 25 ms (the loop was busy).
        let mut run = kind_step(StepKind::Constant { rate: 100.0, max_concurrency: None }, 2);
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(0, Phase::Measure, at(0));
        assert_eq!(run.poll(at(1)), Action::Wait(Some(at(10))));
        assert_eq!(run.poll(at(25)), Action::Submit(Phase::Measure));
        run.on_submitted(1, Phase::Measure, at(25));
        // Each waits 5 ms for its batch.
        run.on_outcome(0, &ran(0, 0, 5, 40), at(40));
        run.on_outcome(1, &ran(1, 25, 30, 50), at(50));
        assert_eq!(intended(&mut run), [(0, 5.0), (10, 20.0)]);
        let d = run.finish(at(50)).result.dispatch;
        // Client lag: 0 and 15 ms (the 5 ms batch waits are by design).
        assert_eq!((d.client_lag.p50, d.client_lag.max), (Some(0.0), Some(15.0)));
        assert_eq!((d.dispatch_delay.count, d.dispatch_delay.max), (2, Some(20.0)));
    }

    #[test]
    fn an_arrival_held_by_max_concurrency_is_meant_for_when_its_slot_freed() {
        // 100/s with one in flight: the second arrival (due at 10 ms) waits for the first to end
        // at 30 ms; the loop submits it at 32 ms: 2 ms of lag, not 22.
        let mut run = kind_step(StepKind::Constant { rate: 100.0, max_concurrency: Some(1) }, 2);
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(0, Phase::Measure, at(0));
        assert_eq!(run.poll(at(10)), Action::Wait(None));
        run.on_outcome(0, &ran(0, 0, 0, 30), at(30));
        assert_eq!(run.poll(at(32)), Action::Submit(Phase::Measure));
        run.on_submitted(1, Phase::Measure, at(32));
        run.on_outcome(1, &ran(1, 32, 32, 40), at(40));
        assert_eq!(intended(&mut run), [(0, 0.0), (30, 2.0)]);
        assert_eq!(run.finish(at(40)).result.dispatch.client_lag.max, Some(2.0));
    }

    #[test]
    fn a_closed_loop_request_is_meant_for_when_the_outcome_before_it_came() {
        let mut run = kind_step(StepKind::Throughput { max_concurrency: 2 }, 4);
        for id in 0..2 {
            assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(0));
        }
        assert_eq!(run.poll(at(0)), Action::Wait(None));
        // Two outcomes came before the loop reacted at 13 ms: both requests are dated from the
        // later one (10 ms), never earlier, so the lag is not overstated.
        run.on_outcome(0, &ran(0, 0, 0, 7), at(7));
        run.on_outcome(1, &ran(1, 0, 0, 10), at(10));
        for id in 2..4 {
            assert_eq!(run.poll(at(13)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(13));
        }
        run.on_outcome(2, &ran(2, 13, 13, 20), at(20));
        run.on_outcome(3, &ran(3, 13, 13, 20), at(20));
        assert_eq!(intended(&mut run), [(0, 0.0), (0, 0.0), (10, 3.0), (10, 3.0)]);
        let result = run.finish(at(20)).result;
        assert_eq!(result.dispatch.client_lag.max, Some(3.0));
        assert!(result.validity_warnings.is_empty(), "3 ms is within the limit");
    }

    #[test]
    fn an_engine_send_after_the_dispatch_is_client_lag_and_warns() {
        use crate::engine::EngineStats;
        let mut run = kind_step(StepKind::Synchronous, 3);
        for id in 0..3 {
            // Each submitted the moment the one before ended: the loop itself never lags.
            let t = id * 50;
            assert_eq!(run.poll(at(t)), Action::Submit(Phase::Measure));
            run.on_submitted(id, Phase::Measure, at(t));
            // The engine sends each request 30 ms after our dispatch.
            let mut outcome = ran(id, t, t, t + 50);
            if let Ok(c) = &mut outcome {
                c.output.stats = EngineStats { sent_ts: Some(at(t + 30).as_secs_f64()), ..EngineStats::default() };
            }
            run.on_outcome(id, &outcome, at(t + 50));
        }
        let records: Vec<_> = std::iter::from_fn(|| run.poll_record()).collect();
        assert_eq!(records[0].sent_ns, Some(at(30)));
        assert_eq!(records.iter().map(|r| r.dispatch_delay_ms).collect::<Vec<_>>(), [Some(30.0); 3]);
        let result = run.finish(at(150)).result;
        assert_eq!((result.dispatch.engine_sent, result.dispatch.client_lag.p99), (3, Some(30.0)));
        let kinds: Vec<_> = result.validity_warnings.iter().map(|w| w.kind.as_str()).collect();
        assert_eq!(kinds, ["client_lag"]);
    }

    #[test]
    fn no_records_unless_asked() {
        let mut run = step(None, 1);
        assert_eq!(run.poll(at(0)), Action::Submit(Phase::Measure));
        run.on_submitted(0, Phase::Measure, at(0));
        run.on_outcome(0, &done(0, 0, 5), at(5));
        assert!(run.poll_record().is_none());
        assert!(run.finish(at(5)).records.is_empty());
    }
}
