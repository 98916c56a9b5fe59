//! The engine lifecycle as an explicit transition table.
//!
//! ```text
//! Created ──start──▶ Starting ──ok──▶ Ready ──shutdown──▶ Draining ──engine stopped──▶ Stopped
//!    │                  │                                                                ▲
//!    │                  └──err──▶ Failed ──shutdown, engine stopped─────────────────────┤
//!    └──shutdown before start───────────────────────────────────────────────────────────┘
//! ```
//! Every state change goes through [`Lifecycle::transition`], which refuses anything not in
//! [`TRANSITIONS`]; tests enumerate the table.

use serde::Serialize;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Built; the engine is not loaded. Submits are rejected.
    Created,
    /// The one engine load is running. Submits queue until it ends.
    Starting,
    /// Loaded; batches are dispatched.
    Ready,
    /// Shutdown has begun: nothing new is admitted, what is queued is dispatched.
    Draining,
    /// The engine is shut down. Terminal.
    Stopped,
    /// The engine failed to start. Everything is rejected.
    Failed,
}

impl State {
    pub const ALL: [State; 6] =
        [State::Created, State::Starting, State::Ready, State::Draining, State::Stopped, State::Failed];
}

/// Every legal transition; anything else is a bug in the caller.
pub const TRANSITIONS: &[(State, State)] = &[
    (State::Created, State::Starting),
    (State::Created, State::Stopped),
    (State::Starting, State::Ready),
    (State::Starting, State::Failed),
    (State::Ready, State::Draining),
    (State::Draining, State::Stopped),
    (State::Failed, State::Stopped),
];

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("illegal lifecycle transition {from:?} -> {to:?}")]
pub struct IllegalTransition {
    pub from: State,
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
    pub fn state(&self) -> State {
        self.state
    }

    pub fn is_legal(from: State, to: State) -> bool {
        TRANSITIONS.contains(&(from, to))
    }

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
                "Starting -> Ready",
                "Starting -> Failed",
                "Ready -> Draining",
                "Draining -> Stopped",
                "Failed -> Stopped",
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
}
