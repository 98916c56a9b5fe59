//! `batcher`: arbitrary driver sequences on the sans-IO [`BatcherCore`].
//!
//! After every step: no batch exceeds `batch_size`, at most one generate is in flight, the core
//! never gives a request id twice, no request gets two outcomes (or one it was never admitted for), an output goes only to its own request,
//! and a queued request always has something that will dispatch it (a deadline, or a running
//! generate). After a final shutdown every admitted request has exactly one outcome.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arbitrary::Arbitrary;
use batchlab::batcher::{BatchConfig, BatcherCore, GenerateResult, Outcome, State};
use batchlab::engine::{EngineDeath, EngineError, EngineInfo, EngineOutput, EngineRequest, FinishReason, RequestId};
use batchlab::time::Timestamp;

#[derive(Arbitrary, Debug, Clone)]
pub struct Input {
    /// 1..=8.
    pub batch_size: u8,
    /// Nanoseconds, at least 1.
    pub batch_timeout: u16,
    /// Nanoseconds, at least 1.
    pub generate_timeout: Option<u16>,
    pub ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    BeginStart,
    StartResult(bool),
    Submit,
    /// Time passes by this many nanoseconds; the driver wakes at every deadline on the way.
    Tick(u16),
    /// Time passes without the driver waking at deadlines (a late driver).
    Jump(u16),
    Reply(Reply),
    /// A result for a batch that is not the one in flight.
    StaleReply(u8),
    /// Cancel the `n`-th admitted request (queued or not).
    Cancel(u8),
    CancelUnknown,
    Shutdown,
    /// The engine's shutdown returns, if it was asked for.
    EngineShutdownDone,
    /// A process watcher reports the engine's death.
    EngineDied,
    /// The first Ctrl-C abandons the running generate.
    Abort,
}

#[derive(Arbitrary, Debug, Clone, Copy, PartialEq)]
pub enum Reply {
    Right,
    Reversed,
    WithoutIds,
    Short,
    Extra,
    WrongId,
    MixedIds,
    Duplicate,
    Error,
    Panic,
}

fn output(id: Option<RequestId>) -> EngineOutput {
    EngineOutput::new(id, FinishReason::Length).with_prompt_tokens(1).with_output_tokens(1)
}

struct InFlight {
    batch_id: u64,
    ids: Vec<RequestId>,
}

struct Harness {
    core: BatcherCore,
    batch_size: usize,
    now: Timestamp,
    accepted: Vec<RequestId>,
    dispatched: HashSet<RequestId>,
    in_flight: Option<InFlight>,
    outcomes: HashMap<RequestId, Outcome>,
    /// The error kind a request must end with, where the harness knows it in advance.
    expected: HashMap<RequestId, &'static str>,
    engine_shutdown_asked: u32,
    engine_shutdown_pending: bool,
    /// A death or abort was reported: nothing is admitted any more.
    dead: bool,
}

impl Harness {
    fn new(config: BatchConfig) -> Self {
        Harness {
            batch_size: config.batch_size(),
            core: BatcherCore::new(config),
            now: Timestamp::from_nanos(1_000_000),
            accepted: Vec::new(),
            dispatched: HashSet::new(),
            in_flight: None,
            outcomes: HashMap::new(),
            expected: HashMap::new(),
            engine_shutdown_asked: 0,
            engine_shutdown_pending: false,
            dead: false,
        }
    }

    fn drain_outcomes(&mut self) {
        while let Some((id, outcome)) = self.core.poll_outcome() {
            assert!(self.accepted.contains(&id), "outcome for request {id}, which was never admitted");
            if let Ok(c) = &outcome {
                assert!(c.output.request_id.is_none_or(|r| r == id), "request {id} got the output of {:?}", c.output);
                assert!(self.dispatched.contains(&id), "request {id} completed without being dispatched");
            }
            if let Some(previous) = self.outcomes.insert(id, outcome) {
                panic!("request {id} got a second outcome; the first was {previous:?}");
            }
        }
    }

    /// What a driver does at `now`: timeouts, dispatch, engine shutdown, outcomes.
    fn pump(&mut self) {
        self.core.handle_timeout(self.now);
        if let Some(batch) = self.core.poll_dispatch(self.now) {
            assert!(self.in_flight.is_none(), "a second batch was dispatched while one is in flight");
            let ids: Vec<RequestId> = batch.requests.iter().map(|r| r.id).collect();
            assert!(
                !ids.is_empty() && ids.len() <= self.batch_size,
                "batch of {} with batch_size {}",
                ids.len(),
                self.batch_size
            );
            for id in &ids {
                assert!(self.accepted.contains(id), "dispatched request {id} was never admitted");
                assert!(!self.outcomes.contains_key(id), "dispatched request {id} already has an outcome");
                assert!(self.dispatched.insert(*id), "request {id} dispatched twice");
            }
            self.in_flight = Some(InFlight { batch_id: batch.id, ids });
            assert_eq!(self.core.poll_dispatch(self.now), None, "poll_dispatch gave a batch while one is in flight");
        }
        if self.core.poll_engine_shutdown() {
            assert!(self.in_flight.is_none(), "engine shutdown with a generate in flight");
            assert_eq!(self.core.queued(), 0, "engine shutdown with requests queued");
            self.engine_shutdown_asked += 1;
            self.engine_shutdown_pending = true;
        }
        assert!(self.engine_shutdown_asked <= 1, "engine shut down twice");
        self.drain_outcomes();
        self.check_progress();
    }

