//! Metrics: per-request mapping from engine stats, and streaming aggregation.
pub mod aggregate;
pub mod client;
pub mod distribution;
pub mod endpoints;
pub mod mapper;
pub mod pareto;
pub mod repeats;
pub mod result;
pub mod series;
pub mod server;
pub mod slo;
pub use crate::time::WallAnchor;
pub use aggregate::BenchmarkAggregator;
pub use distribution::{Distribution, Summary};
pub use mapper::{Anomalies, Itl, RequestMetrics, map_request};
pub use repeats::{RepeatSummary, Spread, summarize_repeats};
pub use result::{BenchmarkResult, all_metric_names, metric_names};
pub use slo::{Slo, SloResult, SloVerdict};
