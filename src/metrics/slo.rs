//! Per-request service-level objectives (`[slo]`) and goodput.
//!
//! A measured request **meets** the SLO when it completed and every objective that is set holds
//! for it (`≤`, in milliseconds). An error never meets it. A completed request that lacks the
//! metric an objective needs (no `itl` from an engine without per-token times, no `ttft` when the
//! engine gave no first-token time) does **not** meet it either: an objective that cannot be
//! checked must not pass silently. Such requests are also counted as `unmeasurable`, so a report
//! says why attainment is low. Cancelled requests (which never ran) and requests still running at
//! the end of an interrupted benchmark are not judged.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::mapper::RequestMetrics;

/// Per-request objectives, in milliseconds; `None` leaves that metric unconstrained.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Most time to the first token.
    pub ttft_ms: Option<f64>,
    /// Most time per output token after the first (vLLM's TPOT).
    pub tpot_ms: Option<f64>,
    /// Longest gap between two consecutive tokens of the request (every `itl` gap at most this).
    pub itl_ms: Option<f64>,
    /// Most end-to-end latency.
    pub latency_ms: Option<f64>,
}

/// How one completed request fares against an [`Slo`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SloVerdict {
    /// Every objective holds.
    Met,
    /// Some objective is exceeded.
    Missed,
    /// Some objective's metric is absent for the request (it does not meet the SLO).
    Unmeasurable,
}

impl Slo {
    /// Whether any objective is set.
    pub fn is_set(&self) -> bool {
        self.objectives().iter().any(|(_, bound)| bound.is_some())
    }

    fn objectives(&self) -> [(Objective, Option<f64>); 4] {
        [
            (Objective::Ttft, self.ttft_ms),
            (Objective::Tpot, self.tpot_ms),
            (Objective::Itl, self.itl_ms),
            (Objective::Latency, self.latency_ms),
        ]
    }

    /// Judges one completed request. A missing metric outweighs an exceeded one: the request
    /// could not be fully checked.
    pub fn judge(&self, m: &RequestMetrics) -> SloVerdict {
        let ms = |d: Duration| d.as_nanos() as f64 / 1e6;
        let mut verdict = SloVerdict::Met;
        for (objective, bound) in self.objectives() {
            let Some(bound) = bound else { continue };
            let value = match objective {
                Objective::Ttft => m.ttft,
                Objective::Tpot => m.tpot,
                Objective::Itl => m.itl_max(),
                Objective::Latency => Some(m.latency),
            };
            match value.map(ms) {
                None => return SloVerdict::Unmeasurable,
                Some(v) if v > bound => verdict = SloVerdict::Missed,
                Some(_) => {}
            }
        }
        verdict
    }
}

#[derive(Copy, Clone)]
enum Objective {
    Ttft,
    Tpot,
    Itl,
    Latency,
}

/// A benchmark's result against its [`Slo`] (`benchmarks[].slo` in report.json).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SloResult {
    /// Measured requests judged: completed plus failed.
    pub judged: u64,
    /// Requests that met every objective.
    pub met: u64,
    /// Completed requests lacking a metric an objective needs (counted as not met).
    pub unmeasurable: u64,
    /// `met / judged`; `None` when nothing was judged.
    pub attainment: Option<f64>,
    /// Requests that met the SLO per second of the window.
    pub goodput_requests_per_s: Option<f64>,
    /// Output tokens of requests that met the SLO per second of the window.
    pub goodput_output_tokens_per_s: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(ttft_ms: Option<u64>, tpot_ms: Option<u64>, gaps_ms: &[u64], latency_ms: u64) -> RequestMetrics {
        RequestMetrics {
            ttft: ttft_ms.map(Duration::from_millis),
            tpot: tpot_ms.map(Duration::from_millis),
            itl: gaps_ms.iter().map(|&g| Duration::from_millis(g)).collect(),
            latency: Duration::from_millis(latency_ms),
            ..RequestMetrics::default()
        }
    }

    /// One row per case: objectives, request, verdict.
    #[test]
    fn verdicts() {
        use SloVerdict::*;
        let all = Slo { ttft_ms: Some(50.0), tpot_ms: Some(10.0), itl_ms: Some(20.0), latency_ms: Some(200.0) };
        let latency_only = Slo { latency_ms: Some(200.0), ..Slo::default() };
        let cases: &[(&Slo, RequestMetrics, SloVerdict)] = &[
            (&all, request(Some(50), Some(10), &[5, 20, 5], 200), Met),
            (&all, request(Some(51), Some(10), &[5, 20, 5], 200), Missed),
            (&all, request(Some(50), Some(11), &[5, 20, 5], 200), Missed),
            (&all, request(Some(50), Some(10), &[5, 21, 5], 200), Missed),
            (&all, request(Some(50), Some(10), &[5, 20, 5], 201), Missed),
            (&all, request(Some(50), Some(10), &[], 200), Unmeasurable),
            (&all, request(None, Some(10), &[5], 200), Unmeasurable),
            (&all, request(Some(500), Some(10), &[], 2000), Unmeasurable),
            (&latency_only, request(None, None, &[], 150), Met),
            (&latency_only, request(None, None, &[], 250), Missed),
            (&Slo::default(), request(None, None, &[], 1_000_000), Met),
        ];
        for (slo, m, expected) in cases {
            assert_eq!(slo.judge(m), *expected, "{slo:?} {m:?}");
        }
        assert!(all.is_set() && latency_only.is_set() && !Slo::default().is_set());
    }
}
