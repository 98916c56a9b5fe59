//! When to submit the next request of one benchmark step: a sans-IO arrival scheduler.
//!
//! [`Scheduler`] never reads a clock and never sleeps. The runner calls [`Scheduler::poll`] with
//! `now` and the number of requests in flight and does what it says:
//! - [`Poll::SubmitNow`]: submit one request, then call [`Scheduler::on_submitted`];
//! - [`Poll::At`]: nothing is due before that time (completions do not change that);
//! - [`Poll::WaitForCompletion`]: nothing can go before a request completes (time alone does not
//!   change that);
//! - [`Poll::CompletionOr`]: a completion or that time, whichever comes first, can let the next
//!   request go (a concurrent ramp-up that is opening streams);
//! - [`Poll::Exhausted`]: the schedule has no more arrivals (a trace's last line went).
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
//!   arrival also comes after one gap, as in a Poisson process started at `start`;
//! - gamma(rate, k, seed): gaps drawn from Gamma(shape k, scale `1 / (rate · k)`), as vLLM's
//!   `bench serve` draws them (`np.random.gamma(shape=burstiness, scale=1 / (rate · burstiness))`),
//!   from [`SplitMix64::gamma`]: mean `1 / rate`, coefficient of variation `1/√k`; the first
//!   arrival after one gap, as poisson (k = 1 is a Poisson process);
//! - trace(arrivals, time_scale): arrival `i` at `start + arrivals[i] / time_scale`; after the last
//!   one, [`Poll::Exhausted`].
//!
//! **Ramp-up** ([`Step::rampup`] = `T`). A rate's arrivals are first scheduled in *operational
//! time* `s` as above, then put through the inverse of the ramp's cumulative intensity: with
//! `λ(t) = rate · min(t / T, 1)`, `Λ(t) / rate` is `t² / (2T)` up to `T` and `t − T/2` after, so
//! arrival `s` goes at `t = √(2Ts)` for `s ≤ T/2` and at `t = s + T/2` after. Arrival counts then
//! follow the ramped intensity exactly in expectation (for poisson, the result is an
//! inhomogeneous Poisson process of intensity `λ`), and after `T` the steady schedule goes on
//! shifted by `T/2`. For concurrent(n), stream `j` (0-based) opens at `start + T · j / n`: the
//! in-flight cap is `min(n, ⌊n · t / T⌋ + 1)` at `t` after the start.
//!
//! A rate-driven arrival that finds `max_concurrency` requests in flight, or that the runner
//! submits late for any reason, is **delayed, not dropped**: it goes as soon as it can, and overdue
//! arrivals go back to back until the schedule is caught up. Later arrivals keep their times. How
//! late arrivals went is counted in [`Lateness`], so a report can say the offered rate was not met.

use std::time::Duration;

use serde::Serialize;

use super::error::LoadError;
use super::profile::{Step, StepKind, TraceArrivals};
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
    /// Call again after a request completes or at this time, whichever comes first.
    CompletionOr(Timestamp),
    /// No arrival is left in the schedule.
    Exhausted,
}

/// What [`Scheduler::skip`] did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The arrival was passed over; the schedule is at the next one.
    Passed,
    /// The arrival is due at this time: call again then.
    At(Timestamp),
    /// No arrival is left in the schedule.
    Exhausted,
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
    /// Concurrent ramp-up: the cap opens one stream at a time over this long.
    stream_ramp: Option<Duration>,
    /// Rate ramp-up: operational seconds are warped onto the ramp (see the module docs).
    rate_ramp: Option<f64>,
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
    /// Random gaps; `elapsed` operational seconds from start to the current arrival, due at `due`.
    Renewal { gaps: Gaps, rng: SplitMix64, elapsed: f64, due: Timestamp },
    /// Arrival `next` at `start + (arrivals[next] - arrivals[first]) / time_scale`.
    Trace { arrivals: TraceArrivals, time_scale: f64, first: usize, next: usize },
}

/// The distribution of a renewal process's gaps.
#[derive(Clone, Copy, Debug)]
enum Gaps {
    Exponential { rate: f64 },
    Gamma { shape: f64, scale: f64 },
}

impl Gaps {
    fn draw(self, rng: &mut SplitMix64) -> f64 {
        match self {
            Gaps::Exponential { rate } => rng.exponential(rate),
            Gaps::Gamma { shape, scale } => rng.gamma(shape, scale),
        }
    }
}

