//! The live progress display, drawn with `indicatif`.
//!
//! The step runner describes each benchmark with a [`StepStatus`]; [`Progress`] draws it on the
//! [`Screen`] it is given:
//!
//! - **Terminal** (`bars`): while the engine starts or stops, a spinner with the elapsed time and
//!   the step; then one bar per benchmark (count/total or elapsed/limit, ETA, rates, mean batch
//!   size, errors), left as a finished line when the benchmark is done. Everything is removed by
//!   [`Progress::clear`] before the report table is printed.
//! - **Plain** (`lines`, stderr is not a terminal): plain lines without a single escape code, one
//!   at each phase change, one every [`PLAIN_INTERVAL`], one per finished benchmark.
//! - **Off** (`--quiet`): nothing.
//!
//! Callers may call [`Progress::status`] as often as they like (the virtual-time driver does so
//! millions of times): it draws at most every [`TERMINAL_INTERVAL`], and the calls in between
//! cost one clock read and a comparison.
//!
//! A [`Screen`] is passed in, never found in a global: it is the terminal, and it knows which
//! display draws on it now. Engines report their start-up steps without knowing about `run/`:
//! they emit `tracing` events with the target [`ENGINE_STEP_TARGET`], and the screen's
//! [`EngineStepLayer`] hands them to that display (`log`). Log lines are written through the
//! screen's [`LogWriter`], above the bars, so the two never garble each other.
//!
//! All output of [`Screen::stderr`] goes to [`crate::sys::terminal`]: the stderr batchlab started
//! with, also while the engine's fds 1 and 2 are captured to its log (see [`crate::sys::capture`]).

mod bars;
mod lines;
mod log;

use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressDrawTarget};

use super::status::{DisplayPhase, StepStatus};
use crate::time::{Clock, MonotonicClock, Timestamp};
use bars::Bars;
use lines::Lines;

pub use log::{ENGINE_STEP_TARGET, EngineStepLayer, LogWriter};

/// The shortest time between two terminal redraws caused by [`Progress::status`].
pub const TERMINAL_INTERVAL: Duration = Duration::from_millis(100);
/// The time between two plain progress lines within one phase.
pub const PLAIN_INTERVAL: Duration = Duration::from_secs(5);

/// How a run shows its progress on stderr.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing is shown (the library default).
    Off,
    /// Redrawn bars and spinners.
    Terminal,
    /// Periodic plain lines.
    Plain,
}

impl ProgressMode {
    /// Terminal when stderr is one (and `TERM` is not `dumb`), else plain; off when `quiet`.
    pub fn detect(quiet: bool) -> Self {
        if quiet {
            ProgressMode::Off
        } else if crate::sys::terminal_is_tty() && !console::is_dumb() {
            ProgressMode::Terminal
        } else {
            ProgressMode::Plain
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The screen: the terminal, passed in, and the display that draws on it now.

/// The terminal a [`Progress`] draws on, shared with everything else that writes there: the
/// [`EngineStepLayer`] (engine steps reach the display drawing now), the [`LogWriter`] and a
/// panic hook ([`Screen::suspend`]), which write above its bars. A handle: clones are the same
/// screen.
///
/// The binary makes one for its stderr and gives it to its logging and to every run
/// ([`RunOptions::screen`](super::RunOptions::screen)). A library caller without a display
/// needs none: [`RunOptions::default`](super::RunOptions::default) has a screen of its own.
#[derive(Clone)]
pub struct Screen {
    shared: Arc<SharedScreen>,
}

struct SharedScreen {
    terminal: Terminal,
    /// The latest display created on this screen with a mode other than `Off`, until it drops.
    active: Mutex<Option<Active>>,
    next_id: AtomicU64,
}

/// The display drawing on a screen now.
struct Active {
    id: u64,
    display: Arc<Mutex<Display>>,
    /// The bars, when the display draws any: log lines are printed above them.
    multi: Option<MultiProgress>,
}

impl Screen {
    /// batchlab's terminal: [`crate::sys::terminal`], the stderr batchlab started with.
    pub fn stderr() -> Self {
        Self::on(Terminal::Stderr)
    }

    fn on(terminal: Terminal) -> Self {
        let shared = SharedScreen { terminal, active: Mutex::new(None), next_id: AtomicU64::new(1) };
        Screen { shared: Arc::new(shared) }
    }

    /// Runs `f` with the bars of the display drawing now hidden, then redraws them: for anything
    /// that writes to the terminal itself (log lines, a panic hook that prints).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.active_bars() {
            Some(multi) => log::suspend_bars(&multi, f),
            None => f(),
        }
    }

    fn terminal(&self) -> &Terminal {
        &self.shared.terminal
    }

    /// Makes `display` the one engine steps and log lines go to; returns its registration.
    fn activate(&self, display: &Arc<Mutex<Display>>) -> u64 {
        let multi = match &lock(display).output {
            Output::Terminal(b) => Some(b.multi().clone()),
            _ => None,
        };
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        *lock(&self.shared.active) = Some(Active { id, display: display.clone(), multi });
        id
    }

    /// Ends the registration `id`, unless a later display took its place.
    fn deactivate(&self, id: u64) {
        let mut active = lock(&self.shared.active);
        if active.as_ref().is_some_and(|a| a.id == id) {
            *active = None;
        }
    }

    fn active_display(&self) -> Option<Arc<Mutex<Display>>> {
        lock(&self.shared.active).as_ref().map(|a| a.display.clone())
    }

    fn active_bars(&self) -> Option<MultiProgress> {
        lock(&self.shared.active).as_ref().and_then(|a| a.multi.clone())
    }
}

impl Default for Screen {
    /// [`Screen::stderr`].
    fn default() -> Self {
        Screen::stderr()
    }
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let terminal = match self.terminal() {
            Terminal::Stderr => "stderr",
            #[cfg(test)]
            Terminal::Memory { .. } => "memory",
        };
        f.debug_struct("Screen").field("terminal", &terminal).finish_non_exhaustive()
    }
}

