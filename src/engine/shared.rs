//! One started engine, several runs.
//!
//! `run_with` takes an engine by value, starts it and shuts it down; a run's batcher calls it from
//! its own engine thread. A calibration or a benchmark that compares many settings on one real
//! engine (one vLLM start of many seconds, not one per setting) needs the engine to outlive a run.
//! [`SharedEngine`] owns the engine on a thread of its own, and hands out [`EngineHandle`]s, each
//! an [`Engine`] for one run: the first handle's `start` starts the engine, later ones get the same
//! [`EngineInfo`]; `generate` runs on the owner thread; a handle's `shutdown` leaves the engine
//! running. [`SharedEngine::shutdown`] stops it, once, after the last run.
//!
//! Why a thread of its own: every call of the engine, its start included, must come from one
//! thread. vLLM's `LLM` is built on the thread that starts it, and its OpenMP thread team and CPU
//! binding belong to that thread; a run that called it from its batcher's new engine thread would
//! measure another engine than a plain `batchlab run` does.
//!
//! A panic in the engine is caught on the owner thread and resumed in the calling handle, so the
//! batcher above sees it as it would see a panic of its own engine; the engine stays usable.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use crate::engine::{ClockDomain, Engine, EngineError, EngineInfo, EngineOutput, EngineRequest};

/// What a call on the owner thread returns: its result, or the panic it raised.
type Reply<T> = Sender<Result<T, Box<dyn Any + Send>>>;

enum Call {
    Start(Reply<Result<EngineInfo, EngineError>>),
    Generate(Vec<EngineRequest>, Reply<Result<Vec<EngineOutput>, EngineError>>),
    Shutdown(Reply<Result<(), EngineError>>),
}

/// An engine on a thread of its own, shared by several runs. See the module docs.
pub struct SharedEngine {
    calls: Option<Sender<Call>>,
    thread: Option<JoinHandle<()>>,
    started: Arc<OnceLock<Result<EngineInfo, EngineError>>>,
    domain: ClockDomain,
}

/// One run's view of a [`SharedEngine`]: an [`Engine`] whose `shutdown` leaves the engine running.
pub struct EngineHandle {
    calls: Sender<Call>,
    started: Arc<OnceLock<Result<EngineInfo, EngineError>>>,
    domain: ClockDomain,
}

impl SharedEngine {
    /// Moves `engine` onto a new thread (`batchlab-shared-engine`). Nothing is started yet.
    pub fn new(engine: impl Engine + 'static) -> Self {
        let domain = engine.clock_domain();
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("batchlab-shared-engine".into())
            .spawn(move || owner_thread(engine, rx))
            .unwrap_or_else(|e| panic!("spawning batchlab-shared-engine: {e}"));
        SharedEngine { calls: Some(tx), thread: Some(thread), started: Arc::default(), domain }
    }

    /// A handle for one run (`run_with(plan, shared.handle(), ...)`).
    pub fn handle(&self) -> EngineHandle {
        EngineHandle {
            calls: self.calls.clone().expect("calls is only taken by shutdown, which consumes self"),
            started: self.started.clone(),
            domain: self.domain,
        }
    }

    /// The engine's info, once a handle started it (`None` before, or when the start failed).
    pub fn info(&self) -> Option<&EngineInfo> {
        self.started.get().and_then(|r| r.as_ref().ok())
    }

    /// Shuts the engine down (if it was started) and ends its thread. A generate still running
    /// (a wedged engine) is waited for.
    pub fn shutdown(mut self) -> Result<(), EngineError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), EngineError> {
        let Some(calls) = self.calls.take() else { return Ok(()) };
        let result = call(&calls, Call::Shutdown).unwrap_or(Ok(()));
        drop(calls);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        result
    }
}

impl Drop for SharedEngine {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "shared engine shutdown on drop failed");
        }
    }
}

