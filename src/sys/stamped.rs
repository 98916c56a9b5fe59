//! TCP connections that know when their bytes came and went: [`StampedTcp`].
//!
//! Each read asks the kernel for its receive timestamp (`SO_TIMESTAMPING` with
//! `SOF_TIMESTAMPING_RX_SOFTWARE`: the moment the newest of the bytes it returns reached this
//! host's network stack), and each write notes the moment just before the bytes were handed to
//! the kernel. Both on [`MonotonicClock`]'s timeline. A program that times a stream by these is
//! not moved by its own load: bytes that waited in the socket while the process was busy with
//! other connections keep the time they came. On loopback the receive stamp is taken inside the
//! sender's `write`, tens of microseconds after it began.
//!
//! The kernel stamps on `CLOCK_REALTIME`; each is moved to `CLOCK_MONOTONIC` by the two clocks'
//! offset read at that read (they advance together but for a step of the wall clock), and a
//! connection's receive stamps never go backwards (bytes come in order). A read the
//! kernel gives no stamp for (a kernel without it, or timestamping refused) is stamped when the
//! read returned, and [`Stamps::kernel`] says which.
//!
//! A read that returns several messages that came at different times gives them all the newest's
//! time: a reader keeps up (reads each message in its own read) unless it lags behind by a whole
//! message gap.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag, recvmsg, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;
use nix::time::{ClockId, clock_gettime};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::time::{MonotonicClock, Timestamp};

/// A connection's latest receive and send times, shared with whoever reads them (a response's
/// extensions, a request's connection info). Zero means "none yet".
#[derive(Debug, Default)]
pub struct Stamps {
    received: AtomicU64,
    sent: AtomicU64,
    kernel: AtomicBool,
}

impl Stamps {
    /// When the newest byte of the latest read reached this host (or, without a kernel stamp,
    /// when that read returned). `None` before the first read that returned data.
    pub fn last_received(&self) -> Option<Timestamp> {
        nonzero(self.received.load(Ordering::Acquire))
    }

    /// When the latest write began: the moment its bytes were handed to the kernel. `None`
    /// before the first write.
    pub fn last_sent(&self) -> Option<Timestamp> {
        nonzero(self.sent.load(Ordering::Acquire))
    }

    /// Whether [`last_received`](Self::last_received) is the kernel's stamp.
    pub fn kernel(&self) -> bool {
        self.kernel.load(Ordering::Acquire)
    }

    /// Never earlier than the read before: TCP hands bytes over in the order they came, so a
    /// later read's newest byte came no earlier than an earlier read's. (A stamp moved from the
    /// wall clock carries the offset's error, and under load two reads' errors differ: one read
    /// 0.4 µs "before" the last split a prompt's tokens into times that go backwards.)
    fn note_received(&self, at: Timestamp, kernel: bool) {
        self.kernel.store(kernel, Ordering::Release);
        self.received.fetch_max(at.as_nanos().max(1), Ordering::AcqRel);
    }

    fn note_sent(&self, at: Timestamp) {
        self.sent.store(at.as_nanos().max(1), Ordering::Release);
    }
}

fn nonzero(nanos: u64) -> Option<Timestamp> {
    (nanos != 0).then(|| Timestamp::from_nanos(nanos))
}

/// A tokio TCP stream whose reads and writes are stamped ([`Stamps`]). Reads go through
/// `recvmsg` for the kernel's stamp; everything else is the stream's own.
#[derive(Debug)]
pub struct StampedTcp {
    io: TcpStream,
    stamps: Arc<Stamps>,
    /// Whether the kernel stamps this socket's reads (timestamping was accepted).
    timestamping: bool,
    /// `recvmsg`'s control buffer, kept for the next read.
    control: Vec<u8>,
    /// Where `recvmsg` reads to, copied out from there: the caller's buffer may be uninitialized,
    /// and zeroing all of it before each read would cost more than copying what came.
    scratch: Box<[u8]>,
}

/// Most bytes one read takes.
const READ_BYTES: usize = 16 * 1024;

impl StampedTcp {
    /// Stamps `io`'s traffic from now on. Asks the kernel to stamp receives; where it refuses,
    /// reads are stamped when they return.
    pub fn new(io: TcpStream) -> Self {
        let flags = TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE;
        let timestamping = setsockopt(&io, sockopt::Timestamping, &flags).is_ok();
        Self::with(io, timestamping)
    }

