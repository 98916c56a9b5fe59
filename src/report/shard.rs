//! report.json's `shard` block: which shard of a sharded run (`batchlab run --shard K/N`) this
//! report is, when it was told to start and how late it did, its clock's offset when a launcher
//! measured one, and its host. Absent from an unsharded run's report (docs/distributed.md).

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// A shard's place in its run and how it started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// This shard's index, 0-based.
    pub k: u32,
    /// The number of shards.
    pub n: u32,
    /// The common start (`--start-at`), in unix seconds; absent when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at_unix_s: Option<f64>,
    /// How late the shard's schedule started after `start_at`, ms (its wake-up); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_lateness_ms: Option<f64>,
    /// The offset of this host's clock a launcher measured (`--clock-offset-ms`), ms; absent
    /// when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<f64>,
    /// The host the shard ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// When the shard's schedule started (its first benchmark), ns on the clock of its
    /// requests.jsonl: the merge aligns every shard's times on it (the common start).
    pub schedule_start_ns: Timestamp,
    /// Each benchmark's measured window on that clock, in run order.
    pub windows: Vec<ShardWindow>,
}

/// One benchmark's measured window in a shard.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardWindow {
    /// The benchmark.
    pub benchmark: String,
    /// Which repeat of it, 0-based.
    pub repeat: u32,
    /// The window's start and end, ns on the shard's clock.
    pub start_ns: Timestamp,
    /// See `start_ns`.
    pub end_ns: Timestamp,
}
