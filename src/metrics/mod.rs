//! Metrics: per-request mapping from engine stats, and streaming aggregation.
pub mod aggregate;
pub mod distribution;
pub mod mapper;
pub mod result;
pub mod series;
pub use crate::time::WallAnchor;
pub use aggregate::BenchmarkAggregator;
pub use distribution::{Distribution, Summary};
pub use mapper::{Anomalies, RequestMetrics, map_request};
pub use result::{BenchmarkResult, all_metric_names, metric_names};
