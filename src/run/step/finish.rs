//! The step's end: requests still in flight counted incomplete, the measured window closed, and
//! the [`Finished`] benchmark with its last `requests.jsonl` rows.

use super::StepRun;
use super::stop::StopReason;
use crate::report::{BenchmarkResult, Phase, RequestOutcome, RequestRecord};
use crate::time::Timestamp;

impl StepRun {
    /// Closes the benchmark. Measured requests still in flight (an interrupted run) are counted
    /// incomplete. The window runs from the first measured submission to the last measured
    /// outcome.
    pub fn finish(mut self, now: Timestamp) -> Finished {
        let ends_run = matches!(self.stop_reason, Some(StopReason::EngineUnusable | StopReason::Interrupted));
        let mut leftovers: Vec<_> = self.in_flight.drain().collect();
        leftovers.sort_by_key(|(id, _)| *id);
        let recording = self.records.is_some();
        let mut records: Vec<RequestRecord> = self.records.take().map(Vec::from).unwrap_or_default();
        for (_, f) in &leftovers {
            if f.phase == Phase::Measure {
                self.aggregator.record_incomplete(f.submitted);
            }
            if recording {
                let mut record = RequestRecord::unfinished(
                    f.index,
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
                super::events::mark_turn(&mut record, f.turn);
                records.push(record);
            }
        }
        let end = if leftovers.iter().any(|(_, f)| f.phase == Phase::Measure) {
            now
        } else {
            self.phases[Phase::Measure].last_end.or(self.measure_end).unwrap_or(now)
        };
        let sessions = self.sessions_result();
        let window = self.aggregator.window(end);
        let mut result = self.aggregator.finish(end);
        result.images = self.media.finish(result.duration_s);
        result.prompt_target = self.prompt_targets.finish();
        result.sessions = sessions;
        result.repeat = self.repeat;
        result.batching.whole_run = self.batches_seen;
        Finished { result, records, ends_run, window }
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
    /// Its measured window on the run's clock, `(start, end)`.
    pub window: (Timestamp, Timestamp),
}
