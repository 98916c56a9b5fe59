//! What keeps a real engine from hanging a run, in one place for any driver to use:
//!
//! - [`DeathWatch`]: from the moment the engine started until just before its normal shutdown, a
//!   [`ProcessWatch`] over batchlab's descendants (vLLM's `VLLM::EngineCore` and workers) turns
//!   any exit into [`Batcher::engine_died`], naming the process and its signal or exit status. A
//!   SIGKILLed EngineCore leaves vLLM's `LLM.generate` blocked for ever, so batchlab must notice
//!   on its own; the pidfd watch does within milliseconds.
//! - [`AbortAfterGrace`]: the first Ctrl-C gives the running generate [`INTERRUPT_GRACE`] to
//!   return, then [`Batcher::abort_in_flight`] answers everyone, so the run always finishes and
//!   writes its report, even while a generate is wedged.
//! - [`shutdown_bounded`]: the engine's shutdown gets [`SHUTDOWN_LIMIT`]; a shutdown stuck on a
//!   dead engine is left behind (the binary's reaper ends any process left over).
//!
//! The real-time driver ([`super::realtime`]) arms the watch once the engine started, starts an
//! [`AbortAfterGrace`] on the first interrupt, and at shutdown drops that, disarms the watch and
//! calls [`shutdown_bounded`].

use std::sync::mpsc;
use std::time::Duration;

use crate::batcher::Batcher;
use crate::engine::{EngineDeath, EngineError};
use crate::sys::{ProcessExit, ProcessWatch};

/// How long the running generate may go on after the first Ctrl-C before it is abandoned.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

/// How long the engine's shutdown may take before the run goes on without it.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(20);

/// Fails the batcher with `engine_died` when any descendant process exits. See the module docs.
pub struct DeathWatch {
    watch: Option<ProcessWatch>,
}

impl DeathWatch {
    /// Starts watching every descendant of this process. Only for engines that run processes
    /// (the Python ones: vLLM's multiprocess mode, whatever a protocol engine starts): the
    /// simulator has none, and a watch there would take a test harness's own children for engine
    /// processes.
    pub fn arm(batcher: &Batcher) -> DeathWatch {
        let batcher = batcher.clone();
        let on_exit = move |exit: ProcessExit| {
            tracing::error!("engine process {exit}: failing every request in flight and queued");
            batcher.engine_died(EngineDeath { process: exit.name, pid: Some(exit.pid), status: exit.status });
        };
        match ProcessWatch::start(on_exit) {
            Ok(watch) => DeathWatch { watch: Some(watch) },
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the engine's processes: a dying engine process may hang the run");
                DeathWatch { watch: None }
            }
        }
    }

    /// Stops watching, before a normal shutdown whose processes exit on purpose.
    pub fn disarm(self) {
        if let Some(watch) = self.watch {
            watch.disarm();
        }
    }
}

/// After the first Ctrl-C: abandons the running generate once [`INTERRUPT_GRACE`] passed. Dropping
/// it (the steps are over, the engine is about to be shut down normally) cancels that.
pub struct AbortAfterGrace {
    /// Dropping it wakes the grace thread, which then leaves without aborting.
    _cancel: mpsc::Sender<()>,
}

impl AbortAfterGrace {
    /// Starts the grace period now, on a thread of its own.
    pub fn start(batcher: &Batcher) -> AbortAfterGrace {
        let batcher = batcher.clone();
        let (cancel, cancelled) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new().name("batchlab-interrupt-grace".into()).spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(INTERRUPT_GRACE) {
                tracing::warn!(
                    "the running generate did not return within {INTERRUPT_GRACE:?} of the interrupt: abandoning it"
                );
                batcher.abort_in_flight();
            }
        });
        if let Err(e) = spawned {
            // Without the thread, a wedged generate is still ended by the generate timeout.
            tracing::warn!(error = %e, "cannot start the interrupt grace thread");
        }
        AbortAfterGrace { _cancel: cancel }
    }
}

/// [`Batcher::shutdown`], given at most [`SHUTDOWN_LIMIT`]; past that it is left running on a thread
/// of its own. Every request is answered either way.
pub fn shutdown_bounded(batcher: &Batcher) -> Result<(), EngineError> {
    let b = batcher.clone();
    let (done, result) = mpsc::channel();
    std::thread::Builder::new()
        .name("batchlab-shutdown".into())
        .spawn(move || {
            let _ = done.send(b.shutdown());
        })
        .map_err(|e| EngineError::Shutdown(format!("cannot start the shutdown thread: {e}")))?;
    match result.recv_timeout(SHUTDOWN_LIMIT) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(EngineError::Shutdown(format!(
            "did not finish within {SHUTDOWN_LIMIT:?}; left behind (leftover processes are ended at exit)"
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(EngineError::Shutdown("shutdown panicked".into())),
    }
}
