//! The keys of `[profile]`, one table per `kind`, with each kind's plan before any key is read.

use super::super::plan::*;
use super::super::reader::LowerBound;
use super::codec::*;
use super::{Key, KeyDefault, Tag, TagOf, Variant, derive_seed, seed_stream};

pub(crate) const PROFILE_TAG: Key<Tag> = key!(kind: TagOf(PROFILE_VARIANTS), KeyDefault::Value, "", Tag(kind));

/// `rampup` of the kinds that have one (see `loadgen::Step::rampup`).
const RAMPUP: Key<ProfileSpec> = key!(
    rampup: Opt(Dur { zero: false }),
    KeyDefault::Value,
    "",
    ProfileSpec::Concurrent { rampup, .. }
        | ProfileSpec::Constant { rampup, .. }
        | ProfileSpec::Poisson { rampup, .. }
        | ProfileSpec::Gamma { rampup, .. }
);

/// `[profile]`, by `kind`.
pub(crate) const PROFILE_VARIANTS: &[Variant<ProfileSpec>] = &[
    Variant {
        name: "synchronous",
        is: |s| matches!(s, ProfileSpec::Synchronous),
        keys: &[],
        default: |_| ProfileSpec::Synchronous,
    },
    Variant {
        name: "concurrent",
        is: |s| matches!(s, ProfileSpec::Concurrent { .. }),
        keys: &[key!(levels: List(U32(1)), KeyDefault::Required("[1, 4, 16]"), "", in ProfileSpec::Concurrent), RAMPUP],
        default: |_| ProfileSpec::Concurrent { levels: Vec::new(), rampup: None },
    },
    Variant {
        name: "throughput",
        is: |s| matches!(s, ProfileSpec::Throughput { .. }),
        keys: &[key!(max_concurrency: U32(1), KeyDefault::Value, "", in ProfileSpec::Throughput)],
        default: |_| ProfileSpec::Throughput { max_concurrency: 256 },
    },
    Variant {
        name: "constant",
        is: |s| matches!(s, ProfileSpec::Constant { .. }),
        keys: &[
            key!(
                rates: List(Float(LowerBound::Above(0.0), f64::INFINITY)),
                KeyDefault::Required("[10.0, 20.0]"),
                "",
                in ProfileSpec::Constant
            ),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Constant),
            RAMPUP,
        ],
        default: |_| ProfileSpec::Constant { rates: Vec::new(), max_concurrency: None, rampup: None },
    },
    Variant {
        name: "poisson",
        is: |s| matches!(s, ProfileSpec::Poisson { .. }),
        keys: &[
            key!(rate: Float(LowerBound::Above(0.0), f64::INFINITY), KeyDefault::Required("50.0"), "", in ProfileSpec::Poisson),
            key!(seed: U64(0), KeyDefault::Text("derived, stream 4"), "", in ProfileSpec::Poisson),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Poisson),
            RAMPUP,
        ],
        default: |master_seed| ProfileSpec::Poisson {
            rate: 1.0,
            seed: derive_seed(master_seed, seed_stream::POISSON),
            max_concurrency: None,
            rampup: None,
        },
    },
    Variant {
        name: "gamma",
        is: |s| matches!(s, ProfileSpec::Gamma { .. }),
        keys: &[
            key!(rate: Float(LowerBound::Above(0.0), f64::MAX), KeyDefault::Required("50.0"), "", in ProfileSpec::Gamma),
            key!(burstiness: Float(LowerBound::Above(0.0), f64::MAX), KeyDefault::Value, "", in ProfileSpec::Gamma),
            key!(seed: U64(0), KeyDefault::Text("derived, stream 5"), "", in ProfileSpec::Gamma),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Gamma),
            RAMPUP,
        ],
        default: |master_seed| ProfileSpec::Gamma {
            rate: 1.0,
            burstiness: 1.0,
            seed: derive_seed(master_seed, seed_stream::GAMMA),
            max_concurrency: None,
            rampup: None,
        },
    },
    Variant {
        name: "trace",
        is: |s| matches!(s, ProfileSpec::Trace { .. }),
        keys: &[
            key!(time_scale: Float(LowerBound::Above(0.0), f64::MAX), KeyDefault::Value, "", in ProfileSpec::Trace),
            key!(max_concurrency: Opt(U32(1)), KeyDefault::Value, "", in ProfileSpec::Trace),
        ],
        default: |_| ProfileSpec::Trace { time_scale: 1.0, arrivals: TraceArrivals::default(), max_concurrency: None },
    },
    Variant {
        name: "sweep",
        is: |s| matches!(s, ProfileSpec::Sweep { .. }),
        keys: &[
            key!(rates: SweepRates, KeyDefault::Value, "", in ProfileSpec::Sweep),
            key!(max_concurrency: U32(1), KeyDefault::Value, "", in ProfileSpec::Sweep),
        ],
        default: |_| ProfileSpec::Sweep { rates: 5, max_concurrency: 256 },
    },
];
