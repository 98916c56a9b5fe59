//! Engine output capture: everything written to fds 1 and 2 goes to a log file, while batchlab's
//! own display keeps the terminal.
//!
//! vLLM writes from Python, from C++ (NUMA and tcmalloc warnings) and from its child processes.
//! Only fd-level redirection catches all of it: [`EngineLog::redirect`] first duplicates the
//! original fds 1 and 2 (close-on-exec, so children never hold the terminal), then `dup2`s the log
//! onto fds 1 and 2. Children started afterwards inherit the log as their stdout and stderr for
//! their whole life. [`EngineLog::restore`] (or drop) puts the originals back.
//!
//! batchlab's own output (progress display, log lines, the final messages) goes through
//! [`terminal`]: the saved stderr while a capture is active, fd 2 otherwise. While a capture is
//! active, `println!`/`eprintln!` go to the log like everything else.
//!
//! Invariants: at most one capture at a time (a second `redirect` is refused); this module does
//! fds only: the engine's logging environment (`VLLM_CONFIGURE_LOGGING`, …) is the engine's.

use std::fs::File;
use std::io::{IsTerminal, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use nix::unistd::{dup2_stderr, dup2_stdout};

use super::SysError;

/// The fds that a capture replaced.
struct Saved {
    stdout: OwnedFd,
    stderr: File,
    log: PathBuf,
}

/// The active capture's saved fds: a process-global, because the log writer and the progress
/// display both need the terminal. Writers hold the read lock, so `restore` cannot close the saved
/// fd under a write.
static SAVED: RwLock<Option<Saved>> = RwLock::new(None);

fn saved() -> std::sync::RwLockReadGuard<'static, Option<Saved>> {
    SAVED.read().unwrap_or_else(|p| p.into_inner())
}

/// The terminal batchlab started with: the original stderr while a capture is active, fd 2
/// otherwise. Cheap to clone; unbuffered, like `std::io::Stderr`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Terminal;

/// Where batchlab's own display and log lines should go. See [`Terminal`].
pub fn terminal() -> Terminal {
    Terminal
}

/// Whether [`terminal`] is a terminal (judged on the original stderr during a capture).
pub fn terminal_is_tty() -> bool {
    match &*saved() {
        Some(saved) => saved.stderr.is_terminal(),
        None => std::io::stderr().is_terminal(),
    }
}

