//! What else writes to a [`Screen`]: engine steps reported as `tracing` events
//! ([`EngineStepLayer`]), log lines ([`LogWriter`]), and anything that must write with the bars
//! out of its way ([`Screen::suspend`], e.g. a panic hook).

use std::fmt::Write as _;
use std::io::Write;

use indicatif::MultiProgress;

use super::{Screen, lock};

/// The `tracing` target of engine start-up and shutdown steps, e.g.
/// `tracing::info!(target: "batchlab::engine_step", "importing vLLM")`.
pub const ENGINE_STEP_TARGET: &str = "batchlab::engine_step";

/// A `tracing` layer that turns events with the target [`ENGINE_STEP_TARGET`] into the engine
/// step of the display drawing on its screen (the spinner's text, or a plain line). Install it
/// with a per-layer filter that lets those `info` events through (see `init_logging` in the CLI).
#[derive(Clone, Debug)]
pub struct EngineStepLayer {
    screen: Screen,
}

impl EngineStepLayer {
    /// Engine steps for the displays on `screen`.
    pub fn new(screen: &Screen) -> Self {
        EngineStepLayer { screen: screen.clone() }
    }
}

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
        if let Some(display) = self.screen.active_display() {
            lock(&display).engine_step(&message.0);
        }
    }
}

/// A `tracing` writer for a [`Screen`]: log lines go above the bars (the bars are hidden while
/// the line is written, then redrawn), never through them.
#[derive(Clone, Debug)]
pub struct LogWriter {
    screen: Screen,
}

impl LogWriter {
    /// Log lines on `screen`.
    pub fn new(screen: &Screen) -> Self {
        LogWriter { screen: screen.clone() }
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.screen.suspend(|| self.screen.terminal().write_all(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // Every write flushes.
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Runs `f` with `multi` hidden, then redraws it.
///
/// `indicatif` does not draw from a panicking thread, so there the bars are hidden by a helper
/// thread that holds them off until `f` is done.
pub(super) fn suspend_bars<R>(multi: &MultiProgress, f: impl FnOnce() -> R) -> R {
    if !std::thread::panicking() {
        return multi.suspend(f);
    }
    let multi = multi.clone();
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
