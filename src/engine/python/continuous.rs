//! Continuous admission (`engine.vllm.admission = "continuous"`): requests go to vLLM's engine as
//! they arrive, and a thread of the engine's own steps it.
//!
//! The batcher hands requests over through the engine's concurrent face
//! ([`ConcurrentEngine::generate`], with `batching.max_in_flight` above 1): each hand-over only
//! queues its requests here and returns. The stepping thread owns the Python object from its
//! start to its shutdown (every Python call of this engine runs on it, as every call of a
//! batch-admission engine runs on the batcher's engine thread): it adds what was handed over
//! (`add`), runs one engine step (`step`) while any request is unfinished, and answers a
//! hand-over's `done` once all of its requests finished. vLLM itself decides what each step
//! runs: that is its continuous batching, which micro-batching cannot reach.
//!
//! Every guarantee of the batcher holds as for batch admission: each hand-over's `done` is called
//! exactly once (its outputs, or the error that ended it: a failed `add` fails that hand-over
//! only; a failed `step` fails every unfinished one, and a dead engine every later one); a
//! stalled or killed engine leaves `done`s uncalled, and the batcher's stall watch and the run's
//! death watch answer them (the stepping thread is this engine's engine thread for the CPU-time
//! probe: `EngineInfo::engine_thread`).

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::interpreter::Session;
use super::{PythonConfig, prepare_chat};
use crate::engine::{
    Concurrent, ConcurrentEngine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStep, GenerateDone,
    RequestId,
};
use crate::time::MonotonicClock;

/// How long dropping a started engine that was never shut down waits for the stepping thread to
/// shut the object down (it may be stuck in a step of a frozen engine).
const DROP_WAIT: Duration = Duration::from_secs(30);

/// The stepping thread and the face that feeds it.
pub(super) struct Continuous {
    shared: Arc<Shared>,
    face: Arc<Face>,
    /// The object's shutdown result, sent by the stepping thread as it ends.
    ended: mpsc::Receiver<Result<(), EngineError>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// Hand-overs not yet added to the engine.
    handed: Vec<(Vec<EngineRequest>, GenerateDone)>,
    /// Shutdown asked: the thread ends once nothing is unfinished.
    stop: bool,
    /// The engine died: every later hand-over fails with this.
    dead: Option<EngineError>,
    /// What the steps served, since they were last taken ([`Concurrent::steps`]).
    steps: Vec<EngineStep>,
}

/// The face the batcher hands requests to.
struct Face {
    shared: Arc<Shared>,
}

impl ConcurrentEngine for Face {
    fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
        let mut state = self.shared.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(dead) = state.dead.clone() {
            drop(state);
            return done(Err(dead));
        }
        if state.stop {
            drop(state);
            return done(Err(EngineError::Generate("the engine is shutting down".into())));
        }
        state.handed.push((batch, done));
        drop(state);
        self.shared.wake.notify_all();
    }
}

impl Continuous {
    /// Starts the stepping thread, which starts the object (`Session::start`) and reports its
    /// start here; then it steps until [`shutdown`](Self::shutdown).
    pub(super) fn start(
        venv: std::path::PathBuf,
        env: Vec<(String, String)>,
        config: PythonConfig,
        path: Option<String>,
    ) -> Result<(Continuous, EngineInfo), EngineError> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new() });
        let (started_tx, started) = mpsc::channel();
        let (ended_tx, ended) = mpsc::channel();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("batchlab-vllm-step".into())
            .spawn(move || {
                let session = match Session::start(&venv, &env, &config, path) {
                    Ok((session, info)) => {
                        let info = EngineInfo { engine_thread: Some(crate::sys::current_thread_id()), ..info };
                        let _ = started_tx.send(Ok(info));
                        session
                    }
                    Err(e) => {
                        let _ = started_tx.send(Err(e));
                        return;
                    }
                };
                step_until_stopped(&s, &session, &config);
                let _ = ended_tx.send(session.shutdown());
            })
            .map_err(|e| EngineError::Start(format!("spawning the stepping thread: {e}")))?;
        let info = started
            .recv()
            .unwrap_or_else(|_| Err(EngineError::Start("the stepping thread ended during the start".into())))?;
        let face = Arc::new(Face { shared: shared.clone() });
        Ok((Continuous { shared, face, ended, thread: Some(thread) }, info))
    }

    /// The face the batcher hands requests to, and what comes with it: vLLM runs in this process
    /// (in-process) or in its EngineCore, both named in the start's info, so the stall watch
    /// judges them; and the steps that served a request are the batches of continuous admission.
    pub(super) fn concurrent(&self) -> Concurrent {
        let shared = self.shared.clone();
        Concurrent {
            runs_here: true,
            steps: Some(Arc::new(move || {
                std::mem::take(&mut shared.state.lock().unwrap_or_else(|e| e.into_inner()).steps)
            })),
            ..Concurrent::new(self.face.clone())
        }
    }

    fn ask_to_stop(&self) {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner()).stop = true;
        self.shared.wake.notify_all();
    }

    /// Stops stepping (every hand-over is answered by now: the batcher shuts an engine down only
    /// after every generate's `done`), shuts the object down on the stepping thread and waits
    /// for it.
    pub(super) fn shutdown(mut self) -> Result<(), EngineError> {
        self.ask_to_stop();
        let result = self.ended.recv().unwrap_or(Ok(()));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        result
    }
}