    /// `io` with reads stamped when they return and writes when they begin, without asking the
    /// kernel for anything (receive stamping is host-wide once any socket asks): for a program
    /// that times nothing by its connections this time, and reads as plainly as a bare stream.
    pub fn without_kernel_stamps(io: TcpStream) -> Self {
        Self::with(io, false)
    }

    fn with(io: TcpStream, timestamping: bool) -> Self {
        StampedTcp {
            io,
            stamps: Arc::default(),
            timestamping,
            control: nix::cmsg_space!(nix::sys::socket::Timestamps),
            scratch: Box::default(),
        }
    }

    /// Whether the kernel stamps this connection's receives (else reads are stamped when they
    /// return).
    pub fn kernel_stamps(&self) -> bool {
        self.timestamping
    }

    /// The connection's stamps, to read while the stream is in use elsewhere.
    pub fn stamps(&self) -> Arc<Stamps> {
        self.stamps.clone()
    }

    /// The stream itself (its addresses, its options).
    pub fn get_ref(&self) -> &TcpStream {
        &self.io
    }

    /// One `recvmsg` of at most `max` bytes into the scratch buffer: the bytes read and the
    /// kernel's stamp, if it gave one.
    fn receive(&mut self, max: usize) -> io::Result<(usize, Option<TimeSpec>)> {
        let fd = self.io.as_raw_fd();
        if self.scratch.is_empty() {
            self.scratch = vec![0; READ_BYTES].into_boxed_slice();
        }
        let (control, scratch) = (&mut self.control, &mut self.scratch[..max.min(READ_BYTES)]);
        self.io.try_io(Interest::READABLE, || {
            let mut iov = [io::IoSliceMut::new(scratch)];
            let message = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut *control), MsgFlags::MSG_DONTWAIT)
                .map_err(io::Error::from)?;
            let mut stamp = None;
            if let Ok(cmsgs) = message.cmsgs() {
                for cmsg in cmsgs {
                    if let ControlMessageOwned::ScmTimestampsns(t) = cmsg {
                        stamp = Some(t.system);
                    }
                }
            }
            Ok((message.bytes, stamp))
        })
    }
}

/// How many times [`realtime_to_monotonic`] reads the clocks for their offset, keeping the
/// tightest bracket: a thread preempted between two reads would move the stamp by the pause.
const OFFSET_TRIES: usize = 3;

/// A bracket this tight is kept at once: the offset is then within half of it, far below what a
/// token's time needs, and a read (on every chunk) pays one try, not three.
const TIGHT_BRACKET_NS: i128 = 1_000;

/// A `CLOCK_REALTIME` stamp on the monotonic timeline, by the clocks' offset now: the wall
/// clock read between two monotonic reads, at their midpoint, the tightest of a few tries. Never
/// later than now (the bytes came before the read that returned them).
fn realtime_to_monotonic(stamp: TimeSpec) -> Option<Timestamp> {
    let nanos = |t: TimeSpec| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec());
    let mut best: Option<(i128, i128)> = None; // (bracket width, monotonic minus wall)
    let mut now = 0;
    for _ in 0..OFFSET_TRIES {
        let before = i128::from(MonotonicClock::read().as_nanos());
        let real = nanos(clock_gettime(ClockId::CLOCK_REALTIME).ok()?);
        let after = i128::from(MonotonicClock::read().as_nanos());
        now = after;
        let width = after - before;
        if best.is_none_or(|(w, _)| width < w) {
            best = Some((width, (before + after) / 2 - real));
        }
        if width <= TIGHT_BRACKET_NS {
            break;
        }
    }
    let (_, offset) = best?;
    let at = (nanos(stamp) + offset).min(now);
    u64::try_from(at).ok().filter(|&n| n > 0).map(Timestamp::from_nanos)
}

