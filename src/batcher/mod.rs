//! The micro-batcher: a sans-IO [`core`], its [`lifecycle`], and drivers that connect it to
//! threads ([`shell`]) or to virtual time ([`virtual_time`]).

#[cfg(not(loom))]
pub mod async_submit;
pub mod core;
mod engine_call;
pub mod error;
pub mod lifecycle;
pub mod shell;
pub mod virtual_time;

pub use self::core::{
    Batch, BatchConfig, BatchId, BatchRun, BatcherCore, Completion, Event, FlushReason, GenerateResult, Outcome,
    REAL_ENGINE_GENERATE_TIMEOUT, REAL_ENGINE_STALL_TIMEOUT, RequestTimes, STALL_FACTOR,
};
pub use engine_call::{in_engine_call, panic_message};
pub use error::{ConfigError, RequestError};
pub use lifecycle::{Lifecycle, State};
pub use shell::{BatchObserver, Batcher, Completer, ProgressProbe, Ticket};
