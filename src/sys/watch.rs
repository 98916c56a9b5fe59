//! The process-death watcher: know within milliseconds that a process (vLLM's EngineCore, a
//! worker) has died, instead of waiting forever on a generate that will never return.
//!
//! [`ProcessWatch::start`] takes the processes to watch (the engine's own: the pids it reported,
//! or the descendants alive when it started) and runs one thread that
//! - holds a pidfd for each, opened before `start` returns, and blocks in `poll` on all of them
//!   (and an eventfd that stops it). A pidfd becomes readable the moment its process exits, so
//!   detection is event-driven: the latency is the callback's scheduling delay, not a polling
//!   period, and no /proc scan runs on a timer;
//! - reads the exit status with `waitid(P_PIDFD, WEXITED | WNOWAIT)`, which leaves the zombie in
//!   place: Python's (or anyone's) own `waitpid` still gets the status. That works for children
//!   and for descendants re-parented to batchlab (a child subreaper, see
//!   [`become_subreaper`](super::become_subreaper)); for a grandchild whose parent is alive the
//!   status comes from `PIDFD_GET_INFO` once its parent reaped it (Linux 6.15+), else
//!   [`ExitCause::Unknown`] says so;
//! - calls `on_exit` once per exit, with status 0 included: the caller decides what is expected.
//!
//! Nothing else is watched: a process started later (a helper an engine runs during a generate)
//! is not the engine's, and its exit is nobody's business here. The pid of a process that is
//! already gone when the watch starts is reported at once, as an exit with an unknown status.
//!
//! The pidfd comes from `rustix::process::pidfd_open`: nix (0.32) has `waitid` with
//! `Id::PIDFd` but no `pidfd_open`, and rustix is a well-kept, already-locked crate whose call
//! returns an `OwnedFd` with no `unsafe` on our side.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::signal::Signal;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};

use super::{SysError, read_proc_entry};

/// How a watched process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitCause {
    /// It exited with this status.
    Exited(i32),
    /// A signal (by number) ended it.
    Killed {
        /// The signal number, e.g. 9 for SIGKILL.
        signal: i32,
        /// Whether the kernel wrote a core dump.
        core_dumped: bool,
    },
    /// It exited, but its status could not be read (not a child of batchlab, or already reaped).
    Unknown(String),
}

impl fmt::Display for ExitCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitCause::Exited(code) => write!(f, "exited with status {code}"),
            ExitCause::Killed { signal, core_dumped } => {
                match Signal::try_from(*signal) {
                    Ok(s) => write!(f, "killed by {}", s.as_str())?,
                    Err(_) => write!(f, "killed by signal {signal}")?,
                }
                if *core_dumped {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
            ExitCause::Unknown(reason) => write!(f, "exited ({reason})"),
        }
    }
}

/// One descendant's exit, as given to the `on_exit` callback.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessExit {
    /// Its process id.
    pub pid: u32,
    /// argv\[0\] from `/proc/<pid>/cmdline` (vLLM sets it to `VLLM::EngineCore`), or `comm`
    /// (truncated to 15 bytes by the kernel) when the cmdline is empty. Read when watching began.
    pub name: String,
    /// `killed by SIGKILL`, `exited with status 1`, …: `cause` as text.
    pub status: String,
    /// How it ended, typed.
    pub cause: ExitCause,
}

impl fmt::Display for ProcessExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (pid {}) {}", self.name, self.pid, self.status)
    }
}

