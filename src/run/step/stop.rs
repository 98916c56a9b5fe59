//! The stop rules: why and when a step stops admitting measured requests (its limits, the
//! error limits, an interrupt, an unusable engine).

use super::StepRun;
use crate::report::Phase;
use crate::time::Timestamp;

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

/// Minimum finished requests before `max_error_rate` is judged, so one early error is not 100 %.
const ERROR_RATE_MIN_SAMPLE: u64 = 20;

impl StepRun {
    pub(super) fn end_measure(&mut self, now: Timestamp, reason: StopReason) {
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

    /// Ends admission for good: the engine can serve nothing more.
    pub(super) fn stop_engine_unusable(&mut self, now: Timestamp) {
        self.warmup_done = true;
        self.end_measure(now, StopReason::EngineUnusable);
        self.stop_reason = Some(StopReason::EngineUnusable);
    }

    pub(super) fn check_error_limits(&mut self, now: Timestamp) {
        if self.measure_end.is_some() {
            return;
        }
        if self.stop.max_errors().is_some_and(|m| self.phases[Phase::Measure].errors >= m) {
            self.end_measure(now, StopReason::MaxErrors);
        } else if let Some(rate) = self.stop.max_error_rate() {
            let finished = self.phases[Phase::Measure].finished;
            if finished >= ERROR_RATE_MIN_SAMPLE && self.phases[Phase::Measure].errors as f64 / finished as f64 > rate {
                self.end_measure(now, StopReason::MaxErrorRate);
            }
        }
    }
}
