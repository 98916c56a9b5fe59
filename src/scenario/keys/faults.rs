//! The keys of `[faults]`, over the engine's own `Faults`, and which of them kill a process.

use super::super::reader::LowerBound;
use super::codec::*;
use super::{Key, KeyDefault, Sub};
use crate::engine::faults::Faults;

/// `[faults]`, in the order the printer writes them (the engine checks batch faults in the order
/// panic, hang, fail_batch, short_output, extra_output, wrong_id).
pub(crate) const FAULT_KEYS: &[Key<Faults>] = &[
    key!(fail_batch: Trigger, NEVER, "the batch fails with an engine error (the engine is not called)", in Faults),
    key!(short_output: Trigger, NEVER, "one output fewer than requests", in Faults),
    key!(extra_output: Trigger, NEVER, "one output more than requests", in Faults),
    key!(wrong_id: Trigger, NEVER, "an output carries an id not in the batch", in Faults),
    key!(panic: Trigger, NEVER, "generate panics", in Faults),
    key!(
        slow: Trigger,
        NEVER,
        "generate returns `slow_factor` times later than the engine took (its outputs and timestamps are the engine's)",
        in Faults
    ),
    key!(
        slow_factor: Float(LowerBound::AtLeast(1.0), f64::INFINITY),
        KeyDefault::Value,
        "how much later a slow generate returns",
        in Faults
    ),
    key!(hang: Trigger, NEVER, "generate blocks for `hang_for`, then fails (the engine is not called)", in Faults),
    key!(
        hang_for: Dur { zero: true },
        KeyDefault::Value,
        "how long a hung generate blocks; set `batching.generate_timeout` to catch it",
        in Faults
    ),
    key!(start_fails: Bool, KeyDefault::Value, "the engine never starts", in Faults),
    key!(start_delay: Dur { zero: true }, KeyDefault::Value, "start takes this much longer", in Faults),
    key!(
        kill_engine: Opt(KillAfter),
        KeyDefault::Value,
        "SIGKILL vLLM's `VLLM::EngineCore` process ~200 ms into generate `after_batches + 1`",
        in Faults
    ),
    key!(
        kill_worker: Opt(KillAfter),
        KeyDefault::Value,
        "SIGKILL a `VLLM::Worker…` process ~200 ms into generate `after_batches + 1` (vLLM's multiprocess executor only)",
        in Faults
    ),
    key!(
        http_429: Trigger,
        NEVER,
        "`batchlab serve` answers 429 with `Retry-After` (per request; `run` ignores it)",
        in Faults
    ),
    key!(http_503: Trigger, NEVER, "`batchlab serve` answers 503 with `Retry-After` (per request)", in Faults),
    key!(drop_stream: Trigger, NEVER, "`batchlab serve` drops the connection halfway through the stream", in Faults),
    key!(
        stall_stream: Trigger,
        NEVER,
        "`batchlab serve` stalls the stream for `stall_for` after its first token",
        in Faults
    ),
    key!(stall_for: Dur { zero: true }, KeyDefault::Value, "how long a stalled stream stalls", in Faults),
    key!(
        exit_server: Trigger,
        NEVER,
        "`batchlab serve` exits at once (status 1) when the request arrives",
        in Faults
    ),
];

/// A trigger's default: it never fires.
const NEVER: KeyDefault = KeyDefault::Text("never");

/// Whether `key` kills a process of the engine (it needs vLLM's multiprocess engine).
pub(crate) fn is_process_fault(key: &Key<Faults>) -> bool {
    key.sub == Sub::Fixed(PROCESS_FAULT_KEYS)
}
