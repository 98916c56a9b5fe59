//! What keeps a real engine from hanging a run, in one place for any driver to use:
//!
//! - [`DeathWatch`]: from the moment the engine started until just before its normal shutdown, a
//!   [`ProcessWatch`] over the engine's own processes ([`EngineProcesses`]: the pids it reported,
//!   such as vLLM's `VLLM::EngineCore` and workers, or else the descendants alive when it
//!   started) turns an exit into [`Batcher::engine_died`], naming the process and its signal or
//!   exit status. A SIGKILLed EngineCore leaves vLLM's `LLM.generate` blocked for ever, so
//!   batchlab must notice on its own; the pidfd watch does within milliseconds. A process the
//!   engine starts later (a helper run during a generate) is not the engine, and its exit is not
//!   a death ([`is_engine_death`]).
//! - [`engine_cpu_probe`]: the engine's CPU time (its processes', and its engine thread's for an
//!   in-process engine), which the batcher's watchdog samples while a generate runs: an engine
//!   that neither returns nor uses CPU for the stall limit is frozen (`engine_stalled`).
//! - [`AbortAfterGrace`]: the first Ctrl-C gives the running generate [`INTERRUPT_GRACE`] to
//!   return, then [`Batcher::abort_in_flight`] answers everyone, so the run always finishes and
//!   writes its report, even while a generate is wedged.
//! - [`shutdown_bounded`]: the engine's shutdown gets [`SHUTDOWN_LIMIT`]; a shutdown stuck on a
//!   dead engine is left behind (the binary's reaper ends any process left over).
//!
//! The real-time driver ([`super::realtime`]) arms the watch and installs the probe once the
//! engine started, starts an [`AbortAfterGrace`] on the first interrupt, and at shutdown drops
//! that, disarms the watch and calls [`shutdown_bounded`].

use std::sync::mpsc;
use std::time::Duration;

use crate::batcher::{Batcher, ProgressProbe};
use crate::engine::{EngineDeath, EngineError, EngineInfo};
use crate::sys::{ExitCause, ProcessExit, ProcessWatch};

/// How long the running generate may go on after the first Ctrl-C before it is abandoned.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(3);

/// How long the engine's shutdown may take before the run goes on without it.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(20);

/// How batchlab knows which processes are the engine, and so what their exit means.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// The engine named them ([`EngineInfo::processes`]): any exit, status 0 included, is its
    /// death (an EngineCore that exits mid-run is gone all the same).
    Reported,
    /// The engine did not say: they are the descendants alive when it started. One that exits
    /// with status 0 was a helper that finished its job; any other end is the engine's death.
    AliveAtStart,
}

/// Whether a watched process's exit is the engine's death.
pub fn is_engine_death(cause: &ExitCause, ownership: Ownership) -> bool {
    match ownership {
        Ownership::Reported => true,
        Ownership::AliveAtStart => *cause != ExitCause::Exited(0),
    }
}

/// The processes that are the engine, by pid, and how batchlab knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineProcesses {
    /// Their pids.
    pub pids: Vec<u32>,
    /// Reported by the engine, or guessed.
    pub ownership: Ownership,
}

impl EngineProcesses {
    /// The engine's processes once it started: those its info names, or, for an engine known to
    /// run processes of its own (`guess`: the plan's Python engines) that did not say, the
    /// descendants alive now. `None` when there are none to watch.
    pub fn of(info: &EngineInfo, guess: bool) -> Option<EngineProcesses> {
        let found = match &info.processes {
            Some(pids) => EngineProcesses { pids: pids.clone(), ownership: Ownership::Reported },
            None if guess => EngineProcesses {
                pids: crate::sys::descendants().into_iter().filter_map(|p| u32::try_from(p).ok()).collect(),
                ownership: Ownership::AliveAtStart,
            },
            None => return None,
        };
        (!found.pids.is_empty()).then_some(found)
    }
}

/// Fails the batcher with `engine_died` when one of the engine's processes exits. See the module
/// docs.
pub struct DeathWatch {
    watch: Option<ProcessWatch>,
}

impl DeathWatch {
    /// Starts watching `processes`. Only the engine's: a watch over every descendant would take a
    /// helper's exit, or a test harness's own children, for the engine's death.
    pub fn arm(batcher: &Batcher, processes: &EngineProcesses) -> DeathWatch {
        let batcher = batcher.clone();
        let ownership = processes.ownership;
        let on_exit = move |exit: ProcessExit| {
            if !is_engine_death(&exit.cause, ownership) {
                tracing::debug!("process {exit}: a helper that finished, not the engine");
                return;
            }
            tracing::error!("engine process {exit}: failing every request in flight and queued");
            batcher.engine_died(EngineDeath::new(exit.name, Some(exit.pid), exit.status));
        };
        tracing::debug!(pids = ?processes.pids, ownership = ?ownership, "watching the engine's processes");
        match ProcessWatch::start(&processes.pids, on_exit) {
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

/// The engine's CPU time so far, for the batcher's stall watch: the engine thread's
/// (`engine_thread`, an in-process engine's work) plus every process of `processes` (all their
/// threads). `None` when none of them can be read any more.
pub fn engine_cpu_probe(engine_thread: Option<i32>, processes: Vec<u32>) -> ProgressProbe {
    std::sync::Arc::new(move || {
        let thread = engine_thread.and_then(crate::sys::thread_cpu_time);
        let own = processes.iter().filter_map(|&pid| crate::sys::process_cpu_time(pid));
        thread.into_iter().chain(own).reduce(|a, b| a + b)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_guessed_helper_may_exit_with_status_zero() {
        let killed = ExitCause::Killed { signal: 9, core_dumped: false };
        let unknown = ExitCause::Unknown("status already collected".into());
        for (cause, reported, guessed) in [
            (ExitCause::Exited(0), true, false),
            (ExitCause::Exited(1), true, true),
            (killed, true, true),
            (unknown, true, true),
        ] {
            assert_eq!(is_engine_death(&cause, Ownership::Reported), reported, "{cause} of a reported process");
            assert_eq!(is_engine_death(&cause, Ownership::AliveAtStart), guessed, "{cause} of a guessed process");
        }
    }

    #[test]
    fn the_engine_names_its_processes_or_they_are_guessed_only_when_asked() {
        let info = EngineInfo::new("e", "1");
        assert_eq!(EngineProcesses::of(&info, false), None, "nothing said, nothing guessed");
        let reported = info.clone().with_processes(vec![7, 8]);
        assert_eq!(
            EngineProcesses::of(&reported, true),
            Some(EngineProcesses { pids: vec![7, 8], ownership: Ownership::Reported })
        );
        assert_eq!(EngineProcesses::of(&info.with_processes(Vec::new()), true), None, "in-process: none");
    }

    #[test]
    fn the_probe_reads_the_engine_threads_cpu_time() {
        let probe = engine_cpu_probe(Some(crate::sys::current_thread_id()), Vec::new());
        assert!(probe().is_some());
        assert_eq!(engine_cpu_probe(None, vec![u32::MAX])(), None, "nothing readable");
    }
}
