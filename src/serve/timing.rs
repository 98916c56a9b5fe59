//! `batchlab serve --timing-log FILE`: when each token was handed to the socket, per request and
//! choice, so a client's own timings can be checked against the server's (scripts/bench_http.sh).
//!
//! The server knows every token's send time exactly; a client only knows when a chunk arrived. The
//! log writes one JSON line per completed choice of a streamed request:
//!
//! ```json
//! {"request_id":"bench-1f2e-17","choice":0,"received_ns":81234000000,"token_ns":[81234500000,81239500000]}
//! ```
//!
//! `request_id` is the request's `X-Request-Id` header as the client sent it (vLLM's
//! `bench serve` sends one), else the response's own `id` (`cmpl-7`); `received_ns` is when the
//! request's head had been parsed; `token_ns[k]` when token `k`'s SSE event was handed to hyper,
//! which writes it to the socket in the same poll of the connection (docs/serve.md says how
//! close that is). All times are ns on `CLOCK_MONOTONIC` ([`MonotonicClock`]), the clock of
//! `std::time::Instant` and Python's `time.perf_counter()`, shared by every process on the machine.
//!
//! Bounded and off the hot path: a stream sends its finished choices over a bounded channel
//! (`try_send`, no lock held, never waits) to one writer thread, which serialises and writes them.
//! When the writer falls behind, records are dropped and counted rather than held or waited for;
//! [`TimingLog::finish`] says how many.
//!
//! [`MonotonicClock`]: crate::time::MonotonicClock

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use serde::Serialize;

use crate::time::Timestamp;

/// Records that may wait for the writer; past it, records are dropped and counted.
pub const DEFAULT_CAPACITY: usize = 65_536;

/// The longest `X-Request-Id` logged as given; a longer one is replaced by the response's id.
pub const MAX_REQUEST_ID_LEN: usize = 4096;

/// One completed choice of a streamed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimingRecord {
    /// The client's `X-Request-Id`, else the response's `id`.
    pub request_id: Arc<str>,
    /// The choice's `index` (the prompt's position in the request).
    pub choice: u32,
    /// When the request's head had been parsed.
    pub received: Timestamp,
    /// When each token's event was handed to hyper, in order.
    pub tokens: Vec<Timestamp>,
}

#[derive(Serialize)]
struct Line<'a> {
    request_id: &'a str,
    choice: u32,
    received_ns: Timestamp,
    token_ns: &'a [Timestamp],
}

enum Msg {
    Record(TimingRecord),
    Close,
}

/// The streams' side of the log: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct TimingSender {
    records: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
}

impl TimingSender {
    /// Queues `record` for the writer, or counts it as dropped when the writer is behind (or
    /// already finished).
    pub fn record(&self, record: TimingRecord) {
        match self.records.try_send(Msg::Record(record)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What the log holds at its end.
#[derive(Debug)]
pub struct TimingSummary {
    /// The file written.
    pub path: PathBuf,
    /// Records written.
    pub written: u64,
    /// Records dropped: the writer was behind (the channel full), or the log had finished.
    pub dropped: u64,
    /// The write error that stopped the writer, if one did.
    pub error: Option<std::io::Error>,
}

/// The log's writer thread and the handle that ends it.
pub struct TimingLog {
    path: PathBuf,
    sender: TimingSender,
    writer: JoinHandle<(u64, Option<std::io::Error>)>,
}

impl std::fmt::Debug for TimingLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimingLog").field("path", &self.path).finish_non_exhaustive()
    }
}

impl TimingLog {
    /// Creates (or truncates) `path` and starts the writer, with [`DEFAULT_CAPACITY`].
    pub fn create(path: &Path) -> std::io::Result<TimingLog> {
        let file = File::create(path)?;
        TimingLog::start(path.to_path_buf(), BufWriter::with_capacity(64 * 1024, file), DEFAULT_CAPACITY)
    }

    /// The writer on any `out`, holding at most `capacity` records waiting.
    pub fn start(path: PathBuf, out: impl Write + Send + 'static, capacity: usize) -> std::io::Result<TimingLog> {
        let (tx, rx) = sync_channel(capacity);
        let writer =
            std::thread::Builder::new().name("batchlab-serve-timing".into()).spawn(move || write_lines(rx, out))?;
        Ok(TimingLog { path, sender: TimingSender { records: tx, dropped: Arc::new(AtomicU64::new(0)) }, writer })
    }

