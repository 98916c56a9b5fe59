//! How closely the engine's prompt counts match the lengths the workload sized its prompts to.
//!
//! A workload that promises exact prompt lengths (`workload.tokenizer`, or `[workload.images]
//! count_in_prompt`: [`crate::loadgen::Workload::prompt_target`]) gives each request a target; the
//! engine reports the prompt tokens it counted. Over the measured requests that completed with a
//! target: how many the engine counted, how many of those differ from their target, and by how
//! much (measured − target). Absent from a benchmark whose requests have no target.

use serde::{Deserialize, Serialize};

/// A benchmark's targets against the engine's counts; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptTargetResult {
    /// Completed measured requests with a target whose prompt tokens the engine counted.
    pub requests: u64,
    /// Of those, the ones whose count differs from the target.
    pub differ: u64,
    /// The largest |measured − target|, tokens.
    pub max_abs_diff: u64,
    /// The mean of measured − target, tokens (positive: the engine counted more).
    pub mean_diff: f64,
    /// Completed measured requests with a target whose engine gave no prompt count.
    pub unmeasured: u64,
}

/// Sums [`PromptTargetResult`] request by request.
#[derive(Clone, Debug, Default)]
pub struct PromptTargetTally {
    requests: u64,
    differ: u64,
    max_abs_diff: u64,
    sum_diff: i128,
    unmeasured: u64,
}

impl PromptTargetTally {
    /// A completed request's target and the prompt tokens its engine counted, if it said.
    pub fn record(&mut self, target: u32, measured: Option<u32>) {
        let Some(measured) = measured else {
            self.unmeasured += 1;
            return;
        };
        self.requests += 1;
        let diff = i64::from(measured) - i64::from(target);
        self.differ += u64::from(diff != 0);
        self.max_abs_diff = self.max_abs_diff.max(diff.unsigned_abs());
        self.sum_diff += i128::from(diff);
    }

    /// The result; `None` when no request had a target.
    pub fn finish(&self) -> Option<PromptTargetResult> {
        if self.requests + self.unmeasured == 0 {
            return None;
        }
        Some(PromptTargetResult {
            requests: self.requests,
            differ: self.differ,
            max_abs_diff: self.max_abs_diff,
            mean_diff: if self.requests == 0 { 0.0 } else { self.sum_diff as f64 / self.requests as f64 },
            unmeasured: self.unmeasured,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_requests_that_miss_their_target_and_by_how_much() {
        let mut t = PromptTargetTally::default();
        assert_eq!(t.finish(), None);
        t.record(100, Some(100));
        t.record(100, Some(108));
        t.record(50, Some(47));
        t.record(70, None);
        let r = t.finish().unwrap();
        assert_eq!((r.requests, r.differ, r.max_abs_diff, r.unmeasured), (3, 2, 8, 1));
        assert!((r.mean_diff - 5.0 / 3.0).abs() < 1e-12, "{r:?}");
    }
}
