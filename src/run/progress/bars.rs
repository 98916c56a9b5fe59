//! The terminal mode: a spinner while the engine starts or stops, then one `indicatif` bar per
//! benchmark, left as a finished line when it is done.

use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};

use super::{Terminal, details, done_headline, headline, lock};
use crate::run::status::{DisplayPhase, StepStatus};
use std::sync::Mutex;

/// How often spinners and bars redraw on their own (the elapsed time and ETA move on).
const TICK: Duration = Duration::from_millis(100);

/// The bar's (position, length) in its unit: requests, or milliseconds of a duration limit.
pub(super) fn bar_extent(s: &StepStatus) -> Option<(u64, u64)> {
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

/// `indicatif`'s view of [`Terminal::Stderr`]: the size is read once, writes are buffered until
/// `indicatif` flushes at the end of each draw, so a frame goes out in one write.
#[derive(Debug)]
pub(super) struct DisplayTerm {
    rows: u16,
    cols: u16,
    pending: Mutex<Vec<u8>>,
}

impl DisplayTerm {
    pub(super) fn new() -> Self {
        // The original stderr also while a capture moved fd 2 to the engine's log.
        let (rows, cols) = crate::sys::terminal_size().unwrap_or((24, 80));
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
        Terminal::Stderr.write_all(&frame)
    }
}

// ---------------------------------------------------------------------------------------------

/// The benchmark a terminal bar shows.
struct BenchmarkBar {
    index: usize,
    phase: Option<DisplayPhase>,
    /// Whether the bar has a length (a count or a duration limit), or is open-ended.
    bounded: Option<bool>,
    bar: ProgressBar,
}

/// The terminal mode's state: the spinner, the current benchmark's bar and the finished ones.
pub(super) struct Bars {
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
    pub(super) fn new(target: ProgressDrawTarget, tick: bool) -> Self {
        Bars {
            multi: MultiProgress::with_draw_target(target),
            styles: Styles::new(),
            tick,
            all: Vec::new(),
            spinner: None,
            current: None,
        }
    }

    /// The bars as one, for writing above them.
    pub(super) fn multi(&self) -> &MultiProgress {
        &self.multi
    }

    fn add(&mut self, bar: ProgressBar) -> ProgressBar {
        let bar = self.multi.add(bar);
        if self.tick {
            bar.enable_steady_tick(TICK);
        }
        self.all.push(bar.clone());
        bar
    }

    pub(super) fn engine_step(&mut self, step: &str) {
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

    pub(super) fn status(&mut self, s: &StepStatus) {
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

    pub(super) fn benchmark_done(&mut self, s: &StepStatus) {
        self.status(s);
        if let Some(b) = self.current.take() {
            b.bar.set_style(self.styles.done.clone());
            b.bar.set_prefix(done_headline(s));
            b.bar.finish_with_message(details(s));
        }
    }

    pub(super) fn clear(&mut self) {
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