impl Drop for Continuous {
    /// Never shut down (an error path): asks the thread to stop and shut the object down, waiting
    /// a bounded time, since it may be stuck in a step of a frozen engine.
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        self.ask_to_stop();
        match self.ended.recv_timeout(DROP_WAIT) {
            Ok(Err(e)) => tracing::warn!(error = %e, "Python engine shutdown on drop failed"),
            Ok(Ok(())) => {}
            Err(_) => tracing::warn!("the stepping thread did not end within {DROP_WAIT:?}; leaving it behind"),
        }
    }
}

/// A hand-over whose requests are in the engine.
struct Pending {
    /// Its requests' ids, in hand-over order, and their outputs as they finish.
    ids: Vec<RequestId>,
    outputs: Vec<Option<EngineOutput>>,
    left: usize,
    done: GenerateDone,
}

/// The stepping loop: add what was handed over, step while anything is unfinished, answer each
/// hand-over once all its requests finished. Ends when asked to stop with nothing unfinished.
fn step_until_stopped(shared: &Shared, session: &Session, config: &PythonConfig) {
    let mut warned_plain = false;
    let mut pending: Vec<Pending> = Vec::new();
    // Request id -> index into `pending` is rebuilt when a hand-over is answered; ids are few.
    let mut owner: HashMap<RequestId, usize> = HashMap::new();
    loop {
        let handed = {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            while state.handed.is_empty() && pending.is_empty() && !state.stop {
                state = shared.wake.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            if state.handed.is_empty() && pending.is_empty() {
                return;
            }
            if state.stop {
                // Only a drop without a shutdown stops with work left: answer it and end.
                drop(state);
                let e = EngineError::Generate("the engine was dropped with the request unfinished".into());
                fail_all(&mut pending, &mut owner, &e);
                return;
            }
            std::mem::take(&mut state.handed)
        };
        for (batch, done) in handed {
            let added = prepare_chat(config, session.chat(), &mut warned_plain, &batch)
                .and_then(|prepared| session.add(&prepared));
            match added {
                Ok(()) => {
                    let index = pending.len();
                    for r in &batch {
                        owner.insert(r.id, index);
                    }
                    let n = batch.len();
                    pending.push(Pending {
                        ids: batch.iter().map(|r| r.id).collect(),
                        outputs: vec![None; n],
                        left: n,
                        done,
                    });
                }
                Err(e) => {
                    if matches!(e, EngineError::Died(_)) {
                        shared.state.lock().unwrap_or_else(|p| p.into_inner()).dead = Some(e.clone());
                    }
                    done(Err(e));
                }
            }
        }
        if pending.is_empty() {
            continue;
        }
        let started = MonotonicClock::read();
        let stepped = session.step();
        let ended = MonotonicClock::read();
        match stepped {
            Ok((finished, step, unfinished)) => {
                // Recorded before the outcomes it produced go out, so a run counts the step first.
                if let Some(step) = step {
                    let step = EngineStep::new(started, ended, step.prefill, step.decode);
                    shared.state.lock().unwrap_or_else(|e| e.into_inner()).steps.push(step);
                }
                for output in finished {
                    let Some(id) = output.request_id else { continue };
                    let Some(&index) = owner.get(&id) else {
                        tracing::warn!(request_id = id, "vLLM finished a request batchlab did not hand over");
                        continue;
                    };
                    let p = &mut pending[index];
                    // The first slot of this id still open: an id given twice (never by the
                    // batcher) still gets each output once.
                    if let Some(slot) = p.ids.iter().zip(&p.outputs).position(|(&r, o)| r == id && o.is_none()) {
                        p.outputs[slot] = Some(output);
                        p.left -= 1;
                    }
                }
                if pending.iter().any(|p| p.left == 0) {
                    let (answered, unfinished): (Vec<_>, Vec<_>) = pending.drain(..).partition(|p| p.left == 0);
                    pending = unfinished;
                    owner = pending
                        .iter()
                        .enumerate()
                        .flat_map(|(index, p)| p.ids.iter().map(move |&id| (id, index)))
                        .collect();
                    for p in answered {
                        let outputs = p.outputs.into_iter().flatten().collect();
                        (p.done)(Ok(outputs));
                    }
                }
                // vLLM has nothing left, yet a hand-over waits: an output it gave under an id
                // that was not handed over. Fail it rather than step an idle engine for ever.
                if !unfinished && !pending.is_empty() {
                    let e = EngineError::Generate("vLLM finished every request without answering this one".into());
                    fail_all(&mut pending, &mut owner, &e);
                }
            }
            Err(e) => {
                // The engine's state is unknown after a failed step: every unfinished hand-over
                // fails with it, and a dead engine fails every later one too.
                tracing::error!(error = %e, unfinished = pending.len(), "vLLM step failed");
                if matches!(e, EngineError::Died(_)) {
                    shared.state.lock().unwrap_or_else(|p| p.into_inner()).dead = Some(e.clone());
                }
                fail_all(&mut pending, &mut owner, &e);
            }
        }
    }
}

/// Answers every unfinished hand-over with `e`.
fn fail_all(pending: &mut Vec<Pending>, owner: &mut HashMap<RequestId, usize>, e: &EngineError) {
    owner.clear();
    for p in pending.drain(..) {
        (p.done)(Err(e.clone()));
    }
}
