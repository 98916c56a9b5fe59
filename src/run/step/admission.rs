//! What the step does next: which phase a request submitted now belongs to (warmup, drained;
//! the measurement until its stop; cooldown), the driver's poll (submit, wait or done), and when
//! a request was meant to arrive (the module docs' intended arrival).

use super::stop::StopReason;
use super::{Action, StepRun};
use crate::loadgen::Poll;
use crate::report::Phase;
use crate::scenario::plan::PhaseLimit;
use crate::time::Timestamp;

impl StepRun {
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
                Some(PhaseLimit::Requests(n)) if self.phases[Phase::Warmup].offered() < n => {
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
            if self.phases[Phase::Warmup].offered() > 0 {
                // The load profile starts over with the measurement (a rate's first arrival now; a
                // trace goes on with its next line).
                if let Ok(fresh) = self.scheduler.restarted(now) {
                    self.scheduler = fresh;
                }
            }
        }
        if self.measure_end.is_none() {
            if self.measure_start.is_none() {
                self.shard_measure_starts();
            }
            let start = *self.measure_start.get_or_insert_with(|| {
                self.aggregator.start(now);
                now
            });
            let deadline = self.stop.max_duration().map(|d| start.saturating_add(d));
            if self.stop.max_requests().is_some_and(|m| self.phases[Phase::Measure].offered() >= m) {
                self.end_measure(now, StopReason::MaxRequests);
            } else if deadline.is_some_and(|d| now >= d) {
                self.end_measure(deadline.unwrap_or(now), StopReason::MaxDuration);
            } else {
                return (Some(Phase::Measure), deadline);
            }
        }
        let end = self.measure_end.unwrap_or(now);
        match self.cooldown {
            Some(PhaseLimit::Requests(n)) if self.phases[Phase::Cooldown].offered() < n => {
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
        if self.sessions.is_some() {
            return self.decide_sessions(now, phase, phase_deadline);
        }
        if let Some(action) = self.pass_others(now, phase, phase_deadline) {
            return action;
        }
        match self.scheduler.poll(now, self.in_flight.len()) {
            Poll::SubmitNow => Action::Submit(phase),
            Poll::At(t) => Action::Wait(Some(phase_deadline.map_or(t, |d| d.min(t)))),
            Poll::WaitForCompletion => Action::Wait(phase_deadline),
            Poll::CompletionOr(t) => Action::Wait(Some(phase_deadline.map_or(t, |d| d.min(t)))),
            Poll::Exhausted => self.schedule_exhausted(now),
        }
    }

    /// The schedule has no arrival left: nothing more to offer in any phase; what is in flight
    /// finishes.
    pub(super) fn schedule_exhausted(&mut self, now: Timestamp) -> Action {
        self.warmup_done = true;
        self.schedule_done = true;
        self.end_measure(now, StopReason::ScheduleEnd);
        self.admitting = None;
        if self.in_flight.is_empty() { Action::Done } else { Action::Wait(None) }
    }

    /// When a request submitted at `now` was meant to arrive (module docs): `due` is its time in
    /// the schedule (`None` for a closed loop), `held_by_cap` whether `max_concurrency` held it.
    pub(super) fn intended_arrival(&self, due: Option<Timestamp>, held_by_cap: bool, now: Timestamp) -> Timestamp {
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
}
