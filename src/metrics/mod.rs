//! Metrics: per-request mapping from engine stats, and streaming aggregation.
pub mod mapper;
pub use mapper::{Anomalies, RequestMetrics, WallAnchor, map_request};
