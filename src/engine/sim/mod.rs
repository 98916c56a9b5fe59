//! The deterministic simulated engine.
pub mod config;
pub use config::{CostModel, FaultTrigger, Faults, SimConfig, TimeMode};
