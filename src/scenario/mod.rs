//! Scenario files: TOML in, a validated [`plan::Plan`] out.
pub mod plan;
