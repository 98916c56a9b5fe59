//! The faults only a server can inject, drawn per request: refusals (429, 503), a connection
//! dropped mid-stream, a stalled stream, and an abrupt exit.
//!
//! They are `[faults]` keys like the engine's ([`crate::engine::faults::FAULT_KEYS`], kind
//! `http`); `batchlab run` ignores them. Request `n` (1-based, every generation request counted)
//! draws from `SplitMix64::derive(seed, n)`, every trigger in a fixed order whether or not it
//! fires, so a seed gives the same faults on the same requests.

use std::time::Duration;

use crate::engine::faults::{FaultTrigger, Faults};
use crate::rng::SplitMix64;

/// The server's faults, from `[faults]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HttpFaults {
    /// Answer 429 (with `Retry-After`).
    pub reject_429: FaultTrigger,
    /// Answer 503 (with `Retry-After`).
    pub reject_503: FaultTrigger,
    /// Drop the connection after half the stream's tokens.
    pub drop_stream: FaultTrigger,
    /// Stall the stream for `stall_for` after its first token.
    pub stall_stream: FaultTrigger,
    /// How long a stalled stream stalls.
    pub stall_for: Duration,
    /// Exit at once (status 1, connections dropped) when this request arrives.
    pub exit_server: FaultTrigger,
    /// Seed of the draws.
    pub seed: u64,
}

/// What befalls one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestFaults {
    /// Refuse it with this status.
    pub reject: Option<u16>,
    /// Drop its connection mid-stream.
    pub drop_stream: bool,
    /// Stall its stream this long after the first token.
    pub stall: Option<Duration>,
    /// Exit the server instead of answering it.
    pub exit: bool,
}

impl HttpFaults {
    /// The HTTP faults of a scenario's `[faults]`, drawn from `seed`.
    pub fn from_faults(faults: &Faults, seed: u64) -> HttpFaults {
        HttpFaults {
            reject_429: faults.http_429.clone(),
            reject_503: faults.http_503.clone(),
            drop_stream: faults.drop_stream.clone(),
            stall_stream: faults.stall_stream.clone(),
            stall_for: faults.stall_for,
            exit_server: faults.exit_server.clone(),
            seed,
        }
    }

    /// The faults of request `n` (1-based).
    pub fn draw(&self, n: u64) -> RequestFaults {
        let mut rng = SplitMix64::derive(self.seed ^ 0x4854_5450, n);
        let mut fires = |t: &FaultTrigger| {
            let by_count = t.every.is_some_and(|every| every > 0 && n % every == 0);
            let by_chance = rng.chance(t.probability);
            by_count || by_chance
        };
        let exit = fires(&self.exit_server);
        let r429 = fires(&self.reject_429);
        let r503 = fires(&self.reject_503);
        let drop_stream = fires(&self.drop_stream);
        let stall = fires(&self.stall_stream);
        RequestFaults {
            reject: if r429 {
                Some(429)
            } else if r503 {
                Some(503)
            } else {
                None
            },
            drop_stream,
            stall: stall.then_some(self.stall_for),
            exit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_fire_by_count_and_by_chance_reproducibly() {
        let f = HttpFaults {
            reject_503: FaultTrigger::every(3),
            drop_stream: FaultTrigger::probability(0.5),
            ..HttpFaults::default()
        };
        let draws: Vec<RequestFaults> = (1..=300).map(|n| f.draw(n)).collect();
        assert_eq!(draws.iter().filter(|d| d.reject == Some(503)).count(), 100);
        let dropped = draws.iter().filter(|d| d.drop_stream).count();
        assert!((100..200).contains(&dropped), "{dropped}");
        assert_eq!(draws, (1..=300).map(|n| f.draw(n)).collect::<Vec<_>>());
        assert!(draws.iter().all(|d| !d.exit && d.stall.is_none()));
    }
}
