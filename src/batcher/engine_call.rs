//! Engine calls under `catch_unwind`, marked, so that a panic hook can tell an engine panic the
//! batcher catches (it becomes its batch's error: one log line is enough) from a bug in batchlab
//! itself (which deserves Rust's full report).

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static IN_ENGINE_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `call` (an engine's `start`, `generate` or `shutdown`), catching a panic; while it runs,
/// [`in_engine_call`] is true on this thread.
pub(crate) fn catch_engine_panic<R>(call: impl FnOnce() -> R) -> std::thread::Result<R> {
    let outer = IN_ENGINE_CALL.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(call));
    IN_ENGINE_CALL.with(|c| c.set(outer));
    result
}

/// A panic's message: its payload when that is text (`panic!("...")` gives a `&str` or a
/// `String`), else a placeholder. The one reading of a payload, for the batcher's batch errors and
/// the CLI's panic hook.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Whether this thread is inside an engine call whose panic the batcher catches and reports.
/// The CLI's panic hook asks, to keep such panics to one line whatever `RUST_BACKTRACE` says.
pub fn in_engine_call() -> bool {
    IN_ENGINE_CALL.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_only_the_call_and_catches_its_panic() {
        assert!(!in_engine_call());
        assert_eq!(catch_engine_panic(in_engine_call).ok(), Some(true));
        let caught = catch_engine_panic(|| -> () { panic!("engine bug") });
        assert!(caught.is_err());
        assert!(!in_engine_call(), "the mark is cleared after a panic too");
    }

    #[test]
    fn a_panic_message_is_its_text_payload() {
        let text = |call: fn()| panic_message(&*catch_engine_panic(call).unwrap_err());
        assert_eq!(text(|| panic!("static")), "static");
        assert_eq!(text(|| panic!("formatted {}", 1)), "formatted 1");
        assert_eq!(text(|| std::panic::panic_any(7_u8)), "non-string panic payload");
    }
}
