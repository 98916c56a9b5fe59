//! [`BatchConfig`], the batching settings, validated, and the defaults and factors of the stall
//! limit.

use std::time::Duration;

use serde::Serialize;

use super::super::error::ConfigError;

/// Batching settings, validated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BatchConfig {
    pub(super) batch_size: usize,
    pub(super) batch_timeout: Duration,
    pub(super) generate_timeout: Option<Duration>,
    pub(super) stall_timeout: Option<Duration>,
    pub(super) max_in_flight: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            batch_size: 32,
            batch_timeout: Duration::from_millis(10),
            generate_timeout: None,
            stall_timeout: None,
            max_in_flight: 1,
        }
    }
}

/// A real engine's default `generate_timeout`: no unbounded wait by default (docs/scenarios.md).
pub const REAL_ENGINE_GENERATE_TIMEOUT: Duration = Duration::from_secs(600);

/// A real engine's default `stall_timeout`, and the floor of the derived limit
/// ([`BatchConfig::stall_limit`]): long enough for any pause a healthy engine makes (a slow first
/// step, a garbage collection, a 10 ms CPU-time tick), short enough that a frozen EngineCore is
/// noticed within a minute.
pub const REAL_ENGINE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The engine counts as busy, which is progress, when its CPU time grew by at least this share of
/// the wall time since the last progress (a tenth of one CPU). Less is what a waiting process does
/// (vLLM's worker polling its queue while the EngineCore is stopped uses under 2 %), not work.
pub const BUSY_CPU_SHARE: f64 = 0.1;

/// A running generate is given at least this many times the longest generate of the run so far
/// before it counts as stalled: a batch that legitimately takes longer than the floor (a big
/// batch on a slow machine) is not mistaken for a stall.
pub const STALL_FACTOR: u32 = 4;

impl BatchConfig {
    /// Checks the two required settings: `batch_size` and `batch_timeout` must be non-zero. No generate timeout.
    pub fn new(batch_size: usize, batch_timeout: Duration) -> Result<Self, ConfigError> {
        if batch_size == 0 {
            return Err(ConfigError::ZeroBatchSize);
        }
        if batch_timeout.is_zero() {
            return Err(ConfigError::ZeroBatchTimeout);
        }
        Ok(BatchConfig { batch_size, batch_timeout, generate_timeout: None, stall_timeout: None, max_in_flight: 1 })
    }

    /// Up to this many batches in flight at once (`batching.max_in_flight`, at least 1; 1 is the
    /// default and runs one generate at a time). More than 1 needs an engine with a concurrent
    /// face ([`Started::concurrent`](crate::engine::Started::concurrent)): an HTTP engine, vLLM
    /// with continuous admission.
    pub fn with_max_in_flight(mut self, n: usize) -> Result<Self, ConfigError> {
        if n == 0 {
            return Err(ConfigError::ZeroMaxInFlight);
        }
        self.max_in_flight = n;
        Ok(self)
    }

    /// A generate running longer than this fails its batch; while it stays stuck, queued requests
    /// fail once they waited as long.
    pub fn with_generate_timeout(mut self, t: Option<Duration>) -> Result<Self, ConfigError> {
        if t.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroGenerateTimeout);
        }
        self.generate_timeout = t;
        Ok(self)
    }

    /// A generate that makes no progress (no output, and no CPU time in the engine's processes,
    /// when the driver samples it) for [`stall_limit`](Self::stall_limit) fails its batch, the
    /// queue and every later request with [`RequestError::EngineStalled`](super::super::error::RequestError::EngineStalled): the engine is frozen.
    pub fn with_stall_timeout(mut self, t: Option<Duration>) -> Result<Self, ConfigError> {
        if t.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::ZeroStallTimeout);
        }
        self.stall_timeout = t;
        Ok(self)
    }

    /// A real engine's defaults for what is not set: [`REAL_ENGINE_GENERATE_TIMEOUT`] and
    /// [`REAL_ENGINE_STALL_TIMEOUT`]. The plan's real engines get them when the scenario is read;
    /// a library caller's real-time engine gets them at the run.
    pub fn with_real_engine_defaults(mut self) -> Self {
        self.generate_timeout = self.generate_timeout.or(Some(REAL_ENGINE_GENERATE_TIMEOUT));
        self.stall_timeout = self.stall_timeout.or(Some(REAL_ENGINE_STALL_TIMEOUT));
        self
    }

    /// Most requests in one batch; a batch this full is dispatched at once.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
    /// How long the oldest queued request waits before a partial batch is dispatched.
    pub fn batch_timeout(&self) -> Duration {
        self.batch_timeout
    }
    /// Most batches in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
    /// How long a generate may run before its batch fails; `None` waits forever.
    pub fn generate_timeout(&self) -> Option<Duration> {
        self.generate_timeout
    }
    /// The configured stall timeout: the floor of [`stall_limit`](Self::stall_limit); `None`
    /// watches for no stall.
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }
    /// How long a generate may go without progress: `stall_timeout`, or [`STALL_FACTOR`] times
    /// `expected` (the longest generate so far) when that is longer.
    pub fn stall_limit(&self, expected: Duration) -> Option<Duration> {
        self.stall_timeout.map(|floor| floor.max(expected.saturating_mul(STALL_FACTOR)))
    }
}