/// Sends a call and waits for its reply; `None` when the owner thread is gone. A panic on the
/// owner thread is resumed here.
fn call<T>(calls: &Sender<Call>, make: impl FnOnce(Reply<T>) -> Call) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    calls.send(make(tx)).ok()?;
    match rx.recv().ok()? {
        Ok(value) => Some(value),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn gone() -> EngineError {
    EngineError::Generate("the shared engine's thread is gone".into())
}

fn owner_thread(mut engine: impl Engine, calls: Receiver<Call>) {
    let mut started = false;
    while let Ok(call) = calls.recv() {
        match call {
            Call::Start(reply) => {
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| engine.start()));
                // The work happens on this thread, not on the caller's: whose CPU time a stall
                // watch samples for an in-process engine.
                let this = crate::sys::current_thread_id();
                let result = result.map(|r| r.map(|info| EngineInfo { engine_thread: Some(this), ..info }));
                started = true;
                let _ = reply.send(result);
            }
            Call::Generate(batch, reply) => {
                let _ = reply.send(std::panic::catch_unwind(AssertUnwindSafe(|| engine.generate(&batch))));
            }
            Call::Shutdown(reply) => {
                let result =
                    if started { std::panic::catch_unwind(AssertUnwindSafe(|| engine.shutdown())) } else { Ok(Ok(())) };
                let _ = reply.send(result);
                return;
            }
        }
    }
    // Every sender dropped without a shutdown call (a SharedEngine leaked by a panic).
    if started && let Err(e) = engine.shutdown() {
        tracing::warn!(error = %e, "shared engine shutdown failed");
    }
}

impl Engine for EngineHandle {
    /// Starts the shared engine the first time; later handles get the first start's result.
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        self.started
            .get_or_init(|| {
                call(&self.calls, Call::Start).unwrap_or_else(|| Err(EngineError::Start(gone().to_string())))
            })
            .clone()
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        call(&self.calls, |reply| Call::Generate(batch.to_vec(), reply)).unwrap_or_else(|| Err(gone()))
    }

    /// Leaves the engine running for the next run: [`SharedEngine::shutdown`] stops it.
    fn shutdown(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn clock_domain(&self) -> ClockDomain {
        self.domain
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::engine::FinishReason;

    /// Records which thread each call came from.
    struct Recorder {
        log: Arc<Mutex<Vec<(&'static str, std::thread::ThreadId)>>>,
    }

    impl Recorder {
        fn note(&self, what: &'static str) {
            self.log.lock().unwrap().push((what, std::thread::current().id()));
        }
    }

    impl Engine for Recorder {
        fn start(&mut self) -> Result<EngineInfo, EngineError> {
            self.note("start");
            Ok(EngineInfo { name: "recorder".into(), version: "1".into(), ..Default::default() })
        }
        fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
            self.note("generate");
            if batch.iter().any(|r| r.max_tokens == 0) {
                panic!("zero tokens");
            }
            Ok(batch
                .iter()
                .map(|r| EngineOutput::new(Some(r.id), FinishReason::Length).with_output_tokens(r.max_tokens))
                .collect())
        }
        fn shutdown(&mut self) -> Result<(), EngineError> {
            self.note("shutdown");
            Ok(())
        }
    }

    #[test]
    fn one_start_one_shutdown_every_call_on_one_thread() {
        let log = Arc::default();
        let shared = SharedEngine::new(Recorder { log: Arc::clone(&log) });
        for run in 0..3u64 {
            // Each run calls from a thread of its own, as each run's batcher does.
            let mut handle = shared.handle();
            std::thread::spawn(move || {
                assert_eq!(handle.start().unwrap().name, "recorder");
                let out = handle.generate(&[EngineRequest::tokens(vec![1], 4).with_id(run)]).unwrap();
                assert_eq!(out[0].request_id, Some(run));
                handle.shutdown().unwrap();
            })
            .join()
            .unwrap();
        }
        assert_eq!(shared.info().map(|i| i.version.as_str()), Some("1"));
        shared.shutdown().unwrap();
        let log = log.lock().unwrap();
        let calls: Vec<_> = log.iter().map(|(what, _)| *what).collect();
        assert_eq!(calls, ["start", "generate", "generate", "generate", "shutdown"]);
        assert!(log.iter().all(|(_, thread)| *thread == log[0].1), "every call on the owner thread");
        assert_ne!(log[0].1, std::thread::current().id());
    }

    #[test]
    fn a_panic_reaches_the_caller_and_the_engine_stays_usable() {
        let shared = SharedEngine::new(Recorder { log: Arc::default() });
        let mut handle = shared.handle();
        handle.start().unwrap();
        let panic = std::panic::catch_unwind(AssertUnwindSafe(|| {
            handle.generate(&[EngineRequest::tokens(vec![1], 0).with_id(1)])
        }))
        .expect_err("the engine's panic is resumed in the caller");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"zero tokens"));
        assert!(handle.generate(&[EngineRequest::tokens(vec![1], 3).with_id(2)]).is_ok());
    }

    #[test]
    fn an_engine_never_started_is_never_shut_down() {
        let log = Arc::default();
        drop(SharedEngine::new(Recorder { log: Arc::clone(&log) }));
        assert!(log.lock().unwrap().is_empty());
    }
}
