//! State-machine property tests of the sans-IO batcher core against a reference model.
//!
//! Random sequences of submit, tick, engine result, cancel, start and shutdown, with engine deaths
//! and aborts injected at any point, are applied to [`BatcherCore`] by a faithful driver (it wakes
//! at every `poll_timeout` deadline and takes every batch `poll_dispatch` gives, like the real
//! drivers) and to a plain FIFO model, with 1, 2 or 3 batches in flight (`max_in_flight`), whose
//! results come back in any order, and with or without a generate timeout. After every step:
//! `poll_dispatch` gives a batch exactly when the dispatch deadline is due; never more than
//! `max_in_flight` are out; batches come from the front of the model's queue and never exceed
//! `batch_size`; no request is dispatched later than `batch_timeout` past the moment it could have
//! been (a slot free); a result answers its own batch only, and a wrong output count or id fails
//! that whole batch; a generate that overruns the timeout fails its own batch, and while every
//! slot is held by one, queued requests fail once they waited as long; the engine is never shut
//! down while a generate is out; the core numbers every submit, admitted or not, with the next id
//! (0, 1, 2, ...), so no id is ever given twice, to a returned request or in the
//! `Submitted`/`Rejected` events. After a death, shutdown needs nothing from the engine: every
//! request is answered before the stuck calls return. At the end: every accepted request has
//! exactly one outcome, and the engine is shut down once.

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
    /// The result of the in-flight batch at this index (modulo how many are out): any of them,
    /// in any order.
    Reply(Reply, usize),
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
    prop_oneof![Just(Op::Died), Just(Op::Abort), (0usize..3).prop_map(|i| Op::Reply(Reply::Died, i))]
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
        6 => (prop_oneof![
            6 => Just(Reply::Ok),
            1 => Just(Reply::Reversed),
            1 => Just(Reply::Short),
            1 => Just(Reply::Extra),
            1 => Just(Reply::WrongId),
            1 => Just(Reply::MixedIds),
            1 => Just(Reply::Error),
            1 => Just(Reply::Panic),
        ], 0usize..3).prop_map(|(reply, i)| Op::Reply(reply, i)),
        1 => (0usize..64).prop_map(Op::Cancel),
        1 => Just(Op::Shutdown),
    ]
}

fn output(id: Option<RequestId>) -> EngineOutput {
    EngineOutput::new(id, FinishReason::Length).with_prompt_tokens(1).with_output_tokens(1)
}

/// A batch the model has out.
struct Flight {
    batch: u64,
    members: Vec<RequestId>,
    dispatched_at: Timestamp,
    /// Failed already (death, abort, generate timeout): its late result must change nothing.
    abandoned: bool,
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
    /// The batches out, in dispatch order.
    in_flight: Vec<Flight>,
    /// A death or abort was reported: nothing is admitted any more.
    dead: bool,
    /// Since when a slot is free (fewer than `max_in_flight` out, the engine ready): a due batch
    /// could have gone since then.
    slot_free_since: Option<Timestamp>,
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
            in_flight: Vec::new(),
            dead: false,
            slot_free_since: None,
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

    /// The model of `handle_timeout`: a generate past the timeout fails its own batch; while every
    /// slot is held by such a generate, queued requests that waited as long fail.
    fn model_timeouts(&mut self) {
        let Some(limit) = self.config.generate_timeout() else { return };
        for f in self.in_flight.iter_mut().filter(|f| !f.abandoned) {
            if self.now >= f.dispatched_at.saturating_add(limit) {
                f.abandoned = true;
                for id in &f.members {
                    self.expected.insert(*id, "generate_timed_out");
                }
            }
        }
        let stuck = self.in_flight.len() >= self.config.max_in_flight() && self.in_flight.iter().all(|f| f.abandoned);
        while let Some(&(id, submitted)) = self.model_queue.front().filter(|_| stuck) {
            if self.now.saturating_since(submitted) < limit {
                break;
            }
            self.model_queue.pop_front();
            self.expected.insert(id, "engine_unresponsive");
        }
    }

