//! State-machine property tests of the sans-IO batcher core against a reference model.
//!
//! Random sequences of submit, tick, engine result, cancel, start and shutdown, with engine deaths
//! and aborts injected at any point, are applied to [`BatcherCore`] by a faithful driver (it wakes
//! at every `poll_timeout` deadline, like the real drivers) and to a plain FIFO model. After every
//! step: `poll_dispatch` gives a batch exactly when the dispatch deadline is due; batches come from
//! the front of the model's queue and never exceed `batch_size`; no request is dispatched later
//! than `batch_timeout` past the moment it could have been; a wrong output count or id fails the
//! whole batch; the engine is never shut down while a generate runs; the core numbers every submit,
//! admitted or not, with the next id (0, 1, 2, ...), so no id is ever given twice, to a returned
//! request or in the `Submitted`/`Rejected` events. After a death, shutdown
//! needs nothing from the engine: every request is answered before the stuck call returns. At the
//! end: every accepted request has exactly one outcome, and the engine is shut down once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use batchlab::batcher::{BatchConfig, BatcherCore, Event, GenerateResult, Outcome, RequestError, State};
use batchlab::engine::{EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, FinishReason, RequestId};
use batchlab::time::Timestamp;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Reply {
    Ok,
    Reversed,
    Short,
    Extra,
    WrongId,
    MixedIds,
    Error,
    Panic,
    /// The engine says it is dead (`EngineError::Died`).
    Died,
}

#[derive(Clone, Debug)]
enum Op {
    BeginStart,
    StartResult(bool),
    Submit,
    Tick(u64),
    Reply(Reply),
    Cancel(usize),
    Shutdown,
    /// A process watcher reports the engine's death.
    Died,
    /// The first Ctrl-C abandons the running generate.
    Abort,
}

/// A death, an abort, or a generate that returns `Died`: injected into a run, rarely, so most
/// runs still batch for a while first.
fn fatal() -> impl Strategy<Value = Op> {
    prop_oneof![Just(Op::Died), Just(Op::Abort), Just(Op::Reply(Reply::Died))]
}

fn death() -> EngineDeath {
    EngineDeath::new("VLLM::EngineCore", Some(1234), "killed by SIGKILL")
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::BeginStart),
        // Start failures rarer than successes, so most runs get to exercise batching.
        1 => prop_oneof![3 => Just(true), 1 => Just(false)].prop_map(Op::StartResult),
        10 => Just(Op::Submit),
        6 => (0u64..3_000).prop_map(Op::Tick),
        6 => prop_oneof![
            6 => Just(Reply::Ok),
            1 => Just(Reply::Reversed),
            1 => Just(Reply::Short),
            1 => Just(Reply::Extra),
            1 => Just(Reply::WrongId),
            1 => Just(Reply::MixedIds),
            1 => Just(Reply::Error),
            1 => Just(Reply::Panic),
        ].prop_map(Op::Reply),
        1 => (0usize..64).prop_map(Op::Cancel),
        1 => Just(Op::Shutdown),
    ]
}

fn output(id: Option<RequestId>) -> EngineOutput {
    EngineOutput::new(id, FinishReason::Length).with_prompt_tokens(1).with_output_tokens(1)
}

struct Harness {
    core: BatcherCore,
    config: BatchConfig,
    now: Timestamp,
    /// Submits so far, admitted or not: the id the core must give the next one.
    submits: u64,
    /// Every id the core gave (returned, or named in a `Submitted` or `Rejected` event).
    numbered: HashSet<RequestId>,
    /// The model's queue: (id, submitted at), FIFO.
    model_queue: VecDeque<(RequestId, Timestamp)>,
    /// (batch, members, abandoned by a death or abort: its late result must change nothing).
    in_flight: Option<(u64, Vec<RequestId>, bool)>,
    /// A death or abort was reported: nothing is admitted any more.
    dead: bool,
    engine_free_since: Option<Timestamp>,
    accepted: Vec<RequestId>,
    outcomes: HashMap<RequestId, Vec<Outcome>>,
    /// Expected error kind for members of batches whose reply must fail.
    expected: HashMap<RequestId, &'static str>,
    engine_shutdowns: u32,
}

impl Harness {
    fn new(config: BatchConfig) -> Self {
        Harness {
            core: BatcherCore::new(config.clone()).with_events(),
            config,
            now: Timestamp::from_nanos(1_000_000),
            submits: 0,
            numbered: HashSet::new(),
            model_queue: VecDeque::new(),
            in_flight: None,
            dead: false,
            engine_free_since: None,
            accepted: Vec::new(),
            outcomes: HashMap::new(),
            expected: HashMap::new(),
            engine_shutdowns: 0,
        }
    }

    fn drain_outcomes(&mut self) {
        while let Some((id, o)) = self.core.poll_outcome() {
            self.outcomes.entry(id).or_default().push(o);
        }
    }

