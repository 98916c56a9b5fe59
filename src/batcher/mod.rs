//! The micro-batcher: a sans-IO [`core`], its [`lifecycle`], and drivers that connect it to
//! threads ([`shell`]) or to virtual time ([`virtual_time`]).

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
