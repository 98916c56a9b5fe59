//! The keys of `[batching]`, over its plain values ([`Batching`]); `BatchConfig` checks them
//! together.

use std::time::Duration;

use super::codec::*;
use super::{Key, KeyDefault};

/// `[batching]` as plain values; `BatchConfig` checks them together.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Batching {
    pub batch_size: usize,
    pub batch_timeout: Duration,
    pub generate_timeout: Option<Duration>,
    pub stall_timeout: Option<Duration>,
    /// `None`: the default, 1, which is left out when printed (a plan that never set it prints
    /// as it did before the key existed).
    pub max_in_flight: Option<usize>,
}

impl Batching {
    pub fn of(c: &crate::batcher::BatchConfig) -> Self {
        Batching {
            batch_size: c.batch_size(),
            batch_timeout: c.batch_timeout(),
            generate_timeout: c.generate_timeout(),
            stall_timeout: c.stall_timeout(),
            max_in_flight: Some(c.max_in_flight()).filter(|&n| n > 1),
        }
    }
}

pub(crate) const BATCHING_KEYS: &[Key<Batching>] = &[
    key!(batch_size: Count(1), KeyDefault::Value, ">= 1; a full batch flushes at once", in Batching),
    key!(
        batch_timeout: Dur { zero: false },
        KeyDefault::Value,
        "> 0; a partial batch flushes when its oldest request waited this long",
        in Batching
    ),
    key!(
        generate_timeout: Opt(Dur { zero: false }),
        KeyDefault::Text("none for `sim`; `engine.openai.timeout` (30 min when derived) + 30 s for `openai`; `\"10m\"` for another real engine"),
        "> 0; a longer generate fails its batch, and while it stays stuck, queued requests fail after waiting as long",
        in Batching
    ),
    key!(
        stall_timeout: Opt(Dur { zero: false }),
        KeyDefault::Text("none for `sim`; `engine.openai.timeout` (30 min when derived) + 30 s for `openai`; `\"30s\"` for another real engine"),
        "> 0; a generate with no progress (no output, no CPU time in the engine's processes) for this long, \
         or 4× the run's longest generate when that is longer, fails with `engine_stalled`, and so does every later request",
        in Batching
    ),
    key!(
        max_in_flight: Opt(Count(1)),
        KeyDefault::Text("1"),
        ">= 1; up to this many batches run at once, each with its own `generate_timeout`; above 1 needs an engine \
         that runs several generates at once (`engine.kind = \"openai\"`): `sim`, `vllm` and `python` run one, \
         and `check` refuses more",
        in Batching
    ),
];
