//! The watchdog thread: generate timeouts and the stall watch's CPU-time samples, while the
//! engine thread may be stuck inside a generate.

use std::time::Duration;

use super::super::core::BatchId;
use super::super::lifecycle::State;
use super::{Cv, Locked, MAX_SAMPLE_INTERVAL, SAMPLES_PER_STALL_LIMIT, Shared};
use crate::sync::Arc;
use crate::time::Timestamp;

/// Enforces `generate_timeout` while the engine thread is stuck inside a generate: fails the
/// overrunning batch, then every queued request that waited that long. Enforces `stall_timeout`:
/// samples the installed [`ProgressProbe`] while a generate runs and hands the core each sample;
/// the core decides when the generate stalled.
pub(super) fn watchdog_thread(shared: Arc<Shared>) {
    // When the next CPU-time sample is due, and of which batch.
    let mut next_sample: Option<(BatchId, crate::time::Timestamp)> = None;
    let mut locked = shared.lock();
    loop {
        if locked.guard.closing || locked.guard.core.state() == State::Stopped {
            shared.release(locked);
            return;
        }
        let now = shared.clock.now();
        let deadline = locked.guard.core.watchdog_deadline();
        if deadline.is_some_and(|d| now >= d) {
            locked.guard.core.handle_timeout(now);
            shared.release(locked);
            locked = shared.lock();
            continue;
        }
        let watched = locked.guard.core.stall_watched_batch().zip(locked.guard.probe.clone());
        let Some((batch, probe)) = watched else {
            next_sample = None;
            locked = watchdog_wait(&shared, locked, deadline, now);
            continue;
        };
        let interval = locked.guard.core.stall_deadline().map_or(MAX_SAMPLE_INTERVAL, |d| {
            (d.saturating_since(now) / SAMPLES_PER_STALL_LIMIT).clamp(Duration::from_millis(1), MAX_SAMPLE_INTERVAL)
        });
        let due = match next_sample {
            Some((b, at)) if b == batch => at,
            // A new generate: its baseline sample one interval from now, so a generate shorter
            // than that costs no sample (its return is its sign of life). Look again: the clock
            // may be past it already.
            _ => {
                next_sample = Some((batch, now.saturating_add(interval)));
                continue;
            }
        };
        if now < due {
            let wake = deadline.map_or(due, |d| d.min(due));
            locked = watchdog_wait(&shared, locked, Some(wake), now);
            continue;
        }
        // Reading /proc is IO: never under the lock.
        shared.release_and_notify(locked, false);
        let cpu = probe();
        locked = shared.lock();
        let sampled_at = shared.clock.now();
        if let Some(cpu) = cpu {
            locked.guard.core.handle_cpu_sample(batch, cpu, sampled_at);
        }
        next_sample = Some((batch, sampled_at.saturating_add(interval)));
    }
}

/// The watchdog's wait: until `until` (`None`: until woken), telling the others when it wakes by
/// itself ([`Inner::watchdog_must_wake`]).
fn watchdog_wait<'a>(shared: &Shared, mut locked: Locked<'a>, until: Option<Timestamp>, now: Timestamp) -> Locked<'a> {
    locked.guard.watchdog_until = until;
    let mut locked = shared.wait(Cv::Watchdog, locked, until.map(|t| t.saturating_since(now)));
    locked.guard.watchdog_until = None;
    locked
}
