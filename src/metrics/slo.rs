//! Per-request service-level objectives (`[slo]`) and goodput.
//!
//! A measured request **meets** the SLO when it completed and every objective that is set holds
//! for it (`≤`, in milliseconds). An error never meets it. A completed request that lacks the
//! metric an objective needs (no `itl` from an engine without per-token times, no `ttft` when the
//! engine gave no first-token time) does **not** meet it either: an objective that cannot be
//! checked must not pass silently. Such requests are also counted as `unmeasurable`, so a report
//! says why attainment is low. Cancelled requests (which never ran) and requests still running at
//! the end of an interrupted benchmark are not judged.
//!
//! A completion of at most one output token has no TPOT and no gap between tokens. As in vLLM's
//! `vllm bench serve` (`calculate_metrics` in `vllm/benchmarks/serve.py`: "if output_len <= 1,
//! we regard tpot as 0 for goodput"), its TPOT counts as 0, so it meets `tpot_ms`; it meets
//! `itl_ms` too, having no gap to exceed it. Only when the engine gave the token count: without
//! one, the TPOT is unmeasurable as before.

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
            // At most one token: no TPOT and no gap, taken as 0 (vLLM's rule, see the module docs).
            let single_token = m.output_tokens.is_some_and(|n| n <= 1).then_some(Duration::ZERO);
            let value = match objective {
                Objective::Ttft => m.ttft,
                Objective::Tpot => m.tpot.or(single_token),
                Objective::Itl => m.itl_max().or(single_token),
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

    /// A completion of `n` tokens without TPOT or gaps (what the mapper gives for `n <= 1`).
    fn one_token(n: Option<u32>, ttft_ms: u64, latency_ms: u64) -> RequestMetrics {
        RequestMetrics { output_tokens: n, ..request(Some(ttft_ms), None, &[], latency_ms) }
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
            // vLLM's rule: at most one token has a TPOT of 0 and no gap, so it meets both…
            (&all, one_token(Some(1), 50, 200), Met),
            (&all, one_token(Some(0), 50, 200), Met),
            // …but not a TTFT or latency it exceeds…
            (&all, one_token(Some(1), 51, 200), Missed),
            (&all, one_token(Some(1), 50, 201), Missed),
            // …and without a token count nothing says it had one token.
            (&all, one_token(None, 50, 200), Unmeasurable),
            (&all, one_token(Some(2), 50, 200), Unmeasurable),
        ];
        for (slo, m, expected) in cases {
            assert_eq!(slo.judge(m), *expected, "{slo:?} {m:?}");
        }
        assert!(all.is_set() && latency_only.is_set() && !Slo::default().is_set());
    }
}
