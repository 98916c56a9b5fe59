//! The shard rule: which of a run's requests shard `k` of `n` sends, and what share of a closed
//! loop's concurrency it keeps. Pure functions, the one place the rule is written
//! (`batchlab run --shard K/N`, docs/distributed.md).
//!
//! **Requests.** The single-process run numbers its arrivals `i = 0, 1, 2, …` in the order its
//! profile offers them (warm-up, measurement and cool-down alike, over every step of the run).
//! Arrival `i` belongs to shard `i mod n`. A shard walks the very same schedule: it passes over
//! the arrivals of the other shards when they fall due ([`crate::loadgen::Scheduler::skip`]) and
//! sends its own with the single-process run's arrival time and the workload's request `i` (its
//! prompt and output length). The union of the shards is the single-process schedule.
//!
//! **Limits.** Counted limits (`stop.max_requests`, a warm-up or cool-down of N requests) count the
//! arrivals passed over too, so the shards stop at the same arrival index and their union is the
//! whole; time limits are the same on every shard. A closed loop's concurrency `c` (and any
//! `max_concurrency` cap) is split as `c / n` rounded down, plus one for the first `c mod n`
//! shards ([`Shard::share`]): the shares sum to `c`. A shard whose share would be 0 is refused.
//!
//! **Refused.** A sweep (its rates are measured as it goes, so the shards' steps would differ), a
//! synchronous step with `n > 1` (one request at a time cannot be split) and sessions
//! (`[workload.sessions]`: their turns are chained by replies, so the arrival order is not the
//! single-process run's) are refused with [`ShardError`].

use super::profile::{Step, StepKind};

/// Shard `k` (0-based) of `n`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    /// This shard's index, `0 ≤ k < n` (Kubernetes' `$JOB_COMPLETION_INDEX`).
    pub k: u32,
    /// How many shards the run is split into.
    pub n: u32,
}

/// Why a shard cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    /// `K/N` did not parse, or `K ≥ N`, or `N = 0`.
    #[error("--shard {text:?}: expected K/N with 0 <= K < N, e.g. 0/3 (K is 0-based, as $JOB_COMPLETION_INDEX)")]
    Syntax {
        /// What was given.
        text: String,
    },
    /// A concurrency (or `max_concurrency`) smaller than the number of shards.
    #[error(
        "step {step}: {what} = {value} cannot be split over {n} shards (each needs at least 1); use at most {value} shards"
    )]
    TooFewSlots {
        /// The step.
        step: String,
        /// Which limit.
        what: &'static str,
        /// Its value.
        value: u32,
        /// The shards asked for.
        n: u32,
    },
    /// A load profile the shard rule does not cover.
    #[error("{what} cannot be sharded: {why}")]
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// Why not.
        why: &'static str,
    },
}

impl std::str::FromStr for Shard {
    type Err = ShardError;

