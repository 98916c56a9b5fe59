//! The live progress display, drawn with `indicatif`.
//!
//! The step runner describes each benchmark with a [`StepStatus`]; [`Progress`] draws it:
//!
//! - **Terminal**: while the engine starts or stops, a spinner with the elapsed time and the step;
//!   then one bar per benchmark (count/total or elapsed/limit, ETA, rates, mean batch size,
//!   errors), left as a finished line when the benchmark is done. Everything is removed by
//!   [`Progress::clear`] before the report table is printed.
//! - **Plain** (stderr is not a terminal): plain lines without a single escape code, one at each
//!   phase change, one every [`PLAIN_INTERVAL`], one per finished benchmark.
//! - **Off** (`--quiet`): nothing.
//!
//! Callers may call [`Progress::status`] as often as they like (the virtual-time driver does so
//! millions of times): it draws at most every [`TERMINAL_INTERVAL`], and the calls in between
//! cost one clock read and a comparison.
//!
//! Engines report their start-up steps without knowing about `run/`: they emit `tracing` events
//! with the target [`ENGINE_STEP_TARGET`], and [`EngineStepLayer`] hands them to the active
//! display. Log lines are written through [`LogWriter`], above the bars, so the two never garble
//! each other.
//!
//! All display output goes through one function, [`terminal`]: the stderr batchlab started with,
//! also while the engine's fds 1 and 2 are captured to its log (see [`crate::sys::capture`]).

use std::fmt::Write as _;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use super::status::{DisplayPhase, StepStatus};
use crate::time::{Clock, MonotonicClock, Timestamp};

/// The `tracing` target of engine start-up and shutdown steps, e.g.
/// `tracing::info!(target: "batchlab::engine_step", "importing vLLM")`.
pub const ENGINE_STEP_TARGET: &str = "batchlab::engine_step";

/// The shortest time between two terminal redraws caused by [`Progress::status`].
pub const TERMINAL_INTERVAL: Duration = Duration::from_millis(100);
/// The time between two plain progress lines within one phase.
pub const PLAIN_INTERVAL: Duration = Duration::from_secs(5);

/// How often spinners and bars redraw on their own (the elapsed time and ETA move on).
const TICK: Duration = Duration::from_millis(100);

/// Where all display output goes (bars, plain lines, log lines): [`crate::sys::terminal`], the
/// stderr batchlab started with, also while the engine's output is captured to its log. It is
/// called for every write and never kept.
fn terminal() -> impl Write {
    crate::sys::terminal()
}

/// The (rows, columns) of [`terminal`]: the original stderr also while a capture moved fd 2 to
/// the engine's log.
fn terminal_size() -> (u16, u16) {
    crate::sys::terminal_size().unwrap_or((24, 80))
}

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

/// `[   12.3s] `: the plain lines' time stamp, since the display started.
fn stamp(elapsed: Duration) -> String {
    format!("[{:>7.1}s] ", elapsed.as_secs_f64())
}

/// The bar's (position, length) in its unit: requests, or milliseconds of a duration limit.
fn bar_extent(s: &StepStatus) -> Option<(u64, u64)> {
    match (s.total, s.duration_limit_s) {
        (Some(total), _) => Some((s.done.min(total), total)),
        (None, Some(limit)) => {
            let ms = |x: f64| (x.max(0.0) * 1000.0) as u64;
            Some((ms(s.elapsed_s).min(ms(limit)), ms(limit)))
        }
        (None, None) => None,
    }
}

fn style(template: &'static str) -> ProgressStyle {
    // The templates are constants; a bad one is caught by every test that draws.
    ProgressStyle::with_template(template).expect("a valid progress template")
}

/// The bar's ETA, or `?` until there is a rate to estimate it from.
fn eta(state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write) {
    let _ =
        if state.pos() == 0 { out.write_str("?") } else { write!(out, "{:#}", indicatif::HumanDuration(state.eta())) };
}

struct Styles {
    spinner: ProgressStyle,
    spinner_done: ProgressStyle,
    bar: ProgressStyle,
    open: ProgressStyle,
    done: ProgressStyle,
}

