//! Fault injection around any engine.
//!
//! [`FaultyEngine`] wraps an [`Engine`] (the simulator, vLLM, a user's own) and makes it fail the
//! way real engines fail: a batch error, too few or too many outputs, an output for a stranger, a
//! panic, a slow or hung generate, a start that fails or takes long, and, for vLLM's multiprocess
//! engine, a SIGKILL of its EngineCore or a worker in the middle of a generate. The batcher above
//! must survive all of them with every request answered exactly once.
//!
//! [`Faults`] is this layer's own config type: the scenario's `[faults]` section is a table of key
//! rows over it, like every other section (the engine knows nothing of scenarios), so its field
//! names are the `[faults]` keys.
//!
//! Draws are deterministic: generate call `n` (1-based) draws from `SplitMix64::derive(seed, n)`,
//! every trigger draws whether or not it fires, so a seed gives the same faults on the same
//! batches, and virtual-time reports stay byte-identical. Sleeps (slow, hang, start delay) go
//! through the wrapper's [`Clock`], so they cost no wall time under a virtual clock.
//!
//! An engine with a concurrent face ([`Started::concurrent`]: an HTTP engine, vLLM with continuous
//! admission) gets the same faults per batch through it: the calls of both faces share one count,
//! so call `n` is the `n`-th batch whichever face ran it, and one decision ([`Faults::decide`])
//! with one [`Effect::apply`] serves both. There nothing may block the caller (it dispatches other
//! batches), so a hang and a slow answer are held back on a thread of their own, and the fault
//! lands in `done`: fail_batch calls it with the error at once, the output faults change what it
//! gets. A panic panics in `generate` itself, before the inner engine is called, and `done` is
//! dropped uncalled: the caller's catch of the panic is the batch's outcome. The wrapper replaces
//! the face alone: every other capability of the wrapped face (it runs here, its counters, its
//! steps) passes through as it is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::engine::{
    ClockDomain, Concurrent, ConcurrentEngine, Engine, EngineError, EngineOutput, EngineRequest, GenerateDone, Started,
    VirtualTimeEngine,
};
use crate::rng::SplitMix64;
use crate::time::{Clock, VirtualClock};

/// When a batch fault fires: on every `every`-th generate call (1-based), and/or with
/// `probability`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FaultTrigger {
    /// Fires on every call whose 1-based number is a multiple of this; `None` (or 0) never by count.
    pub every: Option<u64>,
    /// Chance in [0, 1] that it fires on any one call, drawn from the wrapper's seed.
    pub probability: f64,
}

impl FaultTrigger {
    /// A trigger that never fires (the default of every batch fault).
    pub const NEVER: FaultTrigger = FaultTrigger { every: None, probability: 0.0 };

    /// Fires on generate calls `n`, `2n`, `3n`, ... (1-based).
    pub fn every(n: u64) -> Self {
        FaultTrigger { every: Some(n), probability: 0.0 }
    }

    /// Fires on each generate call with chance `p` in [0, 1].
    pub fn probability(p: f64) -> Self {
        FaultTrigger { every: None, probability: p }
    }

    /// Whether the trigger can never fire (no positive `every`, probability <= 0).
    pub fn is_never(&self) -> bool {
        self.every.is_none_or(|n| n == 0) && self.probability.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    }

    /// Whether the trigger fires on generate call `call`. Draws even when the count fires, so one
    /// trigger's settings never shift another's draws.
    fn fires(&self, call: u64, rng: &mut SplitMix64) -> bool {
        let by_count = self.every.is_some_and(|n| n > 0 && call % n == 0);
        let by_chance = rng.chance(self.probability);
        by_count || by_chance
    }
}

/// A process of the engine killed with SIGKILL during generate call `after_batches + 1`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessFault {
    /// Generate calls that complete before the kill; the kill lands in the next one.
    pub after_batches: u64,
}

