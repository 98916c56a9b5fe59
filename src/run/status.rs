//! What the live display is told: plain data, produced by the sans-IO step runner and drawn by
//! [`super::progress::Progress`]. Nothing here does IO.

/// The part of a benchmark a status describes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DisplayPhase {
    /// Requests that run but are not measured, before the measurement.
    Warmup,
    /// The measured requests.
    Measuring,
    /// Requests that run but are not measured, after the measurement.
    Cooldown,
    /// No new requests: waiting for the in-flight ones to finish.
    Draining,
}

impl DisplayPhase {
    /// The word the display shows.
    pub fn label(self) -> &'static str {
        match self {
            DisplayPhase::Warmup => "warmup",
            DisplayPhase::Measuring => "measuring",
            DisplayPhase::Cooldown => "cooldown",
            DisplayPhase::Draining => "draining",
        }
    }
}

/// One benchmark's progress at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct StepStatus {
    /// The benchmark's name, e.g. `throughput` or `constant@2.00/s`.
    pub benchmark: String,
    /// 0-based position of this benchmark in the run, and how many the run has when known.
    pub index: usize,
    /// How many benchmarks the run has; `None` while a sweep's steps are unknown.
    pub count: Option<usize>,
    /// Where the benchmark is: warm-up, measuring, cool-down or draining.
    pub phase: DisplayPhase,
    /// Requests of *this phase* that have finished (completed or failed).
    pub done: u64,
    /// This phase's request target, when it is a count (`None` for a duration limit).
    pub total: Option<u64>,
    /// Seconds this phase has run, and its duration limit when it has one.
    pub elapsed_s: f64,
    /// This phase's duration limit in seconds, when it has one.
    pub duration_limit_s: Option<f64>,
    /// Rates of the measured requests so far.
    pub requests_per_s: Option<f64>,
    /// Generated tokens per second of the measured requests so far.
    pub output_tokens_per_s: Option<f64>,
    /// Mean size of the batches dispatched in this benchmark so far.
    pub mean_batch_size: Option<f64>,
    /// Requests of this benchmark that failed so far (all phases).
    pub errors: u64,
}