    /// `K/N`, e.g. `0/3`.
    fn from_str(text: &str) -> Result<Shard, ShardError> {
        let bad = || ShardError::Syntax { text: text.to_owned() };
        let (k, n) = text.trim().split_once('/').ok_or_else(bad)?;
        let (k, n): (u32, u32) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if n == 0 || k >= n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

impl Shard {
    /// The whole run: one shard of one.
    pub const WHOLE: Shard = Shard { k: 0, n: 1 };

    /// Whether arrival `i` of the single-process run is this shard's.
    pub fn owns(self, i: u64) -> bool {
        i % u64::from(self.n) == u64::from(self.k)
    }

    /// How many of the arrivals `first .. first + count` of the single-process run are this
    /// shard's: its part of a counted phase that starts at arrival `first`.
    pub fn owned_in(self, first: u64, count: u64) -> u64 {
        let (k, n) = (u64::from(self.k), u64::from(self.n));
        let before = |x: u64| x / n + u64::from(k < x % n);
        before(first + count) - before(first)
    }

    /// This shard's part of `total` slots: `total / n`, plus one for the first `total mod n`
    /// shards, so the parts of all shards sum to `total`.
    pub fn share(self, total: u32) -> u32 {
        // Slot i is shard i mod n's, as an arrival is: the shard's part of slots 0 .. total.
        u32::try_from(self.owned_in(0, u64::from(total))).expect("a part of a u32 fits one")
    }

    /// `step` as this shard runs it: the same arrivals, its share of the concurrency and of any
    /// `max_concurrency` cap (module docs). Fails where the rule does not apply.
    pub fn step(self, step: &Step) -> Result<Step, ShardError> {
        if self.n == 1 {
            return Ok(step.clone());
        }
        let split = |what: &'static str, value: u32| {
            if value < self.n {
                Err(ShardError::TooFewSlots { step: step.name.clone(), what, value, n: self.n })
            } else {
                Ok(self.share(value))
            }
        };
        let cap = |c: Option<u32>| c.map(|c| split("max_concurrency", c)).transpose();
        let kind = match step.kind.clone() {
            StepKind::Synchronous => split("concurrency (synchronous)", 1).map(|_| StepKind::Synchronous)?,
            StepKind::Concurrent(c) => StepKind::Concurrent(split("concurrency", c)?),
            StepKind::Throughput { max_concurrency } => {
                StepKind::Throughput { max_concurrency: split("max_concurrency", max_concurrency)? }
            }
            StepKind::Constant { rate, max_concurrency } => {
                StepKind::Constant { rate, max_concurrency: cap(max_concurrency)? }
            }
            StepKind::Poisson { rate, seed, max_concurrency } => {
                StepKind::Poisson { rate, seed, max_concurrency: cap(max_concurrency)? }
            }
            StepKind::Gamma { rate, burstiness, seed, max_concurrency } => {
                StepKind::Gamma { rate, burstiness, seed, max_concurrency: cap(max_concurrency)? }
            }
            StepKind::Trace { arrivals, time_scale, max_concurrency } => {
                StepKind::Trace { arrivals, time_scale, max_concurrency: cap(max_concurrency)? }
            }
        };
        Ok(Step { kind, ..step.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_arrival_has_exactly_one_shard() {
        for n in [1u32, 2, 3, 7] {
            for i in 0..100u64 {
                let owners: Vec<u32> = (0..n).filter(|&k| Shard { k, n }.owns(i)).collect();
                assert_eq!(owners, [(i % u64::from(n)) as u32], "arrival {i} of {n} shards");
            }
        }
    }

    #[test]
    fn a_shards_part_of_a_counted_phase_is_the_arrivals_it_owns() {
        for n in [1u32, 2, 3, 7] {
            for first in 0..20u64 {
                for count in 0..30u64 {
                    let mut sum = 0;
                    for k in 0..n {
                        let shard = Shard { k, n };
                        let owned = (first..first + count).filter(|&i| shard.owns(i)).count() as u64;
                        assert_eq!(shard.owned_in(first, count), owned, "{k}/{n} of {first}..+{count}");
                        sum += owned;
                    }
                    assert_eq!(sum, count);
                }
            }
        }
    }

    #[test]
    fn shares_sum_to_the_whole_and_differ_by_at_most_one() {
        for n in [1u32, 2, 3, 7] {
            for total in n..40 {
                let shares: Vec<u32> = (0..n).map(|k| Shard { k, n }.share(total)).collect();
                assert_eq!(shares.iter().sum::<u32>(), total, "{total} over {n}: {shares:?}");
                let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(hi - lo <= 1 && *lo >= 1, "{total} over {n}: {shares:?}");
            }
        }
        // 10 over 3: 4, 3, 3.
        assert_eq!((0..3).map(|k| Shard { k, n: 3 }.share(10)).collect::<Vec<_>>(), [4, 3, 3]);
    }

    #[test]
    fn parses_k_of_n_and_refuses_the_rest() {
        assert_eq!("2/7".parse::<Shard>(), Ok(Shard { k: 2, n: 7 }));
        assert_eq!(" 0 / 1 ".parse::<Shard>(), Ok(Shard::WHOLE));
        for bad in ["3/3", "1/0", "1", "a/2", "-1/2", "1/2/3", ""] {
            assert!(matches!(bad.parse::<Shard>(), Err(ShardError::Syntax { .. })), "{bad:?}");
        }
    }

    #[test]
    fn a_step_keeps_its_arrivals_and_splits_its_slots() {
        let step = |kind| Step { name: "s".into(), kind, rampup: None };
        let shard = Shard { k: 2, n: 3 };
        assert_eq!(shard.step(&step(StepKind::Concurrent(8))).map(|s| s.kind), Ok(StepKind::Concurrent(2)));
        assert_eq!(
            Shard { k: 0, n: 3 }.step(&step(StepKind::Throughput { max_concurrency: 8 })).map(|s| s.kind),
            Ok(StepKind::Throughput { max_concurrency: 3 })
        );
        let rate = StepKind::Poisson { rate: 5.0, seed: 9, max_concurrency: Some(7) };
        assert_eq!(
            shard.step(&step(rate)).map(|s| s.kind),
            Ok(StepKind::Poisson { rate: 5.0, seed: 9, max_concurrency: Some(2) })
        );
        let open = StepKind::Constant { rate: 5.0, max_concurrency: None };
        assert_eq!(shard.step(&step(open.clone())).map(|s| s.kind), Ok(open));
        assert!(matches!(
            shard.step(&step(StepKind::Concurrent(2))),
            Err(ShardError::TooFewSlots { value: 2, n: 3, .. })
        ));
        assert!(shard.step(&step(StepKind::Synchronous)).is_err());
        assert_eq!(Shard::WHOLE.step(&step(StepKind::Synchronous)).map(|s| s.kind), Ok(StepKind::Synchronous));
    }
}