/// The faults to inject. Batch faults are checked in this order and at most one fires per
/// generate: panic, hang, fail_batch, short_output, extra_output, wrong_id; `slow` combines with
/// any of them. The field names are the `[faults]` keys.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Faults {
    /// The batch fails with an engine error without calling the engine.
    pub fail_batch: FaultTrigger,
    /// The engine's outputs lose their last one (one output fewer than requests).
    pub short_output: FaultTrigger,
    /// The engine's outputs gain a copy of one (one output more than requests).
    pub extra_output: FaultTrigger,
    /// One output's request id is replaced by an id not in the batch.
    pub wrong_id: FaultTrigger,
    /// Generate panics.
    pub panic: FaultTrigger,
    /// Generate returns `slow_factor` times later than the engine took.
    pub slow: FaultTrigger,
    /// How much later a slow generate returns; >= 1, default 10.
    pub slow_factor: f64,
    /// Generate blocks for `hang_for`, then fails without calling the engine.
    pub hang: FaultTrigger,
    /// How long a hung generate blocks; default one hour.
    pub hang_for: Duration,
    /// `start` fails, so the engine never starts.
    pub start_fails: bool,
    /// Extra time `start` takes before calling the engine.
    pub start_delay: Duration,
    /// SIGKILL vLLM's EngineCore process during a generate.
    pub kill_engine: Option<ProcessFault>,
    /// SIGKILL a vLLM worker process during a generate (multiprocess executor only).
    pub kill_worker: Option<ProcessFault>,
    /// `batchlab serve` answers 429 (drawn per request; see `serve::faults`).
    pub http_429: FaultTrigger,
    /// `batchlab serve` answers 503.
    pub http_503: FaultTrigger,
    /// `batchlab serve` drops the connection halfway through a stream.
    pub drop_stream: FaultTrigger,
    /// `batchlab serve` stalls a stream for `stall_for` after its first token.
    pub stall_stream: FaultTrigger,
    /// How long a stalled stream stalls; default 10 s.
    pub stall_for: Duration,
    /// `batchlab serve` exits at once (status 1) when the request arrives.
    pub exit_server: FaultTrigger,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            fail_batch: FaultTrigger::NEVER,
            short_output: FaultTrigger::NEVER,
            extra_output: FaultTrigger::NEVER,
            wrong_id: FaultTrigger::NEVER,
            panic: FaultTrigger::NEVER,
            slow: FaultTrigger::NEVER,
            slow_factor: 10.0,
            hang: FaultTrigger::NEVER,
            hang_for: Duration::from_secs(3600),
            start_fails: false,
            start_delay: Duration::ZERO,
            kill_engine: None,
            kill_worker: None,
            http_429: FaultTrigger::NEVER,
            http_503: FaultTrigger::NEVER,
            drop_stream: FaultTrigger::NEVER,
            stall_stream: FaultTrigger::NEVER,
            stall_for: Duration::from_secs(10),
            exit_server: FaultTrigger::NEVER,
        }
    }
}

impl Faults {
    /// Whether any process fault is set (they need vLLM's multiprocess engine).
    pub fn has_process_faults(&self) -> bool {
        self.kill_engine.is_some() || self.kill_worker.is_some()
    }
}

/// How long after the start of the chosen generate a process fault kills: late enough that
/// the generate is under way, early enough that even a tiny model's batch is still running.
pub const KILL_DELAY: Duration = Duration::from_millis(200);

/// What the engine's outputs become, when the engine was called.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum OutputFault {
    None,
    ShortOutput,
    ExtraOutput,
    WrongId,
}

/// What one generate call gets, decided before the engine is called ([`Faults::decide`]).
#[derive(Debug, PartialEq)]
enum Decision {
    /// Generate panics, without calling the engine.
    Panic { call: u64 },
    /// The batch fails with `error` without calling the engine: after `hold` (a hang), or at once.
    Refuse { error: EngineError, hold: Option<Duration> },
    /// The engine is called, and its result goes through the effect.
    Call(Effect),
}

/// What a generate call does to the engine's result ([`Effect::apply`]).
#[derive(Copy, Clone, Debug, PartialEq)]
struct Effect {
    output: OutputFault,
    /// An id not in the batch, for `WrongId`.
    stranger: u64,
    /// Slow: the answer is held back this factor of what the engine took, less the time it took.
    slow_factor: Option<f64>,
}

impl Effect {
    /// The result as the faults leave it, given the engine took `took`, and for how long it is
    /// held back (`None`: not slow, answered at once).
    fn apply(
        &self,
        result: Result<Vec<EngineOutput>, EngineError>,
        took: Duration,
    ) -> (Result<Vec<EngineOutput>, EngineError>, Option<Duration>) {
        // The engine cannot be made to compute slower; its answer is held back instead.
        let hold = self.slow_factor.map(|factor| took.mul_f64((factor - 1.0).max(0.0)));
        let result = result.map(|mut outputs| {
            match self.output {
                OutputFault::ShortOutput => {
                    outputs.pop();
                }
                OutputFault::ExtraOutput => {
                    if let Some(last) = outputs.last().cloned() {
                        outputs.push(last);
                    }
                }
                OutputFault::WrongId => {
                    if let Some(first) = outputs.first_mut() {
                        first.request_id = Some(self.stranger);
                    }
                }
                OutputFault::None => {}
            }
            outputs
        });
        (result, hold)
    }
}

