//! Process-level building blocks: what batchlab does to and about its own process and its
//! descendants (vLLM's `VLLM::EngineCore` and `VLLM::Worker` processes). Linux only.
//!
//! - **Hygiene** (here): batchlab is a child subreaper ([`become_subreaper`]), so orphaned
//!   grandchildren (a worker whose EngineCore died) re-parent to it instead of init, and
//!   [`reap_descendants`], called by the binary on every way out, ends whatever is left. An engine
//!   shuts its own children down on the normal path; this covers an error that skips shutdown, a
//!   second Ctrl-C and a panic.
//! - [`affinity`]: widen the CPU mask to the cgroup's cpuset before any thread or engine starts.
//! - [`watch`]: [`ProcessWatch`] reports the death of given processes (the engine's) within
//!   milliseconds (pidfds and poll), so a dead EngineCore fails the run instead of hanging it.
//! - CPU time ([`process_cpu_time`], [`thread_cpu_time`]): how much a process or one of our
//!   threads has run, the engine's sign of life while a generate produces no output yet.
//! - [`stamped`]: [`StampedTcp`], a TCP stream whose reads carry the kernel's receive timestamp
//!   and whose writes are timed, so an HTTP client or server times a stream by when its bytes
//!   came, not by when it got round to reading them.
//! - [`capture`]: [`EngineLog`] sends fds 1 and 2 (this process's and, by inheritance, its
//!   children's) to a log file, while [`terminal`] keeps writing to the real terminal.
//! - [`machine`]: the machine's speed and load at a moment ([`MachineSample`]: a fixed CPU
//!   workload timed, `/proc/loadavg`, `/proc/stat`'s steal), read at a run's start and end.
//! - [`sched`]: a book-keeping thread's wake-ups never preempt the client thread on its core
//!   ([`sched::yield_on_wakeup`], `SCHED_BATCH`).
//!
//! Invariants: system calls go through `nix` (and `rustix` for `pidfd_open`, which nix lacks),
//! never raw `libc` in `unsafe`, but for `sched_setscheduler` and `sched_getscheduler`, which
//! neither wraps (`sched`, one `unsafe` call each); this module knows nothing of engines, plans or runs: it deals in
//! pids, fds and files, and its callers decide what an exit or a mask means.

pub mod affinity;
pub mod capture;
pub mod machine;
pub mod sched;
#[cfg(not(loom))]
pub mod stamped;
pub mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

pub use affinity::{
    AffinityReset, AffinitySource, CpuListError, current_affinity, format_cpu_list, reset_cpu_affinity, usable_cpus,
};
pub use capture::{EngineLog, Terminal, terminal, terminal_is_tty, terminal_size};
pub use machine::{CpuTicks, MachineSample, steal_share};
#[cfg(not(loom))]
pub use stamped::{StampedTcp, Stamps};
pub use watch::{ExitCause, ProcessExit, ProcessWatch};

/// What can go wrong at the process boundary.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// A system call failed.
    #[error("{call} failed: {source}")]
    Os {
        /// The call, e.g. `sched_setaffinity`.
        call: &'static str,
        /// The errno it returned.
        #[source]
        source: nix::Error,
    },
    /// A file could not be opened, read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: `open`, `read`, `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A CPU list file held something that is not a CPU list.
    #[error("{}: {source}", path.display())]
    CpuList {
        /// The file.
        path: PathBuf,
        /// Where and how the text is not a CPU list.
        #[source]
        source: CpuListError,
    },
    /// [`EngineLog::redirect`] while another capture is active.
    #[error("engine output is already captured to {}", .0.display())]
    AlreadyCapturing(PathBuf),
}

impl SysError {
    pub(crate) fn os(call: &'static str) -> impl FnOnce(nix::Error) -> SysError {
        move |source| SysError::Os { call, source }
    }
}

/// Asks Linux to re-parent orphaned descendants to this process. Best effort: a failure is logged.
pub fn become_subreaper() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::debug!("prctl(PR_SET_CHILD_SUBREAPER) failed: {e}");
    }
}

/// One line of the process table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcEntry {
    pub pid: i32,
    pub ppid: i32,
    /// Clock ticks since boot at which the process started: with the pid, it names one process
    /// even when pids are reused.
    pub start_time: u64,
    /// The process has exited and waits to be reaped.
    pub zombie: bool,
}

