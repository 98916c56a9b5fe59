//! Per-token times for an engine whose tokens come out at step ends shared by a whole batch.
//!
//! A continuous-batching engine (the simulator) samples one token per running sequence at the end
//! of each step, so every request of a `generate` call takes its token times from one list of
//! step ends, and a request's tokens are a few runs of consecutive steps (one unless a
//! preemption broke it). [`StepTokens`] says exactly that: the call's [`StepEnds`], shared, and
//! the request's runs. It holds the same times as a per-token list (`EngineStats::token_ts`)
//! without a time per token, and [`StepEnds`] reads each step's time on our clock once for the
//! whole batch, so the metrics mapper gets a request's inter-token gaps in O(runs of equal gaps)
//! instead of O(tokens).

use std::ops::Range;
use std::sync::Arc;

use serde::{Serialize, Serializer};

use crate::time::Timestamp;

/// When each step of one `generate` call ended, in engine-clock seconds, shared by its requests.
#[derive(Debug, PartialEq)]
pub struct StepEnds {
    secs: Vec<f64>,
    /// The same on our clock, for an engine on it ([`crate::engine::ClockDomain::Monotonic`]);
    /// `None` unless every end is a usable time and they never go backwards.
    on_our_clock: Option<OnOurClock>,
}

/// [`StepEnds`] read on our clock once for every request of the call.
#[derive(Debug, PartialEq)]
pub(crate) struct OnOurClock {
    /// Each end, as `Timestamp::from_secs_f64` reads it (non-decreasing).
    pub(crate) at: Vec<Timestamp>,
    /// For each step `k ≥ 1`, the last step `j ≥ k` such that the gaps ending at steps `k..=j`
    /// (the gap ending at step `k` is `at[k] − at[k − 1]`) are all equal: a run of equal gaps
    /// is found in one jump.
    pub(crate) same_gap_until: Vec<usize>,
}

impl OnOurClock {
    /// The gap that ends at step `k ≥ 1`.
    pub(crate) fn gap(&self, k: usize) -> std::time::Duration {
        self.at[k].saturating_since(self.at[k - 1])
    }
}

impl StepEnds {
    /// Step ends in engine-clock seconds, in step order.
    pub fn new(secs: Vec<f64>) -> Self {
        let on_our_clock = Self::read_on_our_clock(&secs);
        StepEnds { secs, on_our_clock }
    }

    /// `secs` on our clock, with the runs of equal gaps; `None` unless every end is a usable
    /// time and they never go backwards (in seconds and once read).
    fn read_on_our_clock(secs: &[f64]) -> Option<OnOurClock> {
        let mut at = Vec::with_capacity(secs.len());
        let mut previous = f64::NEG_INFINITY;
        for &s in secs {
            let t = Timestamp::from_secs_f64(s)?;
            if s < previous || at.last().is_some_and(|&last| t < last) {
                return None;
            }
            previous = s;
            at.push(t);
        }
        let n = at.len();
        let mut same_gap_until = vec![0; n];
        for k in (1..n).rev() {
            let gap = at[k].saturating_since(at[k - 1]);
            same_gap_until[k] =
                if k + 1 < n && at[k + 1].saturating_since(at[k]) == gap { same_gap_until[k + 1] } else { k };
        }
        Some(OnOurClock { at, same_gap_until })
    }

    /// Engine-clock seconds at which step `k` ended.
    pub fn secs(&self) -> &[f64] {
        &self.secs
    }

    pub(crate) fn on_our_clock(&self) -> Option<&OnOurClock> {
        self.on_our_clock.as_ref()
    }
}

/// One request's token times: it sampled one token at the end of each step of `runs`, runs of
/// consecutive steps of `ends`, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct StepTokens {
    /// The call's step ends.
    pub ends: Arc<StepEnds>,
    /// Runs of consecutive steps, ascending and apart (indices into `ends`).
    pub runs: Vec<Range<usize>>,
}

impl StepTokens {
    /// Tokens: one per step of every run.
    pub fn count(&self) -> usize {
        self.runs.iter().map(|run| run.len()).sum()
    }

    /// Each token's time in engine-clock seconds, in order: what `EngineStats::token_ts` would hold.
    pub fn times(&self) -> impl Iterator<Item = f64> + '_ {
        self.runs.iter().flat_map(|run| self.ends.secs[run.clone()].iter().copied())
    }
}

impl Serialize for StepTokens {
    /// As the per-token list it stands for.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.times())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_equal_gaps_are_found_in_one_jump() {
        let ends = StepEnds::new(vec![1.0, 1.001, 1.002, 1.003, 1.005, 1.007, 1.008]);
        let clock = ends.on_our_clock().expect("usable and in order");
        let gaps: Vec<u64> = (1..7).map(|k| clock.gap(k).as_nanos() as u64).collect();
        // Equal gaps are those `Timestamp::from_secs_f64` reads as equal, exactly.
        for k in 1..7 {
            let j = clock.same_gap_until[k];
            assert!((k..=j).all(|i| gaps[i - 1] == gaps[k - 1]), "k {k} j {j} {gaps:?}");
            assert!(j == 6 || gaps[j] != gaps[k - 1], "k {k} j {j} {gaps:?}");
        }
        let tokens = StepTokens { ends: Arc::new(ends), runs: vec![0..2, 4..7] };
        assert_eq!(tokens.count(), 5);
        assert_eq!(tokens.times().collect::<Vec<_>>(), vec![1.0, 1.001, 1.005, 1.007, 1.008]);
        assert_eq!(serde_json::to_string(&tokens).unwrap(), "[1.0,1.001,1.005,1.007,1.008]");
    }

    #[test]
    fn ends_out_of_order_or_unusable_are_not_read_on_our_clock() {
        assert!(StepEnds::new(vec![1.0, 0.5]).on_our_clock().is_none());
        assert!(StepEnds::new(vec![1.0, f64::NAN]).on_our_clock().is_none());
        assert!(StepEnds::new(vec![-1.0, 1.0]).on_our_clock().is_none());
        assert!(StepEnds::new(Vec::new()).on_our_clock().is_some());
    }
}