/// What a [`Screen`] writes to: batchlab's stderr, or memory in tests.
#[derive(Clone)]
enum Terminal {
    Stderr,
    #[cfg(test)]
    Memory {
        /// What the bars draw on, a rendered screen.
        bars: indicatif::InMemoryTerm,
        /// The plain lines and log lines, as written.
        lines: Arc<Mutex<String>>,
    },
}

impl Terminal {
    /// Where `indicatif` draws the bars.
    fn draw_target(&self) -> ProgressDrawTarget {
        match self {
            // At most ~10 frames a second, whatever calls for them (status, ticks).
            Terminal::Stderr => ProgressDrawTarget::term_like_with_hz(Box::new(bars::DisplayTerm::new()), 10),
            #[cfg(test)]
            Terminal::Memory { bars, .. } => ProgressDrawTarget::term_like(Box::new(bars.clone())),
        }
    }

    /// Whether bars redraw on their own (off in tests, where output must not depend on wall time).
    fn ticks(&self) -> bool {
        match self {
            Terminal::Stderr => true,
            #[cfg(test)]
            Terminal::Memory { .. } => false,
        }
    }

    /// Writes `bytes` (a frame, a line) in one piece and flushes.
    fn write_all(&self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Terminal::Stderr => {
                let mut out = crate::sys::terminal();
                out.write_all(bytes)?;
                out.flush()
            }
            #[cfg(test)]
            Terminal::Memory { lines, .. } => {
                lock(lines).push_str(&String::from_utf8_lossy(bytes));
                Ok(())
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The text, shared by both modes.

/// `measuring throughput (1/3)`: what is running.
fn headline(s: &StepStatus) -> String {
    let mut t = format!("{} {}", s.phase.label(), s.benchmark);
    position(&mut t, s);
    t
}

/// ` (1/3)`: the benchmark's place in the run.
fn position(t: &mut String, s: &StepStatus) {
    match s.count {
        Some(n) => {
            let _ = write!(t, " ({}/{n})", s.index + 1);
        }
        None => {
            let _ = write!(t, " (#{})", s.index + 1);
        }
    }
}

/// `120/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors`: how far it is.
fn details(s: &StepStatus) -> String {
    let mut t = match (s.total, s.duration_limit_s) {
        (Some(total), _) => format!("{}/{total} requests", s.done),
        (None, Some(limit)) => format!("{:.1}/{limit:.1} s, {} requests", s.elapsed_s, s.done),
        (None, None) => format!("{} requests", s.done),
    };
    if let Some(r) = s.requests_per_s {
        let _ = write!(t, ", {r:.1} req/s");
    }
    if let Some(r) = s.output_tokens_per_s {
        let _ = write!(t, ", {r:.0} out tok/s");
    }
    if let Some(b) = s.mean_batch_size {
        let _ = write!(t, ", batch {b:.1}");
    }
    let _ = write!(t, ", {} error{}", s.errors, if s.errors == 1 { "" } else { "s" });
    t
}

/// `done throughput (1/3)`: a finished benchmark.
fn done_headline(s: &StepStatus) -> String {
    let mut t = format!("done {}", s.benchmark);
    position(&mut t, s);
    t
}

// ---------------------------------------------------------------------------------------------
// The display's state, shared with the screen's engine-step layer.

enum Output {
    Off,
    Plain(Lines),
    Terminal(Box<Bars>),
}

/// What [`Progress`] and the [`EngineStepLayer`] draw on.
struct Display {
    clock: Arc<dyn Clock>,
    started: Timestamp,
    output: Output,
}

impl Display {
    fn elapsed(&self) -> Duration {
        self.clock.now().saturating_since(self.started)
    }

    fn engine_step(&mut self, step: &str) {
        let elapsed = self.elapsed();
        match &mut self.output {
            Output::Off => {}
            Output::Plain(l) => l.engine_step(elapsed, step),
            Output::Terminal(b) => b.engine_step(step),
        }
    }

    fn status(&mut self, s: &StepStatus) {
        let elapsed = self.elapsed();
        match &mut self.output {
            Output::Off => {}
            Output::Plain(l) => l.status(elapsed, s),
            Output::Terminal(b) => b.status(s),
        }
    }

    fn benchmark_done(&mut self, s: &StepStatus) {
        let elapsed = self.elapsed();
        match &mut self.output {
            Output::Off => {}
            Output::Plain(l) => l.benchmark_done(elapsed, s),
            Output::Terminal(b) => b.benchmark_done(s),
        }
    }

    fn clear(&mut self) {
        if let Output::Terminal(b) = &mut self.output {
            b.clear();
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// The live display of a run. See the module docs for what each [`ProgressMode`] shows.
///
/// A `Progress` created with a mode other than `Off` is its screen's *active* display until it
/// drops (or a later one takes over): it receives the engine steps of the screen's
/// [`EngineStepLayer`], and the screen's [`LogWriter`] prints above its bars.
pub struct Progress {
    mode: ProgressMode,
    clock: Arc<dyn Clock>,
    display: Arc<Mutex<Display>>,
    /// The screen, and the registration on it that drop removes.
    screen: Screen,
    active_id: Option<u64>,
    /// The (benchmark, phase) of the last status drawn, and when the next one is due.
    drawn: Option<(usize, DisplayPhase)>,
    next_draw: Timestamp,
    /// How many statuses passed the throttle (for tests).
    draws: u64,
}

impl Progress {
    /// A display of `mode` on `screen`, timed by the monotonic clock; it becomes the screen's
    /// active display.
    pub fn new(mode: ProgressMode, screen: &Screen) -> Self {
        Self::with_clock(mode, screen, Arc::new(MonotonicClock))
    }

    fn with_clock(mode: ProgressMode, screen: &Screen, clock: Arc<dyn Clock>) -> Self {
        let terminal = screen.terminal();
        let output = match mode {
            ProgressMode::Off => Output::Off,
            ProgressMode::Plain => Output::Plain(Lines::new(terminal.clone())),
            ProgressMode::Terminal => Output::Terminal(Box::new(Bars::new(terminal.draw_target(), terminal.ticks()))),
        };
        let started = clock.now();
        let display = Arc::new(Mutex::new(Display { clock: clock.clone(), started, output }));
        let active_id = (mode != ProgressMode::Off).then(|| screen.activate(&display));
        Progress { mode, clock, display, screen: screen.clone(), active_id, drawn: None, next_draw: started, draws: 0 }
    }

    fn interval(&self) -> Duration {
        match self.mode {
            ProgressMode::Plain => PLAIN_INTERVAL,
            _ => TERMINAL_INTERVAL,
        }
    }

    /// The engine is starting or stopping: shows `step` ("loading engine", "importing vLLM",
    /// "stopping engine", …) next to a spinner and the elapsed time. Always drawn.
    pub fn engine_step(&mut self, step: &str) {
        if self.mode == ProgressMode::Off {
            return;
        }
        self.drawn = None;
        lock(&self.display).engine_step(step);
    }

    /// A benchmark's progress. Drawn at once when the benchmark or its phase changed, else when
    /// the last draw is older than the throttle interval; otherwise this returns at once.
    pub fn status(&mut self, s: &StepStatus) {
        if self.mode == ProgressMode::Off {
            return;
        }
        let key = (s.index, s.phase);
        let now = self.clock.now();
        if self.drawn == Some(key) && now < self.next_draw {
            return;
        }
        self.drawn = Some(key);
        self.next_draw = now.saturating_add(self.interval());
        self.draws += 1;
        lock(&self.display).status(s);
    }

    /// A benchmark finished with these counts: its bar becomes a finished line (terminal), or one
    /// line is printed (plain).
    pub fn benchmark_done(&mut self, s: &StepStatus) {
        if self.mode == ProgressMode::Off {
            return;
        }
        self.drawn = None;
        lock(&self.display).benchmark_done(s);
    }

    /// Removes every bar and spinner from the screen (before the report table is printed).
    pub fn clear(&mut self) {
        lock(&self.display).clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
        if let Some(id) = self.active_id {
            self.screen.deactivate(id);
        }
    }
}

#[cfg(test)]
mod tests;
