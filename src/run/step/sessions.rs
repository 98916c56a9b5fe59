//! The step's sessions (`[workload.sessions]`): which turn or new session goes next, what each
//! submit and outcome does to its session, and the benchmark's [`SessionsResult`].
//!
//! **Load.** `concurrency` (and any `max_concurrency`) counts active sessions, thinking ones
//! included: the profile's scheduler is polled with them, not with the requests in flight. A rate
//! profile's arrivals start sessions; with `next_turn = "rate_tick"` an arrival sends a queued
//! turn first, and only starts a session when none is queued. With `after_reply` a turn goes when
//! its think time ends, whatever the profile: it takes no arrival.
//!
//! **Dating.** A turn that waited for its think time was meant to go when it ended: its dispatch
//! delay and client lag start there, so think time is never counted as client lag.
//!
//! [`SessionsResult`]: crate::metrics::sessions::SessionsResult

use std::time::Duration;

use super::{Action, StepRun};
use crate::batcher::Outcome;
use crate::engine::{EngineRequest, RequestId};
use crate::loadgen::Poll;
use crate::loadgen::sessions::{NextTurn, Reply, Sessions, Turn};
use crate::metrics::sessions::SessionTally;
use crate::report::Phase;
use crate::time::Timestamp;

/// Where a submitted request stands in its session, for its record and the per-turn rows.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct TurnMark {
    pub session: u64,
    pub turn: u32,
    pub history_tokens: u32,
    pub dropped_turns: u32,
}

/// The step's sessions and what they have done.
pub(super) struct StepSessions {
    sessions: Sessions,
    tally: SessionTally,
    /// The turn [`Action::Submit`] asked for: its mark, its request (until the loop takes it),
    /// when it was meant to go (`None`: the profile's arrival dates it) and whether it takes the
    /// profile's arrival.
    pending: Option<Pending>,
}

struct Pending {
    mark: TurnMark,
    request: Option<EngineRequest<()>>,
    due: Option<Timestamp>,
    takes_arrival: bool,
}

impl Pending {
    fn of(turn: Turn, takes_arrival: bool) -> Pending {
        let mark = TurnMark {
            session: turn.session,
            turn: turn.turn,
            history_tokens: turn.history_tokens,
            dropped_turns: turn.dropped_turns,
        };
        let due = if takes_arrival { None } else { turn.due };
        Pending { mark, request: Some(turn.request), due, takes_arrival }
    }
}

impl StepRun {
    /// Sends the step's requests as turns of `sessions` (module docs).
    pub fn with_sessions(mut self, sessions: Sessions) -> Self {
        self.sessions = Some(StepSessions { sessions, tally: SessionTally::default(), pending: None });
        self
    }

    /// The request of the turn [`Action::Submit`] asked for, when the step runs sessions; `None`
    /// otherwise (the loop takes the workload's next request).
    pub fn take_turn_request(&mut self) -> Option<EngineRequest<()>> {
        self.sessions.as_mut()?.pending.as_mut()?.request.take()
    }

    /// The decision of [`StepRun::poll`] for a step with sessions, in `phase` until `deadline`.
    pub(super) fn decide_sessions(&mut self, now: Timestamp, phase: Phase, deadline: Option<Timestamp>) -> Action {
        let in_flight = self.in_flight.len();
        let Some(s) = self.sessions.as_mut() else { return Action::Wait(deadline) };
        s.pending = None;
        let rate_tick = s.sessions.spec().next_turn == NextTurn::RateTick && self.scheduler.next_arrival().is_some();
        if !rate_tick {
            while s.sessions.next_due().is_some_and(|due| due <= now) {
                if let Some(turn) = s.sessions.take_due(now) {
                    s.pending = Some(Pending::of(turn, false));
                    return Action::Submit(phase);
                }
            }
        }
        let queued = rate_tick && s.sessions.has_queued(now);
        // A queued turn holds its session's place: only a new session counts against the cap.
        let load = if queued { in_flight } else { s.sessions.active() };
        let soonest = |a: Option<Timestamp>, b: Option<Timestamp>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let thinking = if rate_tick { None } else { s.sessions.next_due() };
        let wake = soonest(thinking, deadline);
        match self.scheduler.poll(now, load) {
            Poll::SubmitNow => {
                let turn = if queued { s.sessions.take_queued(now) } else { s.sessions.start() };
                match turn {
                    Some(turn) => {
                        s.pending = Some(Pending::of(turn, true));
                        Action::Submit(phase)
                    }
                    // Cut before its turn: look again at once.
                    None => Action::Wait(Some(now)),
                }
            }
            Poll::At(t) | Poll::CompletionOr(t) => Action::Wait(soonest(Some(t), wake)),
            Poll::WaitForCompletion => Action::Wait(wake),
            Poll::Exhausted => self.schedule_exhausted(now),
        }
    }

    /// The pending turn was accepted as `id` at `now`: its mark, when it was meant to go (`None`:
    /// the profile dates it) and whether it took the profile's arrival. `None` without a turn.
    pub(super) fn turn_submitted(
        &mut self,
        id: RequestId,
        now: Timestamp,
    ) -> Option<(TurnMark, Option<Timestamp>, bool)> {
        let s = self.sessions.as_mut()?;
        let pending = s.pending.take()?;
        s.sessions.on_submitted(pending.mark.session, id, now);
        Some((pending.mark, pending.due, pending.takes_arrival))
    }

    /// The pending turn was refused: its session fails.
    pub(super) fn turn_refused(&mut self, now: Timestamp) {
        if let Some(s) = self.sessions.as_mut() {
            if let Some(pending) = s.pending.take() {
                s.sessions.on_refused(pending.mark.session, now);
            }
            while let Some(ended) = s.sessions.poll_ended() {
                s.tally.record_ended(ended);
            }
        }
    }

    /// Request `id`, a turn marked `mark` of `phase`, has its outcome at `now` (a completion's
    /// TTFT `ttft`): its session goes on or ends, and a measured completion counts in its turn's
    /// row.
    pub(super) fn turn_outcome(
        &mut self,
        id: RequestId,
        (mark, phase): (TurnMark, Phase),
        outcome: &Outcome,
        ttft: Option<Duration>,
        now: Timestamp,
    ) {
        let Some(s) = self.sessions.as_mut() else { return };
        match outcome {
            Ok(c) => {
                let out = &c.output;
                let reply = Reply {
                    text: out.text.as_deref(),
                    token_ids: out.output_token_ids.as_deref(),
                    output_tokens: out.output_tokens.or(out.output_token_ids.as_ref().map(|t| t.len() as u32)),
                };
                s.sessions.on_reply(id, reply, now);
                if phase == Phase::Measure {
                    s.tally.record_turn(mark.turn, ttft, out.stats.cached_tokens, out.prompt_tokens);
                }
            }
            Err(_) => {
                s.sessions.on_failed(id, now);
            }
        }
        while let Some(ended) = s.sessions.poll_ended() {
            s.tally.record_ended(ended);
        }
    }

    /// The benchmark's sessions result, when it ran sessions.
    pub(super) fn sessions_result(&self) -> Option<crate::metrics::sessions::SessionsResult> {
        let s = self.sessions.as_ref()?;
        let sessions = &s.sessions;
        Some(s.tally.finish(sessions.started(), sessions.unfinished(), sessions.dropped(), sessions.think_times()))
    }
}
