//! A sharded run's start (`batchlab run --shard K/N --start-at T`): once the engine is loaded the
//! run waits for the common wall-clock instant, starts its schedule then, and keeps how late it
//! woke for its report's `shard` block ([`ShardInfo`]). The rule of which requests a shard sends
//! is [`crate::loadgen::shard`]'s.

use std::time::{Duration, SystemTime};

use super::Interrupt;
use crate::loadgen::shard::Shard;
use crate::report::BenchmarkResult;
use crate::report::shard::{ShardInfo, ShardWindow};
use crate::time::Timestamp;

/// How a shard of a run is run: which shard, when it starts, what a launcher measured of its clock.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardRun {
    /// Which shard.
    pub shard: Shard,
    /// The common start, on the wall clock; `None` starts as soon as the engine is loaded.
    pub start_at: Option<SystemTime>,
    /// This host's clock offset a launcher measured (ms), recorded as given.
    pub clock_offset_ms: Option<f64>,
}

impl ShardRun {
    /// Waits until `start_at` (in slices, so an interrupt ends the wait) and says how late the
    /// wake-up was, ms; `None` without a `start_at`.
    pub(super) fn wait_for_start(&self, interrupt: &Interrupt) -> Option<f64> {
        let at = self.start_at?;
        loop {
            let now = SystemTime::now();
            match at.duration_since(now) {
                Ok(left) if !left.is_zero() && !interrupt.is_fired() => {
                    std::thread::sleep(left.min(Duration::from_millis(100)));
                }
                _ => return Some(now.duration_since(at).unwrap_or_default().as_secs_f64() * 1e3),
            }
        }
    }

    /// The report's `shard` block: the wake-up's lateness, when the schedule started on the run's
    /// clock, the benchmarks' measured `windows` (in their order); the host is the report's to fill in.
    pub(super) fn info(
        &self,
        start_lateness_ms: Option<f64>,
        schedule_start_ns: Timestamp,
        benchmarks: &[BenchmarkResult],
        windows: &[(Timestamp, Timestamp)],
    ) -> ShardInfo {
        let windows = benchmarks
            .iter()
            .zip(windows)
            .map(|(b, &(start_ns, end_ns))| ShardWindow {
                benchmark: b.name.clone(),
                repeat: b.repeat,
                start_ns,
                end_ns,
            })
            .collect();
        ShardInfo {
            k: self.shard.k,
            n: self.shard.n,
            start_at_unix_s: self
                .start_at
                .map(|t| t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64()),
            start_lateness_ms,
            clock_offset_ms: self.clock_offset_ms,
            host: None,
            schedule_start_ns,
            windows,
        }
    }
}
