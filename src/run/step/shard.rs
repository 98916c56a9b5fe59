//! The step's part in a sharded run (`--shard K/N`, [`crate::loadgen::shard`]): it walks the
//! single-process run's arrivals, passes over the other shards' when they fall due and numbers
//! its own by their index in that run.

use super::{Action, StepRun};
use crate::engine::RequestId;
use crate::loadgen::Skip;
use crate::loadgen::shard::Shard;
use crate::report::Phase;
use crate::time::Timestamp;

/// A step's shard and where it is in the single-process run's arrivals.
pub(super) struct StepShard {
    shard: Shard,
    /// The index of the next arrival in the single-process run (the workload's request index).
    next: u64,
    /// The index of the measurement's first arrival, once it started.
    measure_first: Option<u64>,
}

impl StepRun {
    /// Sends only `shard`'s arrivals; `first` is the index, in the single-process run, of this
    /// step's first arrival (the driver's next workload request).
    pub fn with_shard(mut self, shard: Shard, first: u64) -> Self {
        self.shard = Some(StepShard { shard, next: first, measure_first: None });
        self
    }

    /// The index a request just submitted (or refused) as batcher id `id` has in the
    /// single-process run: `id` itself unless sharded.
    pub(super) fn next_index(&mut self, id: RequestId) -> RequestId {
        match &mut self.shard {
            Some(s) => {
                s.next += 1;
                s.next - 1
            }
            None => id,
        }
    }

    /// The measurement starts with the next arrival.
    pub(super) fn shard_measure_starts(&mut self) {
        if let Some(s) = &mut self.shard {
            s.measure_first.get_or_insert(s.next);
        }
    }

    /// A counted measurement of `total` arrivals as this shard sees it: its own part of them,
    /// once the measurement started; `total` itself unless sharded.
    pub(super) fn own_part(&self, total: Option<u64>) -> Option<u64> {
        match &self.shard {
            Some(StepShard { shard, measure_first: Some(first), .. }) => total.map(|t| shard.owned_in(*first, t)),
            _ => total,
        }
    }

    /// When the next arrival is another shard's: passes over it once due ([`Action::Pass`]), or
    /// waits for its time (or the phase's `deadline`); `None` when it is this shard's.
    pub(super) fn pass_others(&mut self, now: Timestamp, phase: Phase, deadline: Option<Timestamp>) -> Option<Action> {
        let s = self.shard.as_mut()?;
        if s.shard.owns(s.next) {
            return None;
        }
        Some(match self.scheduler.skip(now) {
            Skip::Passed => {
                s.next += 1;
                self.phases[phase].passed += 1;
                Action::Pass
            }
            Skip::At(t) => Action::Wait(Some(deadline.map_or(t, |d| d.min(t)))),
            Skip::Exhausted => self.schedule_exhausted(now),
        })
    }
}
