//! The engine lifecycle as an explicit transition table.
//!
//! ```text
//! Created ─────────start──────────────▶ Starting
//! Created ─────────shutdown, death,───▶ Stopped            (nothing was loaded)
//!                  abort
//! Starting ────────loaded─────────────▶ Ready
//! Starting ────────shutdown───────────▶ StartingThenDrain
//! Starting ────────load failed*───────▶ Failed
//! StartingThenDrain ─loaded───────────▶ Draining
//! StartingThenDrain ─load failed*─────▶ FailedClosing
//! Ready ───────────shutdown───────────▶ Draining
//! Ready ───────────death, abort───────▶ Failed
//! Draining ────────death, abort───────▶ FailedClosing
//! Failed ──────────shutdown───────────▶ FailedClosing
//! Draining, FailedClosing ─shutdown issued─▶ EngineStopping  (nothing queued or running)
//! EngineStopping ──engine stopped─────▶ Stopped
//! ```
//! (*) Also when the load returns, whatever its result, after a death or abort was reported
//! during it (that report already failed the queue and rejects every submit).
//!
//! Shutdown being requested is part of the state (`StartingThenDrain`, `Draining`,
//! `FailedClosing`, `EngineStopping`, `Stopped`), not a flag beside it, and so is the engine's
//! shutdown once issued (`EngineStopping`: issued exactly once, never while a call into the
//! engine runs). Every state change goes through [`Lifecycle::transition`], which refuses anything not in [`TRANSITIONS`]; tests
//! enumerate the table.

use serde::Serialize;

/// Where the engine is in its one life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Built; the engine is not loaded. Submits are rejected.
    Created,
    /// The one engine load is running. Submits queue until it ends.
    Starting,
    /// Shutdown was requested during the load: nothing new is admitted; once the load ends, what
    /// is queued drains (or fails, if the load failed).
    StartingThenDrain,
    /// Loaded; batches are dispatched.
    Ready,
    /// Shutdown has begun: nothing new is admitted, what is queued is dispatched.
    Draining,
    /// The engine is unusable: it failed to start, died, or its generate was aborted. Everything
    /// is rejected with the reason. Waits for shutdown.
    Failed,
    /// Shutdown was requested of an unusable engine: its shutdown runs once no call into it is
    /// running, never while a generate is stuck.
    FailedClosing,
    /// The engine's shutdown was issued (once: nothing was queued or running) and has not yet
    /// returned. A death or abort now changes nothing but the cause later submits are rejected
    /// with.
    EngineStopping,
    /// The engine is shut down (or was never started). Terminal.
    Stopped,
}

impl State {
    /// Every state, for exhaustive tests of the transition table.
    pub const ALL: [State; 9] = [
        State::Created,
        State::Starting,
        State::StartingThenDrain,
        State::Ready,
        State::Draining,
        State::Failed,
        State::FailedClosing,
        State::EngineStopping,
        State::Stopped,
    ];

    /// Shutdown was requested (or is done).
    pub fn shutdown_requested(self) -> bool {
        matches!(
            self,
            State::StartingThenDrain | State::Draining | State::FailedClosing | State::EngineStopping | State::Stopped
        )
    }
}

/// Every legal transition; anything else is a bug in the caller.
pub const TRANSITIONS: &[(State, State)] = &[
    (State::Created, State::Starting),
    (State::Created, State::Stopped),
    (State::Starting, State::StartingThenDrain),
    (State::Starting, State::Ready),
    (State::Starting, State::Failed),
    (State::StartingThenDrain, State::Draining),
    (State::StartingThenDrain, State::FailedClosing),
    (State::Ready, State::Draining),
    (State::Ready, State::Failed),
    (State::Draining, State::FailedClosing),
    (State::Draining, State::EngineStopping),
    (State::Failed, State::FailedClosing),
    (State::FailedClosing, State::EngineStopping),
    (State::EngineStopping, State::Stopped),
];

/// A transition that [`TRANSITIONS`] does not allow; a bug in the caller, never user input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("illegal lifecycle transition {from:?} -> {to:?}")]
pub struct IllegalTransition {
    /// The state the lifecycle was in.
    pub from: State,
    /// The state that was asked for.
    pub to: State,
}

/// The current state, changed only along [`TRANSITIONS`].
#[derive(Clone, Debug)]
pub struct Lifecycle {
    state: State,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle { state: State::Created }
    }
}

impl Lifecycle {
    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Whether `from -> to` is in [`TRANSITIONS`].
    pub fn is_legal(from: State, to: State) -> bool {
        TRANSITIONS.contains(&(from, to))
    }

    /// Moves to `to` if the table allows it from the current state; otherwise leaves the state as it was.
    pub fn transition(&mut self, to: State) -> Result<(), IllegalTransition> {
        if Self::is_legal(self.state, to) {
            self.state = to;
            Ok(())
        } else {
            Err(IllegalTransition { from: self.state, to })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_exactly_the_documented_one() {
        let legal: Vec<String> = State::ALL
            .iter()
            .flat_map(|&from| State::ALL.iter().map(move |&to| (from, to)))
            .filter(|&(from, to)| Lifecycle::is_legal(from, to))
            .map(|(from, to)| format!("{from:?} -> {to:?}"))
            .collect();
        assert_eq!(
            legal,
            [
                "Created -> Starting",
                "Created -> Stopped",
                "Starting -> StartingThenDrain",
                "Starting -> Ready",
                "Starting -> Failed",
                "StartingThenDrain -> Draining",
                "StartingThenDrain -> FailedClosing",
                "Ready -> Draining",
                "Ready -> Failed",
                "Draining -> FailedClosing",
                "Draining -> EngineStopping",
                "Failed -> FailedClosing",
                "FailedClosing -> EngineStopping",
                "EngineStopping -> Stopped",
            ]
        );
    }

    #[test]
    fn illegal_transitions_are_errors_and_leave_state_alone() {
        for from in State::ALL {
            for to in State::ALL {
                let mut l = Lifecycle { state: from };
                let r = l.transition(to);
                if Lifecycle::is_legal(from, to) {
                    assert_eq!(r, Ok(()));
                    assert_eq!(l.state(), to);
                } else {
                    assert_eq!(r, Err(IllegalTransition { from, to }));
                    assert_eq!(l.state(), from);
                }
            }
        }
    }

    #[test]
    fn stopped_is_terminal_and_start_after_stop_is_illegal() {
        let mut l = Lifecycle { state: State::Stopped };
        assert!(l.transition(State::Starting).is_err());
        assert!(State::ALL.iter().all(|&to| !Lifecycle::is_legal(State::Stopped, to)));
    }

    #[test]
    fn no_way_back_from_failure_and_shutdown_is_never_forgotten() {
        for (from, to) in TRANSITIONS {
            assert!(!from.shutdown_requested() || to.shutdown_requested(), "{from:?} -> {to:?} forgets the shutdown");
            let failed = |s: &State| matches!(s, State::Failed | State::FailedClosing);
            let stopping = matches!(to, State::EngineStopping | State::Stopped);
            assert!(!failed(from) || failed(to) || stopping, "{from:?} -> {to:?} revives the engine");
        }
    }
}
