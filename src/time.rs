//! Time as a value.
//!
//! The batcher core never reads a clock: every input carries `now`. A [`Timestamp`] is nanoseconds on
//! the process's monotonic timeline. [`MonotonicClock`] reads `CLOCK_MONOTONIC`, the clock that
//! `std::time::Instant` and Python's `time.monotonic()` (hence vLLM's `*_ts` stats) use on Linux, so
//! engine timestamps map onto ours exactly. [`VirtualClock`] is advanced by hand: a simulated hour
//! takes no wall time and the same inputs give the same timestamps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Nanoseconds on a monotonic timeline. Ordering is chronological.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The timeline's origin (boot, for `CLOCK_MONOTONIC`).
    pub const ZERO: Timestamp = Timestamp(0);

    /// The timestamp `nanos` ns after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds (as engines such as vLLM report them) to a timestamp. `None` for NaN, infinities,
    /// negative values and values beyond the `u64` nanosecond range.
    pub fn from_secs_f64(secs: f64) -> Option<Self> {
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        let nanos = secs * 1e9;
        if nanos >= u64::MAX as f64 {
            return None;
        }
        // Rounded half away from zero, as `f64::round`, without its libm call (hot: every token
        // time an engine reports): `nanos - whole` is exact, whole being `nanos` truncated.
        let whole = nanos as u64;
        Some(Timestamp(if nanos - whole as f64 >= 0.5 { whole + 1 } else { whole }))
    }

    /// Seconds since the origin, as engines report their `*_ts` stats.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - earlier`, or `None` when `earlier` is after `self`. Durations are never negative.
    pub fn checked_since(self, earlier: Timestamp) -> Option<Duration> {
        self.0.checked_sub(earlier.0).map(Duration::from_nanos)
    }

    /// `self - earlier`, clamped at zero.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at the end of the `u64` nanosecond range.
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_nanos(d)))
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
#[doc(hidden)]
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of `now`, and a way to let time pass.
pub trait Clock: Send + Sync + 'static {
    /// The current time on this clock.
    fn now(&self) -> Timestamp;
    /// Lets `d` pass: a real sleep, or an advance of virtual time.
    fn sleep(&self, d: Duration);
}

/// `CLOCK_MONOTONIC`, the clock of `std::time::Instant` and of vLLM's `*_ts` stats on Linux.
#[derive(Copy, Clone, Debug, Default)]
pub struct MonotonicClock;

impl MonotonicClock {
    /// Reads `CLOCK_MONOTONIC` now.
    pub fn read() -> Timestamp {
        use nix::time::{ClockId, clock_gettime};
        // CLOCK_MONOTONIC cannot fail on Linux; a zero would only make durations absent, never wrong.
        let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap_or_else(|_| nix::sys::time::TimeSpec::new(0, 0));
        Timestamp(ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Timestamp {
        Self::read()
    }
    fn sleep(&self, d: Duration) {
        // The real clock's sleep: how real-time engines (the simulator in real time, injected
        // delays) take time. Tests run them on a `VirtualClock` instead, except where real time
        // is what is under test.
        std::thread::sleep(d)
    }
}

/// One wall-clock reading and one monotonic reading taken together, to convert between them.
#[doc(hidden)]
#[derive(Copy, Clone, Debug, PartialEq, serde::Serialize)]
pub struct WallAnchor {
    /// Seconds since the Unix epoch.
    pub wall_secs: f64,
    /// The same moment on our monotonic timeline.
    pub mono: Timestamp,
}

impl WallAnchor {
    /// Virtual time's fixed anchor: [`VirtualClock::ORIGIN`] stands for 2026-01-01T00:00:00Z, so
    /// virtual runs have a fixed wall clock and byte-identical reports.
    pub const VIRTUAL: WallAnchor = WallAnchor { wall_secs: 1_767_225_600.0, mono: VirtualClock::ORIGIN };

    /// The wall clock and [`MonotonicClock`] read now.
    pub fn now() -> WallAnchor {
        let mono = MonotonicClock::read();
        let wall_secs =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        WallAnchor { wall_secs, mono }
    }
}

/// Virtual time: `sleep` advances it at once. Clones share the same time.
#[derive(Clone, Debug)]
pub struct VirtualClock(Arc<AtomicU64>);

impl VirtualClock {
    /// Virtual time starts at a fixed, recognisable origin (1000 s) so reports are byte-identical.
    pub const ORIGIN: Timestamp = Timestamp(1_000_000_000_000);

    /// A virtual clock at [`Self::ORIGIN`].
    pub fn new() -> Self {
        VirtualClock(Arc::new(AtomicU64::new(Self::ORIGIN.0)))
    }

    /// Moves time forward to `t`; never backwards.
    pub fn advance_to(&self, t: Timestamp) {
        self.0.fetch_max(t.0, Ordering::SeqCst);
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) {
        self.0.fetch_add(duration_nanos(d), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn from_secs_f64_rounds_as_f64_round() {
        let mut values =
            vec![0.0, -0.0, 0.5e-9, 1.5e-9, 2.5e-9, 0.49999999999e-9, 1e-9, 123.456_789_012_5, 1e10, 9.2e9];
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Seconds with every kind of fraction, up to about 2^64 ns.
            values.push(f64::from_bits(x) % 1.8e10);
            values.push((x >> 11) as f64 / 1e9 + 0.5e-9);
        }
        for secs in values.into_iter().filter(|s| s.is_finite() && *s >= 0.0) {
            let nanos = secs * 1e9;
            let expected = (nanos < u64::MAX as f64).then(|| nanos.round() as u64);
            assert_eq!(super::Timestamp::from_secs_f64(secs).map(|t| t.as_nanos()), expected, "{secs:e}");
        }
    }

    use super::*;

    #[test]
    fn seconds_round_trip_and_reject_garbage() {
        let t = Timestamp::from_secs_f64(12_345.678_901_234).unwrap();
        assert_eq!(t.as_nanos(), 12_345_678_901_234);
        for bad in [f64::NAN, f64::INFINITY, -1.0, 1e30] {
            assert_eq!(Timestamp::from_secs_f64(bad), None, "{bad}");
        }
    }

    #[test]
    fn monotonic_clock_matches_std_instant_timeline() {
        // Both read CLOCK_MONOTONIC: an Instant taken between two reads lies between them.
        let a = MonotonicClock::read();
        let b = MonotonicClock::read();
        assert!(b >= a);
    }

    #[test]
    fn virtual_clock_only_moves_forward() {
        let c = VirtualClock::new();
        c.sleep(Duration::from_millis(5));
        assert_eq!(c.now(), VirtualClock::ORIGIN.saturating_add(Duration::from_millis(5)));
        c.advance_to(VirtualClock::ORIGIN);
        assert_eq!(c.now(), VirtualClock::ORIGIN.saturating_add(Duration::from_millis(5)));
    }
}
