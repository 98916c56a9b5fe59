//! The live progress display.
//!
//! On a terminal it is one status line on stderr, redrawn at most ten times a second and on every
//! phase change. Log lines go through [`LogWriter`], which erases the status line before writing,
//! so the two never garble each other; the next update redraws it. Without a terminal it prints a
//! plain line on every phase change and every few seconds. `--quiet` turns it off.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::status::StepStatus;

/// Whether the status line is on screen (shared with the log writer).
static LINE_SHOWN: Mutex<bool> = Mutex::new(false);

const ERASE: &str = "\r\x1b[2K";

/// How progress is shown.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// Not at all.
    Off,
    /// A redrawn status line.
    Terminal,
    /// Periodic plain lines.
    Plain,
}

impl ProgressMode {
    /// Terminal when stderr is one, else plain; off when `quiet`.
    pub fn detect(quiet: bool) -> Self {
        if quiet {
            ProgressMode::Off
        } else if std::io::stderr().is_terminal() {
            ProgressMode::Terminal
        } else {
            ProgressMode::Plain
        }
    }
}

/// What the display shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    pub phase: String,
    pub benchmark: String,
    pub done: u64,
    pub total: Option<u64>,
    pub requests_per_s: Option<f64>,
    pub output_tokens_per_s: Option<f64>,
}

pub struct Progress {
    mode: ProgressMode,
    started: Instant,
    last_draw: Option<Instant>,
    status: Status,
}

impl Progress {
    pub fn new(mode: ProgressMode) -> Self {
        Progress { mode, started: Instant::now(), last_draw: None, status: Status::default() }
    }

    fn interval(&self) -> Duration {
        match self.mode {
            ProgressMode::Terminal => Duration::from_millis(100),
            _ => Duration::from_secs(5),
        }
    }

    /// The engine is loading or stopping: `step` says which ("loading engine").
    pub fn engine_step(&mut self, step: &str) {
        self.phase(step, "");
    }

    /// A benchmark's progress: drawn at once on a phase change, else at most once per throttle
    /// interval. Counts are set before drawing, so a new phase never shows the old one's counts.
    pub fn status(&mut self, s: &StepStatus) {
        self.show(s, s.phase.label(), false);
    }

    /// A benchmark finished: its final status, always drawn.
    pub fn benchmark_done(&mut self, s: &StepStatus) {
        self.show(s, "finished", true);
    }

    fn show(&mut self, s: &StepStatus, label: &str, force: bool) {
        let changed = self.status.phase != label || self.status.benchmark != s.benchmark;
        self.status.phase = label.to_string();
        self.status.benchmark = s.benchmark.clone();
        self.status.done = s.done;
        self.status.total = s.total;
        self.status.requests_per_s = s.requests_per_s;
        self.status.output_tokens_per_s = s.output_tokens_per_s;
        if force || changed || self.last_draw.is_none_or(|t| t.elapsed() >= self.interval()) {
            self.draw();
        }
    }

    /// A phase change: always drawn.
    fn phase(&mut self, phase: &str, benchmark: &str) {
        if self.status.phase != phase || self.status.benchmark != benchmark {
            self.status.phase = phase.to_string();
            self.status.benchmark = benchmark.to_string();
            self.draw();
        }
    }

    /// New counts: drawn when the last draw is older than the throttle interval.
    #[cfg(test)]
    fn update(&mut self, done: u64, total: Option<u64>, rps: Option<f64>, tps: Option<f64>) {
        self.status.done = done;
        self.status.total = total;
        self.status.requests_per_s = rps;
        self.status.output_tokens_per_s = tps;
        if self.last_draw.is_none_or(|t| t.elapsed() >= self.interval()) {
            self.draw();
        }
    }

    fn render(&self) -> String {
        let s = &self.status;
        let mut line = format!("[{:>7.1}s] {}", self.started.elapsed().as_secs_f64(), s.phase);
        if !s.benchmark.is_empty() {
            line.push_str(&format!(" {}", s.benchmark));
        }
        if ["measuring", "warmup", "cooldown", "draining", "finished"].contains(&s.phase.as_str()) {
            match s.total {
                Some(t) => line.push_str(&format!(": {}/{} requests", s.done, t)),
                None => line.push_str(&format!(": {} requests", s.done)),
            }
            if let Some(r) = s.requests_per_s {
                line.push_str(&format!(", {r:.1} req/s"));
            }
            if let Some(t) = s.output_tokens_per_s {
                line.push_str(&format!(", {t:.0} out tok/s"));
            }
        }
        line
    }

    fn draw(&mut self) {
        self.last_draw = Some(Instant::now());
        let text = self.render();
        let mut err = std::io::stderr().lock();
        match self.mode {
            ProgressMode::Off => {}
            ProgressMode::Plain => {
                let _ = writeln!(err, "{text}");
            }
            ProgressMode::Terminal => {
                let mut shown = LINE_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
                let _ = write!(err, "{ERASE}{text}");
                let _ = err.flush();
                *shown = true;
            }
        }
    }

    /// Removes the status line (before the final report is printed).
    pub fn clear(&mut self) {
        if self.mode == ProgressMode::Terminal {
            let mut shown = LINE_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
            if *shown {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "{ERASE}");
                let _ = err.flush();
                *shown = false;
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// A `tracing` writer for stderr that first erases the status line.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut shown = LINE_SHOWN.lock().unwrap_or_else(|e| e.into_inner());
        let mut err = std::io::stderr().lock();
        if *shown {
            err.write_all(ERASE.as_bytes())?;
            *shown = false;
        }
        err.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_reads_well() {
        let mut p = Progress::new(ProgressMode::Off);
        p.phase("measuring", "throughput");
        p.update(120, Some(256), Some(52.14), Some(3334.4));
        let line = p.render();
        let (_, rest) = line.split_once("] ").unwrap();
        assert_eq!(rest, "measuring throughput: 120/256 requests, 52.1 req/s, 3334 out tok/s");
        p.phase("loading engine", "");
        assert!(p.render().ends_with("] loading engine"));
    }
}
