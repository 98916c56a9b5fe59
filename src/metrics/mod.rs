//! Metrics: per-request mapping from engine stats, and streaming aggregation.
//!
//! # Files
//! - `mapper`: engine stats to TTFT, TPOT, per-gap ITL as runs of equal gaps (`Itl`), the engine's
//!   send time, and so on; a missing timestamp is an absent metric, inconsistent stats are flagged.
//! - `distribution`: HDR histograms with exact moments, 100 geometric bins.
//! - `series`: per-interval time series in at most 1000 intervals (ten merge into one as the window
//!   grows), sans-IO.
//! - `client`: dispatch delay and client lag from a request's intended arrival, and the validity
//!   warning when the client lag's p99 is over 10 ms.
//! - `endpoints`: per-endpoint counts, errors and latency, failure episodes and the time to recover.
//! - `server`: the deltas of the servers' own counters over a benchmark.
//! - `media`: the images a benchmark sent and the engine's encoder-cache hits; `prompt_target`:
//!   the engine's prompt counts against the lengths a token-exact workload sized its prompts to.
//! - `sessions`: a benchmark's multi-turn sessions, and TTFT and cache hit rate by turn index.
//! - `aggregate`, `result`: `BenchmarkResult`; `PerDistribution<T>`, the one list of the eight
//!   timing distributions (`Distributions` is `PerDistribution<Summary>`).
//! - `slo` (per-request objectives, goodput), `repeats` (mean, spread and Student-t interval over
//!   `--repeat` runs), `pareto` (the throughput/latency Pareto front).
//!
//! Knows nothing of `scenario/` or `run/`.
pub mod aggregate;
pub mod client;
pub mod distribution;
pub mod endpoints;
pub mod mapper;
pub mod media;
pub mod pareto;
pub mod prompt_target;
pub mod repeats;
pub mod result;
pub mod series;
pub mod server;
pub mod sessions;
pub mod slo;
pub use crate::time::WallAnchor;
pub use aggregate::BenchmarkAggregator;
pub use distribution::{Distribution, Summary};
pub use mapper::{Anomalies, Itl, RequestMetrics, map_request};
pub use repeats::{RepeatSummary, Spread, summarize_repeats};
pub use result::{BenchmarkResult, all_metric_names, metric_names};
pub use slo::{Slo, SloResult, SloVerdict};
