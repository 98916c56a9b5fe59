//! A step's counts, one set per phase: [`PerPhase`] indexed by [`Phase`], as
//! [`PerDistribution`](crate::metrics::result::PerDistribution) is by distribution.

use std::ops::{Index, IndexMut};

use crate::report::Phase;
use crate::time::Timestamp;

/// One phase's requests, as the step counts them. A phase uses the counts it needs: warmup its
/// submitted and in flight, the measurement all but in flight, cooldown its submitted and finished.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PhaseCounts {
    /// Requests submitted (admitted by the driver).
    pub submitted: u64,
    /// Arrivals of other shards passed over (`--shard`): counted limits count them too.
    pub passed: u64,
    /// Requests not finished yet (warmup: measurement waits for them).
    pub in_flight: u64,
    /// Requests finished, failed ones included.
    pub finished: u64,
    /// Requests that failed (not cancelled).
    pub errors: u64,
    /// Output tokens of the completed requests.
    pub output_tokens: u64,
    /// When the latest request finished.
    pub last_end: Option<Timestamp>,
}

impl PhaseCounts {
    /// Arrivals offered in the phase, this shard's and the others' (`--shard`): what a counted
    /// limit (`stop.max_requests`, a warm-up of N requests) counts.
    pub fn offered(&self) -> u64 {
        self.submitted + self.passed
    }
}

/// One `T` per [`Phase`], indexed by it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct PerPhase<T> {
    warmup: T,
    measure: T,
    cooldown: T,
}

impl<T> Index<Phase> for PerPhase<T> {
    type Output = T;
    fn index(&self, phase: Phase) -> &T {
        match phase {
            Phase::Warmup => &self.warmup,
            Phase::Measure => &self.measure,
            Phase::Cooldown => &self.cooldown,
        }
    }
}

impl<T> IndexMut<Phase> for PerPhase<T> {
    fn index_mut(&mut self, phase: Phase) -> &mut T {
        match phase {
            Phase::Warmup => &mut self.warmup,
            Phase::Measure => &mut self.measure,
            Phase::Cooldown => &mut self.cooldown,
        }
    }
}