impl Faults {
    /// What generate call `call` (1-based) of `batch` gets, drawn from `seed`: at most one batch
    /// fault (in the order of the type's doc), and whether it is slow. Every trigger draws, fired
    /// or not.
    fn decide(&self, seed: u64, call: u64, batch: &[EngineRequest]) -> Decision {
        #[derive(Copy, Clone, PartialEq)]
        enum Fault {
            Panic,
            Hang,
            Fail,
            Output(OutputFault),
        }
        let mut rng = SplitMix64::derive(seed, call);
        let order = [
            (&self.panic, Fault::Panic),
            (&self.hang, Fault::Hang),
            (&self.fail_batch, Fault::Fail),
            (&self.short_output, Fault::Output(OutputFault::ShortOutput)),
            (&self.extra_output, Fault::Output(OutputFault::ExtraOutput)),
            (&self.wrong_id, Fault::Output(OutputFault::WrongId)),
        ];
        let mut chosen = None;
        for (trigger, fault) in order {
            if trigger.fires(call, &mut rng) && chosen.is_none() {
                chosen = Some(fault);
            }
        }
        let slow = self.slow.fires(call, &mut rng);
        let output = match chosen {
            Some(Fault::Panic) => return Decision::Panic { call },
            Some(Fault::Hang) => {
                let error =
                    EngineError::Generate(format!("injected hang of {:?} (generate call {call})", self.hang_for));
                return Decision::Refuse { error, hold: Some(self.hang_for) };
            }
            Some(Fault::Fail) => {
                let error = EngineError::Generate(format!("injected failure (generate call {call})"));
                return Decision::Refuse { error, hold: None };
            }
            Some(Fault::Output(output)) => output,
            None => OutputFault::None,
        };
        let stranger = batch.iter().map(|r| r.id).max().unwrap_or(0).wrapping_add(1);
        Decision::Call(Effect { output, stranger, slow_factor: slow.then_some(self.slow_factor) })
    }
}

/// What both faces of a [`FaultyEngine`] share: the faults, their seed and the one count of calls.
#[derive(Clone)]
struct Draws {
    faults: Faults,
    seed: u64,
    /// Generate calls so far, of both faces.
    calls: Arc<AtomicU64>,
}

impl Draws {
    /// The next generate call's decision, its process faults scheduled.
    fn next(&self, batch: &[EngineRequest]) -> Decision {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        schedule_kills(&self.faults, call);
        self.faults.decide(self.seed, call, batch)
    }
}

/// An engine with faults injected; see the module docs.
pub struct FaultyEngine<E> {
    inner: E,
    draws: Draws,
    clock: Arc<dyn Clock>,
    inner_started: bool,
    /// Any fault configured: otherwise generate is a plain call of the inner engine.
    active: bool,
}

impl<E: Engine> FaultyEngine<E> {
    /// Wraps `inner`. Draws come from `seed`; slow, hang and start delays sleep on `clock` (the
    /// inner engine's clock, so a virtual one stays virtual). With `Faults::default()` the wrapper
    /// only passes calls through.
    pub fn new(inner: E, faults: Faults, seed: u64, clock: Arc<dyn Clock>) -> Self {
        let active = faults != Faults::default();
        let draws = Draws { faults, seed, calls: Arc::new(AtomicU64::new(0)) };
        FaultyEngine { inner, draws, clock, inner_started: false, active }
    }

    /// The faults this wrapper injects.
    pub fn faults(&self) -> &Faults {
        &self.draws.faults
    }

    /// The wrapped engine.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

/// Starts the helper threads of process faults due on call `call`.
fn schedule_kills(faults: &Faults, call: u64) {
    let due = [(faults.kill_engine, process::Target::EngineCore), (faults.kill_worker, process::Target::Worker)];
    for (fault, target) in due {
        if fault.is_some_and(|f| f.after_batches.checked_add(1) == Some(call)) {
            process::kill_later(target, KILL_DELAY);
        }
    }
}

/// On a virtual clock, the wrapper's delays and the engine's costs both advance it.
impl<E: VirtualTimeEngine> VirtualTimeEngine for FaultyEngine<E> {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock.clone());
        self.inner.use_virtual_clock(clock);
    }
}

impl<E: Engine> Engine for FaultyEngine<E> {
    fn start(&mut self) -> Result<Started, EngineError> {
        let faults = &self.draws.faults;
        if !faults.start_delay.is_zero() {
            self.clock.sleep(faults.start_delay);
        }
        if faults.start_fails {
            return Err(EngineError::Start("injected start failure".into()));
        }
        let started = self.inner.start()?;
        self.inner_started = true;
        if !self.active {
            return Ok(started);
        }
        // The wrapper replaces the face alone; every other capability passes through as it is.
        let concurrent = started.concurrent.map(|c| Concurrent {
            face: Arc::new(FaultyConcurrent {
                inner: c.face.clone(),
                draws: self.draws.clone(),
                clock: self.clock.clone(),
            }),
            ..c
        });
        Ok(Started { concurrent, ..started })
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        if !self.active {
            return self.inner.generate(batch);
        }
        let effect = match self.draws.next(batch) {
            Decision::Panic { call } => panic!("injected panic (generate call {call})"),
            Decision::Refuse { error, hold } => {
                if let Some(hold) = hold {
                    self.clock.sleep(hold);
                }
                return Err(error);
            }
            Decision::Call(effect) => effect,
        };
        let began = self.clock.now();
        let result = self.inner.generate(batch);
        let (result, hold) = effect.apply(result, self.clock.now().saturating_since(began));
        if let Some(hold) = hold {
            self.clock.sleep(hold);
        }
        result
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        if !self.inner_started {
            return Ok(());
        }
        self.inner_started = false;
        self.inner.shutdown()
    }

