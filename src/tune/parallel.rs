//! The search's independent runs on several threads, with the serial search's answer.
//!
//! Each phase of the search (the grid, a refinement round, the recommendation's seed and stress
//! runs) is a list of runs that do not depend on each other. A run on the simulator in virtual
//! time is single-threaded and deterministic, and shares nothing with another run (its engine,
//! clock, batcher and metrics are its own; `RunOptions::quiet()` shows, writes and listens to
//! nothing), so the runs of one phase may go on any threads in any order: [`in_order`] hands
//! them to a pool of threads and gives the results back in the list's order, stopping where a
//! serial loop would stop (the first failure in the list's order, whichever thread saw a failure
//! first). The search then takes the results in exactly the order the serial search did, so its
//! result is the same for any number of threads.

use std::num::NonZeroUsize;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many threads the search runs its points on by default: the CPUs this process may use.
pub use crate::sys::usable_cpus as available_threads;

/// What one item gave: its value or its stop, or the panic it raised.
type Outcome<R, S> = std::thread::Result<Result<R, S>>;

/// `run` on each of `items`, on up to `threads` threads, as the serial loop
///
/// ```text
/// for item in items { match run(item) { Ok(r) => done.push(r), Err(stop) => return (done, Some(stop)) } }
/// ```
///
/// would answer: the results in `items`' order up to the first item (in that order) that
/// stopped, and that stop; a panic, likewise the first in order, is raised again on the caller's
/// thread. Items after a stop are not started once the stop is known (those already running
/// finish, and their results are dropped).
pub(crate) fn in_order<T, R, S>(
    threads: NonZeroUsize,
    items: &[T],
    run: impl Fn(&T) -> Result<R, S> + Sync,
) -> (Vec<R>, Option<S>)
where
    T: Sync,
    R: Send,
    S: Send,
{
    let threads = threads.get().min(items.len());
    if threads <= 1 {
        let mut done = Vec::with_capacity(items.len());
        for item in items {
            match run(item) {
                Ok(r) => done.push(r),
                Err(stop) => return (done, Some(stop)),
            }
        }
        return (done, None);
    }
    let next = AtomicUsize::new(0);
    // The lowest index that stopped (or panicked) so far: no item after it is started.
    let first_stop = AtomicUsize::new(usize::MAX);
    let slots: Vec<Mutex<Option<Outcome<R, S>>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    // Items are taken in order, so every item before a stop has been taken.
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= items.len() || i > first_stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let outcome = catch_unwind(AssertUnwindSafe(|| run(&items[i])));
                    if !matches!(outcome, Ok(Ok(_))) {
                        first_stop.fetch_min(i, Ordering::SeqCst);
                    }
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
                }
            });
        }
    });
    let mut done = Vec::with_capacity(items.len());
    for slot in slots {
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(Ok(r))) => done.push(r),
            Some(Ok(Err(stop))) => return (done, Some(stop)),
            Some(Err(panic)) => resume_unwind(panic),
            // Only items after the first stop are left out, and the loop has returned by then.
            None => unreachable!("an item before the first stop was not run"),
        }
    }
    (done, None)
}

/// [`in_order`] for runs that fail: every result in order, or the first failure in order.
pub(crate) fn try_in_order<T, R, E>(
    threads: NonZeroUsize,
    items: &[T],
    run: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E>
where
    T: Sync,
    R: Send,
    E: Send,
{
    match in_order(threads, items, run) {
        (done, None) => Ok(done),
        (_, Some(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn threads(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    /// Later items finish first (they sleep less), yet the results come in the items' order.
    #[test]
    fn results_come_in_the_items_order_whatever_finishes_first() {
        let items: Vec<u64> = (0..16).collect();
        for n in [1, 2, 3, 8, 32] {
            let (done, stop) = in_order(threads(n), &items, |&i| {
                std::thread::sleep(Duration::from_millis(16 - i));
                Ok::<_, ()>(i * 10)
            });
            assert_eq!(stop, None);
            assert_eq!(done, items.iter().map(|i| i * 10).collect::<Vec<_>>(), "{n} threads");
        }
        assert_eq!(in_order(threads(4), &[] as &[u64], |&i| Ok::<_, ()>(i)), (vec![], None));
    }

    /// Two items fail; the later one fails first in time. The answer is the serial loop's: the
    /// results before the first failure in order, and that failure.
    #[test]
    fn the_first_stop_in_order_wins_whichever_came_first_in_time() {
        let items: Vec<u64> = (0..40).collect();
        for n in [1, 2, 4] {
            let started = AtomicUsize::new(0);
            let (done, stop) = in_order(threads(n), &items, |&i| {
                started.fetch_add(1, Ordering::SeqCst);
                match i {
                    5 => {
                        std::thread::sleep(Duration::from_millis(30));
                        Err(format!("item {i}"))
                    }
                    7 => Err(format!("item {i}")),
                    _ => Ok(i),
                }
            });
            assert_eq!(stop.as_deref(), Some("item 5"), "{n} threads");
            assert_eq!(done, (0..5).collect::<Vec<_>>());
            if n == 1 {
                assert_eq!(started.load(Ordering::SeqCst), 6, "a serial loop stops at the stop");
            }
        }
        assert_eq!(try_in_order(threads(3), &items, |&i| if i == 9 { Err(i) } else { Ok(i) }), Err(9));
        assert_eq!(
            try_in_order(threads(3), &items[..9], |&i| if i == 9 { Err(i) } else { Ok(i) }),
            Ok(items[..9].to_vec())
        );
    }

    /// A panic is raised again on the caller's thread, with its own message; a stop before it in
    /// order wins over it, as in a serial loop.
    #[test]
    fn a_panic_comes_back_to_the_caller_unless_a_stop_comes_first() {
        let items: Vec<u64> = (0..8).collect();
        let panicked = catch_unwind(|| {
            in_order(threads(3), &items, |&i| if i == 4 { panic!("point {i} broke") } else { Ok::<_, ()>(i) })
        })
        .expect_err("the panic comes back");
        assert_eq!(panicked.downcast_ref::<String>().map(String::as_str), Some("point 4 broke"));
        let (done, stop) = in_order(threads(3), &items, |&i| {
            if i == 6 {
                panic!("never raised")
            } else if i == 2 {
                Err(i)
            } else {
                Ok(i)
            }
        });
        assert_eq!((done, stop), (vec![0, 1], Some(2)));
    }
}
