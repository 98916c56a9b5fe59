//! When to submit the next request of one benchmark step: a sans-IO arrival scheduler.
//!
//! [`Scheduler`] never reads a clock and never sleeps. The runner calls [`Scheduler::poll`] with
//! `now` and the number of requests in flight and does what it says:
//! - [`Poll::SubmitNow`]: submit one request, then call [`Scheduler::on_submitted`];
//! - [`Poll::At`]: nothing is due before that time (completions do not change that);
//! - [`Poll::WaitForCompletion`]: nothing can go before a request completes (time alone does not
//!   change that).
//!
//! Polling more often than asked is always allowed. Stop conditions belong to the runner.
//!
//! Semantics per [`StepKind`]:
//! - synchronous: submit when nothing is in flight;
//! - concurrent(n) and throughput(n): submit while fewer than `n` are in flight (a cap of 0 counts
//!   as 1, so a step always makes progress);
//! - constant(rate): arrival `i` is due at `start + i / rate`, computed from `i` (rounded to the
//!   nanosecond) rather than accumulated, so the schedule never drifts;
//! - poisson(rate, seed): exponential gaps from [`SplitMix64`] seeded with `seed`; the first
//!   arrival also comes after one gap, as in a Poisson process started at `start`.
//!
//! A rate-driven arrival that finds `max_concurrency` requests in flight, or that the runner
//! submits late for any reason, is **delayed, not dropped**: it goes as soon as it can, and overdue
//! arrivals go back to back until the schedule is caught up. Later arrivals keep their times. How
//! late arrivals went is counted in [`Lateness`], so a report can say the offered rate was not met.

use std::time::Duration;

use serde::Serialize;

use super::error::LoadError;
use super::profile::{Step, StepKind};
use crate::rng::SplitMix64;
use crate::time::Timestamp;

/// What the runner should do now.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Submit one request, then call [`Scheduler::on_submitted`].
    SubmitNow,
    /// Call again at this time.
    At(Timestamp),
    /// Call again after a request completes.
    WaitForCompletion,
}

/// How far submissions fell behind a rate-driven schedule. All zero for steps without one.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Lateness {
    /// Arrivals submitted after their due time, by any amount (a real runner's wake-up jitter
    /// counts too); `total` and `max` say by how much.
    pub late: u64,
    /// Arrivals that had to wait for a completion because `max_concurrency` was reached.
    pub delayed_by_cap: u64,
    /// Sum of (submit time - due time) over all arrivals.
    pub total: Duration,
    /// Largest single (submit time - due time).
    pub max: Duration,
}

/// The arrival scheduler of one step; see the module docs.
#[derive(Clone, Debug)]
pub struct Scheduler {
    step: Step,
    start: Timestamp,
    submitted: u64,
    pacing: Pacing,
    /// In-flight cap; `None` for an uncapped rate.
    cap: Option<usize>,
    lateness: Lateness,
    /// The current arrival has been told to wait for a completion.
    blocked_by_cap: bool,
}

#[derive(Clone, Debug)]
enum Pacing {
    /// Submit whenever the cap allows.
    Closed,
    /// Arrival `i` at `start + i / rate`.
    Constant { rate: f64, due: Timestamp },
    /// `elapsed` seconds from start to the current arrival, due at `due`.
    Poisson { rate: f64, rng: SplitMix64, elapsed: f64, due: Timestamp },
}

impl Scheduler {
    /// A scheduler for `step` starting at `start`. Fails for a rate that is not finite and above 0.
    pub fn new(step: Step, start: Timestamp) -> Result<Scheduler, LoadError> {
        let at_least_one = |n: u32| n.max(1) as usize;
        let check_rate = |rate: f64| {
            if rate.is_finite() && rate > 0.0 {
                Ok(rate)
            } else {
                Err(LoadError::InvalidRate { step: step.name.clone(), rate })
            }
        };
        let (pacing, cap) = match step.kind {
            StepKind::Synchronous => (Pacing::Closed, Some(1)),
            StepKind::Concurrent(n) | StepKind::Throughput { max_concurrency: n } => {
                (Pacing::Closed, Some(at_least_one(n)))
            }
            StepKind::Constant { rate, max_concurrency } => {
                let rate = check_rate(rate)?;
                (Pacing::Constant { rate, due: start }, max_concurrency.map(at_least_one))
            }
            StepKind::Poisson { rate, seed, max_concurrency } => {
                let rate = check_rate(rate)?;
                let mut rng = SplitMix64::new(seed);
                let elapsed = rng.exponential(rate);
                let due = offset(start, elapsed);
                (Pacing::Poisson { rate, rng, elapsed, due }, max_concurrency.map(at_least_one))
            }
        };
        Ok(Scheduler { step, start, submitted: 0, pacing, cap, lateness: Lateness::default(), blocked_by_cap: false })
    }

    /// What to do at `now` with `in_flight` requests outstanding.
    pub fn poll(&mut self, now: Timestamp, in_flight: usize) -> Poll {
        match self.next_arrival() {
            Some(due) if now < due => return Poll::At(due),
            _ => {}
        }
        if self.cap.is_some_and(|cap| in_flight >= cap) {
            self.blocked_by_cap = true;
            return Poll::WaitForCompletion;
        }
        Poll::SubmitNow
    }

    /// Records that one request was submitted at `now` and moves to the next arrival.
    pub fn on_submitted(&mut self, now: Timestamp) {
        if let Some(due) = self.next_arrival() {
            let late = now.saturating_since(due);
            if !late.is_zero() {
                self.lateness.late += 1;
                self.lateness.total += late;
                self.lateness.max = self.lateness.max.max(late);
            }
            if self.blocked_by_cap {
                self.lateness.delayed_by_cap += 1;
            }
        }
        self.blocked_by_cap = false;
        self.submitted += 1;
        match &mut self.pacing {
            Pacing::Closed => {}
            Pacing::Constant { rate, due } => {
                // From the index, not the previous due time: no accumulated rounding.
                *due = offset(self.start, self.submitted as f64 / *rate);
            }
            Pacing::Poisson { rate, rng, elapsed, due } => {
                *elapsed += rng.exponential(*rate);
                *due = offset(self.start, *elapsed);
            }
        }
    }

    /// When the next arrival is due; `None` for steps paced only by completions.
    pub fn next_arrival(&self) -> Option<Timestamp> {
        match self.pacing {
            Pacing::Closed => None,
            Pacing::Constant { due, .. } | Pacing::Poisson { due, .. } => Some(due),
        }
    }

    /// The step this scheduler paces.
    pub fn step(&self) -> &Step {
        &self.step
    }

    /// When the step began; arrival times are offsets from it.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// Requests submitted so far.
    pub fn submitted(&self) -> u64 {
        self.submitted
    }

    /// How late arrivals were submitted so far.
    pub fn lateness(&self) -> Lateness {
        self.lateness
    }
}

/// `start + secs`, rounded to the nanosecond, saturating far in the future.
fn offset(start: Timestamp, secs: f64) -> Timestamp {
    let nanos = (secs * 1e9).round();
    let nanos = if nanos >= u64::MAX as f64 { u64::MAX } else { nanos as u64 };
    start.saturating_add(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests;
