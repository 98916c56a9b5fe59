//! The deterministic simulated engine.
//!
//! It exists so that everything above the [`Engine`] boundary can be tested and benchmarked
//! without Python or a model: a cost model (fixed overhead, prefill per prompt token, decode per
//! step and per running sequence, a `max_num_seqs` limit) produces timings in the same shape vLLM
//! reports. Faults are not its business: [`crate::engine::faults::FaultyEngine`] wraps it like any
//! other engine. All randomness comes from the seed and the request id, so a seed always gives the
//! same run. With a [`VirtualClock`](crate::time::VirtualClock) no wall time passes at all.

pub mod config;
mod cost;

use std::sync::Arc;
use std::time::Duration;

pub use config::{CostModel, SimConfig, TimeMode};

use crate::engine::{
    Engine, EngineError, EngineInfo, EngineOutput, EngineRequest, EngineStats, FinishReason, TimedEngine,
    VirtualTimeEngine,
};
use crate::time::{Clock, MonotonicClock, VirtualClock, WallAnchor};

/// The simulated engine. See the module docs.
pub struct SimEngine {
    config: SimConfig,
    clock: Arc<dyn Clock>,
    anchor: WallAnchor,
    started: bool,
}

impl SimEngine {
    /// An engine in real time: it sleeps on [`MonotonicClock`], anchored on the wall clock now.
    /// `config.time` is not looked at; [`SimEngine::timed`] honours it.
    pub fn new(config: SimConfig) -> Self {
        SimEngine::on_clock(config, Arc::new(MonotonicClock), WallAnchor::now())
    }

    /// An engine that passes time on `clock`, whose wall-clock times derive from `anchor`.
    pub fn on_clock(config: SimConfig, clock: Arc<dyn Clock>, anchor: WallAnchor) -> Self {
        SimEngine { config, clock, anchor, started: false }
    }

    /// An engine in the time `config.time` names.
    pub fn timed(config: SimConfig) -> TimedEngine {
        match config.time {
            TimeMode::Real => TimedEngine::real_time(SimEngine::new(config)),
            TimeMode::Virtual => TimedEngine::virtual_time(SimEngine::new(config)),
        }
    }

    /// An engine on a fresh virtual clock, and that clock.
    pub fn virtual_time(config: SimConfig) -> (Self, VirtualClock) {
        let clock = VirtualClock::new();
        let mut engine = SimEngine::new(config);
        engine.use_virtual_clock(clock.clone());
        (engine, clock)
    }

    /// The settings the engine was built with.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }
}

impl Engine for SimEngine {
    fn start(&mut self) -> Result<EngineInfo, EngineError> {
        self.started = true;
        Ok(EngineInfo { name: "sim".into(), version: env!("CARGO_PKG_VERSION").into(), resolved_config: None })
    }

    fn generate(&mut self, batch: &[EngineRequest]) -> Result<Vec<EngineOutput>, EngineError> {
        if !self.started {
            return Err(EngineError::Generate("generate before start".into()));
        }
        let start = self.clock.now();
        let timeline = cost::simulate(&self.config.cost, self.config.seed, batch);
        let secs = |offset: Duration| start.saturating_add(offset).as_secs_f64();
        let arrival_wall = self.anchor.wall_secs + start.saturating_since(self.anchor.mono).as_secs_f64();

        let outputs: Vec<EngineOutput> = batch
            .iter()
            .zip(&timeline.requests)
            .map(|(req, t)| EngineOutput {
                request_id: Some(req.id),
                prompt_tokens: Some(t.prompt_tokens),
                output_tokens: Some(t.output_tokens),
                output_token_ids: None,
                text: None,
                finish_reason: if t.output_tokens >= req.max_tokens {
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                },
                stats: EngineStats {
                    arrival_wall: Some(arrival_wall),
                    queued_ts: Some(secs(Duration::ZERO)),
                    scheduled_ts: Some(secs(t.scheduled)),
                    first_token_ts: t.first_token.map(secs),
                    last_token_ts: t.last_token.map(secs),
                    cached_tokens: None,
                },
            })
            .collect();
        self.clock.sleep(timeline.total);

        Ok(outputs)
    }

    fn shutdown(&mut self) -> Result<(), EngineError> {
        self.started = false;
        Ok(())
    }
}

impl VirtualTimeEngine for SimEngine {
    fn use_virtual_clock(&mut self, clock: VirtualClock) {
        self.clock = Arc::new(clock);
        self.anchor = WallAnchor::VIRTUAL;
    }
}

#[cfg(test)]
mod tests;