/// Watches a given set of processes and reports each exit. See the module docs.
///
/// Stopping: [`disarm`](Self::disarm) or drop. Either stops and joins the thread; once it returns,
/// `on_exit` is never called again.
pub struct ProcessWatch {
    armed: Arc<AtomicBool>,
    wake: Arc<EventFd>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl ProcessWatch {
    /// Starts watching `pids`: each has its pidfd before this returns, so an exit from then on is
    /// never missed. A pid already gone is reported at once (status unknown).
    ///
    /// `on_exit` runs on the watch's thread: keep it short (send on a channel). It may call
    /// [`disarm`](Self::disarm) on a shared watch. A panic in it is logged and the watch goes on.
    ///
    /// Errors: the kernel lacks pidfds (Linux < 5.3), or no eventfd or thread could be created.
    pub fn start(pids: &[u32], on_exit: impl Fn(ProcessExit) + Send + 'static) -> Result<ProcessWatch, SysError> {
        // Fail here, not silently in the thread, when pidfds are unavailable.
        open_pidfd(std::process::id() as i32)?;
        let wake = Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC).map_err(SysError::os("eventfd"))?);
        let armed = Arc::new(AtomicBool::new(true));
        let mut watcher = Watcher::default();
        let mut gone = Vec::new();
        for &pid in pids {
            let Ok(pid) = i32::try_from(pid) else { continue };
            match watch_one(pid) {
                Some(watched) => _ = watcher.watched.insert(pid, watched),
                None => gone.push(pid),
            }
        }
        let thread = std::thread::Builder::new()
            .name("process-watch".into())
            .spawn({
                let (armed, wake) = (armed.clone(), wake.clone());
                move || {
                    for pid in gone {
                        let status = "was gone when the watch started".to_string();
                        let exit = ProcessExit {
                            pid: pid as u32,
                            name: "?".into(),
                            status: format!("exited ({status})"),
                            cause: ExitCause::Unknown(status),
                        };
                        if armed.load(Ordering::SeqCst) {
                            on_exit(exit);
                        }
                    }
                    watcher.run(&wake, &armed, &on_exit)
                }
            })
            .map_err(|source| SysError::Io { action: "start thread", path: "process-watch".into(), source })?;
        Ok(ProcessWatch { armed, wake, thread: Mutex::new(Some(thread)) })
    }

    /// Stops reporting, before a normal engine shutdown whose processes exit on purpose. Stops the
    /// thread and waits for it (unless called from `on_exit` itself). Idempotent.
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
        // A failed write can only mean the counter is full: the thread is being woken anyway.
        let _ = self.wake.write(1);
        let handle = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// Whether exits are still reported.
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::SeqCst)
    }
}

impl Drop for ProcessWatch {
    fn drop(&mut self) {
        self.disarm();
    }
}

impl fmt::Debug for ProcessWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessWatch").field("armed", &self.is_armed()).finish_non_exhaustive()
    }
}

pub(crate) fn open_pidfd(pid: i32) -> Result<OwnedFd, SysError> {
    let errno =
        |e: rustix::io::Errno| SysError::Os { call: "pidfd_open", source: nix::Error::from_raw(e.raw_os_error()) };
    let pid = rustix::process::Pid::from_raw(pid).ok_or_else(|| errno(rustix::io::Errno::INVAL))?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).map_err(errno)
}

struct Watched {
    pidfd: OwnedFd,
    name: String,
    /// Its parent at discovery, to explain an unreadable status once it is gone from /proc.
    ppid: i32,
}

/// The watch thread's state.
#[derive(Default)]
struct Watcher {
    watched: BTreeMap<i32, Watched>,
}

