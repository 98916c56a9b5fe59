//! Runs the search can prove equal to one it already made, taken from that one instead of run
//! again.
//!
//! At a given timeout and load, a run whose every batch was smaller than its batch size never
//! filled a batch: each flush took the whole queue, so any batch size above its largest batch
//! dispatches exactly the same batches, and the benchmark is the same to the byte
//! ([`crate::metrics::result::BatchesSeen::same_with_batch_size`], tested in `tests/batch_size_equivalence.rs`). At a
//! load the engine keeps up with, most of a search's batch sizes are such sizes: one run answers
//! for all of them. The result never depends on which runs were reused, only the time does.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::metrics::result::BenchmarkResult;
use crate::report::tuning::SearchRuns;

/// Which run of a point: the search's own, one of its extra seeds, or its stress run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    /// The scenario as the search runs it.
    Scenario,
    /// The scenario's seed plus this.
    Seed(u64),
    /// The load raised by [`super::STRESS`].
    Stress,
}

/// The runs made so far, shared by the search's threads.
#[derive(Default)]
pub(crate) struct Memo {
    runs: Mutex<Vec<Ran>>,
    simulated: AtomicUsize,
    reused: AtomicUsize,
}

struct Ran {
    key: RunKey,
    batch_size: usize,
    result: BenchmarkResult,
}

/// What a run is, but for its batch size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RunKey {
    pub(crate) variant: Variant,
    pub(crate) batch_timeout: Duration,
    /// The point's load (rate, concurrency) in thousandths; 0 without one.
    pub(crate) load: u64,
}

impl RunKey {
    /// The key of a point's run: its timeout and load, and which run.
    pub(crate) fn of(variant: Variant, batch_timeout: Duration, load: Option<f64>) -> RunKey {
        RunKey { variant, batch_timeout, load: load.map_or(0, |l| (l * 1000.0).round() as u64) }
    }
}

impl Memo {
    /// The benchmark of the run `key` at `batch_size`: that of a run made before that is
    /// provably the same, else `run()`'s (remembered for later ones). `run` gives the run's
    /// first benchmark.
    pub(crate) fn get_or_run<E>(
        &self,
        key: RunKey,
        batch_size: usize,
        run: impl FnOnce() -> Result<Option<BenchmarkResult>, E>,
    ) -> Result<Option<BenchmarkResult>, E> {
        let found = {
            let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.iter()
                .find(|r| r.key == key && r.result.batching.whole_run.same_with_batch_size(r.batch_size, batch_size))
                .map(|r| r.result.clone())
        };
        if let Some(result) = found {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(result));
        }
        let result = run()?;
        self.simulated.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = &result {
            let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            runs.push(Ran { key, batch_size, result: b.clone() });
        }
        Ok(result)
    }

    /// The runs made and reused so far.
    pub(crate) fn counts(&self) -> SearchRuns {
        SearchRuns { simulated: self.simulated.load(Ordering::Relaxed), reused: self.reused.load(Ordering::Relaxed) }
    }
}
