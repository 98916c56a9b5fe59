//! The stall watch: whether the engine still shows a sign of life while a generate runs.
//!
//! [`StallWatch`] holds what the watch knows beyond each running generate's own signs of life
//! (those stay with the generate, in `InFlight`): the longest generate so far, whether the engine
//! runs here, and when a generate last returned. It makes the decision: which generate is
//! watched, its deadline, whether a CPU sample is progress, and whether it stalled. The core's
//! stall methods ask it; see "Several batches in flight" in the module docs for when it watches.

use std::time::Duration;

use super::super::error::RequestError;
use super::config::BUSY_CPU_SHARE;
use super::{BatchConfig, BatchId, BatcherCore, InFlight};
use crate::time::Timestamp;

/// The stall watch's state and decision. See the module docs.
#[derive(Debug, Default)]
pub(super) struct StallWatch {
    /// The longest generate that returned: what a batch is expected to take, for the stall limit.
    longest_generate: Duration,
    /// The engine's concurrent face works here: the stall watch applies with several in flight.
    engine_runs_here: bool,
    /// When the last generate returned: the engine's last sign of life through its outputs.
    last_result_at: Option<Timestamp>,
}

impl StallWatch {
    /// A generate returned at `now`, abandoned or not: any result is a sign of the engine's life.
    pub(super) fn generate_returned(&mut self, now: Timestamp) {
        self.last_result_at = Some(self.last_result_at.map_or(now, |r| r.max(now)));
    }

    /// A generate that was not abandoned returned after `took`: what a batch is expected to take.
    pub(super) fn generate_took(&mut self, took: Duration) {
        self.longest_generate = self.longest_generate.max(took);
    }

    /// The running generate the stall watch judges: the one in flight, with `max_in_flight = 1`.
    /// With several in flight there is none: see "Several batches in flight" in the module docs.
    fn watched<'a>(&self, config: &BatchConfig, in_flight: &'a [InFlight]) -> Option<&'a InFlight> {
        if config.max_in_flight > 1 && !self.engine_runs_here {
            return None;
        }
        in_flight.iter().find(|f| !f.abandoned)
    }

    /// The watched generate's last sign of life: its own (its dispatch, a busy CPU sample), or
    /// any generate's result since.
    fn last_progress(&self, f: &InFlight) -> Timestamp {
        self.last_result_at.map_or(f.last_progress, |r| r.max(f.last_progress))
    }

    /// When the watched generate counts as stalled if no sign of life comes first.
    fn deadline(&self, config: &BatchConfig, in_flight: &[InFlight]) -> Option<Timestamp> {
        let f = self.watched(config, in_flight)?;
        let limit = config.stall_limit(self.longest_generate)?;
        Some(self.last_progress(f).saturating_add(limit))
    }

    /// The decision: the watched generate is past its deadline at `now`, and the error that makes
    /// the engine unusable.
    fn stalled(&self, config: &BatchConfig, in_flight: &[InFlight], now: Timestamp) -> Option<RequestError> {
        if let Some(deadline) = self.deadline(config, in_flight)
            && now >= deadline
            && let Some(f) = self.watched(config, in_flight)
        {
            return Some(RequestError::EngineStalled {
                batch_id: f.batch_id,
                batch_size: f.members.len(),
                stalled_for: now.saturating_since(self.last_progress(f)),
            });
        }
        None
    }

    /// A CPU-time sample of the engine while `batch_id` ran: see
    /// [`BatcherCore::handle_cpu_sample`].
    fn sample(
        &self,
        config: &BatchConfig,
        in_flight: &mut [InFlight],
        batch_id: BatchId,
        cpu: Duration,
        now: Timestamp,
    ) {
        let watched = self.watched(config, in_flight).map(|f| f.batch_id);
        if watched != Some(batch_id) {
            return;
        }
        let Some(f) = in_flight.iter_mut().find(|f| f.batch_id == batch_id) else { return };
        let Some((base_cpu, base_at)) = f.cpu_baseline else {
            f.cpu_baseline = Some((cpu, now));
            return;
        };
        let used = cpu.saturating_sub(base_cpu);
        let busy =
            !used.is_zero() && used.as_secs_f64() >= now.saturating_since(base_at).as_secs_f64() * BUSY_CPU_SHARE;
        if busy {
            f.last_progress = f.last_progress.max(now);
            f.cpu_baseline = Some((cpu, now));
        }
    }
}

impl BatcherCore {
    /// The started engine's concurrent face works in this machine's processes (its CPU time is
    /// its sign of life), so the stall watch applies with several generates in flight too: see
    /// "Several batches in flight" in the module docs. A driver says so after the start.
    pub fn set_engine_runs_here(&mut self, runs_here: bool) {
        self.stall.engine_runs_here = runs_here;
    }

    /// When the running generate counts as stalled if no sign of life comes first: its last
    /// progress plus [`BatchConfig::stall_limit`]. `None` without a stall timeout, when no
    /// generate runs (or it was abandoned), or with `max_in_flight > 1` on an engine that does not
    /// run here.
    pub fn stall_deadline(&self) -> Option<Timestamp> {
        self.stall.deadline(&self.config, &self.in_flight)
    }

    /// The batch whose generate runs and is watched for a stall: the driver samples the engine's
    /// CPU time while this is `Some` and reports it with
    /// [`handle_cpu_sample`](Self::handle_cpu_sample). Always `None` with `max_in_flight > 1`,
    /// unless the engine runs here: then the oldest running generate.
    pub fn stall_watched_batch(&self) -> Option<BatchId> {
        self.config.stall_timeout?;
        self.stall.watched(&self.config, &self.in_flight).map(|f| f.batch_id)
    }

    /// The engine's CPU time (its processes', its engine thread's) was `cpu` at `now`, while
    /// `batch_id` ran. The engine was busy, which is progress and moves the stall deadline, when
    /// its CPU time since the baseline grew by at least [`BUSY_CPU_SHARE`] of the time passed:
    /// the baseline then moves to this sample. The first sample of a generate only sets the
    /// baseline; a sample of a batch not watched is ignored.
    pub fn handle_cpu_sample(&mut self, batch_id: BatchId, cpu: Duration, now: Timestamp) {
        self.stall.sample(&self.config, &mut self.in_flight, batch_id, cpu, now);
    }

    /// The watched generate stalled at `now`: the engine is unusable, as after a death (see
    /// [`handle_timeout`](Self::handle_timeout)). Returns whether it did.
    pub(super) fn fail_if_stalled(&mut self, now: Timestamp) -> bool {
        let Some(error) = self.stall.stalled(&self.config, &self.in_flight, now) else { return false };
        self.fail_for_good(error, now);
        true
    }
}