    /// A queued request always has something that will move it: never a silent hang.
    fn check_progress(&self) {
        if self.core.queued() == 0 || self.core.generate_in_flight() {
            return;
        }
        match self.core.state() {
            State::Ready => {
                let deadline = self.core.poll_timeout();
                assert!(deadline.is_some_and(|d| d > self.now), "queued requests but no future deadline: {deadline:?}");
            }
            State::Starting | State::StartingThenDrain => {}
            other => panic!("{} requests queued in state {other:?} with nothing running", self.core.queued()),
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::BeginStart => {
                let was_created = self.core.state() == State::Created;
                assert_eq!(self.core.begin_start(), was_created);
            }
            Op::StartResult(ok) => self.start_result(ok),
            Op::Submit => {
                let state = self.core.state();
                let admitted = self.core.submit(EngineRequest::tokens(vec![1], 1), self.now);
                let open = matches!(state, State::Starting | State::Ready) && !self.dead;
                assert_eq!(admitted.is_ok(), open, "submit in {state:?}");
                if let Ok(id) = admitted {
                    assert!(!self.accepted.contains(&id), "request id {id} given twice");
                    self.accepted.push(id);
                }
            }
            Op::Tick(nanos) => {
                let target = self.now.saturating_add(Duration::from_nanos(u64::from(nanos)));
                while let Some(deadline) = self.core.poll_timeout().filter(|d| *d <= target && *d > self.now) {
                    self.now = deadline;
                    self.pump();
                }
                self.now = target;
            }
            Op::Jump(nanos) => self.now = self.now.saturating_add(Duration::from_nanos(u64::from(nanos))),
            Op::Reply(reply) => self.reply(reply),
            Op::StaleReply(k) => {
                let current = self.in_flight.as_ref().map_or(0, |f| f.batch_id);
                let stale = current.wrapping_add(1 + u64::from(k));
                let before = self.outcomes.len();
                self.core.handle_generate_result(stale, GenerateResult::Outputs(Vec::new()), self.now);
                self.drain_outcomes();
                assert_eq!(self.outcomes.len(), before, "a result for batch {stale} (not in flight) was used");
            }
            Op::Cancel(n) => {
                if self.accepted.is_empty() {
                    return;
                }
                let id = self.accepted[usize::from(n) % self.accepted.len()];
                let queued = !self.dispatched.contains(&id) && !self.outcomes.contains_key(&id);
                assert_eq!(self.core.cancel(id, self.now), queued, "cancel of request {id}");
                if queued {
                    self.expected.insert(id, "cancelled");
                }
            }
            Op::CancelUnknown => assert!(!self.core.cancel(u64::MAX, self.now)),
            Op::Shutdown => self.core.begin_shutdown(self.now),
            Op::EngineShutdownDone => {
                if std::mem::take(&mut self.engine_shutdown_pending) {
                    self.core.handle_engine_shutdown_done();
                    assert_eq!(self.core.state(), State::Stopped);
                }
            }
            Op::EngineDied => {
                self.dead = true;
                let death = EngineDeath::new("core", Some(1), "killed by SIGKILL");
                self.core.handle_engine_died(death, self.now);
                self.check_all_answered();
            }
            Op::Abort => {
                self.dead = true;
                self.core.abort_in_flight(self.now);
                self.check_all_answered();
            }
        }
        self.pump();
    }

    /// After a death or abort, nobody waits for the engine any more.
    fn check_all_answered(&mut self) {
        self.drain_outcomes();
        for id in &self.accepted {
            assert!(self.outcomes.contains_key(id), "request {id} unanswered after a death or abort");
        }
    }

    fn start_result(&mut self, ok: bool) {
        let starting = matches!(self.core.state(), State::Starting | State::StartingThenDrain);
        let result = if ok { Ok(EngineInfo::new("fuzz", "0")) } else { Err(EngineError::Start("no".into())) };
        self.core.handle_start_result(result, self.now);
        if starting && !ok {
            for id in &self.accepted {
                if !self.outcomes.contains_key(id) && !self.dispatched.contains(id) {
                    self.expected.insert(*id, "start_failed");
                }
            }
        }
    }

