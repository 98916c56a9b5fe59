//! Whether a shard's measurements can be trusted, judged against bounds (`batchlab merge`'s
//! flags): a pure function of what its report says (docs/distributed.md, "The validity verdict").
//!
//! - **lagged**: its client fell behind its schedule: the p99 of its client lag (intended arrival
//!   to sent, minus the engine's part) above `max_client_lag_p99_ms`, in any benchmark;
//! - **started late**: it woke after the common start by more than `max_start_lateness_ms`;
//! - **clock off**: the clock offset a launcher measured is beyond `max_clock_offset_ms` either way.
//!
//! A shard without a problem is **ok**. A shard with one is still merged: its verdict says how far
//! to trust the merged numbers.

use serde::{Deserialize, Serialize};

/// The bounds a shard is judged against.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidityBounds {
    /// Most client lag p99, ms, in any benchmark.
    pub max_client_lag_p99_ms: f64,
    /// Most lateness of the shard's start after `--start-at`, ms.
    pub max_start_lateness_ms: f64,
    /// Most clock offset (either way), ms.
    pub max_clock_offset_ms: f64,
}

impl Default for ValidityBounds {
    /// 10 ms of client lag (batchlab's own `client_lag` warning's bound), 100 ms of start lateness,
    /// 5 ms of clock offset (well-run NTP on one network).
    fn default() -> Self {
        let lag = crate::metrics::client::CLIENT_LAG_P99_LIMIT.as_secs_f64() * 1e3;
        ValidityBounds { max_client_lag_p99_ms: lag, max_start_lateness_ms: 100.0, max_clock_offset_ms: 5.0 }
    }
}

/// What is wrong with a shard.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Its client lag p99 is beyond the bound.
    Lagged,
    /// It started late beyond the bound.
    StartedLate,
    /// Its clock offset is beyond the bound.
    ClockOff,
}

impl Problem {
    /// The verdict's word, as the console prints it.
    pub fn label(self) -> &'static str {
        match self {
            Problem::Lagged => "lagged",
            Problem::StartedLate => "started late",
            Problem::ClockOff => "clock off",
        }
    }
}

/// A shard's problems against `bounds`: empty is ok.
pub fn judge(
    client_lag_p99_ms: Option<f64>,
    start_lateness_ms: Option<f64>,
    clock_offset_ms: Option<f64>,
    bounds: &ValidityBounds,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    if client_lag_p99_ms.is_some_and(|lag| lag > bounds.max_client_lag_p99_ms) {
        problems.push(Problem::Lagged);
    }
    if start_lateness_ms.is_some_and(|late| late > bounds.max_start_lateness_ms) {
        problems.push(Problem::StartedLate);
    }
    if clock_offset_ms.is_some_and(|offset| offset.abs() > bounds.max_clock_offset_ms) {
        problems.push(Problem::ClockOff);
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_is_judged_on_its_own_and_at_the_bound_is_ok() {
        let b = ValidityBounds::default();
        assert_eq!(judge(None, None, None, &b), []);
        assert_eq!(judge(Some(10.0), Some(100.0), Some(-5.0), &b), [], "at every bound: ok");
        assert_eq!(judge(Some(10.5), None, None, &b), [Problem::Lagged]);
        assert_eq!(judge(None, Some(100.5), None, &b), [Problem::StartedLate]);
        assert_eq!(judge(None, None, Some(-5.5), &b), [Problem::ClockOff], "an offset either way");
        assert_eq!(judge(None, None, Some(5.5), &b), [Problem::ClockOff]);
        assert_eq!(
            judge(Some(11.0), Some(101.0), Some(6.0), &b),
            [Problem::Lagged, Problem::StartedLate, Problem::ClockOff]
        );
    }
}