    /// Everything a driver does at `now`: timeouts, every due dispatch, engine shutdown.
    fn pump(&mut self) -> Result<(), TestCaseError> {
        self.core.handle_timeout(self.now);
        self.model_timeouts();
        loop {
            let free = self.in_flight.len() < self.config.max_in_flight();
            if self.core.state() == State::Ready && free && self.slot_free_since.is_none() {
                self.slot_free_since = Some(self.now);
            }
            if !self.dispatch()? {
                break;
            }
        }
        if self.core.poll_engine_shutdown() {
            prop_assert!(self.in_flight.is_empty(), "engine shutdown with a generate in flight");
            self.engine_shutdowns += 1;
            self.core.handle_engine_shutdown_done();
        }
        self.drain_outcomes();
        Ok(())
    }

    /// One `poll_dispatch`, checked against the model; whether it gave a batch.
    fn dispatch(&mut self) -> Result<bool, TestCaseError> {
        let due = self.core.dispatch_deadline().is_some_and(|d| d <= self.now);
        let dispatched = self.core.poll_dispatch(self.now);
        prop_assert_eq!(due, dispatched.is_some(), "the dispatch deadline and poll_dispatch disagree");
        if let Some(batch) = dispatched {
            prop_assert!(
                self.in_flight.len() < self.config.max_in_flight(),
                "a batch beyond max_in_flight = {}",
                self.config.max_in_flight()
            );
            let n = batch.requests.len();
            prop_assert!(n >= 1 && n <= self.config.batch_size(), "batch of {n}");
            let expected: Vec<_> = self.model_queue.drain(..n.min(self.model_queue.len())).collect();
            let got: Vec<_> = batch.requests.iter().map(|r| r.id).collect();
            prop_assert_eq!(
                got.clone(),
                expected.iter().map(|e| e.0).collect::<Vec<_>>(),
                "batch is not the queue's front"
            );
            let free = self.slot_free_since.unwrap_or(self.now);
            for (id, submitted) in &expected {
                let could = submitted.saturating_add(self.config.batch_timeout()).max(free);
                prop_assert!(
                    self.now <= could,
                    "request {id} dispatched at {:?}, could have gone at {:?}",
                    self.now,
                    could
                );
            }
            self.in_flight.push(Flight { batch: batch.id, members: got, dispatched_at: self.now, abandoned: false });
            if self.in_flight.len() >= self.config.max_in_flight() {
                self.slot_free_since = None;
            }
            return Ok(true);
        }
        Ok(false)
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::BeginStart => {
                let _ = self.core.begin_start();
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
            Op::Reply(kind, pick) => {
                if self.in_flight.is_empty() {
                    return Ok(());
                }
                let Flight { batch: batch_id, members: ids, abandoned, .. } =
                    self.in_flight.remove(pick % self.in_flight.len());
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
                if self.slot_free_since.is_none() {
                    self.slot_free_since = Some(self.now);
                }
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
            for f in self.in_flight.iter_mut().filter(|f| !f.abandoned) {
                f.abandoned = true;
                for id in &f.members {
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
                self.core.state() == State::Stopped || self.core.is_wedged() || self.in_flight.is_empty(),
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
            if self.in_flight.is_empty() {
                break;
            }
            self.apply(&Op::Reply(Reply::Ok, 0))?;
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
        max_in_flight in 1usize..=3,
        generate_timeout_us in proptest::option::weighted(0.3, 1u64..6_000),
        mut ops in proptest::collection::vec(op(), 0..160),
        fatal in proptest::collection::vec((0usize..160, fatal()), 0..3),
    ) {
        for (at, op) in fatal {
            ops.insert(at % (ops.len() + 1), op);
        }
        let config = BatchConfig::new(batch_size, Duration::from_micros(timeout_us))
            .and_then(|c| c.with_max_in_flight(max_in_flight))
            .and_then(|c| c.with_generate_timeout(generate_timeout_us.map(Duration::from_micros)))
            .unwrap();
        let mut h = Harness::new(config);
        for op in &ops {
            h.apply(op)?;
        }
        h.finish()?;
    }
}
