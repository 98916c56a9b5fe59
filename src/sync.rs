//! The loom facade: `loom::sync` under `cfg(loom)`, `std::sync` otherwise, plus the lock-order
//! check.
//!
//! # Lock order
//! The batcher has three kinds of locks, ranked:
//! 1. [`Level::Batcher`]: the shell's one state mutex (`Shared::inner`).
//! 2. [`Level::Slot`]: a waiter's outcome slot. A leaf.
//! 3. [`Level::Observer`]: the batch observer, told about each batch before its outcomes (on the
//!    engine thread, or on whichever thread a concurrent engine's `done` runs). A leaf.
//!
//! A thread may only take a lock ranked above every lock it holds. So a slot is never held while
//! the batcher lock is taken, which rules out the only possible cycle. Engine calls (a concurrent
//! engine's `done` included), the observer and completion callbacks run with no batcher lock held. [`ordered`] checks this at run time on every
//! acquisition (a thread-local bitmask, a few nanoseconds) and panics on a violation, in tests and
//! in loom models alike.

#[cfg(loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub use loom::{sync::atomic, thread};
#[cfg(not(loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::{sync::atomic, thread};

use std::cell::Cell;

/// A lock's rank; see the module docs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Level {
    /// The shell's state mutex; taken first.
    Batcher = 1,
    /// A waiter's outcome slot; a leaf, never held while taking another lock.
    Slot = 2,
    /// The batch observer; a leaf, taken with no batcher lock held.
    Observer = 3,
}

#[cfg(loom)]
loom::thread_local! {
    static HELD: Cell<u8> = Cell::new(0);
}
#[cfg(not(loom))]
std::thread_local! {
    static HELD: Cell<u8> = const { Cell::new(0) };
}

/// Marks a lock of `level` as held by this thread until dropped.
pub struct Held(Level);

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|h| h.set(h.get() & !(1 << self.0 as u8)));
    }
}

/// Claims `level` for this thread; panics if the thread holds a lock of the same or a higher rank.
pub fn ordered(level: Level) -> Held {
    HELD.with(|h| {
        let held = h.get();
        let bit = 1u8 << level as u8;
        // Any bit at or above our own means an order violation.
        assert!(held & !(bit - 1) == 0, "lock order violated: taking {level:?} while holding rank mask {held:#b}");
        h.set(held | bit);
    });
    Held(level)
}

/// Panics if this thread holds a lock of `level`.
pub fn assert_not_held(level: Level) {
    HELD.with(|h| assert!(h.get() & (1 << level as u8) == 0, "{level:?} lock held where it must not be"));
}

/// Locks, ignoring poison: every critical section in the batcher leaves its state consistent
/// (engine calls, which may panic, run outside locks).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn ascending_order_is_allowed_and_released_on_drop() {
        let a = ordered(Level::Batcher);
        let b = ordered(Level::Slot);
        drop(b);
        drop(a);
        let _again = ordered(Level::Batcher);
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn descending_order_panics() {
        let _slot = ordered(Level::Slot);
        let _batcher = ordered(Level::Batcher);
    }
}