impl Write for Terminal {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &*saved() {
            Some(saved) => (&saved.stderr).write(buf),
            None => std::io::stderr().write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        // One lock for the whole line, so restore cannot split it.
        match &*saved() {
            Some(saved) => (&saved.stderr).write_all(buf),
            None => std::io::stderr().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An active capture of fds 1 and 2 into a log file. Restores the originals on
/// [`restore`](Self::restore) or drop.
#[derive(Debug)]
pub struct EngineLog {
    path: PathBuf,
    active: bool,
}

impl EngineLog {
    /// Sends fds 1 and 2 to `path` (created if needed, appended to). See the module docs.
    ///
    /// Errors: a capture is already active, or `path` cannot be opened, or a `dup` fails (then
    /// nothing is changed).
    pub fn redirect(path: &Path) -> Result<EngineLog, SysError> {
        let mut slot = SAVED.write().unwrap_or_else(|p| p.into_inner());
        if let Some(active) = &*slot {
            return Err(SysError::AlreadyCapturing(active.log.clone()));
        }
        let dup = |fd: std::os::fd::BorrowedFd<'_>, what| {
            fd.try_clone_to_owned().map_err(|source| SysError::Io { action: "duplicate", path: what, source })
        };
        // `try_clone_to_owned` is F_DUPFD_CLOEXEC: children do not inherit the terminal.
        let stdout = dup(std::io::stdout().as_fd(), "fd 1".into())?;
        let stderr = File::from(dup(std::io::stderr().as_fd(), "fd 2".into())?);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(|source| SysError::Io {
            action: "open",
            path: path.to_path_buf(),
            source,
        })?;
        let _ = std::io::stdout().flush();
        dup2_stdout(&log).map_err(SysError::os("dup2 onto fd 1"))?;
        if let Err(e) = dup2_stderr(&log) {
            let _ = dup2_stdout(&stdout);
            return Err(SysError::os("dup2 onto fd 2")(e));
        }
        *slot = Some(Saved { stdout, stderr, log: path.to_path_buf() });
        Ok(EngineLog { path: path.to_path_buf(), active: true })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Puts the original fds 1 and 2 back (Rust's stdout is flushed into the log first).
    pub fn restore(mut self) -> Result<(), SysError> {
        self.put_back()
    }

    fn put_back(&mut self) -> Result<(), SysError> {
        if !std::mem::take(&mut self.active) {
            return Ok(());
        }
        let _ = std::io::stdout().flush();
        let mut slot = SAVED.write().unwrap_or_else(|p| p.into_inner());
        let Some(saved) = slot.take() else { return Ok(()) };
        let out = dup2_stdout(&saved.stdout).map_err(SysError::os("dup2 back onto fd 1"));
        let err = dup2_stderr(&saved.stderr).map_err(SysError::os("dup2 back onto fd 2"));
        out.and(err)
    }

    /// The last `n` lines of the log at `path`, read from the end (the log may be large). Invalid
    /// UTF-8 is replaced; escape sequences and control characters other than tab are removed, and
    /// a `\r`-overwritten line (a progress bar) keeps only its last state, so a tail printed to a
    /// terminal shows text and nothing else.
    pub fn tail(path: &Path, n: usize) -> Result<Vec<String>, SysError> {
        let io = |source| SysError::Io { action: "read", path: path.to_path_buf(), source };
        let mut file = File::open(path).map_err(io)?;
        let mut end = file.seek(SeekFrom::End(0)).map_err(io)?;
        const CHUNK: u64 = 64 * 1024;
        let mut tail: Vec<u8> = Vec::new();
        // Enough when more than n newlines are in (the first line may be partial), or at the start.
        while end > 0 && tail.iter().filter(|&&b| b == b'\n').count() <= n {
            let start = end.saturating_sub(CHUNK);
            let mut chunk = vec![0; (end - start) as usize];
            file.seek(SeekFrom::Start(start)).map_err(io)?;
            file.read_exact(&mut chunk).map_err(io)?;
            chunk.extend_from_slice(&tail);
            tail = chunk;
            end = start;
        }
        let text = String::from_utf8_lossy(&tail);
        let mut lines: Vec<&str> = text.split('\n').collect();
        if lines.last() == Some(&"") {
            lines.pop();
        }
        let skip = lines.len().saturating_sub(n);
        Ok(lines[skip..].iter().map(|line| clean_line(line)).collect())
    }
}

impl Drop for EngineLog {
    fn drop(&mut self) {
        if let Err(e) = self.put_back() {
            let _ = writeln!(terminal(), "batchlab: cannot restore stdout/stderr: {e}");
        }
    }
}

/// A log line as a terminal would show it, without any escape sequence or control character.
fn clean_line(line: &str) -> String {
    let line = line.trim_end_matches('\r');
    let line = line.rsplit('\r').next().unwrap_or(line);
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters, then one final byte in @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ST (ESC \).
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::sys::process_test_lock;

    const CHILD_ENV: &str = "BATCHLAB_CAPTURE_TEST_LOG";

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("batchlab-{}-{name}", std::process::id()))
    }

    /// Runs in a child process (the test binary re-run on this one test), because redirecting
    /// fds inside the harness would swallow the harness's own output.
    #[test]
    fn redirect_sends_this_process_and_its_children_to_the_log() {
        if let Some(log) = std::env::var_os(CHILD_ENV) {
            return capture_child(Path::new(&log));
        }
        let _lock = process_test_lock();
        let log = temp_path("capture.log");
        let _ = std::fs::remove_file(&log);
        let me = std::env::current_exe().expect("test binary");
        let output = Command::new(me)
            .args(["--exact", "sys::capture::tests::redirect_sends_this_process_and_its_children_to_the_log"])
            .args(["--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &log)
            .output()
            .expect("re-run the test binary");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "child failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
        let text = std::fs::read_to_string(&log).expect("the log");
        let _ = std::fs::remove_file(&log);
        for line in ["rust stdout", "rust stderr", "child stdout", "child stderr"] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in the log:\n{text}");
        }
        for line in ["to the terminal", "after restore", "terminal_is_tty=false"] {
            assert!(!text.contains(line), "{line:?} in the log:\n{text}");
            assert!(stderr.lines().any(|l| l == line), "{line:?} not on stderr:\n{stderr}");
        }
        for line in ["rust stdout", "rust stderr", "child stdout", "child stderr"] {
            assert!(!stderr.lines().any(|l| l == line), "{line:?} escaped to stderr:\n{stderr}");
            assert!(!stdout.lines().any(|l| l == line), "{line:?} escaped to stdout:\n{stdout}");
        }
    }

    fn capture_child(log: &Path) {
        let capture = EngineLog::redirect(log).expect("redirect");
        assert!(matches!(EngineLog::redirect(log), Err(SysError::AlreadyCapturing(_))));
        println!("rust stdout");
        eprintln!("rust stderr");
        writeln!(terminal(), "to the terminal").expect("terminal");
        writeln!(terminal(), "terminal_is_tty={}", terminal_is_tty()).expect("terminal");
        let status = Command::new("sh").args(["-c", "echo child stdout; echo child stderr >&2"]).status();
        assert!(status.expect("sh").success());
        capture.restore().expect("restore");
        writeln!(terminal(), "after restore").expect("terminal");
    }

    #[test]
    fn tail_reads_the_last_lines_from_the_end() {
        let path = temp_path("tail.log");
        let mut text = String::new();
        // More than one read chunk, so the tail is assembled across chunks.
        for i in 0..20_000 {
            text.push_str(&format!("line {i}\n"));
        }
        std::fs::write(&path, &text).expect("write");
        let tail = EngineLog::tail(&path, 3).expect("tail");
        assert_eq!(tail, ["line 19997", "line 19998", "line 19999"]);
        assert_eq!(EngineLog::tail(&path, 0).expect("tail"), Vec::<String>::new());
        std::fs::write(&path, "only\nno newline at the end").expect("write");
        assert_eq!(EngineLog::tail(&path, 5).expect("tail"), ["only", "no newline at the end"]);
        std::fs::write(&path, "").expect("write");
        assert_eq!(EngineLog::tail(&path, 5).expect("tail"), Vec::<String>::new());
        std::fs::remove_file(&path).expect("remove");
        assert!(matches!(EngineLog::tail(&path, 5), Err(SysError::Io { action: "read", .. })));
    }

    #[test]
    fn tail_lines_carry_no_control_characters() {
        let path = temp_path("tail-control.log");
        let bytes: &[u8] = b"\x1b[31mWARNING\x1b[0m red\n\
            progress  10%\rprogress  50%\rprogress 100%\n\
            \x1b]0;title\x07osc gone\x1b]8;;http://x\x1b\\ link\n\
            tab\tkept, bell\x07 gone, crlf\r\n\
            bad \xff utf-8\n";
        std::fs::write(&path, bytes).expect("write");
        let tail = EngineLog::tail(&path, 10).expect("tail");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(
            tail,
            ["WARNING red", "progress 100%", "osc gone link", "tab\tkept, bell gone, crlf", "bad \u{fffd} utf-8"]
        );
    }
}