/// Parses `/proc/<pid>/stat`: `pid (comm) state ppid … starttime(22nd) …`. comm may contain
/// spaces and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(pid: i32, stat: &str) -> Option<ProcEntry> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state), so field n is fields[n - 3].
    Some(ProcEntry {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
        zombie: *fields.first()? == "Z",
    })
}

pub(crate) fn read_proc_entry(pid: i32) -> Option<ProcEntry> {
    parse_stat(pid, &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// User plus system CPU time in `stat` (fields 14 and 15, clock ticks), counted from the last
/// `)` as [`parse_stat`] does.
pub(crate) fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second of /proc's CPU times: the kernel's fixed user-space `USER_HZ`
/// (`sysconf(_SC_CLK_TCK)`), 100 on every architecture Linux runs batchlab on.
const USER_HZ: u64 = 100;

fn cpu_time_of(stat_path: &str) -> Option<Duration> {
    let ticks = parse_cpu_ticks(&std::fs::read_to_string(stat_path).ok()?)?;
    Some(Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / USER_HZ)))
}

/// The CPU time (user and system, all threads) process `pid` has used so far, from
/// `/proc/<pid>/stat`, in clock ticks (10 ms on most kernels). `None` once it is gone.
pub fn process_cpu_time(pid: u32) -> Option<Duration> {
    cpu_time_of(&format!("/proc/{pid}/stat"))
}

/// The CPU time one thread of this process has used so far (`/proc/self/task/<tid>/stat`), for
/// an engine that runs in-process: its engine thread's.
pub fn thread_cpu_time(tid: i32) -> Option<Duration> {
    cpu_time_of(&format!("/proc/self/task/{tid}/stat"))
}

/// The kernel's id of the calling thread (what [`thread_cpu_time`] takes).
pub fn current_thread_id() -> i32 {
    nix::unistd::gettid().as_raw()
}

/// Every process visible in /proc.
fn proc_table() -> Vec<ProcEntry> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter_map(read_proc_entry)
        .collect()
}

/// Every descendant of this process (zombies included), by pid.
pub(crate) fn descendant_entries() -> Vec<ProcEntry> {
    let me = std::process::id() as i32;
    let mut children: HashMap<i32, Vec<ProcEntry>> = HashMap::new();
    for entry in proc_table() {
        children.entry(entry.ppid).or_default().push(entry);
    }
    let mut found = Vec::new();
    let mut frontier = vec![me];
    while let Some(p) = frontier.pop() {
        for entry in children.remove(&p).unwrap_or_default() {
            frontier.push(entry.pid);
            found.push(entry);
        }
    }
    found.sort_unstable_by_key(|e| e.pid);
    found
}

/// Every live descendant of this process.
pub fn descendants() -> Vec<i32> {
    descendant_entries().into_iter().map(|e| e.pid).collect()
}

/// Sends SIGTERM to every descendant, waits up to `grace` for them to go, then SIGKILLs the rest
/// and reaps them. Returns how many there were. Waits on the processes' exits (pidfds), never by
/// polling /proc on a timer.
pub fn reap_descendants(grace: Duration) -> usize {
    let first = descendants();
    if first.is_empty() {
        return 0;
    }
    tracing::debug!(?first, "terminating leftover child processes");
    for &pid in &first {
        // An error means the process is already gone. SIGCONT after SIGTERM: a stopped process
        // (a frozen EngineCore) acts on its SIGTERM only once it runs again.
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
    }
    let left = reap_until_gone(Instant::now() + grace);
    if !left.is_empty() {
        for &pid in &left {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        // SIGKILL cannot be ignored: this wait ends as soon as the kernel has ended them.
        reap_until_gone(Instant::now() + KILL_WAIT);
    }
    first.len()
}

/// How long [`reap_descendants`] waits for SIGKILLed descendants to go.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// Reaps exited descendants until none is left or `deadline` passes; returns those still alive.
fn reap_until_gone(deadline: Instant) -> Vec<i32> {
    loop {
        reap_zombies();
        let left = descendant_entries();
        let alive: Vec<i32> = left.iter().filter(|e| !e.zombie).map(|e| e.pid).collect();
        let now = Instant::now();
        if left.is_empty() || now >= deadline {
            return alive;
        }
        if alive.is_empty() {
            // Only zombies, reaped by the next round (ours) or by their parents.
            std::thread::yield_now();
            continue;
        }
        wait_for_any_exit(&alive, deadline.saturating_duration_since(now));
    }
}

/// Blocks until one of `pids` exits or `timeout` passes, on their pidfds (readable once a process
/// has exited): the wait ends at the exit itself. Returns whether one exited (a pid already gone
/// counts). Without pidfds (Linux < 5.3) it waits a short slice instead, so callers that loop
/// until a condition holds still make progress.
pub fn wait_for_any_exit(pids: &[i32], timeout: Duration) -> bool {
    use std::os::fd::AsFd;

    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

    let mut fds = Vec::with_capacity(pids.len());
    for &pid in pids {
        match watch::open_pidfd(pid) {
            Ok(fd) => fds.push(fd),
            Err(SysError::Os { source: nix::Error::ESRCH, .. }) => return true,
            Err(_) => {
                // No pidfds on this kernel: the only wait left is a timed one (explained above).
                std::thread::sleep(timeout.min(Duration::from_millis(20)));
                return false;
            }
        }
    }
    let mut polled: Vec<PollFd> = fds.iter().map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN)).collect();
    // Round up, so a sub-millisecond remainder does not spin.
    let millis = timeout.as_micros().div_ceil(1000);
    let timeout = PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX);
    matches!(poll(&mut polled, timeout), Ok(n) if n > 0)
}

