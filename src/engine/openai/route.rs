//! Which endpoint a request goes to, and which endpoints are out of rotation: sans IO (the
//! engine passes `now` in), so the rule is tested step by step.
//!
//! **The rule.** A request goes to an endpoint in rotation: in turn (`round_robin`), or the one
//! with the fewest of our requests in flight (`least_outstanding`, ties in turn). An endpoint
//! whose request ended [`Health::Down`] is taken out of rotation for a backoff of 250 ms,
//! doubling with each failure in a row up to 5 s. When its backoff is over, the next request goes
//! to it as a probe (one at a time); a success puts it back in rotation and clears its failures,
//! a failure starts the next, longer backoff, and any other outcome (a timeout, a 4xx, a dropped
//! stream) leaves it out for another backoff of the same length. When every endpoint is out, a
//! request still goes to the one whose backoff ends first, so it gets that server's answer
//! (a refused connection comes back at once): nothing waits for an endpoint to come back, and a
//! single endpoint is never skipped. Endpoints that cannot be reached at `start` begin out of
//! rotation.

use std::time::Duration;

use super::config::Routing;
use crate::time::Timestamp;

/// The first backoff after a failure.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The backoff after `failures` failures in a row (at least 1).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// What a request's outcome says about its endpoint's health.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The server answered (whatever it answered, short of a 5xx).
    Up,
    /// It is not serving: the engine says so of a failed connection, a 5xx, a stall, a timeout,
    /// a dropped stream and a bad response (a hung or broken server leaves the rotation).
    Down,
    /// Nothing either way.
    Unknown,
}

/// Where a request went: give it back to [`Router::finish`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Pick {
    /// The endpoint's index.
    pub index: usize,
    /// It was sent as the probe of an endpoint out of rotation.
    pub probe: bool,
}

#[derive(Clone, Debug, Default)]
struct Endpoint {
    outstanding: usize,
    failures: u32,
    /// Out of rotation until then.
    out_until: Option<Timestamp>,
    /// A probe is in flight.
    probing: bool,
}

/// The endpoints' rotation.
#[derive(Clone, Debug)]
pub struct Router {
    endpoints: Vec<Endpoint>,
    routing: Routing,
    /// Where the round robin goes on.
    next: usize,
}

impl Router {
    /// `endpoints` endpoints (at least one), all in rotation.
    pub fn new(endpoints: usize, routing: Routing) -> Self {
        Router { endpoints: vec![Endpoint::default(); endpoints.max(1)], routing, next: 0 }
    }

    /// Takes endpoint `index` out of rotation, as after a failure at `now`.
    pub fn mark_down(&mut self, index: usize, now: Timestamp) {
        let e = &mut self.endpoints[index];
        e.failures = e.failures.saturating_add(1);
        e.out_until = Some(now.saturating_add(backoff(e.failures)));
    }

    /// The endpoint for the next request of `session`, counted in flight until
    /// [`Router::finish`]: with `session_affinity`, session `s`'s endpoint `s mod n` while it is in
    /// rotation; else [`Router::pick`]'s.
    pub fn pick_for(&mut self, now: Timestamp, session: Option<u64>) -> Pick {
        let n = self.endpoints.len();
        if let (Routing::SessionAffinity, Some(s)) = (self.routing, session) {
            let index = (s % n as u64) as usize;
            if self.endpoints[index].out_until.is_none() {
                self.endpoints[index].outstanding += 1;
                return Pick { index, probe: false };
            }
        }
        self.pick(now)
    }

    /// The endpoint for the next request, counted in flight until [`Router::finish`].
    pub fn pick(&mut self, now: Timestamp) -> Pick {
        let n = self.endpoints.len();
        let order = (0..n).map(|i| (self.next + i) % n);
        // A probe first: an endpoint whose backoff is over learns soonest whether it is back.
        let probe = order.clone().find(|&i| {
            let e = &self.endpoints[i];
            e.out_until.is_some_and(|t| t <= now) && !e.probing
        });
        let pick = if let Some(index) = probe {
            self.endpoints[index].probing = true;
            Pick { index, probe: true }
        } else {
            let in_rotation = order.filter(|&i| self.endpoints[i].out_until.is_none());
            let chosen = match self.routing {
                Routing::RoundRobin => in_rotation.into_iter().next(),
                // `min_by_key` keeps the first of equals: ties go in turn. A session whose
                // endpoint is out goes where the load is least.
                Routing::LeastOutstanding | Routing::SessionAffinity => {
                    in_rotation.min_by_key(|&i| self.endpoints[i].outstanding)
                }
            };
            // Every endpoint is out: the one back soonest.
            let index = chosen.unwrap_or_else(|| {
                (0..n).min_by_key(|&i| self.endpoints[i].out_until.unwrap_or(Timestamp::ZERO)).unwrap_or(0)
            });
            Pick { index, probe: false }
        };
        self.next = (pick.index + 1) % n;
        self.endpoints[pick.index].outstanding += 1;
        pick
    }
}

