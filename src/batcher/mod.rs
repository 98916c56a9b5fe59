//! The micro-batcher: a sans-IO [`core`], its [`lifecycle`], and drivers that connect it to
//! threads ([`shell`]) or to virtual time ([`virtual_time`]).
//!
//! # Files
//! - `core`: `BatcherCore`, all batching, matching and failure fan-out logic, up to
//!   `batching.max_in_flight` batches in flight (slots, results in any order, a generate timeout per
//!   batch), the stall decision, and the one source of request ids. Its module doc (`core/mod.rs`) is
//!   the driver contract; beside it one file per job: `config` (`BatchConfig`), `vocab` (batches,
//!   outcomes, events), `ids` (`IdMap`), `stall` (`StallWatch`, the stall decision), `matching` (a
//!   result fanned out to its batch), `failure` (the engine made unusable), `tests`.
//! - `error`: `RequestError`, `ConfigError`, and `BatchId` (below the core: an error names its
//!   batch, and `error` names nothing of the core).
//! - `lifecycle`: the engine lifecycle as an explicit transition table (start, shutdown, failure and
//!   death).
//! - `shell`: `Batcher`, the core behind one mutex, an engine thread and a watchdog thread (generate
//!   timeouts, and the engine's CPU time sampled through a driver's `ProgressProbe`, with the lock
//!   released, for the core's stall decision); `Ticket`. The engine starts lazily, at `preload` or
//!   the first submit. With `max_in_flight > 1` the engine thread hands each batch to the engine's
//!   `ConcurrentEngine` face and each result comes back through `done`, on any thread, delivered once
//!   (`Delivery`). Outcomes go to each request's `Completer`, or, for `submit_to_sink`, to the
//!   batcher's `OutcomeSink`, a batch's at once. The engine thread and the watchdog sleep until a
//!   time of their own and are woken only by a change that brings a deadline before it.
//!   One file per thread (`shell/engine_thread`, `shell/watchdog`), and `shell/delivery` for the
//!   outcomes on their way out.
//! - `engine_call`: engine calls under `catch_unwind`, marked (`in_engine_call`) so that the CLI's
//!   panic hook keeps a caught engine panic to one line; `panic_message`, the one reading of a panic
//!   payload.
//! - `async_submit`: `submit_async`, the tokio face of `Batcher`.
//! - `virtual_time`: `VirtualTimeBatcher`, the core and an engine as a discrete-event simulation.

#[doc(hidden)]
#[cfg(not(loom))]
pub mod async_submit;
#[doc(hidden)]
pub mod core;
mod engine_call;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod lifecycle;
#[doc(hidden)]
pub mod shell;
#[doc(hidden)]
pub mod virtual_time;

#[doc(hidden)]
pub use self::core::{
    Batch, BatchId, BatchRun, BatcherCore, Completion, Event, GenerateResult, REAL_ENGINE_GENERATE_TIMEOUT,
    REAL_ENGINE_STALL_TIMEOUT, RequestTimes, STALL_FACTOR, StepPhases,
};
pub use self::core::{BatchConfig, FlushReason, Outcome};
#[doc(hidden)]
pub use engine_call::{in_engine_call, panic_message};
pub use error::{ConfigError, RequestError};
#[doc(hidden)]
pub use lifecycle::{Lifecycle, State};
#[doc(hidden)]
pub use shell::{BatchObserver, Completer, OutcomeSink, ProgressProbe};
pub use shell::{Batcher, Ticket};