    fn reply(&mut self, reply: Reply) {
        let Some(InFlight { batch_id, ids }) = self.in_flight.take() else { return };
        let with =
            |ids: &mut dyn Iterator<Item = Option<RequestId>>| GenerateResult::Outputs(ids.map(output).collect());
        let result = match reply {
            Reply::Right => with(&mut ids.iter().map(|&i| Some(i))),
            Reply::Reversed => with(&mut ids.iter().rev().map(|&i| Some(i))),
            Reply::WithoutIds => with(&mut ids.iter().map(|_| None)),
            Reply::Short => with(&mut ids.iter().skip(1).map(|&i| Some(i))),
            Reply::Extra => with(&mut ids.iter().chain(ids.first()).map(|&i| Some(i))),
            Reply::WrongId => with(&mut ids.iter().map(|&i| Some(i + 1_000_000))),
            Reply::MixedIds => with(&mut ids.iter().enumerate().map(|(k, &i)| (k > 0).then_some(i))),
            Reply::Duplicate => with(&mut ids.iter().map(|_| Some(ids[0]))),
            Reply::Error => GenerateResult::Error(EngineError::Generate("boom".into())),
            Reply::Panic => GenerateResult::Panicked("boom".into()),
        };
        let single = ids.len() == 1;
        let kind = match reply {
            Reply::Right | Reply::Reversed | Reply::WithoutIds => None,
            Reply::MixedIds | Reply::Duplicate if single => None,
            Reply::Short | Reply::Extra => Some("output_count_mismatch"),
            Reply::WrongId | Reply::MixedIds | Reply::Duplicate => Some("output_id_mismatch"),
            Reply::Error => Some("engine_error"),
            Reply::Panic => Some("engine_panicked"),
        };
        // A generate that already timed out has its outcomes; its late result must change nothing.
        let timed_out = ids.iter().all(|id| self.outcomes.contains_key(id));
        self.core.handle_generate_result(batch_id, result, self.now);
        self.drain_outcomes();
        for id in &ids {
            assert!(self.outcomes.contains_key(id), "request {id} of batch {batch_id} got no outcome from its result");
            if timed_out {
                let kind = self.outcomes[id].as_ref().err().map(|e| e.kind());
                assert!(matches!(kind, Some("generate_timed_out" | "engine_died" | "aborted")), "{kind:?}");
            } else if let Some(kind) = kind {
                self.expected.insert(*id, kind);
            }
        }
    }

    /// Shut down the way a driver does, then check every admitted request has its one outcome.
    fn finish(&mut self) {
        self.core.begin_shutdown(self.now);
        if matches!(self.core.state(), State::Starting | State::StartingThenDrain) {
            self.start_result(true);
        }
        self.pump();
        for _ in 0..=self.accepted.len() + 2 {
            if self.in_flight.is_some() {
                self.reply(Reply::Right);
            }
            self.pump();
            if self.engine_shutdown_pending {
                self.apply(&Op::EngineShutdownDone);
            }
            if self.core.state() == State::Stopped {
                break;
            }
        }
        assert_eq!(self.core.state(), State::Stopped, "shutdown did not finish");
        assert!(self.core.is_idle(), "stopped but not idle: {} queued", self.core.queued());
        assert!(self.engine_shutdown_asked <= 1);
        for id in &self.accepted {
            let outcome = self.outcomes.get(id).unwrap_or_else(|| panic!("request {id} was lost: no outcome"));
            match (outcome, self.expected.get(id)) {
                (Ok(_), None) => {}
                (Err(e), Some(kind)) => assert_eq!(e.kind(), *kind, "request {id}: {e}"),
                // Failures the harness does not predict: the generate timeout and the queue it holds up, a
                // death or an abort.
                (Err(e), None) => assert!(
                    matches!(
                        e.kind(),
                        "generate_timed_out"
                            | "engine_unresponsive"
                            | "engine_failed"
                            | "start_failed"
                            | "engine_died"
                            | "aborted"
                    ),
                    "request {id}: unexpected {e}"
                ),
                (Ok(c), Some(kind)) => panic!("request {id}: completed ({c:?}), expected {kind}"),
            }
        }
        assert_eq!(self.outcomes.len(), self.accepted.len());
    }
}

pub fn check(input: &Input) {
    let batch_size = usize::from(input.batch_size % 8) + 1;
    let timeout = Duration::from_nanos(u64::from(input.batch_timeout.max(1)));
    let generate_timeout = input.generate_timeout.map(|t| Duration::from_nanos(u64::from(t.max(1))));
    let config = BatchConfig::new(batch_size, timeout)
        .and_then(|c| c.with_generate_timeout(generate_timeout))
        .expect("the fuzz config is valid by construction");
    let mut h = Harness::new(config);
    for op in &input.ops {
        h.apply(op);
    }
    h.finish();
}
