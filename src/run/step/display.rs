//! What the display shows of a running step: its phase, its own count and target, and the rates
//! so far.

use super::super::status::{DisplayPhase, StepStatus};
use super::{StepRun, StopReason};
use crate::report::Phase;
use crate::scenario::plan::PhaseLimit;
use crate::time::Timestamp;

impl StepRun {
    /// For progress displays: (requests/s, output tokens/s) over the measured window so far.
    pub fn rates_so_far(&self, now: Timestamp) -> (Option<f64>, Option<f64>) {
        let Some(start) = self.measure_start else { return (None, None) };
        let secs = now.saturating_since(start).as_secs_f64();
        if secs <= 0.0 {
            return (None, None);
        }
        (
            Some(self.phases[Phase::Measure].finished as f64 / secs),
            Some(self.phases[Phase::Measure].output_tokens as f64 / secs),
        )
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
        // A shard counts its own part of the measured requests.
        let measured_total = self.own_part(self.stop.max_requests());
        let measured_limit = self.stop.max_duration().map(|d| d.as_secs_f64());
        // Admission over, but measured requests still running: the measurement is what runs.
        let stopped_early = matches!(self.stop_reason, Some(StopReason::Interrupted | StopReason::EngineUnusable));
        let measuring = self.measure_start.is_some()
            && self.phases[Phase::Measure].finished < self.phases[Phase::Measure].submitted;
        let phase_now = match self.phase_now() {
            None if measuring && !stopped_early => Some(Phase::Measure),
            p => p,
        };
        let (phase, done, (total, duration_limit_s), elapsed_s) = match phase_now {
            Some(Phase::Warmup) => (
                DisplayPhase::Warmup,
                self.phases[Phase::Warmup].submitted - self.phases[Phase::Warmup].in_flight,
                limit(&self.warmup),
                since(Some(self.started_at)),
            ),
            Some(Phase::Measure) => (
                DisplayPhase::Measuring,
                self.phases[Phase::Measure].finished,
                (measured_total, measured_limit),
                since(self.measure_start),
            ),
            Some(Phase::Cooldown) => (
                DisplayPhase::Cooldown,
                self.phases[Phase::Cooldown].finished,
                limit(&self.cooldown),
                since(self.measure_end),
            ),
            None => (
                DisplayPhase::Draining,
                self.phases[Phase::Measure].finished,
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
