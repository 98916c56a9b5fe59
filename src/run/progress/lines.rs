//! The plain mode, for a stderr that is not a terminal: one line at each phase change, one every
//! [`PLAIN_INTERVAL`](super::PLAIN_INTERVAL) (the throttle is [`Progress`](super::Progress)'s), one
//! per finished benchmark, each with a time stamp and not a single escape code.

use std::time::Duration;

use super::{Terminal, details, done_headline, headline};
use crate::run::status::{DisplayPhase, StepStatus};

/// The plain mode's state.
pub(super) struct Lines {
    terminal: Terminal,
    /// The last (benchmark, phase) a line was printed for.
    shown: Option<(usize, DisplayPhase)>,
}

impl Lines {
    pub(super) fn new(terminal: Terminal) -> Self {
        Lines { terminal, shown: None }
    }

    /// `[    1.2s] importing vLLM`
    pub(super) fn engine_step(&mut self, elapsed: Duration, step: &str) {
        self.shown = None;
        self.line(&format!("{}{step}", stamp(elapsed)));
    }

    /// `[    6.3s] measuring throughput (1/2): 125/256 requests, …`
    pub(super) fn status(&mut self, elapsed: Duration, s: &StepStatus) {
        self.shown = Some((s.index, s.phase));
        self.line(&format!("{}{}: {}", stamp(elapsed), headline(s), details(s)));
    }

    /// `[   11.5s] done throughput (1/2): 256/256 requests, …`
    pub(super) fn benchmark_done(&mut self, elapsed: Duration, s: &StepStatus) {
        self.shown = None;
        self.line(&format!("{}{}: {}", stamp(elapsed), done_headline(s), details(s)));
    }

    fn line(&self, text: &str) {
        let _ = self.terminal.write_all(format!("{text}\n").as_bytes());
    }
}

/// `[   12.3s] `: the plain lines' time stamp, since the display started.
fn stamp(elapsed: Duration) -> String {
    format!("[{:>7.1}s] ", elapsed.as_secs_f64())
}