impl AsyncRead for StampedTcp {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.timestamping {
            ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
            if !buf.filled().is_empty() {
                this.stamps.note_received(MonotonicClock::read(), false);
            }
            return Poll::Ready(Ok(()));
        }
        loop {
            ready!(this.io.poll_read_ready(cx))?;
            match this.receive(buf.remaining()) {
                Ok((n, stamp)) => {
                    buf.put_slice(&this.scratch[..n]);
                    if n > 0 {
                        match stamp.and_then(realtime_to_monotonic) {
                            Some(at) => this.stamps.note_received(at, true),
                            None => this.stamps.note_received(MonotonicClock::read(), false),
                        }
                    }
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale: `try_io` cleared it, so the next poll waits for more.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for StampedTcp {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stamps.note_sent(MonotonicClock::read());
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.stamps.note_sent(MonotonicClock::read());
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A connected pair of stamped streams, returned once the kernel stamps their receives: the
/// kernel turns receive stamping on for the whole host a moment after the first socket asks
/// (`net_enable_timestamp` defers it to a work queue), and off when the last such socket closes.
/// A test holds the pair while it checks stamps of its own.
#[cfg(test)]
pub(crate) async fn stamping_on() -> (StampedTcp, StampedTcp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
    let (server, _) = listener.accept().await.expect("accept");
    let (mut reader, mut writer) = (StampedTcp::new(client), StampedTcp::new(server));
    let mut byte = [0u8; 1];
    for _ in 0..200 {
        writer.write_all(b"x").await.expect("write");
        reader.read_exact(&mut byte).await.expect("read");
        if reader.stamps().kernel() {
            return (reader, writer);
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("the kernel never stamped a loopback TCP receive (SO_TIMESTAMPING)");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Bytes that wait in the socket keep the time they came, not the time they were read.
    #[tokio::test]
    async fn a_late_read_keeps_the_bytes_arrival_time() {
        let (mut reader, mut writer) = stamping_on().await;
        let stamps = reader.stamps();
        let mut buf = [0u8; 64];
        for round in 0..3 {
            let before = MonotonicClock::read();
            writer.write_all(b"data: {}\n\n").await.expect("write");
            let sent = writer.stamps().last_sent().expect("the write is stamped");
            assert!(sent >= before, "round {round}");
            tokio::time::sleep(Duration::from_millis(40)).await;
            let read_at = MonotonicClock::read();
            let n = reader.read(&mut buf).await.expect("read");
            assert_eq!(&buf[..n], b"data: {}\n\n");
            assert!(stamps.kernel(), "round {round}: the kernel stamped this receive");
            let came = stamps.last_received().expect("stamped");
            // Within a few ms of the write (loopback: tens of µs), 40 ms before the read.
            let after_send = came.checked_since(sent).unwrap_or_else(|| panic!("{came:?} before {sent:?}"));
            assert!(after_send < Duration::from_millis(5), "round {round}: {after_send:?} after the write");
            assert!(read_at.saturating_since(came) >= Duration::from_millis(35), "round {round}");
        }
    }

    /// A read's stamp never goes back before the read before it (bytes come in order), and a
    /// wall-clock stamp lands on the monotonic timeline where it happened, never after now.
    #[test]
    fn receive_stamps_never_go_backwards_and_never_into_the_future() {
        let stamps = Stamps::default();
        stamps.note_received(Timestamp::from_nanos(2_000), true);
        stamps.note_received(Timestamp::from_nanos(1_600), true);
        assert_eq!(stamps.last_received(), Some(Timestamp::from_nanos(2_000)));
        stamps.note_received(Timestamp::from_nanos(2_500), false);
        assert_eq!((stamps.last_received(), stamps.kernel()), (Some(Timestamp::from_nanos(2_500)), false));

        let wall = |t: TimeSpec| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec());
        let real = clock_gettime(ClockId::CLOCK_REALTIME).expect("wall clock");
        let (before, after) = (MonotonicClock::read(), MonotonicClock::read());
        let ms_ago = TimeSpec::from_duration(Duration::from_nanos((wall(real) - 1_000_000) as u64));
        let at = realtime_to_monotonic(ms_ago).expect("on the timeline");
        let one_ms_before = before.as_nanos() - 1_000_000;
        // The two clocks read apart by at most the test's own pauses: within 5 ms.
        assert!(at.as_nanos().abs_diff(one_ms_before) < 5_000_000, "{at:?} against {one_ms_before}");
        let future = TimeSpec::from_duration(Duration::from_nanos((wall(real) + 10_000_000_000) as u64));
        let capped = realtime_to_monotonic(future).expect("on the timeline");
        assert!(capped >= after && capped <= MonotonicClock::read(), "a stamp from the future is now: {capped:?}");
    }

    /// Before the first read there is nothing; a connection the kernel does not stamp for (none
    /// here) would say so through `kernel()`.
    #[tokio::test]
    async fn a_new_connection_has_no_stamps_yet() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
        let stamped = StampedTcp::new(client);
        assert!(stamped.kernel_stamps(), "SO_TIMESTAMPING is accepted on TCP");
        assert_eq!((stamped.stamps().last_received(), stamped.stamps().last_sent()), (None, None));
        let plain = StampedTcp::without_kernel_stamps(
            TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect"),
        );
        assert!(!plain.kernel_stamps(), "nothing asked of the kernel");
    }
}