/// How an endpoint's place in the rotation changed with a request's outcome.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// It was in rotation and is now out.
    Left,
    /// It was out and is back.
    Back,
    /// Neither.
    Same,
}

impl Router {
    /// A request sent to `pick` ended at `now`, and what that says about the endpoint.
    pub fn finish(&mut self, pick: Pick, health: Health, now: Timestamp) -> Change {
        let was_in = self.in_rotation(pick.index);
        self.apply(pick, health, now);
        match (was_in, self.in_rotation(pick.index)) {
            (true, false) => Change::Left,
            (false, true) => Change::Back,
            _ => Change::Same,
        }
    }

    fn apply(&mut self, pick: Pick, health: Health, now: Timestamp) {
        let e = &mut self.endpoints[pick.index];
        e.outstanding = e.outstanding.saturating_sub(1);
        if pick.probe {
            e.probing = false;
        }
        match health {
            Health::Up => {
                e.failures = 0;
                e.out_until = None;
            }
            Health::Down => self.mark_down(pick.index, now),
            Health::Unknown if pick.probe => {
                e.out_until = Some(now.saturating_add(backoff(e.failures.max(1))));
            }
            Health::Unknown => {}
        }
    }

    /// Whether endpoint `index` is in rotation.
    pub fn in_rotation(&self, index: usize) -> bool {
        self.endpoints[index].out_until.is_none()
    }

    /// Our requests in flight to endpoint `index`.
    pub fn outstanding(&self, index: usize) -> usize {
        self.endpoints[index].outstanding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    fn picks(router: &mut Router, n: usize, now: Timestamp) -> Vec<usize> {
        (0..n).map(|_| router.pick(now).index).collect()
    }

    #[test]
    fn round_robin_takes_turns_and_least_outstanding_fills_the_emptiest() {
        let mut rr = Router::new(3, Routing::RoundRobin);
        assert_eq!(picks(&mut rr, 7, at(0)), [0, 1, 2, 0, 1, 2, 0]);

        let mut lo = Router::new(3, Routing::LeastOutstanding);
        let first = picks(&mut lo, 3, at(0));
        assert_eq!(first, [0, 1, 2]);
        // Endpoint 1 answers twice as fast: it gets the next requests.
        lo.finish(Pick { index: 1, probe: false }, Health::Up, at(1));
        assert_eq!(lo.pick(at(1)).index, 1);
        lo.finish(Pick { index: 1, probe: false }, Health::Up, at(2));
        lo.finish(Pick { index: 2, probe: false }, Health::Up, at(2));
        assert_eq!(picks(&mut lo, 2, at(2)), [2, 1], "ties go in turn, from where the turn is");
        assert_eq!((lo.outstanding(0), lo.outstanding(1), lo.outstanding(2)), (1, 1, 1));
    }

    #[test]
    fn a_failed_endpoint_is_skipped_then_probed_then_back() {
        let mut r = Router::new(2, Routing::RoundRobin);
        let p = r.pick(at(0));
        assert_eq!(p.index, 0);
        assert_eq!(r.finish(p, Health::Down, at(10)), Change::Left);
        assert!(!r.in_rotation(0));
        assert_eq!(picks(&mut r, 3, at(100)), [1, 1, 1], "out for the first backoff (250 ms)");
        // The backoff is over: one probe, and only one while it is in flight.
        let probe = r.pick(at(260));
        assert_eq!(probe, Pick { index: 0, probe: true });
        assert_eq!(picks(&mut r, 2, at(261)), [1, 1]);
        // The probe fails: a longer backoff (500 ms).
        assert_eq!(r.finish(probe, Health::Down, at(270)), Change::Same);
        assert_eq!(r.pick(at(700)).index, 1);
        let probe = r.pick(at(771));
        assert_eq!(probe, Pick { index: 0, probe: true });
        assert_eq!(r.finish(probe, Health::Up, at(780)), Change::Back);
        assert!(r.in_rotation(0));
        assert_eq!(picks(&mut r, 2, at(781)), [1, 0], "back in turn");
    }

    #[test]
    fn with_every_endpoint_out_the_soonest_back_still_gets_the_request() {
        let mut r = Router::new(2, Routing::LeastOutstanding);
        r.mark_down(0, at(0));
        r.mark_down(1, at(0));
        r.mark_down(1, at(0)); // two failures: back later
        assert_eq!(r.pick(at(1)), Pick { index: 0, probe: false });
        let mut single = Router::new(1, Routing::RoundRobin);
        single.mark_down(0, at(0));
        assert_eq!(single.pick(at(1)).index, 0, "a single endpoint is never skipped");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let ms: Vec<u128> = (1..=7).map(|f| backoff(f).as_millis()).collect();
        assert_eq!(ms, [250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
