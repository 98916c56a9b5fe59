//! What the driver tells the step: a request submitted (with its images and prompt target), one
//! refused, a batch the engine ran, and a request's outcome, mapped to metrics and its
//! `requests.jsonl` row.

use super::stop::StopReason;
use super::{Flight, StepRun};
use crate::batcher::{BatchRun, Outcome, RequestError};
use crate::engine::RequestId;
use crate::engine::image::ImageSummary;
use crate::metrics::client::ClientTiming;
use crate::metrics::map_request;
use crate::report::{Phase, RequestOutcome, RequestRecord};
use crate::time::Timestamp;

impl StepRun {
    /// The request asked for by [`Action::Submit`] was accepted as `id` at `now`.
    pub fn on_submitted(&mut self, id: RequestId, phase: Phase, now: Timestamp) {
        let turn = self.turn_submitted(id, now);
        let intended = match turn {
            // A turn after its think time takes no arrival: it was meant to go when that ended.
            Some((_, Some(due), false)) => due.min(now),
            _ => {
                let due = self.scheduler.next_arrival();
                let held_before = self.scheduler.lateness().delayed_by_cap;
                self.scheduler.on_submitted(now);
                let held_by_cap = self.scheduler.lateness().delayed_by_cap > held_before;
                self.intended_arrival(due, held_by_cap, now)
            }
        };
        let turn = turn.map(|(mark, _, _)| mark);
        let index = self.next_index(id);
        self.in_flight
            .insert(id, Flight { phase, submitted: now, intended, images: None, prompt_target: None, turn, index });
        match phase {
            Phase::Warmup => {
                self.phases[Phase::Warmup].submitted += 1;
                self.phases[Phase::Warmup].in_flight += 1;
            }
            Phase::Measure => {
                self.phases[Phase::Measure].submitted += 1;
                self.aggregator.record_submitted();
                if self.stop.max_requests().is_some_and(|m| self.phases[Phase::Measure].offered() >= m) {
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

    /// The batcher refused a request: the engine is unusable or shutting down, so the step ends.
    pub fn on_rejected(&mut self, error: &RequestError, now: Timestamp) {
        // A refused request took its index in the run all the same (a shard moves past it).
        let _ = self.next_index(0);
        self.turn_refused(now);
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
        if let Some(mark) = flight.turn {
            let ttft = match outcome {
                Ok(c) => map_request(&c.times, &c.output, self.domain, self.anchor).ttft,
                Err(_) => None,
            };
            self.turn_outcome(id, (mark, flight.phase), outcome, ttft, now);
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
                        self.aggregator.record_designed_cached(
                            design.cached_tokens(flight.index, block_size),
                            metrics.prompt_tokens,
                        );
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
                let sharded = self.shard.is_some();
                self.record(|name| {
                    let mut record = RequestRecord::completed(flight.index, name, flight.phase, c, &metrics);
                    record.intended_ns = Some(flight.intended);
                    record.dispatch_delay_ms = Some(client.dispatch_delay.as_nanos() as f64 / 1e6);
                    record.ttft_from_submit_ms = client.ttft_from_submit.map(|t| t.as_nanos() as f64 / 1e6);
                    record.wire_batch = client.wire_batch.map(|(w, _)| w);
                    record.images = flight.images;
                    record.image_cache_hits = c.output.stats.image_cache_hits;
                    record.prompt_tokens_target = flight.prompt_target;
                    if sharded {
                        let runs = metrics.itl.runs().iter();
                        record.itl_runs_ns =
                            Some(runs.map(|&(gap, n)| [crate::time::duration_nanos(gap), n]).collect());
                    }
                    mark_turn(&mut record, flight.turn);
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
                    let mut record = RequestRecord::unfinished(
                        flight.index,
                        name,
                        flight.phase,
                        outcome,
                        Some(flight.submitted),
                        Some(now),
                    );
                    record.intended_ns = Some(flight.intended);
                    record.endpoint = endpoint.map(str::to_owned);
                    record.images = flight.images;
                    record.prompt_tokens_target = flight.prompt_target;
                    mark_turn(&mut record, flight.turn);
                    record
                });
            }
        }
    }
}

/// A turn's place in its session, on its `requests.jsonl` row.
pub(super) fn mark_turn(record: &mut RequestRecord, turn: Option<super::sessions::TurnMark>) {
    if let Some(t) = turn {
        record.session = Some(t.session);
        record.turn = Some(t.turn);
        record.history_tokens = Some(t.history_tokens);
        record.dropped_turns = Some(t.dropped_turns);
    }
}
