//! The scaffold of a real-engine session, the same for every command that starts an engine
//! (`run`, `calibrate SCENARIO`, `tune`'s confirmation): the engine's output captured in
//! `engine.log` (for the engines that run processes), Ctrl-C and SIGTERM firing the run's
//! [`Interrupt`] (a second one leaves at once), the work on tokio's blocking pool while the
//! runtime's thread watches for signals, and the log's tail when the engine failed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use anyhow::Context;
use batchlab::run::Interrupt;
use batchlab::scenario::plan::EnginePlan;
use batchlab::sys::EngineLog;

use super::{EXIT_SIGINT, EXIT_SIGTERM};

/// The engine's captured output, in the output directory.
const ENGINE_LOG_FILE: &str = "engine.log";

/// A session started: the runtime, the capture and the interrupt, until [`Session::run`].
pub(crate) struct Session {
    runtime: tokio::runtime::Runtime,
    capture: Option<EngineLog>,
    interrupt: Interrupt,
    /// The exit code of the first signal: 130 for SIGINT, 143 for SIGTERM.
    signal_code: Arc<AtomicU8>,
}

/// What [`Session::run`] returns: the work's value, and what the caller may print after it.
pub(crate) struct Ended<T> {
    /// What the work returned.
    pub(crate) value: T,
    log_path: Option<PathBuf>,
    signal_code: Arc<AtomicU8>,
}

impl Session {
    /// Starts a session for `engine` whose log goes to `<log_dir>/engine.log`: captured when the
    /// engine runs processes (the Python ones) and the user did not ask to see its output
    /// (`verbose`).
    pub(crate) fn start(engine: &EnginePlan, log_dir: &Path, verbose: bool) -> anyhow::Result<Session> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")?;
        let writes_output = engine.runs_processes();
        let capture = if writes_output && !verbose { Some(capture_engine_output(log_dir)?) } else { None };
        Ok(Session { runtime, capture, interrupt: Interrupt::new(), signal_code: Arc::new(AtomicU8::new(EXIT_SIGINT)) })
    }

    /// The interrupt the first Ctrl-C or SIGTERM fires: give it to the run.
    pub(crate) fn interrupt(&self) -> Interrupt {
        self.interrupt.clone()
    }

    /// Runs `work` on the blocking pool while the runtime watches for signals, then ends the
    /// session: the runtime shut down (not waiting for a shutdown left behind on a dead engine;
    /// the reaper ends its processes) and stdout and stderr given back.
    pub(crate) fn run<T: Send + 'static>(self, work: impl FnOnce() -> T + Send + 'static) -> Ended<T> {
        let Session { runtime, capture, interrupt, signal_code } = self;
        let value = runtime.block_on(async {
            watch_signals(interrupt, signal_code.clone());
            // The work blocks; the runtime's thread stays free to watch for signals.
            tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
        });
        runtime.shutdown_timeout(Duration::from_millis(500));
        let log_path = capture.as_ref().map(|c| c.path().to_path_buf());
        if let Some(capture) = capture
            && let Err(e) = capture.restore()
        {
            tracing::warn!(error = %e, "cannot restore stdout and stderr");
        }
        Ended { value, log_path, signal_code }
    }
}

impl<T> Ended<T> {
    /// The exit code of the first signal: 130 for SIGINT (also when none came), 143 for SIGTERM.
    pub(crate) fn first_signal(&self) -> u8 {
        self.signal_code.load(Ordering::SeqCst)
    }

    /// After the engine failed: the end of engine.log, when it was captured.
    pub(crate) fn print_log_tail(&self) {
        if let Some(path) = &self.log_path {
            print_engine_log_tail(path);
        }
    }
}

/// How many lines of engine.log a failed run prints.
const ENGINE_LOG_TAIL: usize = 20;

/// Sends the engine's fds 1 and 2 to `<output>/engine.log` for the whole run, for engines that
/// write (the Python ones: vLLM logs, Python warnings, C++ warnings, child processes). The
/// display and the log lines keep the terminal (`sys::terminal`).
fn capture_engine_output(output_dir: &Path) -> anyhow::Result<EngineLog> {
    std::fs::create_dir_all(output_dir).with_context(|| format!("creating {}", output_dir.display()))?;
    let path = output_dir.join(ENGINE_LOG_FILE);
    // One run's log: an earlier run's into the same directory is replaced.
    let _ = std::fs::remove_file(&path);
    EngineLog::redirect(&path).context("capturing the engine's output")
}

/// The end of engine.log, after the engine failed, where the user sees it.
fn print_engine_log_tail(path: &Path) {
    match EngineLog::tail(path, ENGINE_LOG_TAIL) {
        Ok(lines) if !lines.is_empty() => {
            eprintln!("last {} lines of {}:", lines.len(), path.display());
            for line in lines {
                eprintln!("  {line}");
            }
        }
        Ok(_) => eprintln!("the engine wrote nothing to {}", path.display()),
        Err(e) => eprintln!("cannot read the engine's log: {e}"),
    }
}

/// First Ctrl-C (or SIGTERM): fire `interrupt` (stop admitting, drain, report) and keep the
/// signal's exit code (130 for SIGINT, 143 for SIGTERM) in `first_signal`. Second: leave at once,
/// with the second signal's code. Call inside the runtime, before the run starts: a signal that
/// came before the watcher task first ran would otherwise kill the process.
fn watch_signals(interrupt: Interrupt, first_signal: Arc<AtomicU8>) {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = signal(SignalKind::interrupt()).and_then(|int| Ok((int, signal(SignalKind::terminate())?)));
    match signals {
        Ok((mut int, mut term)) => {
            tokio::spawn(async move {
                let code = tokio::select! {
                    _ = int.recv() => EXIT_SIGINT,
                    _ = term.recv() => EXIT_SIGTERM,
                };
                first_signal.store(code, Ordering::SeqCst);
                interrupt.fire();
                let code = tokio::select! {
                    _ = int.recv() => EXIT_SIGINT,
                    _ = term.recv() => EXIT_SIGTERM,
                };
                let _ = writeln!(batchlab::sys::terminal(), "\ninterrupted twice: exiting now");
                batchlab::sys::reap_descendants(Duration::from_secs(2));
                std::process::exit(i32::from(code));
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot watch for Ctrl-C and SIGTERM"),
    }
}
