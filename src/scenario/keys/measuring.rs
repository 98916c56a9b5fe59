//! The keys of the sections that bound and judge the measured run and say where it goes:
//! `[stop]`, `[warmup]`/`[cooldown]` ([`Phase`]), `[slo]` and `[output]`.

use std::time::Duration;

use super::super::plan::*;
use super::super::reader::LowerBound;
use super::codec::*;
use super::{Key, KeyDefault};

pub(crate) const STOP_KEYS: &[Key<StopPlan>] = &[
    key!(
        max_requests: Opt(U64(1)),
        KeyDefault::Text("1000 if neither `max_requests` nor `max_duration` is set"),
        "",
        in StopPlan
    ),
    key!(max_duration: Opt(Dur { zero: false }), KeyDefault::Value, "", in StopPlan),
    key!(max_errors: Opt(U64(0)), KeyDefault::Value, "", in StopPlan),
    key!(max_error_rate: Opt(Float(LowerBound::AtLeast(0.0), 1.0)), KeyDefault::Value, "", in StopPlan),
];

/// `[warmup]` or `[cooldown]` as written: exactly one of the two must be set.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Phase {
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
}

impl Phase {
    pub fn of(limit: &PhaseLimit) -> Self {
        match limit {
            PhaseLimit::Requests(n) => Phase { requests: Some(*n), duration: None },
            PhaseLimit::Duration(d) => Phase { requests: None, duration: Some(*d) },
        }
    }
}

pub(crate) const PHASE_KEYS: &[Key<Phase>] = &[
    key!(requests: Opt(U64(0)), KeyDefault::Value, "this many requests; 0: none", in Phase),
    key!(duration: Opt(Dur { zero: false }), KeyDefault::Value, "requests for this long", in Phase),
];

/// A latency objective in milliseconds.
const OBJECTIVE_MS: Opt<Float> = Opt(Float(LowerBound::Above(0.0), f64::INFINITY));

pub(crate) const SLO_KEYS: &[Key<Slo>] = &[
    key!(ttft_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; time to first token, ms", in Slo),
    key!(tpot_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; time per output token after the first, ms", in Slo),
    key!(itl_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; every gap between two tokens, ms (needs per-token times)", in Slo),
    key!(latency_ms: OBJECTIVE_MS, KeyDefault::Value, "> 0; end-to-end latency, ms", in Slo),
];

pub(crate) const OUTPUT_KEYS: &[Key<OutputPlan>] = &[
    key!(dir: Opt(PathAsIs), KeyDefault::Value, "relative to the current directory", in OutputPlan),
    key!(requests_jsonl: Bool, KeyDefault::Value, "also write one line per request", in OutputPlan),
];