    /// Everything a driver does at `now`: timeouts, dispatch, engine shutdown.
    fn pump(&mut self) -> Result<(), TestCaseError> {
        self.core.handle_timeout(self.now);
        if self.core.state() == State::Ready && self.engine_free_since.is_none() {
            self.engine_free_since = Some(self.now);
        }
        let due = self.core.dispatch_deadline().is_some_and(|d| d <= self.now);
        let dispatched = self.core.poll_dispatch(self.now);
        prop_assert_eq!(due, dispatched.is_some(), "the dispatch deadline and poll_dispatch disagree");
        if let Some(batch) = dispatched {
            prop_assert!(self.in_flight.is_none(), "two generates in flight");
            let n = batch.requests.len();
            prop_assert!(n >= 1 && n <= self.config.batch_size(), "batch of {n}");
            let expected: Vec<_> = self.model_queue.drain(..n.min(self.model_queue.len())).collect();
            let got: Vec<_> = batch.requests.iter().map(|r| r.id).collect();
            prop_assert_eq!(
                got.clone(),
                expected.iter().map(|e| e.0).collect::<Vec<_>>(),
                "batch is not the queue's front"
            );
            let free = self.engine_free_since.unwrap_or(self.now);
            for (id, submitted) in &expected {
                let could = submitted.saturating_add(self.config.batch_timeout()).max(free);
                prop_assert!(
                    self.now <= could,
                    "request {id} dispatched at {:?}, could have gone at {:?}",
                    self.now,
                    could
                );
            }
            self.in_flight = Some((batch.id, got, false));
            self.engine_free_since = None;
        }
        if self.core.poll_engine_shutdown() {
            prop_assert!(self.in_flight.is_none(), "engine shutdown with a generate in flight");
            self.engine_shutdowns += 1;
            self.core.handle_engine_shutdown_done();
        }
        self.drain_outcomes();
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::BeginStart => {
                self.core.begin_start();
            }
            Op::StartResult(ok) => {
                let was_starting = matches!(self.core.state(), State::Starting | State::StartingThenDrain);
                let r = if *ok { Ok(EngineInfo::new("mock", "0")) } else { Err(EngineError::Start("no".into())) };
                self.core.handle_start_result(r, self.now);
                if was_starting && !ok {
                    for (id, _) in self.model_queue.drain(..) {
                        self.expected.insert(id, "start_failed");
                    }
                }
            }
            Op::Submit => {
                let state = self.core.state();
                let r = self.core.submit(EngineRequest::tokens(vec![1], 1), self.now);
                let admit = matches!(state, State::Starting | State::Ready) && !self.dead;
                prop_assert_eq!(r.is_ok(), admit, "submit in {:?}: {:?}", state, r);
                let id = self.take_submit_id()?;
                if let Ok(returned) = r {
                    prop_assert_eq!(returned, id, "submit returned another id than its event names");
                    self.accepted.push(id);
                    self.model_queue.push_back((id, self.now));
                }
            }
            Op::Tick(us) => {
                let target = self.now.saturating_add(Duration::from_micros(*us));
                while let Some(deadline) = self.core.poll_timeout().filter(|d| *d <= target) {
                    self.now = self.now.max(deadline);
                    self.pump()?;
                    if self.core.poll_timeout() == Some(deadline) {
                        break;
                    }
                }
                self.now = target;
            }
            Op::Reply(kind) => {
                let Some((batch_id, ids, abandoned)) = self.in_flight.take() else { return Ok(()) };
                let result = match kind {
                    Reply::Ok => GenerateResult::Outputs(ids.iter().map(|&i| output(Some(i))).collect()),
                    Reply::Reversed => GenerateResult::Outputs(ids.iter().rev().map(|&i| output(Some(i))).collect()),
                    Reply::Short => GenerateResult::Outputs(ids.iter().skip(1).map(|&i| output(Some(i))).collect()),
                    Reply::Extra => {
                        GenerateResult::Outputs(ids.iter().chain(ids.first()).map(|&i| output(Some(i))).collect())
                    }
                    Reply::WrongId => {
                        GenerateResult::Outputs(ids.iter().map(|&i| output(Some(i + 1_000_000))).collect())
                    }
                    Reply::MixedIds => GenerateResult::Outputs(
                        ids.iter().enumerate().map(|(k, &i)| output((k > 0).then_some(i))).collect(),
                    ),
                    Reply::Error => GenerateResult::Error(EngineError::Generate("boom".into())),
                    Reply::Panic => GenerateResult::Panicked("boom".into()),
                    Reply::Died => GenerateResult::Error(EngineError::Died(death())),
                };
                let expect = match kind {
                    Reply::Ok | Reply::Reversed => None,
                    Reply::Short | Reply::Extra => Some("output_count_mismatch"),
                    Reply::WrongId => Some("output_id_mismatch"),
                    Reply::MixedIds if ids.len() > 1 => Some("output_id_mismatch"),
                    Reply::MixedIds => None,
                    Reply::Error => Some("engine_error"),
                    Reply::Panic => Some("engine_panicked"),
                    Reply::Died => Some("engine_died"),
                };
                // An abandoned generate's waiters were answered already; its result is discarded.
                if let (Some(kind), false) = (expect, abandoned) {
                    for id in &ids {
                        self.expected.insert(*id, kind);
                    }
                    if kind == "engine_died" {
                        self.kill("engine_died");
                    }
                }
                self.core.handle_generate_result(batch_id, result, self.now);
                self.engine_free_since = Some(self.now);
            }
            Op::Cancel(i) => {
                if self.accepted.is_empty() {
                    return Ok(());
                }
                let id = self.accepted[i % self.accepted.len()];
                let queued = self.model_queue.iter().position(|q| q.0 == id);
                let cancelled = self.core.cancel(id, self.now);
                prop_assert_eq!(cancelled, queued.is_some(), "cancel of {} (queued: {:?})", id, queued);
                if let Some(pos) = queued {
                    self.model_queue.remove(pos);
                    self.expected.insert(id, "cancelled");
                }
            }
            Op::Shutdown => self.core.begin_shutdown(self.now),
            Op::Died => {
                self.kill("engine_died");
                self.core.handle_engine_died(death(), self.now);
            }
            Op::Abort => {
                self.kill("aborted");
                self.core.abort_in_flight(self.now);
            }
        }
        self.pump()
    }

    /// The id the core gave the submit just made, from its `Submitted` or `Rejected` event: the
    /// next number, never one it gave before.
    fn take_submit_id(&mut self) -> Result<RequestId, TestCaseError> {
        let ids: Vec<RequestId> = self
            .core
            .take_events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Submitted { id, .. } | Event::Rejected { id, .. } => Some(id),
                _ => None,
            })
            .collect();
        prop_assert_eq!(ids.len(), 1, "one submit, one Submitted or Rejected event: {:?}", ids);
        let id = ids[0];
        prop_assert!(self.numbered.insert(id), "request id {} given twice", id);
        prop_assert_eq!(id, self.submits, "the core numbers submits 0, 1, 2, ...");
        self.submits += 1;
        Ok(id)
    }

    /// The model of a death or abort: the running batch and the queue fail with `kind`, once,
    /// unless the engine was already unusable or never started.
    fn kill(&mut self, kind: &'static str) {
        let live =
            matches!(self.core.state(), State::Starting | State::StartingThenDrain | State::Ready | State::Draining);
        if live && !self.dead {
            if let Some((_, ids, abandoned)) = self.in_flight.as_mut().filter(|f| !f.2) {
                *abandoned = true;
                for id in ids.iter() {
                    self.expected.insert(*id, kind);
                }
            }
            for (id, _) in self.model_queue.drain(..) {
                self.expected.insert(id, kind);
            }
        }
        self.dead = true;
    }

    fn finish(&mut self) -> Result<(), TestCaseError> {
        self.core.begin_shutdown(self.now);
        self.pump()?;
        if self.dead {
            // Shutdown may return now: every request is answered, whether or not the engine's
            // stuck call ever returns.
            prop_assert!(
                self.core.state() == State::Stopped || self.core.is_wedged() || self.in_flight.is_none(),
                "dead engine, shutdown would wait: {:?}",
                self.core.state()
            );
            for id in &self.accepted {
                prop_assert!(self.outcomes.contains_key(id), "request {} unanswered after the death", id);
            }
        }
        if matches!(self.core.state(), State::Starting | State::StartingThenDrain) {
            self.apply(&Op::StartResult(true))?;
        }
        for _ in 0..10_000 {
            self.pump()?;
            if self.in_flight.is_some() {
                self.apply(&Op::Reply(Reply::Ok))?;
            } else {
                break;
            }
        }
        self.pump()?;
        prop_assert_eq!(self.core.state(), State::Stopped);
        prop_assert!(self.engine_shutdowns <= 1);
        prop_assert!(self.core.is_idle());
        for id in &self.accepted {
            let got = self.outcomes.get(id).map(Vec::as_slice).unwrap_or(&[]);
            prop_assert_eq!(got.len(), 1, "request {} has {} outcomes", id, got.len());
            match (&got[0], self.expected.get(id)) {
                (Ok(c), None) => {
                    prop_assert!(c.output.request_id.is_none_or(|r| r == *id), "output given to the wrong request");
                }
                (Err(e), Some(kind)) => prop_assert_eq!(e.kind(), *kind),
                (Err(RequestError::StartFailed(_)), None) => {}
                (o, k) => prop_assert!(false, "request {id}: outcome {o:?}, expected {k:?}"),
            }
        }
        prop_assert_eq!(self.outcomes.len(), self.accepted.len(), "outcome for a request never accepted");
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn core_matches_model(
        batch_size in 1usize..6,
        timeout_us in 1u64..2_000,
        mut ops in proptest::collection::vec(op(), 0..160),
        fatal in proptest::collection::vec((0usize..160, fatal()), 0..3),
    ) {
        for (at, op) in fatal {
            ops.insert(at % (ops.len() + 1), op);
        }
        let config = BatchConfig::new(batch_size, Duration::from_micros(timeout_us)).unwrap();
        let mut h = Harness::new(config);
        for op in &ops {
            h.apply(op)?;
        }
        h.finish()?;
    }
}