/// Collects exit statuses of finished children, so they do not linger as zombies.
fn reap_zombies() {
    while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Serialises the tests of this module that start processes: [`reap_descendants`] and the
/// [`ProcessWatch`] see every child of the test binary, including other tests' children.
#[cfg(test)]
pub(crate) fn process_test_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_and_reaps_a_child_and_grandchild() {
        use std::io::BufRead;
        let _lock = process_test_lock();
        // sh starts a sleeping grandchild, says its pid (so both exist: sh forked it), and sleeps.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; sleep 30"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let pid = child.id() as i32;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the pid");
        let grandchild: i32 = line.trim().parse().expect("a pid");
        let seen = descendants();
        assert!(seen.contains(&pid) && seen.contains(&grandchild), "{seen:?} lacks {pid} or {grandchild}");
        become_subreaper();
        assert!(reap_descendants(Duration::from_secs(2)) >= 2);
        let _ = child.wait();
        assert!(descendants().is_empty(), "{:?}", descendants());
    }

    #[test]
    fn waiting_for_an_exit_ends_at_the_exit() {
        let _lock = process_test_lock();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = child.id() as i32;
        assert!(!wait_for_any_exit(&[pid], Duration::ZERO), "a running process has not exited");
        kill(Pid::from_raw(pid), Signal::SIGKILL).expect("kill");
        // Far above the kill's latency; only a missed exit reaches it.
        assert!(wait_for_any_exit(&[pid], Duration::from_secs(60)), "the exit was not seen");
        let _ = child.wait();
        assert!(wait_for_any_exit(&[pid], Duration::from_secs(60)), "a reaped pid counts as exited");
    }

    #[test]
    fn cpu_time_is_read_from_stat_and_grows_with_work() {
        let stat = "4242 (VLLM::Engine) (x) S 17 4242 4242 0 -1 4194560 1 0 0 0 250 30 0 0 20 0 1 0 98765 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(280));
        assert_eq!(parse_cpu_ticks("7 (sh) S 1"), None);
        let tid = current_thread_id();
        let before = thread_cpu_time(tid).expect("our own thread");
        let process_before = process_cpu_time(std::process::id()).expect("our own process");
        // Spin until the kernel has charged at least one more tick to this thread.
        let mut x = 0u64;
        while thread_cpu_time(tid).expect("our own thread") <= before {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
        }
        assert!(process_cpu_time(std::process::id()).expect("our own process") > process_before);
        assert_eq!(process_cpu_time(u32::MAX), None, "no such process");
    }

    #[test]
    fn stat_lines_parse_with_odd_comm() {
        let stat = "4242 (VLLM::Engine) (x) S 17 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        assert_eq!(parse_stat(4242, stat), Some(ProcEntry { pid: 4242, ppid: 17, start_time: 98765, zombie: false }));
        let zombie = "7 (sh) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert!(parse_stat(7, zombie).is_some_and(|e| e.zombie));
        assert_eq!(parse_stat(7, "garbage"), None);
        assert_eq!(parse_stat(7, "7 (sh) S"), None);
    }
}