impl Watcher {
    fn run(mut self, wake: &EventFd, armed: &AtomicBool, on_exit: &dyn Fn(ProcessExit)) {
        loop {
            let (stop, exited) = match self.wait(wake) {
                Ok(ready) => ready,
                Err(e) => {
                    tracing::warn!("process watch stopped: poll failed: {e}");
                    return;
                }
            };
            if stop {
                return;
            }
            for pid in exited {
                let Some(watched) = self.watched.remove(&pid) else { continue };
                let exit = collect(pid, watched);
                if armed.load(Ordering::SeqCst) {
                    let call = std::panic::AssertUnwindSafe(|| on_exit(exit));
                    if std::panic::catch_unwind(call).is_err() {
                        tracing::warn!("process watch: the on_exit callback panicked");
                    }
                }
            }
            if !armed.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// Blocks until the stop eventfd or some pidfds are readable. Returns whether to stop and
    /// which pids exited.
    fn wait(&self, wake: &EventFd) -> Result<(bool, Vec<i32>), nix::Error> {
        let mut fds = Vec::with_capacity(self.watched.len() + 1);
        fds.push(PollFd::new(wake.as_fd(), PollFlags::POLLIN));
        fds.extend(self.watched.values().map(|w| PollFd::new(w.pidfd.as_fd(), PollFlags::POLLIN)));
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => return Ok((false, Vec::new())),
            Err(e) => return Err(e),
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let stop = ready(&fds[0]);
        let exited = self.watched.keys().zip(&fds[1..]).filter(|(_, fd)| ready(fd)).map(|(&pid, _)| pid).collect();
        Ok((stop, exited))
    }
}

/// Opens a pidfd on `pid`'s process and reads its name; `None` when it is gone (or not visible).
fn watch_one(pid: i32) -> Option<Watched> {
    let pidfd = match open_pidfd(pid) {
        Ok(fd) => fd,
        Err(e) => {
            tracing::debug!(pid, "not watched: {e}");
            return None;
        }
    };
    let ppid = read_proc_entry(pid).map_or(0, |e| e.ppid);
    Some(Watched { pidfd, name: process_name(pid), ppid })
}

/// argv\[0\] of `/proc/<pid>/cmdline`, else `comm`, else `?`.
fn process_name(pid: i32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0).trim().to_string();
    if !argv0.is_empty() {
        return argv0;
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    if comm.is_empty() { "?".to_string() } else { comm.to_string() }
}

/// The exit of a process whose pidfd is readable, read without reaping it.
fn collect(pid: i32, watched: Watched) -> ProcessExit {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT | WaitPidFlag::WNOHANG;
    let cause = match waitid(Id::PIDFd(watched.pidfd.as_fd()), flags) {
        Ok(WaitStatus::Exited(_, code)) => ExitCause::Exited(code),
        Ok(WaitStatus::Signaled(_, signal, core_dumped)) => ExitCause::Killed { signal: signal as i32, core_dumped },
        Ok(other) => ExitCause::Unknown(format!("unexpected wait status {other:?}")),
        // Someone else's child, or already reaped (Python's multiprocessing waits for its own
        // children): the kernel keeps the status for the pidfd once the process is reaped.
        Err(nix::Error::ECHILD) if let Some(cause) = exit_info_when_reaped(&watched.pidfd) => cause,
        // Not our child (now: a subreaper adopts orphans, so the parent may have changed).
        Err(nix::Error::ECHILD) => match read_proc_entry(pid).map(|e| e.ppid).unwrap_or(watched.ppid) {
            ppid if ppid == std::process::id() as i32 => ExitCause::Unknown("status already collected".into()),
            ppid => ExitCause::Unknown(format!("status unknown: its parent, pid {ppid}, is not batchlab")),
        },
        Err(e) => ExitCause::Unknown(format!("status unknown: waitid failed: {e}")),
    };
    ProcessExit { pid: pid as u32, name: watched.name, status: cause.to_string(), cause }
}

/// `struct pidfd_info` of `<linux/pidfd.h>` in its first version (64 bytes, Linux 6.15).
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    ids: [u32; 11],
    exit_code: i32,
}

/// `PIDFD_INFO_EXIT` of `<linux/pidfd.h>`: ask for (and, on return, got) the exit status.
const PIDFD_INFO_EXIT: u64 = 1 << 3;

nix::ioctl_readwrite!(
    /// `ioctl(pidfd, PIDFD_GET_INFO, &info)`: `_IOWR(PIDFS_IOCTL_MAGIC = 0xFF, 11, struct pidfd_info)`.
    pidfd_get_info,
    0xFF,
    11,
    PidfdInfo
);

/// How long [`exit_info_when_reaped`] waits for the parent to reap the process.
const REAP_WAIT: Duration = Duration::from_millis(100);

/// The exit status of a process someone else reaps, from `PIDFD_GET_INFO` (Linux 6.15+), which
/// has it once the process is reaped: tried for up to [`REAP_WAIT`] (its parent is usually
/// waiting for it). `None` on older kernels, or when the parent has not reaped it by then.
fn exit_info_when_reaped(pidfd: &OwnedFd) -> Option<ExitCause> {
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + REAP_WAIT;
    loop {
        let mut info = PidfdInfo { mask: PIDFD_INFO_EXIT, ..PidfdInfo::default() };
        // SAFETY: `pidfd` is an open pidfd for the call's whole duration, and `info` is a
        // properly sized, initialised `struct pidfd_info` that the kernel fills in place.
        let result = unsafe { pidfd_get_info(pidfd.as_raw_fd(), &mut info) };
        match result {
            Ok(_) if info.mask & PIDFD_INFO_EXIT != 0 => return Some(cause_of_wait_status(info.exit_code)),
            // Not reaped yet: exit information appears when it is.
            // The kernel offers no event for "reaped by its parent": this wait can only be a timed
            // retry, bounded by REAP_WAIT.
            Ok(_) | Err(nix::Error::ESRCH) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => return None,
        }
    }
}

/// A `wait` status word as an [`ExitCause`].
fn cause_of_wait_status(status: i32) -> ExitCause {
    match status & 0x7f {
        0 => ExitCause::Exited((status >> 8) & 0xff),
        signal => ExitCause::Killed { signal, core_dumped: status & 0x80 != 0 },
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};

    use nix::sys::signal::kill;
    use nix::unistd::Pid;

    use super::*;
    use crate::sys::{descendants, process_test_lock};

    /// The exits reported to a test's watch, in order, including ones a test has not asked for yet.
    struct Exits {
        rx: Receiver<ProcessExit>,
        seen: Vec<ProcessExit>,
    }

    impl Exits {
        /// The exit of `pid` within `limit`; others are kept for later calls.
        fn of(&mut self, pid: u32, limit: Duration) -> ProcessExit {
            let deadline = Instant::now() + limit;
            loop {
                if let Some(i) = self.seen.iter().position(|e| e.pid == pid) {
                    return self.seen.remove(i);
                }
                match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(exit) => self.seen.push(exit),
                    Err(e) => panic!("no exit of pid {pid} within {limit:?} ({e}); others: {:?}", self.seen),
                }
            }
        }

        /// Everything reported until the watch's thread ends (its sender goes with it), within `LIMIT`.
        fn until_closed(self) -> Vec<ProcessExit> {
            let deadline = Instant::now() + LIMIT;
            let mut all = self.seen;
            loop {
                match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(exit) => all.push(exit),
                    Err(RecvTimeoutError::Disconnected) => return all,
                    Err(RecvTimeoutError::Timeout) => panic!("the watch thread is still running"),
                }
            }
        }
    }

    /// A watch over `pids`.
    fn watch(pids: &[u32]) -> (ProcessWatch, Exits) {
        let (tx, rx) = channel();
        let watch = ProcessWatch::start(pids, move |exit| {
            let _ = tx.send(exit);
        })
        .expect("pidfds");
        (watch, Exits { rx, seen: Vec::new() })
    }

    /// Far above any legitimate wait here; reaching it means an exit was missed.
    const LIMIT: Duration = Duration::from_secs(60);

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().expect("sleep")
    }

    fn sigkill(pid: u32) {
        kill(Pid::from_raw(pid as i32), Signal::SIGKILL).expect("kill");
    }

    /// Reaps `child` and checks that the watch left its status for us (WNOWAIT) and no zombie.
    fn reap(mut child: Child) -> std::process::ExitStatus {
        let pid = child.id() as i32;
        let status = child.wait().expect("the status is still ours to collect");
        assert!(!descendants().contains(&pid), "pid {pid} left behind");
        status
    }

    #[test]
    fn sigkill_of_a_child_is_reported_at_once_and_not_reaped() {
        let _lock = process_test_lock();
        let child = sleeper();
        let pid = child.id();
        // The exit can only be seen on the child's pidfd, as it happens: nothing scans /proc.
        let (_watch, mut exits) = watch(&[pid]);
        sigkill(pid);
        let exit = exits.of(pid, LIMIT);
        assert_eq!(exit.status, "killed by SIGKILL");
        assert_eq!(exit.cause, ExitCause::Killed { signal: 9, core_dumped: false });
        assert_eq!(exit.name, "sleep");
        assert_eq!(exit.to_string(), format!("sleep (pid {pid}) killed by SIGKILL"));
        assert_eq!(reap(child).signal(), Some(9));
    }

    #[test]
    fn a_killed_grandchild_is_reported() {
        let _lock = process_test_lock();
        let mut child =
            Command::new("sh").args(["-c", "sleep 30 & echo $!; wait"]).stdout(Stdio::piped()).spawn().expect("sh");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("the pid");
        let grandchild: u32 = line.trim().parse().expect("a pid");
        // `$!` is known as soon as sh forks, before the fork has exec'd `sleep`.
        let comm = format!("/proc/{grandchild}/comm");
        let deadline = std::time::Instant::now() + LIMIT;
        while std::fs::read_to_string(&comm).map_or(true, |c| c.trim() != "sleep") {
            assert!(std::time::Instant::now() < deadline, "the grandchild never became sleep");
            std::thread::yield_now();
        }
        let (_watch, mut exits) = watch(&[child.id(), grandchild]);
        sigkill(grandchild);
        let exit = exits.of(grandchild, LIMIT);
        assert_eq!(exit.name, "sleep");
        // sh, not batchlab, is its parent: `waitid` cannot read its status, the pidfd can once sh
        // reaped it (Linux 6.15+), else the status is unknown.
        let killed = ExitCause::Killed { signal: 9, core_dumped: false };
        assert!(exit.cause == killed || matches!(exit.cause, ExitCause::Unknown(_)), "{exit}");
        // sh's `wait` returns, and sh exits on purpose: reported too.
        let sh = exits.of(child.id(), LIMIT);
        assert_eq!(sh.status, "exited with status 0");
        assert!(reap(child).success());
    }

    #[test]
    fn only_the_given_processes_are_watched() {
        let _lock = process_test_lock();
        let engine = sleeper();
        let (_watch, mut exits) = watch(&[engine.id()]);
        // A helper started after the watch, and one that was there but not given: neither is
        // watched, whatever way they end.
        let helper = Command::new("true").spawn().expect("true");
        let other = sleeper();
        sigkill(other.id());
        assert!(reap(helper).success());
        assert_eq!(reap(other).signal(), Some(9));
        sigkill(engine.id());
        assert_eq!(exits.of(engine.id(), LIMIT).status, "killed by SIGKILL");
        assert_eq!(reap(engine).signal(), Some(9));
        assert!(exits.seen.is_empty(), "{:?}", exits.seen);
        assert!(exits.rx.try_recv().is_err(), "nothing else is reported");
    }

    #[test]
    fn a_pid_already_gone_is_reported_at_once() {
        let _lock = process_test_lock();
        let child = Command::new("true").spawn().expect("true");
        let pid = child.id();
        assert!(reap(child).success());
        let (_watch, mut exits) = watch(&[pid]);
        let exit = exits.of(pid, LIMIT);
        assert!(matches!(exit.cause, ExitCause::Unknown(_)), "{exit}");
    }

    #[test]
    fn after_disarm_nothing_is_reported() {
        let _lock = process_test_lock();
        let child = sleeper();
        let pid = child.id();
        let (watch, exits) = watch(&[pid]);
        watch.disarm();
        assert!(!watch.is_armed());
        sigkill(pid);
        assert_eq!(reap(child).signal(), Some(9));
        drop(watch);
        // The thread is gone with its sender: the channel ends, without this pid in it.
        assert!(exits.until_closed().iter().all(|e| e.pid != pid));
    }

    #[test]
    fn dropping_the_watch_stops_its_thread() {
        let _lock = process_test_lock();
        let (watch, exits) = watch(&[]);
        drop(watch);
        exits.until_closed();
    }

    #[test]
    fn wait_statuses_decode() {
        assert_eq!(cause_of_wait_status(9), ExitCause::Killed { signal: 9, core_dumped: false });
        assert_eq!(cause_of_wait_status(11 | 0x80), ExitCause::Killed { signal: 11, core_dumped: true });
        assert_eq!(cause_of_wait_status(3 << 8), ExitCause::Exited(3));
        assert_eq!(cause_of_wait_status(0), ExitCause::Exited(0));
    }

    #[test]
    fn causes_read_as_text() {
        let cases = [
            (ExitCause::Exited(1), "exited with status 1"),
            (ExitCause::Exited(0), "exited with status 0"),
            (ExitCause::Killed { signal: 11, core_dumped: true }, "killed by SIGSEGV (core dumped)"),
            (ExitCause::Killed { signal: 99, core_dumped: false }, "killed by signal 99"),
            (ExitCause::Unknown("status already collected".into()), "exited (status already collected)"),
        ];
        for (cause, text) in cases {
            assert_eq!(cause.to_string(), text);
        }
    }
}