impl Styles {
    fn new() -> Self {
        Styles {
            spinner: style("{spinner} {msg} [{elapsed}]"),
            spinner_done: style("✔ {msg} [{elapsed}]"),
            bar: style("{prefix} [{bar:24}] {msg}, ETA {eta}").progress_chars("=> ").with_key("eta", eta),
            open: style("{prefix} {spinner} {msg}"),
            done: style("✔ {prefix}: {msg}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The terminal the bars are drawn on.

/// `indicatif`'s view of [`terminal`]: the size is read once, writes are buffered until
/// `indicatif` flushes at the end of each draw, so a frame goes out in one write.
#[derive(Debug)]
struct DisplayTerm {
    rows: u16,
    cols: u16,
    pending: Mutex<Vec<u8>>,
}

impl DisplayTerm {
    fn new() -> Self {
        let (rows, cols) = terminal_size();
        DisplayTerm { rows, cols, pending: Mutex::new(Vec::new()) }
    }

    fn push(&self, bytes: &[u8]) -> std::io::Result<()> {
        lock(&self.pending).extend_from_slice(bytes);
        Ok(())
    }

    fn csi(&self, n: usize, code: char) -> std::io::Result<()> {
        if n == 0 { Ok(()) } else { self.push(format!("\x1b[{n}{code}").as_bytes()) }
    }
}

impl TermLike for DisplayTerm {
    fn width(&self) -> u16 {
        self.cols
    }
    fn height(&self) -> u16 {
        self.rows
    }
    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'A')
    }
    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'B')
    }
    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'C')
    }
    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'D')
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.push(s.as_bytes())?;
        self.push(b"\n")
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.push(s.as_bytes())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.push(b"\r\x1b[2K")
    }
    fn flush(&self) -> std::io::Result<()> {
        let frame = std::mem::take(&mut *lock(&self.pending));
        if frame.is_empty() {
            return Ok(());
        }
        let mut out = terminal();
        out.write_all(&frame)?;
        out.flush()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The display's state, shared with the engine-step layer.

/// Where plain lines go: [`terminal`], or a buffer in tests.
#[derive(Clone)]
enum LineSink {
    Terminal,
    #[cfg(test)]
    Memory(Arc<Mutex<String>>),
}

impl LineSink {
    fn line(&self, text: &str) {
        match self {
            LineSink::Terminal => {
                let mut out = terminal();
                let _ = out.write_all(format!("{text}\n").as_bytes());
                let _ = out.flush();
            }
            #[cfg(test)]
            LineSink::Memory(buf) => {
                let mut b = lock(buf);
                b.push_str(text);
                b.push('\n');
            }
        }
    }
}

/// The benchmark a terminal bar shows.
struct BenchmarkBar {
    index: usize,
    phase: Option<DisplayPhase>,
    /// Whether the bar has a length (a count or a duration limit), or is open-ended.
    bounded: Option<bool>,
    bar: ProgressBar,
}

struct Bars {
    multi: MultiProgress,
    styles: Styles,
    /// Start a bar's own redraws (off in tests, where output must not depend on wall time).
    tick: bool,
    /// Every bar added, to remove them all on `clear`.
    all: Vec<ProgressBar>,
    spinner: Option<ProgressBar>,
    current: Option<BenchmarkBar>,
}

impl Bars {
    fn add(&mut self, bar: ProgressBar) -> ProgressBar {
        let bar = self.multi.add(bar);
        if self.tick {
            bar.enable_steady_tick(TICK);
        }
        self.all.push(bar.clone());
        bar
    }

    fn engine_step(&mut self, step: &str) {
        if let Some(b) = self.current.take() {
            if !b.bar.is_finished() {
                b.bar.abandon();
            }
        }
        match &self.spinner {
            Some(s) => s.set_message(step.to_string()),
            None => {
                let s =
                    ProgressBar::new_spinner().with_style(self.styles.spinner.clone()).with_message(step.to_string());
                let s = self.add(s);
                s.tick();
                self.spinner = Some(s);
            }
        }
    }

    fn finish_spinner(&mut self) {
        if let Some(s) = self.spinner.take() {
            s.set_style(self.styles.spinner_done.clone());
            s.finish_with_message("engine ready");
        }
    }

    fn status(&mut self, s: &StepStatus) {
        self.finish_spinner();
        if self.current.as_ref().is_none_or(|b| b.index != s.index) {
            if let Some(b) = self.current.take() {
                if !b.bar.is_finished() {
                    b.bar.abandon();
                }
            }
            let bar = self.add(ProgressBar::no_length());
            self.current = Some(BenchmarkBar { index: s.index, phase: None, bounded: None, bar });
        }
        let Some(current) = self.current.as_mut() else { return };
        let bar = &current.bar;
        if current.phase != Some(s.phase) {
            current.phase = Some(s.phase);
            bar.reset();
            bar.set_prefix(headline(s));
        }
        let extent = bar_extent(s);
        if current.bounded != Some(extent.is_some()) {
            current.bounded = Some(extent.is_some());
            bar.set_style(if extent.is_some() { self.styles.bar.clone() } else { self.styles.open.clone() });
        }
        match extent {
            Some((pos, len)) => {
                if bar.length() != Some(len) {
                    bar.set_length(len);
                }
                bar.set_position(pos);
            }
            None => bar.unset_length(),
        }
        bar.set_message(details(s));
    }

    fn benchmark_done(&mut self, s: &StepStatus) {
        self.status(s);
        if let Some(b) = self.current.take() {
            b.bar.set_style(self.styles.done.clone());
            b.bar.set_prefix(done_headline(s));
            b.bar.finish_with_message(details(s));
        }
    }

    fn clear(&mut self) {
        self.spinner = None;
        self.current = None;
        for bar in self.all.drain(..) {
            bar.disable_steady_tick();
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
        let _ = self.multi.clear();
    }
}

struct Lines {
    sink: LineSink,
    /// The last (benchmark, phase) a line was printed for.
    shown: Option<(usize, DisplayPhase)>,
}

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
        let stamp = stamp(self.elapsed());
        match &mut self.output {
            Output::Off => {}
            Output::Plain(l) => {
                l.shown = None;
                l.sink.line(&format!("{stamp}{step}"));
            }
            Output::Terminal(b) => b.engine_step(step),
        }
    }

    fn status(&mut self, s: &StepStatus) {
        let stamp = stamp(self.elapsed());
        match &mut self.output {
            Output::Off => {}
            Output::Plain(l) => {
                l.shown = Some((s.index, s.phase));
                l.sink.line(&format!("{stamp}{}: {}", headline(s), details(s)));
            }
            Output::Terminal(b) => b.status(s),
        }
    }

    fn benchmark_done(&mut self, s: &StepStatus) {
        let stamp = stamp(self.elapsed());
        match &mut self.output {
            Output::Off => {}
            Output::Plain(l) => {
                l.shown = None;
                l.sink.line(&format!("{stamp}{}: {}", done_headline(s), details(s)));
            }
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
// The active display, for the engine-step layer and the log writer.

struct Active {
    id: u64,
    display: Arc<Mutex<Display>>,
    /// The bars, when the display draws any: log lines are printed above them.
    multi: Option<MultiProgress>,
}

static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn active_display() -> Option<Arc<Mutex<Display>>> {
    lock(&ACTIVE).as_ref().map(|a| a.display.clone())
}

fn active_bars() -> Option<MultiProgress> {
    lock(&ACTIVE).as_ref().and_then(|a| a.multi.clone())
}

// ---------------------------------------------------------------------------------------------

/// The live display of a run. See the module docs for what each [`ProgressMode`] shows.
///
/// The latest `Progress` created with a mode other than `Off` is the *active* one: it receives
/// the engine steps of [`EngineStepLayer`] and [`LogWriter`] prints above its bars.
pub struct Progress {
    mode: ProgressMode,
    clock: Arc<dyn Clock>,
    display: Arc<Mutex<Display>>,
    /// The registration in [`ACTIVE`], removed on drop.
    active_id: Option<u64>,
    /// The (benchmark, phase) of the last status drawn, and when the next one is due.
    drawn: Option<(usize, DisplayPhase)>,
    next_draw: Timestamp,
    /// How many statuses passed the throttle (for tests).
    draws: u64,
}

/// Where a [`Progress`] draws in terminal mode.
enum Target {
    Real,
    #[cfg(test)]
    Memory(indicatif::InMemoryTerm),
}

impl Progress {
    /// A display of `mode` on [`terminal`], timed by the monotonic clock; it becomes the active
    /// display.
    pub fn new(mode: ProgressMode) -> Self {
        let mut p = Self::build(mode, Arc::new(MonotonicClock), Target::Real, true, LineSink::Terminal);
        p.activate();
        p
    }

    fn build(mode: ProgressMode, clock: Arc<dyn Clock>, target: Target, tick: bool, sink: LineSink) -> Self {
        let output = match mode {
            ProgressMode::Off => Output::Off,
            ProgressMode::Plain => Output::Plain(Lines { sink, shown: None }),
            ProgressMode::Terminal => {
                let draw_target = match target {
                    // At most ~10 frames a second, whatever calls for them (status, ticks).
                    Target::Real => ProgressDrawTarget::term_like_with_hz(Box::new(DisplayTerm::new()), 10),
                    #[cfg(test)]
                    Target::Memory(term) => ProgressDrawTarget::term_like(Box::new(term)),
                };
                Output::Terminal(Box::new(Bars {
                    multi: MultiProgress::with_draw_target(draw_target),
                    styles: Styles::new(),
                    tick,
                    all: Vec::new(),
                    spinner: None,
                    current: None,
                }))
            }
        };
        let started = clock.now();
        let display = Arc::new(Mutex::new(Display { clock: clock.clone(), started, output }));
        Progress { mode, clock, display, active_id: None, drawn: None, next_draw: started, draws: 0 }
    }

    /// Makes this the display that engine steps and log lines go to.
    fn activate(&mut self) {
        if self.mode == ProgressMode::Off {
            return;
        }
        let multi = match &lock(&self.display).output {
            Output::Terminal(b) => Some(b.multi.clone()),
            _ => None,
        };
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        *lock(&ACTIVE) = Some(Active { id, display: self.display.clone(), multi });
        self.active_id = Some(id);
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
            let mut active = lock(&ACTIVE);
            if active.as_ref().is_some_and(|a| a.id == id) {
                *active = None;
            }
        }
    }
}

/// A `tracing` layer that turns events with the target [`ENGINE_STEP_TARGET`] into the active
/// display's engine step (the spinner's text, or a plain line). Install it with a per-layer
/// filter that lets those `info` events through (see `init_logging` in the CLI).
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineStepLayer;

/// Collects an event's message.
struct MessageVisitor(String);

impl tracing::field::Visit for MessageVisitor {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for EngineStepLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != ENGINE_STEP_TARGET {
            return;
        }
        let mut message = MessageVisitor(String::new());
        event.record(&mut message);
        if let Some(display) = active_display() {
            lock(&display).engine_step(&message.0);
        }
    }
}

/// A `tracing` writer for the display's terminal: log lines go above the bars (the bars are
/// hidden while the line is written, then redrawn), never through them.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        suspend(|| {
            let mut out = terminal();
            out.write_all(buf)?;
            out.flush()
        })?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        terminal().flush()
    }
}

/// Runs `f` with the active display's bars hidden, then redraws them: for anything that writes
/// to the terminal itself (log lines, a panic hook that prints).
///
/// `indicatif` does not draw from a panicking thread, so there the bars are hidden by a helper
/// thread that holds them off until `f` is done.
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    let Some(multi) = active_bars() else { return f() };
    if !std::thread::panicking() {
        return multi.suspend(f);
    }
    let (hidden_tx, hidden_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new().spawn_scoped(scope, move || {
            multi.suspend(|| {
                let _ = hidden_tx.send(());
                let _ = done_rx.recv();
            })
        });
        if helper.is_ok() {
            let _ = hidden_rx.recv();
        }
        let r = f();
        drop(done_tx);
        r
    })
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

#[cfg(test)]
mod tests;