    fn clock_domain(&self) -> ClockDomain {
        self.inner.clock_domain()
    }
}

/// The concurrent face of a [`FaultyEngine`]: the same faults, drawn from the same count.
struct FaultyConcurrent {
    inner: Arc<dyn ConcurrentEngine>,
    draws: Draws,
    clock: Arc<dyn Clock>,
}

impl ConcurrentEngine for FaultyConcurrent {
    fn generate(&self, batch: Vec<EngineRequest>, done: GenerateDone) {
        let effect = match self.draws.next(&batch) {
            Decision::Panic { call } => panic!("injected panic (generate call {call})"),
            Decision::Refuse { error, hold: Some(hold) } => return later(&self.clock, hold, move || done(Err(error))),
            Decision::Refuse { error, hold: None } => return done(Err(error)),
            Decision::Call(effect) => effect,
        };
        let clock = self.clock.clone();
        let began = clock.now();
        let faulty_done: GenerateDone = Box::new(move |result| {
            match effect.apply(result, clock.now().saturating_since(began)) {
                // Held back as the blocking face holds it back, off the thread that answered.
                (result, Some(hold)) => later(&clock, hold, move || done(result)),
                (result, None) => done(result),
            }
        });
        self.inner.generate(batch, faulty_done);
    }
}

/// Runs `f` after `delay` on `clock`, on a thread of its own (at once, without the delay, if no
/// thread can be had: `f` runs either way).
fn later(clock: &Arc<dyn Clock>, delay: Duration, f: impl FnOnce() + Send + 'static) {
    let slot = Arc::new(Mutex::new(Some(f)));
    let (clock, waiting) = (clock.clone(), slot.clone());
    let spawned = std::thread::Builder::new().name("batchlab-fault-delay".into()).spawn(move || {
        clock.sleep(delay);
        let f = waiting.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(f) = f {
            f();
        }
    });
    if spawned.is_err() {
        let f = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(f) = f {
            f();
        }
    }
}

/// Process faults: find one of batchlab's descendants by its command line and SIGKILL it.
mod process {
    use std::time::Duration;

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    /// A process of vLLM's multiprocess engine, by the name vLLM gives its argv[0]
    /// (`/proc/<pid>/comm` would cut it at 15 characters).
    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    pub(super) enum Target {
        EngineCore,
        Worker,
    }

    impl Target {
        pub(super) fn matches(self, argv0: &str) -> bool {
            match self {
                Target::EngineCore => argv0.starts_with("VLLM::EngineCore"),
                Target::Worker => argv0.starts_with("VLLM::Worker"),
            }
        }
    }

    /// argv[0] of `pid`, if it is still there.
    fn argv0(pid: i32) -> Option<String> {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let first = cmdline.split(|&b| b == 0).next()?;
        Some(String::from_utf8_lossy(first).into_owned())
    }

    /// The lowest-numbered descendant of this process that is `target`.
    pub(super) fn find(target: Target) -> Option<i32> {
        crate::sys::descendants().into_iter().find(|&pid| argv0(pid).is_some_and(|a| target.matches(&a)))
    }

    /// From a helper thread, `delay` from now: SIGKILL `target`. Logs what it did.
    pub(super) fn kill_later(target: Target, delay: Duration) {
        let spawned = std::thread::Builder::new().name("batchlab-fault-kill".into()).spawn(move || {
            // The kill lands `delay` into the generate of a real (multiprocess) engine: real time
            // by nature, as the processes it kills are real.
            std::thread::sleep(delay);
            match find(target) {
                Some(pid) => match kill(Pid::from_raw(pid), Signal::SIGKILL) {
                    Ok(()) => tracing::warn!(?target, pid, "injected fault: sent SIGKILL"),
                    Err(e) => tracing::error!(?target, pid, error = %e, "injected fault: kill failed"),
                },
                None => tracing::error!(?target, "injected fault: no such process among batchlab's descendants"),
            }
        });
        if let Err(e) = spawned {
            tracing::error!(?target, error = %e, "injected fault: cannot start the kill thread");
        }
    }
}

#[cfg(test)]
mod tests;
