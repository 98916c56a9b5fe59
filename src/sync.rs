//! The loom facade: `loom::sync` under `cfg(loom)`, `std::sync` otherwise.
#[cfg(loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};