    /// A sender for the streams.
    pub fn sender(&self) -> TimingSender {
        self.sender.clone()
    }

    /// Writes what is queued, flushes, and stops the writer; records sent later are dropped
    /// (a stream still open after the server's grace period). Blocks until the writer is done:
    /// call it outside the async runtime.
    pub fn finish(self) -> TimingSummary {
        // Blocks only while the channel is full, and the writer is draining it.
        let _ = self.sender.records.send(Msg::Close);
        let (written, error) =
            self.writer.join().unwrap_or_else(|_| (0, Some(std::io::Error::other("the timing log's writer panicked"))));
        TimingSummary { path: self.path, written, dropped: self.sender.dropped.load(Ordering::Relaxed), error }
    }
}

/// The writer: a JSON line per record, flushed whenever nothing more is waiting, so the file is
/// current as soon as the server is idle. Stops at `Close` or at the first write error.
fn write_lines(rx: Receiver<Msg>, mut out: impl Write) -> (u64, Option<std::io::Error>) {
    let mut written = 0u64;
    let mut line = Vec::with_capacity(256);
    let result = (|| {
        while let Ok(first) = rx.recv() {
            let mut msg = first;
            loop {
                match msg {
                    Msg::Close => {
                        out.flush()?;
                        return Ok(());
                    }
                    Msg::Record(r) => {
                        line.clear();
                        let l = Line {
                            request_id: &r.request_id,
                            choice: r.choice,
                            received_ns: r.received,
                            token_ns: &r.tokens,
                        };
                        serde_json::to_writer(&mut line, &l).map_err(std::io::Error::other)?;
                        line.push(b'\n');
                        out.write_all(&line)?;
                        written += 1;
                    }
                }
                match rx.try_recv() {
                    Ok(next) => msg = next,
                    Err(_) => break,
                }
            }
            out.flush()?;
        }
        out.flush()
    })();
    (written, result.err())
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{Sender, channel};

    use super::*;

    fn record(id: &str, choice: u32, tokens: &[u64]) -> TimingRecord {
        TimingRecord {
            request_id: id.into(),
            choice,
            received: Timestamp::from_nanos(100),
            tokens: tokens.iter().map(|&t| Timestamp::from_nanos(t)).collect(),
        }
    }

    /// A writer that holds every write until the test lets it go, and hands the bytes back.
    struct Gated {
        gate: Receiver<()>,
        bytes: Sender<Vec<u8>>,
    }

    impl Write for Gated {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _ = self.gate.recv();
            let _ = self.bytes.send(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn records_become_json_lines_and_a_full_channel_drops_and_counts_instead_of_waiting() {
        let (open, gate) = channel();
        let (bytes, written_bytes) = channel();
        let log = TimingLog::start("mem".into(), Gated { gate, bytes }, 2).unwrap();
        let sender = log.sender();
        // The writer takes the first record and blocks writing it; two more fill the channel; the
        // rest are dropped at once (this thread would hang here if `record` waited).
        for k in 0..10u32 {
            sender.record(record("req-1", k, &[200, 300 + u64::from(k)]));
        }
        for _ in 0..100 {
            open.send(()).unwrap();
        }
        let summary = log.finish();
        assert!(summary.error.is_none(), "{:?}", summary.error);
        // The writer may or may not have taken the first record off the channel before the others
        // were sent: 2 or 3 got through, the rest were counted.
        assert!((2..=3).contains(&summary.written), "{summary:?}");
        assert_eq!(summary.written + summary.dropped, 10, "{summary:?}");
        let text = String::from_utf8(written_bytes.try_iter().flatten().collect()).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len() as u64, summary.written);
        assert_eq!(
            lines[0],
            serde_json::json!({"request_id": "req-1", "choice": 0, "received_ns": 100, "token_ns": [200, 300]})
        );
        // A record after the end is dropped, not an error.
        sender.record(record("late", 0, &[1]));
        assert_eq!(sender.dropped.load(Ordering::Relaxed), summary.dropped + 1);
    }

    #[test]
    fn a_write_error_stops_the_writer_and_is_reported() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = TimingLog::start("broken".into(), Broken, 8).unwrap();
        log.sender().record(record("a", 0, &[1]));
        let summary = log.finish();
        assert_eq!(summary.written, 0);
        assert_eq!(summary.error.map(|e| e.to_string()).as_deref(), Some("disk full"));
    }
}
