//! The scheduling policy of batchlab's own threads.
//!
//! A client on few cores shares them between the thread that talks to the server (the HTTP
//! runtime: it writes each request and reads each stream) and the threads that keep the books
//! (the run's driver loop, the batcher's engine thread). Under the kernel's default policy a
//! woken thread may preempt the one running on its core, so every outcome handed to the driver
//! and every request handed back cost the client thread a context switch (about two and a half a
//! request at `batch_size = 1`, measured: docs/performance.md §9b). [`yield_on_wakeup`] makes the
//! calling thread `SCHED_BATCH` (sched(7)): the scheduler takes it for CPU-bound and never lets
//! its wake-up preempt the thread on its core, so the book-keepers run when the client thread
//! waits or its slice ends, taking what piled up in one go. Its share of the CPU and its nice
//! value are unchanged, no privilege is needed, and on a core of its own it changes nothing.

use super::SysError;

/// Makes the calling thread `SCHED_BATCH` at static priority 0 (the only one that policy has),
/// keeping its nice value: see the module docs.
pub fn yield_on_wakeup() -> Result<(), SysError> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` reads `param` (a valid, live `sched_param`) and nothing else;
    // pid 0 is the calling thread. Neither nix nor rustix wraps this call.
    let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if result == 0 { Ok(()) } else { Err(SysError::Os { call: "sched_setscheduler", source: nix::Error::last() }) }
}

/// Whether thread `tid` of this process (0: the calling thread) runs under `SCHED_BATCH`.
pub fn yields_on_wakeup(tid: i32) -> bool {
    // SAFETY: takes a thread id and only reads that thread's policy.
    unsafe { libc::sched_getscheduler(tid) == libc::SCHED_BATCH }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_yields_on_wakeup_once_asked_and_others_do_not() {
        std::thread::spawn(|| {
            assert!(!yields_on_wakeup(0), "a new thread has the default policy");
            yield_on_wakeup().expect("SCHED_BATCH needs no privilege");
            assert!(yields_on_wakeup(0));
            assert!(yields_on_wakeup(crate::sys::current_thread_id()), "by its id too");
        })
        .join()
        .expect("the thread");
        assert!(!yields_on_wakeup(0), "only the thread that asked");
    }
}
