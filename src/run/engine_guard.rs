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
//! A driver creates the watch after the engine started ([`DeathWatch::arm`]), an
//! [`AbortAfterGrace`] on the first interrupt (dropped when the steps are over), and calls
//! [`DeathWatch::disarm`] and then [`shutdown_bounded`] at the end.

use std::time::Duration;

use crate::batcher::Batcher;
use crate::engine::{EngineDeath, EngineError};
use crate::scenario::plan::{EnginePlan, Plan};
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
    /// Starts watching for engines that run processes (the Python engines: vLLM's multiprocess
    /// mode and whatever a protocol engine starts). The simulator has none, and a watch there
    /// would take a test harness's own children for engine processes: it gets an unarmed watch.
    pub fn arm(plan: &Plan, batcher: &Batcher) -> DeathWatch {
        if !matches!(plan.engine, EnginePlan::Vllm(_) | EnginePlan::Python(_)) {
            return DeathWatch { watch: None };
        }
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
    task: tokio::task::JoinHandle<()>,
}

impl AbortAfterGrace {
    /// Starts the grace period now. Needs a tokio runtime.
    pub fn start(batcher: &Batcher) -> AbortAfterGrace {
        let batcher = batcher.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(INTERRUPT_GRACE).await;
            tracing::warn!(
                "the running generate did not return within {INTERRUPT_GRACE:?} of the interrupt: abandoning it"
            );
            batcher.abort_in_flight();
        });
        AbortAfterGrace { task }
    }
}

impl Drop for AbortAfterGrace {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// [`Batcher::shutdown`], given at most [`SHUTDOWN_LIMIT`]. Every request is answered either way.
pub async fn shutdown_bounded(batcher: &Batcher) -> Result<(), EngineError> {
    let b = batcher.clone();
    let stop = tokio::task::spawn_blocking(move || b.shutdown());
    match tokio::time::timeout(SHUTDOWN_LIMIT, stop).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(EngineError::Shutdown(format!("shutdown panicked: {join}"))),
        Err(_) => Err(EngineError::Shutdown(format!(
            "did not finish within {SHUTDOWN_LIMIT:?}; left behind (leftover processes are ended at exit)"
        ))),
    }
}