impl Scheduler {
    /// A scheduler for `step` starting at `start`. Fails for a rate that is not finite and above
    /// 0, a burstiness that is not, a time scale that is not, or an empty trace.
    pub fn new(step: Step, start: Timestamp) -> Result<Scheduler, LoadError> {
        let at_least_one = |n: u32| n.max(1) as usize;
        let positive = |value: f64, what: &'static str| {
            if value.is_finite() && value > 0.0 {
                Ok(value)
            } else {
                Err(LoadError::InvalidParameter { step: step.name.clone(), what, value })
            }
        };
        let check_rate = |rate: f64| {
            if rate.is_finite() && rate > 0.0 {
                Ok(rate)
            } else {
                Err(LoadError::InvalidRate { step: step.name.clone(), rate })
            }
        };
        let ramp = step.rampup.filter(|r| !r.is_zero());
        let mut rate_ramp = None;
        let mut stream_ramp = None;
        let renewal = |gaps: Gaps| {
            let mut rng = SplitMix64::new(match step.kind {
                StepKind::Poisson { seed, .. } | StepKind::Gamma { seed, .. } => seed,
                _ => 0,
            });
            let elapsed = gaps.draw(&mut rng);
            Pacing::Renewal { gaps, rng, elapsed, due: start }
        };
        let (pacing, cap) = match step.kind {
            StepKind::Synchronous => (Pacing::Closed, Some(1)),
            StepKind::Concurrent(n) => {
                stream_ramp = ramp;
                (Pacing::Closed, Some(at_least_one(n)))
            }
            StepKind::Throughput { max_concurrency: n } => (Pacing::Closed, Some(at_least_one(n))),
            StepKind::Constant { rate, max_concurrency } => {
                let rate = check_rate(rate)?;
                rate_ramp = ramp.map(|r| r.as_secs_f64());
                (Pacing::Constant { rate, due: start }, max_concurrency.map(at_least_one))
            }
            StepKind::Poisson { rate, max_concurrency, .. } => {
                let rate = check_rate(rate)?;
                rate_ramp = ramp.map(|r| r.as_secs_f64());
                (renewal(Gaps::Exponential { rate }), max_concurrency.map(at_least_one))
            }
            StepKind::Gamma { rate, burstiness, max_concurrency, .. } => {
                let rate = check_rate(rate)?;
                let shape = positive(burstiness, "burstiness")?;
                rate_ramp = ramp.map(|r| r.as_secs_f64());
                let scale = 1.0 / (rate * shape);
                if !scale.is_finite() || scale <= 0.0 {
                    return Err(LoadError::InvalidParameter {
                        step: step.name.clone(),
                        what: "rate × burstiness",
                        value: rate * shape,
                    });
                }
                (renewal(Gaps::Gamma { shape, scale }), max_concurrency.map(at_least_one))
            }
            StepKind::Trace { ref arrivals, time_scale, max_concurrency } => {
                let time_scale = positive(time_scale, "time_scale")?;
                if arrivals.is_empty() {
                    return Err(LoadError::InvalidParameter {
                        step: step.name.clone(),
                        what: "trace length",
                        value: 0.0,
                    });
                }
                let pacing = Pacing::Trace { arrivals: arrivals.clone(), time_scale, first: 0, next: 0 };
                (pacing, max_concurrency.map(at_least_one))
            }
        };
        let mut scheduler = Scheduler {
            step,
            start,
            submitted: 0,
            pacing,
            cap,
            stream_ramp,
            rate_ramp,
            lateness: Lateness::default(),
            blocked_by_cap: false,
        };
        scheduler.update_due();
        Ok(scheduler)
    }

    /// The schedule started over at `now`, as the measurement begins after a warmup: a rate's
    /// first arrival (and its ramp-up) from `now`; a trace goes on with its next line, due at
    /// `now`, and the lines after it keep their recorded gaps (so request `k` still gets line `k`).
    pub fn restarted(&self, now: Timestamp) -> Result<Scheduler, LoadError> {
        let mut fresh = Scheduler::new(self.step.clone(), now)?;
        if let (Pacing::Trace { next, .. }, Pacing::Trace { first, next: fresh_next, .. }) =
            (&self.pacing, &mut fresh.pacing)
        {
            (*first, *fresh_next) = (*next, *next);
            fresh.update_due();
        }
        Ok(fresh)
    }

    /// What to do at `now` with `in_flight` requests outstanding.
    pub fn poll(&mut self, now: Timestamp, in_flight: usize) -> Poll {
        if self.is_exhausted() {
            return Poll::Exhausted;
        }
        match self.next_arrival() {
            Some(due) if now < due => return Poll::At(due),
            _ => {}
        }
        let (cap, opens_at) = self.cap_at(now);
        if cap.is_some_and(|cap| in_flight >= cap) {
            self.blocked_by_cap = true;
            return match opens_at {
                Some(t) => Poll::CompletionOr(t),
                None => Poll::WaitForCompletion,
            };
        }
        Poll::SubmitNow
    }

    /// The in-flight cap at `now`, and when it next grows (during a concurrent ramp-up).
    fn cap_at(&self, now: Timestamp) -> (Option<usize>, Option<Timestamp>) {
        let (Some(cap), Some(ramp)) = (self.cap, self.stream_ramp) else { return (self.cap, None) };
        // Stream j opens at `opens(j)`; the count is judged on those very timestamps, so the time
        // returned for the next opening always opens it.
        let opens = |j: usize| offset(self.start, ramp.as_secs_f64() * j as f64 / cap as f64);
        let elapsed = now.saturating_since(self.start).as_secs_f64();
        let estimate = (cap as f64 * elapsed / ramp.as_secs_f64()).floor();
        let mut open = if estimate >= cap as f64 { cap } else { (estimate as usize + 1).min(cap) };
        while open < cap && opens(open) <= now {
            open += 1;
        }
        while open > 1 && opens(open - 1) > now {
            open -= 1;
        }
        (Some(open), (open < cap).then(|| opens(open)))
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
        self.advance();
    }

    /// Passes over the current arrival without submitting it (another shard sends it,
    /// [`super::shard`]) once it is due at `now`: [`Skip::Passed`], and the schedule moves on as
    /// if it had been submitted on time (no lateness is counted, no cap holds it). Before it is
    /// due, [`Skip::At`] its time; after a trace's last line, [`Skip::Exhausted`].
    pub fn skip(&mut self, now: Timestamp) -> Skip {
        if self.is_exhausted() {
            return Skip::Exhausted;
        }
        if let Some(due) = self.next_arrival().filter(|due| now < *due) {
            return Skip::At(due);
        }
        self.blocked_by_cap = false;
        self.submitted += 1;
        self.advance();
        Skip::Passed
    }

    /// Moves the pacing to the next arrival.
    fn advance(&mut self) {
        match &mut self.pacing {
            Pacing::Closed | Pacing::Constant { .. } => {}
            Pacing::Renewal { gaps, rng, elapsed, .. } => *elapsed += gaps.draw(rng),
            Pacing::Trace { next, .. } => *next += 1,
        }
        self.update_due();
    }

    /// Recomputes the current arrival's due time from its operational time.
    fn update_due(&mut self) {
        let ramp = self.rate_ramp;
        let start = self.start;
        let at = |secs: f64| offset(start, ramp.map_or(secs, |t| ramped(secs, t)));
        match &mut self.pacing {
            Pacing::Closed | Pacing::Trace { .. } => {}
            // From the index, not the previous due time: no accumulated rounding.
            Pacing::Constant { rate, due } => *due = at(self.submitted as f64 / *rate),
            Pacing::Renewal { elapsed, due, .. } => *due = at(*elapsed),
        }
    }

    fn is_exhausted(&self) -> bool {
        matches!(&self.pacing, Pacing::Trace { arrivals, next, .. } if *next >= arrivals.len())
    }

    /// When the next arrival is due; `None` for steps paced only by completions.
    pub fn next_arrival(&self) -> Option<Timestamp> {
        match &self.pacing {
            Pacing::Closed => None,
            Pacing::Constant { due, .. } | Pacing::Renewal { due, .. } => Some(*due),
            Pacing::Trace { arrivals, time_scale, first, next } => {
                let offsets = arrivals.offsets();
                let at = offsets.get(*next)?;
                Some(offset(self.start, (at - offsets[*first]) / time_scale))
            }
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

/// Operational seconds `s` on a linear ramp of `t` seconds: the inverse of the ramp's cumulative
/// intensity (module docs).
fn ramped(s: f64, t: f64) -> f64 {
    if s <= t / 2.0 { (2.0 * t * s).sqrt() } else { s + t / 2.0 }
}

/// `start + secs`, rounded to the nanosecond, saturating far in the future.
fn offset(start: Timestamp, secs: f64) -> Timestamp {
    let nanos = (secs * 1e9).round();
    let nanos = if nanos >= u64::MAX as f64 { u64::MAX } else { nanos as u64 };
    start.saturating_add(Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests;
